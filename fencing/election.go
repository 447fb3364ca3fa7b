package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Epoch names a leadership term: the create revision of the leader's
// election key. Epochs of one election only grow; 0 means none.
type Epoch int64

// Leadership is one term of leadership won by Elect. It ends when the
// session's lease is lost (expired, revoked, or no longer kept alive), when
// the leader key is deleted, when etcd cannot confirm the key, or on Resign;
// it never comes back: campaign again for a new term.
type Leadership struct {
	cli     *clientv3.Client
	session *concurrency.Session
	id      string
	key     string
	epoch   Epoch
	ttl     time.Duration

	// alive is cancelled, with the cause, when the lease is lost: clientv3
	// stopped keeping it alive, or no keep-alive answer came within its
	// TTL. release stops the term's own keep-alive observer.
	alive   context.Context
	release func()

	ctx     context.Context
	cancel  context.CancelCauseFunc
	stopped chan struct{} // closed when monitor has returned
}

// Elect campaigns under prefix and blocks until candidateID is the leader,
// ctx is done, or etcd fails. Candidates queue in order of arrival; each
// standby takes over, with a higher epoch, once every earlier candidate's
// key is gone (resigned, or its lease expired).
//
// ttl is the session lease's time to live, at least one second and rounded
// up to whole seconds; etcd may raise it to its minimum lease TTL. It bounds
// how long a crashed leader keeps the leadership.
//
// ctx bounds the campaign only. The term lasts until it is lost or resigned,
// and its Context keeps ctx's values but not its cancellation. A term that
// is never resigned lasts as long as its client keeps the lease alive.
func Elect(ctx context.Context, cli *clientv3.Client, prefix, candidateID string, ttl time.Duration) (*Leadership, error) {
	switch {
	case prefix == "":
		return nil, errors.New("fencing: elect: empty prefix")
	case candidateID == "":
		return nil, errors.New("fencing: elect: empty candidate id")
	case ttl < time.Second:
		return nil, fmt.Errorf("fencing: elect: ttl %v is shorter than 1s", ttl)
	}
	secs := int((ttl + time.Second - 1) / time.Second)
	for {
		l, err := campaign(ctx, cli, prefix, candidateID, secs)
		if l != nil || err != nil {
			return l, err
		}
		// The lease lapsed while we waited in line: queue again.
	}
}

// campaign runs one campaign on a fresh lease. It returns nil, nil if the
// lease was lost before the term could begin.
func campaign(ctx context.Context, cli *clientv3.Client, prefix, id string, secs int) (*Leadership, error) {
	granted := time.Now()
	lease, err := cli.Grant(ctx, int64(secs))
	if err != nil {
		return nil, fmt.Errorf("fencing: elect under %s: grant lease: %w", prefix, err)
	}
	ttl := time.Duration(lease.TTL) * time.Second // as granted, maybe raised
	// The term observes the keep-alive answers itself: clientv3 notices an
	// unanswered keep-alive only seconds after etcd expired the lease (see
	// DrainKeepAlive), and a standby is elected as soon as it has.
	kctx, kcancel := context.WithCancel(context.WithoutCancel(ctx))
	kch, err := cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		kcancel()
		return nil, fmt.Errorf("fencing: elect under %s: keep lease alive: %w", prefix, err)
	}
	alive, lost := context.WithCancelCause(context.Background())
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		DrainKeepAlive(kch, ttl, granted, func() {
			lost(fmt.Errorf("%w: lease %x: no keep-alive answer within its TTL %v", ErrLeadershipLost, lease.ID, ttl))
			kcancel()
		})
	}()
	release := func() {
		kcancel()
		<-drained
		lost(context.Canceled)
	}
	// The session keeps the lease alive on the client's context, not ctx:
	// the term must outlive the campaign.
	s, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(lease.TTL)))
	if err != nil {
		release()
		return nil, fmt.Errorf("fencing: elect under %s: keep lease alive: %w", prefix, err)
	}
	context.AfterFunc(s.Ctx(), func() {
		lost(fmt.Errorf("%w: lease %x no longer kept alive (expired, revoked or client closed)", ErrLeadershipLost, lease.ID))
	})
	e := concurrency.NewElection(s, prefix)
	if err := campaignInLine(ctx, e, id, alive); err != nil {
		// Revoke, so that an abandoned candidate key does not hold up the
		// candidates queued behind it until the lease expires.
		err = errors.Join(fmt.Errorf("fencing: elect under %s: campaign: %w", prefix, err), s.Close())
		release()
		return nil, err
	}
	// Campaign returns once every earlier candidate is gone, even if our own
	// key went with its lease meanwhile: confirm the key before claiming the
	// term, and watch it from the revision that confirmed it.
	resp, err := cli.Get(ctx, e.Key())
	if err != nil {
		err = errors.Join(fmt.Errorf("fencing: elect under %s: confirm leader key: %w", prefix, err), s.Close())
		release()
		return nil, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev() || alive.Err() != nil {
		// The lease is gone, holds nothing, or may have expired: let it
		// lapse.
		s.Orphan()
		release()
		return nil, nil
	}
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	l := &Leadership{
		cli:     cli,
		session: s,
		id:      id,
		key:     e.Key(),
		epoch:   Epoch(e.Rev()),
		ttl:     ttl,
		alive:   alive,
		release: release,
		ctx:     lctx,
		cancel:  cancel,
		stopped: make(chan struct{}),
	}
	go l.monitor(resp.Header.Revision)
	return l, nil
}

