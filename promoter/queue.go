package promoter

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
)

// item is what the queue holds for a key besides the key itself.
type item struct {
	// forced: an on-demand request of one target; the policy's selection
	// is not applied (prechecks still are).
	forced bool
	// requested: enqueued by Request (forced or not): a target dropped
	// from the tier since its promotion is promoted again, and a skip
	// when its turn comes is noted for the requester (Skipped).
	requested bool
	// ids: the promotion ids the requests were answered with. When the
	// turn comes the lake may have moved on and the target's id with it;
	// the requested ids are then noted as superseded (Skipped).
	ids []string
	// rev: the revision of the stored request of the key (0: not stored);
	// the worker deletes it at that revision once the turn has come.
	rev int64
}

func (it item) merge(o item) item {
	ids := it.ids
	for _, id := range o.ids {
		if !slices.Contains(ids, id) {
			ids = append(slices.Clip(ids), id)
		}
	}
	return item{forced: it.forced || o.forced, requested: it.requested || o.requested, ids: ids, rev: max(it.rev, o.rev)}
}

// queue is a de-duplicating work queue of keys with per-key exclusion and
// a per-policy concurrency limit, in the manner of controller-runtime's
// workqueue: a key is at most once pending; a key being processed is not
// handed out again; a key added while it is processed is marked dirty and
// becomes pending again when it is done. Items are handed out in the order
// they were added, skipping keys whose policy is at its limit.
type queue struct {
	limit func(policy string) int // concurrent keys per policy; <= 0: unlimited

	mu struct {
		sync.Mutex
		order     []Key
		pending   map[Key]item
		running   map[Key]bool
		dirty     map[Key]item
		perPolicy map[string]int
		closed    bool
		changed   chan struct{} // closed and replaced on every change
	}
}

func newQueue(limit func(string) int) *queue {
	q := &queue{limit: limit}
	q.mu.pending = map[Key]item{}
	q.mu.running = map[Key]bool{}
	q.mu.dirty = map[Key]item{}
	q.mu.perPolicy = map[string]int{}
	q.mu.changed = make(chan struct{})
	return q
}

func (q *queue) broadcastLocked() {
	close(q.mu.changed)
	q.mu.changed = make(chan struct{})
}

// add enqueues k. It reports whether k was not already pending or dirty
// (false when the queue is closed: see enqueue).
func (q *queue) add(k Key, it item) bool {
	added, _ := q.enqueue(k, it)
	return added
}

// enqueue is add for a caller that must know whether k was taken: it fails
// with ErrClosed while the queue is closed (Run does not run: it has not
// started, or its term ended), when k is dropped.
func (q *queue) enqueue(k Key, it item) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return false, ErrClosed
	}
	if q.mu.running[k] {
		old, ok := q.mu.dirty[k]
		q.mu.dirty[k] = old.merge(it)
		return !ok, nil
	}
	if old, ok := q.mu.pending[k]; ok {
		q.mu.pending[k] = old.merge(it)
		return false, nil
	}
	q.mu.pending[k] = it
	q.mu.order = append(q.mu.order, k)
	q.broadcastLocked()
	return true, nil
}

// queued returns what the queue holds for k waiting to run: pending, or
// dirty (added again while it runs).
func (q *queue) queued(k Key) (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if it, ok := q.mu.pending[k]; ok {
		return it, true
	}
	it, ok := q.mu.dirty[k]
	return it, ok
}

// removeID takes out of the queue the item that carries promotion id (a
// pending key's, or a dirty one's) and returns its key and what it held;
// false if no queued item carries it (any more).
func (q *queue) removeID(id string) (Key, item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, it := range q.mu.pending {
		if slices.Contains(it.ids, id) {
			delete(q.mu.pending, k)
			q.mu.order = slices.DeleteFunc(q.mu.order, func(o Key) bool { return o == k })
			q.broadcastLocked()
			return k, it, true
		}
	}
	for k, it := range q.mu.dirty {
		if slices.Contains(it.ids, id) {
			delete(q.mu.dirty, k)
			return k, it, true
		}
	}
	return Key{}, item{}, false
}

// queuedID is a promotion id a queued item carries: its key and how many
// keys are queued before it (-1 for a dirty key: queued again while it
// runs, it waits for that run).
type queuedID struct {
	id    string
	k     Key
	ahead int
}

