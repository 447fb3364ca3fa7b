package promoter

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/strictjson"
)

// StoredRequest is an on-demand request of one key, kept in the ledger
// from the moment Request answers until the key's turn has come (see
// Ledger.PutRequests): a promoter that stops, crashes or loses its
// leadership before then does not forget it, and the next one to run
// (Run) queues it again.
type StoredRequest struct {
	Key
	// Forced: the request named the partition; the policy's selection is
	// not applied to it.
	Forced bool
	// IDs: the promotion ids the requests of the key were answered with.
	IDs []string
	// At: when the request was last stored.
	At time.Time
	// Revision: the etcd revision that stored it (set by the ledger).
	Revision int64
}

// RequestVersion is the format version of the stored requests this
// promoter writes and the only one it reads.
const RequestVersion = 1

// storedRequest is a request's stored form.
type storedRequest struct {
	Version     int       `json:"version"`
	Policy      string    `json:"policy"`
	Partition   string    `json:"partition"`
	Forced      bool      `json:"forced"`
	IDs         []string  `json:"ids"`
	RequestedAt time.Time `json:"requested_at"`
}

var requestMembers = []string{"version", "policy", "partition", "forced", "ids", "requested_at"}

// maxRequestOps bounds the puts of one etcd transaction, under etcd's
// default limit of 128 operations (--max-txn-ops).
const maxRequestOps = 100

func (l *EtcdLedger) requestDir() string { return l.prefix + "/requests/" }

// requestKey is k's etcd key: a digest of the key, since partition names
// may hold any character (the value names the key).
func (l *EtcdLedger) requestKey(k Key) string {
	sum := sha256.Sum256([]byte(k.Policy + "\x00" + k.Partition))
	return l.requestDir() + hex.EncodeToString(sum[:16])
}

// PutRequests implements Ledger: each request replaces its key's, in
// transactions of up to maxRequestOps (fenced like every write). When one
// fails, the requests of the transactions before it stay stored and their
// revisions are returned with the error. Deleting them again would be no
// undo: a key's request replaces the one stored before (the caller's merge
// of it), which would then be lost.
func (l *EtcdLedger) PutRequests(ctx context.Context, rs []StoredRequest) ([]int64, error) {
	revs := make([]int64, 0, len(rs))
	for chunk := range slices.Chunk(rs, maxRequestOps) {
		ops := make([]clientv3.Op, 0, len(chunk))
		for _, r := range chunk {
			b, err := encodeRequest(r)
			if err != nil {
				return revs, err
			}
			ops = append(ops, clientv3.OpPut(l.requestKey(r.Key), string(b)))
		}
		resp, _, err := l.txn(ctx, nil, ops, nil)
		if err != nil {
			return revs, fmt.Errorf("promoter: ledger: store requests: %w", err)
		}
		for range chunk {
			revs = append(revs, resp.Header.Revision)
		}
	}
	return revs, nil
}

// DeleteRequest implements Ledger.
func (l *EtcdLedger) DeleteRequest(ctx context.Context, k Key, rev int64) error {
	key := l.requestKey(k)
	if _, _, err := l.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
		[]clientv3.Op{clientv3.OpDelete(key)}, nil); err != nil {
		return fmt.Errorf("promoter: ledger: delete the request of %s: %w", k, err)
	}
	return nil
}

// Requests implements Ledger.
func (l *EtcdLedger) Requests(ctx context.Context) ([]StoredRequest, error) {
	resp, err := l.cli.Get(ctx, l.requestDir(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("promoter: ledger: read requests: %w", err)
	}
	var out []StoredRequest
	var errs []error
	for _, kv := range resp.Kvs {
		r, err := decodeRequest(kv.Value)
		if err == nil && l.requestKey(r.Key) != string(kv.Key) {
			err = fmt.Errorf("decode request: the request of %s stored under another key", r.Key)
		}
		if err != nil {
			errs = append(errs, &UnreadableRecordError{Key: string(kv.Key), Err: err})
			continue
		}
		r.Revision = kv.ModRevision
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b StoredRequest) int { return cmp.Compare(a.Revision, b.Revision) })
	return out, errors.Join(errs...)
}