// campaignInLine runs e's Campaign until it wins, ctx ends, the lease is lost
// (alive), or it fails otherwise. A candidate waits in line by watching
// the key before its own from the revision it read it at; a watch that
// breaks and resumes after etcd compacted past that revision (any network
// blip while a standby waits for hours under auto-compaction) failed the
// Campaign with ErrCompacted, and so the standby: campaigning again on the
// same session finds its own key, keeps its place in line, and reads
// afresh before watching.
func campaignInLine(ctx context.Context, e *concurrency.Election, id string, alive context.Context) error {
	wait := 50 * time.Millisecond
	for {
		err := e.Campaign(ctx, id)
		if err == nil || ctx.Err() != nil || alive.Err() != nil || !rewatch(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-alive.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// rewatch reports whether a Campaign failed only because its watch of the
// candidate before it broke: the revision it watched from compacted, or
// the watch channel closed without an error.
func rewatch(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || err.Error() == "lost watcher waiting for delete"
}

// Epoch returns the term's epoch: the create revision of Key.
func (l *Leadership) Epoch() Epoch { return l.epoch }

// Key returns the leader key, prefix + "/" + the lease id in hex.
func (l *Leadership) Key() string { return l.key }

// ID returns the candidate id the term was won with.
func (l *Leadership) ID() string { return l.id }

// Context returns a context that is cancelled when the term ends; its cause
// (context.Cause) wraps ErrLeadershipLost. Run the leader's work under it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Leadership) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil during the term and, once it has ended, why (wrapping
// ErrLeadershipLost).
func (l *Leadership) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Txn is GuardedTxn with the term's key and epoch. Once the term is known to
// have ended it returns Err without asking etcd.
func (l *Leadership) Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	return GuardedTxn(ctx, l.cli, l.key, l.epoch, cmps, then, els)
}

// Resign ends the term: it cancels Context first, so work stops before the
// leadership is handed over, then deletes the leader key if it still belongs
// to this term, which lets the next candidate take over at once, and revokes
// the term's lease, which holds nothing else. Resign is idempotent and may be
// called after the term was lost. If the key cannot be deleted, it still goes
// when the lease, no longer kept alive, expires.
func (l *Leadership) Resign(ctx context.Context) error {
	l.cancel(fmt.Errorf("%w: resigned", ErrLeadershipLost))
	select {
	case <-l.stopped:
	case <-ctx.Done():
		return fmt.Errorf("fencing: resign %s: %w", l.key, ctx.Err())
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(l.key), "=", int64(l.epoch))
	if _, err := l.cli.Txn(ctx).If(cmp).Then(clientv3.OpDelete(l.key)).Commit(); err != nil {
		return fmt.Errorf("fencing: resign %s: delete leader key: %w", l.key, err)
	}
	if _, err := l.cli.Revoke(ctx, l.session.Lease()); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("fencing: resign %s: revoke lease: %w", l.key, err)
	}
	return nil
}

// monitor owns the end of the term: it cancels the context on the first sign
// of loss and stops keeping the lease alive.
func (l *Leadership) monitor(rev int64) {
	defer close(l.stopped)
	defer l.release()
	defer l.session.Orphan()
	for {
		cause := l.watchKey(rev)
		if cause == nil {
			rev, cause = l.confirmKey()
		}
		if cause != nil {
			l.cancel(cause)
			return
		}
	}
}

// watchKey waits for the end of the term and returns why, or nil if the
// watch broke and the key must be confirmed by a read.
func (l *Leadership) watchKey(rev int64) error {
	// WithRequireLeader: an etcd member cut off from its quorum closes the
	// watch instead of keeping it silently open.
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
	defer cancel()
	// Watch blocks until its stream is set up: on a connection gone silent
	// it would not return before gRPC's keepalive gave up (15 s), well
	// after the lease expired and a standby was elected. The lease's loss
	// cancels it.
	defer context.AfterFunc(l.alive, cancel)()
	wch := l.cli.Watch(ctx, l.key, clientv3.WithRev(rev+1))
	for {
		select {
		case <-l.ctx.Done():
			return context.Cause(l.ctx)
		case <-l.alive.Done():
			return context.Cause(l.alive)
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return fmt.Errorf("%w: leader key %s deleted at revision %d", ErrLeadershipLost, l.key, ev.Kv.ModRevision)
				}
			}
		}
	}
}

