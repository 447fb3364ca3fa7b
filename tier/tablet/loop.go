package tablet

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
)

// assignRec is a target's assignment as the loop holds it.
type assignRec struct {
	rev    int64
	routes map[int32]bucketRoute
	full   bool // from etcd (every bucket), not from a NotifyAssignment
}

// tableRec is a table record and its compiled schema.
type tableRec struct {
	rec   meta.TableRecord
	rev   int64
	table *kv.Table
}

type partRec struct {
	rec meta.PartitionRecord
	rev int64
}

// pushedInfo is what a NotifyAssignment said of a target, used until the
// table and partition records are known.
type pushedInfo struct {
	snap  snapshot.Target
	table *kv.Table
}

// loop is the server's one reconcile goroutine. It owns everything below:
// the assignments, records and data states it has learnt, and the replica
// entries (the replica map); it publishes views of them under Server.mu.
// Slow work never runs on it: restores, tailing and snapshots run on each
// entry's worker, confirmations on the RPC's goroutine.
type loop struct {
	s   *Server
	log *slog.Logger
	ctx context.Context // the parent of every entry's ctx

	assigns   map[meta.Target]*assignRec
	deleted   map[meta.Target]int64 // dropped targets: revision of the deletion
	pushed    map[meta.Target]pushedInfo
	tables    map[int64]*tableRec
	tableKeys map[string]int64
	parts     map[meta.Target]*partRec
	partKeys  map[string]meta.Target
	states    map[meta.Target]*targetState

	entries  map[bucketKey]*replicaEntry
	byTarget map[meta.Target]map[int32]*replicaEntry
	closing  map[bucketKey]chan struct{} // done of the last stopped entry of a bucket
	// unviewed holds the entries stopped because their target could no
	// longer be viewed (its table or partition marked dropping) before its
	// assignment's deletion arrived (the two are watched apart): their
	// logs are deleted when it does.
	unviewed map[meta.Target][]*replicaEntry

	registered bool
	// listed says which kinds of records (indexed by recordKind) were
	// listed once: until then a push may fence a target but not open it.
	listed [2]bool
	dirty  map[meta.Target]struct{}
	all    bool // reconcile every target

	logDeletes sync.WaitGroup // deleteDroppedLog goroutines

	catchUpToken uint64 // the last replicaEntry.needCatchUp token handed out
}

func newLoop(s *Server) *loop {
	return &loop{
		s:         s,
		log:       s.log,
		assigns:   make(map[meta.Target]*assignRec),
		deleted:   make(map[meta.Target]int64),
		pushed:    make(map[meta.Target]pushedInfo),
		tables:    make(map[int64]*tableRec),
		tableKeys: make(map[string]int64),
		parts:     make(map[meta.Target]*partRec),
		partKeys:  make(map[string]meta.Target),
		states:    make(map[meta.Target]*targetState),
		entries:   make(map[bucketKey]*replicaEntry),
		byTarget:  make(map[meta.Target]map[int32]*replicaEntry),
		closing:   make(map[bucketKey]chan struct{}),
		unviewed:  make(map[meta.Target][]*replicaEntry),
		dirty:     make(map[meta.Target]struct{}),
	}
}

// run handles the inputs until ctx is done, reconciling after each, then
// stops every replica and waits until all are closed and removed.
func (l *loop) run(ctx context.Context, assignments <-chan meta.AssignmentUpdate, servers <-chan meta.ServerSet) {
	l.ctx = ctx
	for {
		select {
		case <-ctx.Done():
			l.shutdown()
			return
		case u, ok := <-assignments:
			if !ok {
				assignments = nil
				continue
			}
			l.applyAssignments(u)
		case set, ok := <-servers:
			if !ok {
				servers = nil
				continue
			}
			l.setServers(set)
		case fn := <-l.s.calls:
			fn(l)
		}
		l.reconcile()
	}
}

func (l *loop) shutdown() {
	var dones []chan struct{}
	for _, e := range l.entries {
		l.stop(e)
	}
	for _, d := range l.closing {
		dones = append(dones, d)
	}
	l.s.mu.Lock()
	clear(l.s.mu.targets)
	clear(l.s.mu.replicas)
	l.s.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	l.logDeletes.Wait() // they end with the loop's context
}

func (l *loop) markDirty(t meta.Target) { l.dirty[t] = struct{}{} }

// markTable marks every target of a table dirty.
func (l *loop) markTable(tableID int64) {
	for t := range l.assigns {
		if t.TableID == tableID {
			l.markDirty(t)
		}
	}
	for t := range l.byTarget {
		if t.TableID == tableID {
			l.markDirty(t)
		}
	}
}