func encodeRequest(r StoredRequest) ([]byte, error) {
	ids := r.IDs
	if ids == nil {
		ids = []string{}
	}
	b, err := json.Marshal(storedRequest{
		Version: RequestVersion, Policy: r.Policy, Partition: r.Partition,
		Forced: r.Forced, IDs: ids, RequestedAt: r.At.UTC(),
	})
	if err != nil {
		return nil, fmt.Errorf("promoter: encode the request of %s: %w", r.Key, err)
	}
	return b, nil
}

// decodeRequest parses a stored request strictly: one JSON object with
// exactly the members of version RequestVersion, a policy and valid
// promotion ids.
func decodeRequest(b []byte) (StoredRequest, error) {
	fail := func(format string, args ...any) (StoredRequest, error) {
		return StoredRequest{}, fmt.Errorf("decode request: %s", fmt.Sprintf(format, args...))
	}
	members, err := strictjson.Check(b, strictjson.Options{MaxDepth: 4})
	if err != nil {
		return fail("%v", err)
	}
	if members == nil {
		return fail("not a JSON object")
	}
	if err := strictjson.Members(members, requestMembers, nil); err != nil {
		return fail("%v", err)
	}
	var s storedRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return fail("%v", err)
	}
	switch {
	case s.Version != RequestVersion:
		return fail("request version %d: this promoter reads version %d; upgrade it", s.Version, RequestVersion)
	case s.Policy == "":
		return fail("member \"policy\" is empty")
	}
	for _, id := range s.IDs {
		if validID(id) != nil {
			return fail("member \"ids\": %q is not a promotion id", abbreviate(id))
		}
	}
	return StoredRequest{Key: Key{Policy: s.Policy, Partition: s.Partition}, Forced: s.Forced, IDs: s.IDs, At: s.RequestedAt}, nil
}

// enqueueRequests stores the requests of keys (items[i] is keys[i]'s),
// each merged with what the queue holds for its key already, then queues
// them with the revisions that stored them. When only some can be stored
// (the ledger stores in several transactions), those are queued and the
// error is returned: a key's stored request is always what the queue
// holds for it, and a caller repeating the request merges into it.
// Requests are stored one call at a time, so that the stored request of a
// key is always the queue's latest merge. The skip notes of the requested
// ids go under the same lock, so that a Cancel of an id (which notes it
// under the lock) cannot land between this request's clearing its note
// and queueing it.
func (p *Promoter) enqueueRequests(ctx context.Context, keys []Key, items []item) error {
	if len(keys) == 0 {
		return nil
	}
	p.reqMu.Lock()
	defer p.reqMu.Unlock()
	stored := make([]StoredRequest, len(keys))
	for i, k := range keys {
		merged := items[i]
		if old, ok := p.q.queued(k); ok {
			merged = old.merge(merged)
		}
		stored[i] = StoredRequest{Key: k, Forced: merged.forced, IDs: merged.ids, At: p.now()}
	}
	revs, err := p.cfg.Ledger.PutRequests(ctx, stored)
	if err != nil && fencing.IsFenced(err) {
		p.halt(err)
		return err
	}
	for i, rev := range revs {
		it := items[i]
		for _, id := range it.ids {
			p.clearSkip(id)
		}
		it.rev = rev
		p.q.add(keys[i], it)
	}
	return err
}

// settleRequest ends the stored request of a key whose turn came (process
// returned r and err), unless the promoter is stopping (ctx is done: the
// next promoter to run takes the request up). A request that could not
// start (no record written, and not skipped) gets a note with why, so that
// its waiter ends.
func (p *Promoter) settleRequest(ctx context.Context, k Key, it item, r Record, err error) {
	if !it.requested || ctx.Err() != nil {
		return
	}
	if err != nil && r.ID == "" && !errors.Is(err, ErrSkipped) && !errors.Is(err, ErrTargetNotEmpty) {
		for _, id := range it.ids {
			if _, ok := p.Skipped(id); !ok {
				p.noteSkip(id, "it could not start: "+err.Error())
			}
		}
	}
	if it.rev == 0 {
		return
	}
	if derr := p.cfg.Ledger.DeleteRequest(ctx, k, it.rev); derr != nil && ctx.Err() == nil {
		p.log.Warn("delete a stored request", "key", k.String(), "err", derr)
	}
}