// ids lists the promotion ids of the queued items: pending ones in queue
// order, then dirty ones by key.
func (q *queue) ids() []queuedID {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []queuedID
	for i, k := range q.mu.order {
		for _, id := range q.mu.pending[k].ids {
			out = append(out, queuedID{id: id, k: k, ahead: i})
		}
	}
	dirty := slices.SortedFunc(maps.Keys(q.mu.dirty), func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Partition, b.Partition))
	})
	for _, k := range dirty {
		for _, id := range q.mu.dirty[k].ids {
			out = append(out, queuedID{id: id, k: k, ahead: -1})
		}
	}
	return out
}

// eligibleLocked reports whether k may start now.
func (q *queue) eligibleLocked(k Key) bool {
	if q.mu.running[k] {
		return false
	}
	n := q.limit(k.Policy)
	return n <= 0 || q.mu.perPolicy[k.Policy] < n
}

func (q *queue) startLocked(k Key) {
	q.mu.running[k] = true
	q.mu.perPolicy[k.Policy]++
	q.broadcastLocked()
}

// get blocks until a pending key may start, marks it running and returns it.
// It fails when ctx is done or the queue is closed.
func (q *queue) get(ctx context.Context) (Key, item, error) {
	for {
		q.mu.Lock()
		if q.mu.closed {
			q.mu.Unlock()
			return Key{}, item{}, ErrClosed
		}
		for i, k := range q.mu.order {
			if q.eligibleLocked(k) {
				it := q.mu.pending[k]
				q.mu.order = append(q.mu.order[:i:i], q.mu.order[i+1:]...)
				delete(q.mu.pending, k)
				q.startLocked(k)
				q.mu.Unlock()
				return k, it, nil
			}
		}
		ch := q.mu.changed
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return Key{}, item{}, context.Cause(ctx)
		case <-ch:
		}
	}
}

// acquire waits until k may start (it is not running and its policy is
// under its limit) and marks it running: the exclusion of a synchronous
// Promote or a resume. A queued item of k stays queued and runs after
// (it dropped it: a request's stored record and waiters were never
// settled, and the next start queued the request again).
func (q *queue) acquire(ctx context.Context, k Key) error {
	for {
		q.mu.Lock()
		if q.eligibleLocked(k) {
			q.startLocked(k)
			q.mu.Unlock()
			return nil
		}
		ch := q.mu.changed
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		}
	}
}

// tryAcquireIdle marks k running if it neither runs nor waits in the
// queue (pending, or dirty), whatever its policy's limit, and reports
// whether it did: the exclusion of a short ledger write that is no
// promotion (PruneLedger), checked and taken under one lock.
func (q *queue) tryAcquireIdle(k Key) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, pending := q.mu.pending[k]
	_, dirty := q.mu.dirty[k]
	if q.mu.running[k] || pending || dirty {
		return false
	}
	q.startLocked(k)
	return true
}

// done ends k's run; a dirty k becomes pending again.
func (q *queue) done(k Key) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.mu.running, k)
	q.mu.perPolicy[k.Policy]--
	if q.mu.perPolicy[k.Policy] <= 0 {
		delete(q.mu.perPolicy, k.Policy)
	}
	if it, ok := q.mu.dirty[k]; ok && !q.mu.closed {
		delete(q.mu.dirty, k)
		q.mu.pending[k] = it
		q.mu.order = append(q.mu.order, k)
	}
	q.broadcastLocked()
}

// close makes get fail; pending keys are dropped (a restart's reconcile
// finds them again, and Run queues stored requests again).
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = true
	q.mu.order, q.mu.pending, q.mu.dirty = nil, map[Key]item{}, map[Key]item{}
	q.broadcastLocked()
}

// reopen undoes close (Run may be called again after it returned).
func (q *queue) reopen() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = false
}

// depth returns the pending and running counts.
func (q *queue) depth() (pending, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.mu.order), len(q.mu.running)
}

// waitIdle blocks until nothing is pending or running.
func (q *queue) waitIdle(ctx context.Context) error {
	for {
		q.mu.Lock()
		idle := len(q.mu.order) == 0 && len(q.mu.running) == 0
		ch := q.mu.changed
		q.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		}
	}
}

// isRunning reports whether k is being processed.
func (q *queue) isRunning(k Key) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.running[k]
}