func (l *loop) setRegistered(ok bool) {
	if l.registered != ok {
		l.registered = ok
		l.all = true
	}
}

func (l *loop) setServers(set meta.ServerSet) {
	m := make(map[string]string, len(set.Servers))
	for _, r := range set.Servers {
		m[r.ID] = r.Address
	}
	l.s.mu.Lock()
	l.s.mu.servers = m
	l.s.mu.Unlock()
}

// stateOf returns the data state of a target, creating it.
func (l *loop) stateOf(t meta.Target) *targetState {
	st, ok := l.states[t]
	if !ok {
		st = newTargetState()
		l.states[t] = st
	}
	return st
}

// applyAssignments applies one delivery of the assignment watch.
func (l *loop) applyAssignments(u meta.AssignmentUpdate) {
	if u.Reset {
		seen := make(map[meta.Target]bool, len(u.Put)+len(u.Undecodable))
		for _, v := range u.Put {
			seen[v.Value.Target()] = true
		}
		// An assignment that exists but does not decode (a newer
		// release's field, a damaged record) is not a drop: deleting it
		// would stop the replicas and delete the bucket's changelog.
		for _, t := range u.Undecodable {
			seen[t] = true
		}
		for t, a := range l.assigns {
			if !seen[t] && a.rev <= u.Rev {
				l.deleteAssignment(t, u.Rev)
			}
		}
	}
	for _, v := range u.Put {
		routes := make(map[int32]bucketRoute, len(v.Value.Buckets))
		for i, b := range v.Value.Buckets {
			routes[int32(i)] = bucketRoute{replicas: b.Replicas, leader: b.Leader, epoch: b.LeaderEpoch}
		}
		l.putAssignment(v.Value.Target(), &assignRec{rev: v.Rev, routes: routes, full: true})
	}
	for _, t := range u.Deleted {
		l.deleteAssignment(t, u.Rev)
	}
}

// putAssignment adopts a if it is newer than what the loop holds (at the
// same revision, a full assignment replaces a pushed one).
func (l *loop) putAssignment(t meta.Target, a *assignRec) bool {
	if rev, ok := l.deleted[t]; ok && rev >= a.rev {
		return false
	}
	if cur := l.assigns[t]; cur != nil && (cur.rev > a.rev || (cur.rev == a.rev && (cur.full || !a.full))) {
		return false
	}
	// Assigned again after a deletion (one inferred from a relist, say):
	// its data state applies again.
	delete(l.deleted, t)
	l.assigns[t] = a
	l.markDirty(t)
	return true
}

func (l *loop) deleteAssignment(t meta.Target, rev int64) {
	delete(l.assigns, t)
	delete(l.pushed, t)
	delete(l.states, t)
	l.deleted[t] = max(l.deleted[t], rev)
	l.markDirty(t)
}

// pushAllowed says whether a pushed data state may be applied. Until the
// records that hold the target's state were listed once, an ACTIVE push is
// not: after a restart the state starts unknown (revision 0), and a push
// built before a bulk load fenced the target (a reconcile round's, sent
// late) would open it to writes although its record says LOADING. A
// target still unknown after that listing was created after it, so no
// earlier incarnation of this server fenced it. LOADING pushes only
// restrict, and a fence must work on a server that has just started.
func (l *loop) pushAllowed(t meta.Target, d dataState) bool {
	k := recordTables
	if t.Partitioned() {
		k = recordPartitions
	}
	return d.state != meta.Active || l.listed[k]
}

// applyState applies a data state learnt from a record or a push.
func (l *loop) applyState(t meta.Target, d dataState) {
	if _, gone := l.deleted[t]; gone {
		return
	}
	l.stateOf(t).apply(d)
}

// view builds the view of a target, nil if the target is not (or no
// longer) servable: no assignment, or no names and schema known.
func (l *loop) view(t meta.Target) *targetView {
	a := l.assigns[t]
	if a == nil {
		return nil
	}
	var (
		snap  snapshot.Target
		table *kv.Table
	)
	tr := l.tables[t.TableID]
	pr := l.parts[t]
	switch {
	case tr != nil && !tr.rec.Dropping && tr.rec.Partitioned() == t.Partitioned() &&
		(!t.Partitioned() || (pr != nil && !pr.rec.Dropping)):
		snap, table = tr.rec.SnapshotTarget(), tr.table
		if t.Partitioned() {
			snap.Partition, snap.PartitionID = pr.rec.Name, pr.rec.ID
		}
	default:
		p, ok := l.pushed[t]
		if !ok {
			return nil
		}
		snap, table = p.snap, p.table
	}
	return &targetView{
		id: t, snap: snap, table: table, physKey: table.PhysicalKey(),
		assignRev: a.rev, routes: a.routes, state: l.stateOf(t),
	}
}

