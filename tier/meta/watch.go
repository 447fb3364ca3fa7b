package meta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Retry delays of a broken watch or list.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = 2 * time.Second
)

var (
	errStop      = errors.New("meta: watch stopped by its receiver")
	errCompacted = errors.New("meta: watch revision compacted")
)

// follow keeps a view of the keys under prefix current. reset receives
// every key and the revision they were read at; changes then receives the
// events of each watch response, in revision order. A broken watch resumes
// after the last revision delivered; if that revision has been compacted,
// follow lists again and calls reset. It returns when ctx is done or a
// callback returns false; it never gives up on etcd errors, retrying with
// backoff.
func (s *Store) follow(ctx context.Context, prefix string, page int64,
	reset func(kvs []*mvccpb.KeyValue, rev int64) bool,
	changes func(evs []*clientv3.Event) bool,
) {
	delay := minRetry
	for ctx.Err() == nil {
		var kvs []*mvccpb.KeyValue
		rev, err := s.scan(ctx, prefix, page, func(kv *mvccpb.KeyValue) error {
			kvs = append(kvs, kv)
			return nil
		})
		if err != nil {
			s.log.Warn("meta list for watch failed", "prefix", prefix, "err", err)
			if !sleep(ctx, &delay) {
				return
			}
			continue
		}
		if !reset(kvs, rev) {
			return
		}
		for {
			next, err := s.watchFrom(ctx, prefix, rev, changes)
			if next > rev {
				rev, delay = next, minRetry
			}
			if errors.Is(err, errStop) || ctx.Err() != nil {
				return
			}
			if errors.Is(err, errCompacted) {
				s.log.Info("meta watch relists after compaction", "prefix", prefix, "rev", rev)
				break
			}
			s.log.Warn("meta watch broke", "prefix", prefix, "rev", rev, "err", err)
			if !sleep(ctx, &delay) {
				return
			}
		}
	}
}

// watchFrom delivers the changes under prefix after rev until the watch
// breaks, and returns the revision of the last change delivered.
func (s *Store) watchFrom(ctx context.Context, prefix string, rev int64, changes func(evs []*clientv3.Event) bool) (int64, error) {
	// WithRequireLeader: a member cut off from its quorum closes the watch
	// rather than keep it silently open.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.CompactRevision != 0 {
			return rev, fmt.Errorf("%w: compacted at %d", errCompacted, wr.CompactRevision)
		}
		if err := wr.Err(); err != nil {
			return rev, err
		}
		if len(wr.Events) == 0 {
			continue
		}
		if !changes(wr.Events) {
			return rev, errStop
		}
		rev = wr.Events[len(wr.Events)-1].Kv.ModRevision
	}
	if err := ctx.Err(); err != nil {
		return rev, err
	}
	return rev, errors.New("meta: watch channel closed")
}

// sleep waits *d or until ctx is done, doubles *d up to maxRetry, and
// reports whether ctx is still live.
func sleep(ctx context.Context, d *time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	*d = min(2**d, maxRetry)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lastEvents keeps the last event of each key, in key order of first
// appearance: a watch response may change a key more than once.
func lastEvents(evs []*clientv3.Event) []*clientv3.Event {
	idx := make(map[string]int, len(evs))
	out := make([]*clientv3.Event, 0, len(evs))
	for _, ev := range evs {
		if i, ok := idx[string(ev.Kv.Key)]; ok {
			out[i] = ev
			continue
		}
		idx[string(ev.Kv.Key)] = len(out)
		out = append(out, ev)
	}
	return out
}