// confirmKey reads the leader key and returns the revision it was read at,
// or why the term is over. Not being able to read it within the lease TTL
// counts as loss: the lease may well have expired meanwhile.
func (l *Leadership) confirmKey() (int64, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.ttl)
	defer cancel()
	// A closed client fails the read only at the deadline: stop it as soon
	// as the lease is lost.
	defer context.AfterFunc(l.alive, cancel)()
	resp, err := l.cli.Get(ctx, l.key)
	switch {
	case l.ctx.Err() != nil:
		return 0, context.Cause(l.ctx)
	case l.alive.Err() != nil:
		return 0, context.Cause(l.alive)
	case err != nil:
		return 0, fmt.Errorf("%w: confirm leader key %s: %w", ErrLeadershipLost, l.key, err)
	case len(resp.Kvs) == 0 || Epoch(resp.Kvs[0].CreateRevision) != l.epoch:
		return 0, fmt.Errorf("%w: leader key %s deleted", ErrLeadershipLost, l.key)
	}
	return resp.Header.Revision, nil
}

// Leader is an election's leader as an observer sees it. The zero Leader
// means there is none.
type Leader struct {
	ID    string // the candidate id, the leader key's value
	Key   string // the leader key
	Epoch Epoch  // the leader key's create revision
}

// CurrentLeader returns the leader of the election under prefix, or the zero
// Leader if there is none. The read is linearizable.
func CurrentLeader(ctx context.Context, kv clientv3.KV, prefix string) (Leader, error) {
	l, _, err := currentLeader(ctx, kv, prefix)
	return l, err
}

func currentLeader(ctx context.Context, kv clientv3.KV, prefix string) (Leader, int64, error) {
	resp, err := kv.Get(ctx, prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, 0, fmt.Errorf("fencing: read leader under %s: %w", prefix, err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, resp.Header.Revision, nil
	}
	kv0 := resp.Kvs[0]
	return Leader{ID: string(kv0.Value), Key: string(kv0.Key), Epoch: Epoch(kv0.CreateRevision)}, resp.Header.Revision, nil
}

// Observe reports the leader of the election under prefix: first the current
// one (the zero Leader if none), then each change. The channel holds only
// the latest value, so a slow reader skips intermediate leaders but never
// misses the last. It is closed when ctx is done or etcd cannot be read.
func Observe(ctx context.Context, cli *clientv3.Client, prefix string) <-chan Leader {
	ch := make(chan Leader, 1)
	go func() {
		defer close(ch)
		last := Leader{Epoch: -1}
		publish := func(cur Leader) {
			if cur == last {
				return
			}
			last = cur
			select { // drop an unread, outdated value; we are the only sender
			case <-ch:
			default:
			}
			ch <- cur
		}
		for ctx.Err() == nil {
			cur, rev, err := currentLeader(ctx, cli, prefix)
			if err != nil {
				return
			}
			publish(cur)
			if !awaitLeaderChanges(ctx, cli, prefix, rev, publish) {
				return
			}
		}
	}()
	return ch
}

// awaitLeaderChanges watches the election from rev+1, publishing the leader
// after every change. It returns false if the leader cannot be read, true if
// the watch broke and should be restarted.
func awaitLeaderChanges(ctx context.Context, cli *clientv3.Client, prefix string, rev int64, publish func(Leader)) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.Canceled || wr.Err() != nil {
			return true
		}
		if len(wr.Events) == 0 {
			continue
		}
		cur, _, err := currentLeader(ctx, cli, prefix)
		if err != nil {
			return false
		}
		publish(cur)
	}
	return true
}