// reconcile brings the published views and the replica entries of the
// dirty targets (every target after a registration change) in line with
// what the loop knows: it starts a replica for every bucket assigned here,
// stops those no longer assigned, and flags a replica that became its
// bucket's leader for a catch-up.
func (l *loop) reconcile() {
	// A stopped entry's done, once closed, says every earlier replica of
	// its bucket is gone: a later start needs no prev. (Kept, one per
	// bucket ever stopped here, the map grew for the server's life.)
	for k, d := range l.closing {
		select {
		case <-d:
			delete(l.closing, k)
		default:
		}
	}
	targets := slices.Collect(maps.Keys(l.dirty))
	if l.all {
		seen := map[meta.Target]struct{}{}
		for t := range l.assigns {
			seen[t] = struct{}{}
		}
		for t := range l.byTarget {
			seen[t] = struct{}{}
		}
		for t := range l.s.mu.targets { // the loop is the only writer: no lock to read
			seen[t] = struct{}{}
		}
		targets = slices.Collect(maps.Keys(seen))
	}
	clear(l.dirty)
	l.all = false
	if len(targets) == 0 {
		return
	}
	slices.SortFunc(targets, compareTargets)

	views := make(map[meta.Target]*targetView, len(targets))
	var started, stopped []*replicaEntry
	for _, t := range targets {
		tv := l.view(t)
		views[t] = tv
		want := map[int32]bucketRoute{}
		if tv != nil && l.registered {
			for b, r := range tv.routes {
				if r.hosts(l.s.cfg.ID) {
					want[b] = r
				}
			}
		}
		for b, e := range l.byTarget[t] {
			if _, ok := want[b]; !ok {
				stopped = append(stopped, e)
			}
		}
		for _, b := range slices.Sorted(maps.Keys(want)) {
			e := l.byTarget[t][b]
			if e == nil {
				e = l.newEntry(bucketKey{t, b}, tv, restoreSource{}, 0)
				started = append(started, e)
			}
			leader, epoch := want[b].leader == l.s.cfg.ID, want[b].epoch
			if leader && (!e.leader || e.epoch != epoch) {
				// A term it did not lead before, even after leading the
				// previous one: another server may have led (and written)
				// in between without this one seeing it.
				l.catchUpToken++
				e.needCatchUp.Store(l.catchUpToken)
			}
			e.leader, e.epoch = leader, epoch
		}
	}
	for _, e := range stopped {
		l.log.Info("tablet replica unassigned", logAttrs(e.key)...)
	}
	l.publish(views, stopped, started)
	for _, e := range stopped {
		switch _, dropped := l.deleted[e.key.target]; {
		case dropped:
			l.deleteDroppedLog(e)
		case views[e.key.target] == nil:
			l.unviewed[e.key.target] = append(l.unviewed[e.key.target], e)
		}
	}
	for _, t := range targets {
		if _, dropped := l.deleted[t]; dropped {
			for _, e := range l.unviewed[t] {
				l.deleteDroppedLog(e)
			}
			delete(l.unviewed, t)
		}
	}
}

// deleteDroppedLog deletes the changelog of a dropped target's bucket once
// e's replica has closed: assignments are deleted only when their target
// is dropped, and target ids are never reused, so nobody reads the log
// again. Another replica of the bucket may still hold the log open (the
// local log is shared by the tablet servers of a host): ErrInUse, like any
// failure, is retried until the server stops. A server that stops first
// leaves the log behind. The log goes only once the metadata confirms the
// drop (DroppedTargets, as the sweep asks): the loop's own view of a
// deletion comes from a watch, and a log deleted wrongly is acknowledged
// writes lost.
func (l *loop) deleteDroppedLog(e *replicaEntry) {
	l.logDeletes.Add(1)
	go func() {
		defer l.logDeletes.Done()
		select {
		case <-e.done:
		case <-l.ctx.Done():
			return
		}
		id := e.rid.LogID()
		b := backoff{min: l.s.cfg.RetryMin, max: l.s.cfg.RetryMax}
		for {
			dropped, err := l.s.deps.Meta.DroppedTargets(l.ctx, []meta.Target{e.key.target})
			switch {
			case l.ctx.Err() != nil:
				return
			case err != nil:
				l.log.Warn("changelog of a dropped target: cannot confirm the drop; retrying", append(logAttrs(e.key), "err", err)...)
				b.sleep(l.ctx)
				continue
			case len(dropped) == 0:
				l.log.Warn("changelog kept: the metadata does not say its target was dropped", logAttrs(e.key)...)
				return
			}
			deleted, err := l.s.deps.Changelog.Delete(l.ctx, id)
			switch {
			case err == nil:
				if deleted {
					l.log.Info("changelog of a dropped target deleted", logAttrs(e.key)...)
				}
				return
			case l.ctx.Err() != nil:
				return
			case !errors.Is(err, changelog.ErrInUse):
				l.log.Warn("changelog of a dropped target not deleted; retrying", append(logAttrs(e.key), "err", err)...)
			}
			b.sleep(l.ctx)
		}
	}()
}

