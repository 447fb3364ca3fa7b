package meta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// Registration is a tablet server's registration, held by a lease that a
// goroutine keeps alive until Close or until the lease is lost.
type Registration struct {
	cli    *clientv3.Client
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{}
}

// RegisterServer writes rec at {p}/servers/{id} under a new lease of the
// given TTL (rounded up to whole seconds; etcd may raise it to its minimum)
// and keeps the lease alive. The key exists exactly as long as the lease:
// it goes when the registration is closed, when the process dies (TTL
// later) or when the lease is revoked. It fails with ErrExists while
// another live lease holds the id, as after a crash until the old lease
// expires. Registrations are the servers' own writes: they carry no
// coordinator guard. A zero Version or StartedMs is filled in.
func (s *Store) RegisterServer(ctx context.Context, rec ServerRecord, ttl time.Duration) (*Registration, error) {
	if rec.Version == 0 {
		rec.Version = RecordVersion
	}
	if rec.StartedMs == 0 {
		rec.StartedMs = s.nowMs()
	}
	key := s.k.server(rec.ID)
	b, err := Marshal(rec)
	if err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: register server %s: ttl %v", ErrInvalid, rec.ID, ttl)
	}
	granted := time.Now()
	lease, err := s.cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return nil, fmt.Errorf("meta: register server %s: grant lease: %w", rec.ID, err)
	}
	fail := func(err error) (*Registration, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, rerr := s.cli.Revoke(rctx, lease.ID)
		return nil, errors.Join(err, rerr)
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))).
		Commit()
	switch {
	case err != nil:
		return fail(fmt.Errorf("meta: register server %s: %w", rec.ID, err))
	case !resp.Succeeded:
		return fail(fmt.Errorf("%w: server %s is registered under another lease", ErrExists, rec.ID))
	}
	// The keep-alive outlives ctx: it runs until Close or until the lease
	// is lost.
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	kch, err := s.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		return fail(fmt.Errorf("meta: register server %s: keep lease alive: %w", rec.ID, err))
	}
	r := &Registration{cli: s.cli, lease: lease.ID, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		// Without an answer within the lease's TTL of the grant or of the
		// last answer, the registration ends (etcd has expired the lease
		// by then, unless the answers were merely that slow).
		fencing.DrainKeepAlive(kch, time.Duration(lease.TTL)*time.Second, granted, cancel)
	}()
	return r, nil
}

// Done is closed when the registration has ended: its lease expired or was
// revoked, it could not be kept alive within its TTL, or Close was called.
// A server whose registration ended is no longer live and must register
// again.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Lease returns the registration's lease.
func (r *Registration) Lease() clientv3.LeaseID { return r.lease }

// Close stops keeping the lease alive and revokes it, which deletes the
// registration at once. Closing an ended registration is not an error.
func (r *Registration) Close(ctx context.Context) error {
	r.cancel()
	<-r.done
	if _, err := r.cli.Revoke(ctx, r.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("meta: revoke registration lease %x: %w", r.lease, err)
	}
	return nil
}

// ServerSet is the set of live tablet servers at an etcd revision.
type ServerSet struct {
	Rev     int64
	Servers []ServerRecord // by id
	// Incarnations maps each server id to the create revision of its
	// registration key: it changes whenever the server registers again
	// (a restart, or a lost lease), so it tells two lives of one id apart.
	Incarnations map[string]int64
}

// ListServers returns the live tablet servers. An undecodable
// registration is logged and left out, as WatchServers does: servers write
// their own, unguarded, and one bad entry (a newer release's, a stray
// write) must not stop the coordinator's placement, failover and routing.
func (s *Store) ListServers(ctx context.Context) (ServerSet, error) {
	set := ServerSet{Servers: []ServerRecord{}, Incarnations: map[string]int64{}}
	rev, err := s.scan(ctx, s.k.servers(), listPage, func(kv *mvccpb.KeyValue) error {
		id := strings.TrimPrefix(string(kv.Key), s.k.servers())
		v, err := decodeKV[ServerRecord](kv)
		if err == nil && v.Value.ID != id {
			err = fmt.Errorf("%w: key %s holds server %s", ErrCorrupt, kv.Key, v.Value.ID)
		}
		if err != nil {
			s.log.Error("meta skips an undecodable server registration", "key", string(kv.Key), "err", err)
			return nil
		}
		set.Servers = append(set.Servers, v.Value)
		set.Incarnations[v.Value.ID] = kv.CreateRevision
		return nil
	})
	if err != nil {
		return ServerSet{}, err
	}
	set.Rev = rev
	return set, nil
}

// WatchServers delivers the live set of tablet servers: first the current
// one, then the whole set again after every change. The channel holds only
// the latest set, so a slow receiver skips intermediate sets but never
// misses the last. It is closed when ctx is done; etcd errors are retried.
// An undecodable registration is logged and left out.
func (s *Store) WatchServers(ctx context.Context) <-chan ServerSet {
	ch := make(chan ServerSet, 1)
	live := map[string]ServerRecord{}
	created := map[string]int64{}
	publish := func(rev int64) bool {
		set := ServerSet{Rev: rev, Servers: make([]ServerRecord, 0, len(live)), Incarnations: make(map[string]int64, len(live))}
		for _, id := range slices.Sorted(maps.Keys(live)) {
			set.Servers = append(set.Servers, live[id])
			set.Incarnations[id] = created[id]
		}
		select { // drop an unread, outdated set; this goroutine is the only sender
		case <-ch:
		default:
		}
		ch <- set
		return true
	}
	apply := func(kv *mvccpb.KeyValue, deleted bool) {
		id := strings.TrimPrefix(string(kv.Key), s.k.servers())
		delete(live, id)
		delete(created, id)
		if deleted {
			return
		}
		v, err := decodeKV[ServerRecord](kv)
		if err == nil && v.Value.ID != id {
			err = fmt.Errorf("%w: key %s holds server %s", ErrCorrupt, kv.Key, v.Value.ID)
		}
		if err != nil {
			s.log.Error("meta skips an undecodable server registration", "key", string(kv.Key), "err", err)
			return
		}
		live[id] = v.Value
		created[id] = kv.CreateRevision
	}
	go func() {
		defer close(ch)
		s.follow(ctx, s.k.servers(), listPage,
			func(kvs []*mvccpb.KeyValue, rev int64) bool {
				clear(live)
				for _, kv := range kvs {
					apply(kv, false)
				}
				return publish(rev)
			},
			func(evs []*clientv3.Event) bool {
				for _, ev := range evs {
					apply(ev.Kv, ev.Type == clientv3.EventTypeDelete)
				}
				return publish(evs[len(evs)-1].Kv.ModRevision)
			})
	}()
	return ch
}