// loadRequests queues the stored requests (Run, before its workers start):
// those a promoter before this one answered and did not get to. A request
// of a policy this promoter does not have, or that no longer takes
// requests, is deleted; one it cannot read is logged and left.
func (p *Promoter) loadRequests(ctx context.Context) error {
	rs, err := p.cfg.Ledger.Requests(ctx)
	if err != nil && !errors.Is(err, ErrUnreadable) {
		return err
	}
	for _, u := range UnreadableRecords(err) {
		p.log.Error("stored request left unread", "key", u.Key, "err", u.Err)
	}
	n := 0
	for _, r := range rs {
		if pol := p.pols[r.Policy]; pol == nil || !pol.Triggers().OnRequest {
			p.log.Warn("stored request dropped: its policy is gone or takes no requests", "key", r.Key.String(), "promotions", r.IDs)
			if err := p.cfg.Ledger.DeleteRequest(ctx, r.Key, r.Revision); err != nil {
				return err
			}
			// Its waiters learn why, as for a cancel or a skip; they
			// would wait for a promotion that no longer exists.
			for _, id := range r.IDs {
				p.noteSkip(id, "its stored request was dropped at start: policy "+r.Policy+" is gone or takes no requests")
			}
			continue
		}
		p.q.add(r.Key, item{forced: r.Forced, requested: true, ids: r.IDs, rev: r.Revision})
		n++
	}
	if n > 0 {
		p.log.Info("stored requests queued", "requests", n)
		p.updateDepth()
	}
	return nil
}

// Cancel withdraws the requested promotion id that waits in the queue for
// its turn: its key leaves the queue and its stored request is deleted,
// and the promotion ids the key was requested with are noted as skipped
// ("cancelled"), so their waiters end. A running promotion is not
// stopped: ErrNotQueued, as for one that has run or was never requested.
// A target the policy selects is queued again by the next reconcile.
func (p *Promoter) Cancel(ctx context.Context, id string) (QueuedRequest, error) {
	if err := p.awaitResumed(ctx); err != nil {
		return QueuedRequest{}, err
	}
	p.reqMu.Lock()
	defer p.reqMu.Unlock()
	q, ok := p.Queued(id)
	if !ok {
		if _, running := p.Progress(id); running {
			return QueuedRequest{}, fmt.Errorf("%w: promotion %s runs now (a running promotion is not cancelled)", ErrNotQueued, id)
		}
		return QueuedRequest{}, fmt.Errorf("%w: promotion %s waits in no queue (thaw status lists what does)", ErrNotQueued, id)
	}
	// Found and taken out at once: the item the id was found in may have
	// started meanwhile, and the key be queued again by a reconcile.
	k, it, ok := p.q.removeID(id)
	if !ok || k != q.Key {
		if ok {
			p.q.add(k, it) // moved to another key meanwhile: leave it
		}
		return QueuedRequest{}, fmt.Errorf("%w: promotion %s started meanwhile", ErrNotQueued, id)
	}
	p.updateDepth()
	if it.rev != 0 {
		if err := p.cfg.Ledger.DeleteRequest(ctx, q.Key, it.rev); err != nil {
			p.q.add(q.Key, it) // nothing changed: queue it again
			if fencing.IsFenced(err) {
				p.halt(err)
			}
			return QueuedRequest{}, err
		}
	}
	for _, other := range it.ids {
		p.noteSkip(other, "cancelled while it waited in the queue")
	}
	p.log.Info("queued promotion cancelled", "key", q.Key.String(), "promotions", it.ids)
	return q, nil
}