// publish makes views, the removal of stopped and the addition of started
// visible to the handlers at once, then stops and starts the entries.
func (l *loop) publish(views map[meta.Target]*targetView, stopped, started []*replicaEntry) {
	l.s.mu.Lock()
	for t, tv := range views {
		if tv == nil {
			delete(l.s.mu.targets, t)
		} else {
			l.s.mu.targets[t] = tv
		}
	}
	for _, e := range stopped {
		if l.s.mu.replicas[e.key] == e {
			delete(l.s.mu.replicas, e.key)
		}
	}
	for _, e := range started {
		l.s.mu.replicas[e.key] = e
	}
	l.s.mu.Unlock()
	for _, e := range stopped {
		l.stop(e)
	}
	for _, e := range started {
		l.start(e)
	}
}

// newEntry creates (without starting) the entry of a bucket replica.
func (l *loop) newEntry(key bucketKey, tv *targetView, src restoreSource, latestID int64) *replicaEntry {
	ctx, cancel := context.WithCancel(l.ctx)
	e := &replicaEntry{
		key:    key,
		rid:    replica.ReplicaID{Target: tv.snap, Bucket: key.bucket},
		state:  tv.state,
		source: src,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	e.setStatus(entryStatus{state: restoringState, restoringID: src.restoringID()})
	e.latestID.Store(latestID)
	return e
}

// start registers e in the loop's maps and starts its worker, after the
// bucket's previous replica (if any) is closed and removed.
func (l *loop) start(e *replicaEntry) {
	l.entries[e.key] = e
	m := l.byTarget[e.key.target]
	if m == nil {
		m = make(map[int32]*replicaEntry)
		l.byTarget[e.key.target] = m
	}
	m[e.key.bucket] = e
	prev := l.closing[e.key]
	delete(l.closing, e.key)
	if u := l.unviewed[e.key.target]; u != nil {
		// The bucket is served again: its log is in use.
		if u = slices.DeleteFunc(u, func(o *replicaEntry) bool { return o.key == e.key }); len(u) == 0 {
			delete(l.unviewed, e.key.target)
		} else {
			l.unviewed[e.key.target] = u
		}
	}
	go l.s.runEntry(e, prev)
}

// stop cancels e's worker and forgets e; the worker closes and removes the
// replica.
func (l *loop) stop(e *replicaEntry) {
	e.cancel()
	l.closing[e.key] = e.done
	delete(l.entries, e.key)
	if m := l.byTarget[e.key.target]; m != nil && m[e.key.bucket] == e {
		delete(m, e.key.bucket)
		if len(m) == 0 {
			delete(l.byTarget, e.key.target)
		}
	}
}

// replace stops e and starts a new entry of its bucket restoring from src.
func (l *loop) replace(e *replicaEntry, src restoreSource) *replicaEntry {
	tv := l.s.mu.targets[e.key.target]
	if tv == nil { // cannot happen while e is assigned; keep e
		return e
	}
	n := l.newEntry(e.key, tv, src, e.latestID.Load())
	n.leader, n.epoch = e.leader, e.epoch
	if e.leader {
		l.catchUpToken++
		n.needCatchUp.Store(l.catchUpToken)
	}
	l.publish(nil, []*replicaEntry{e}, []*replicaEntry{n})
	return n
}

// entriesOf returns the entries of a target, by bucket.
func (l *loop) entriesOf(t meta.Target) []*replicaEntry {
	m := l.byTarget[t]
	out := make([]*replicaEntry, 0, len(m))
	for _, b := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[b])
	}
	return out
}

func compareTargets(a, b meta.Target) int {
	return cmp.Or(cmp.Compare(a.TableID, b.TableID), cmp.Compare(a.PartitionID, b.PartitionID))
}

// logAttrs are the log keys naming a bucket.
func logAttrs(k bucketKey) []any {
	return []any{"table", k.target.TableID, "partition", k.target.PartitionID, "bucket", k.bucket}
}
