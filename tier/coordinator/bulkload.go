package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/meta"
)

// bulkManager drives the bulk-load transactions of one leadership term:
// one runner goroutine per transaction it holds (every record in etcd,
// terminal ones until their result expires), each owning its
// bulktxn.Machine. It follows the assignments and the live tablet servers
// (the replica holders every runner's rounds go to), recovers every
// transaction from etcd when the term starts, routes requests to runners,
// and sweeps what aborted transactions left in object storage.
type bulkManager struct {
	c   *Coordinator
	t   *term
	log *slog.Logger
	cfg bulktxn.Config

	ready chan struct{} // closed once every record was loaded (recovery done)
	ctx   context.Context
	wg    sync.WaitGroup
	sem   chan struct{} // bounds tablet calls of all runners together

	// beginMu serializes admissions, so that two Begins on one target (or
	// over the active limit) do not both pass Admit.
	beginMu sync.Mutex

	mu struct {
		sync.Mutex
		runners  map[string]*runner                 // by transaction id
		byTarget map[meta.Target]map[string]*runner // by target, then id
		assigns  map[meta.Target]meta.Versioned[meta.Assignment]
		servers  meta.ServerSet
		addrs    map[string]string // server id → address
	}
}

func newBulkManager(c *Coordinator, t *term, log *slog.Logger) *bulkManager {
	m := &bulkManager{c: c, t: t, log: log.With("component", "bulkload"), cfg: c.bulkCfg, ready: make(chan struct{}),
		sem: make(chan struct{}, max(c.cfg.Fanout, 1))}
	m.mu.runners = make(map[string]*runner)
	m.mu.byTarget = make(map[meta.Target]map[string]*runner)
	m.mu.assigns = make(map[meta.Target]meta.Versioned[meta.Assignment])
	m.mu.addrs = make(map[string]string)
	return m
}

// run follows assignments and servers, recovers every transaction and
// serves until ctx (the term's) is done; then it waits for its runners.
func (m *bulkManager) run(ctx context.Context) error {
	m.ctx = ctx
	defer func() {
		m.wg.Wait()
		m.c.m.bulk.txns.Reset()
		m.c.m.bulk.restoring.Set(0)
	}()
	assigns := m.c.store.WatchAssignments(ctx)
	servers := m.c.store.WatchServers(ctx)
	var gotAssigns, gotServers bool
	for !gotAssigns || !gotServers {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-assigns:
			if !ok {
				return nil
			}
			m.applyAssignments(u)
			gotAssigns = true
		case set, ok := <-servers:
			if !ok {
				return nil
			}
			m.applyServers(set)
			gotServers = true
		}
	}
	if err := m.load(ctx); err != nil {
		return nil // the term ended while loading
	}
	close(m.ready)
	m.log.Info("coordinator resumed bulk loads", "transactions", m.count())

	var sweep <-chan time.Time
	if d := m.c.cfg.BulkLoad.OrphanCleanInterval; d > 0 {
		tk := time.NewTicker(d)
		defer tk.Stop()
		sweep = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-assigns:
			if !ok {
				return nil
			}
			m.applyAssignments(u)
		case set, ok := <-servers:
			if !ok {
				return nil
			}
			m.applyServers(set)
		case <-sweep:
			m.sweepOrphans(ctx)
		}
	}
}

// load starts a runner for every record in etcd; each recovers its
// transaction. It retries etcd errors until ctx is done.
func (m *bulkManager) load(ctx context.Context) error {
	b := newBackoff(100*time.Millisecond, 5*time.Second)
	for {
		recs, err := m.c.store.ListBulkLoads(ctx)
		if err == nil {
			for _, v := range recs {
				m.start(newRunner(m, v.Value))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err() // the term or the process ends: no warning
		}
		m.log.Warn("coordinator cannot list bulk loads", "err", err)
		if !b.wait(ctx) {
			return ctx.Err()
		}
	}
}

// awaitReady waits until the term's transactions are loaded.
func (m *bulkManager) awaitReady(ctx context.Context) error {
	select {
	case <-m.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.t.l.Context().Done():
		return fmt.Errorf("%w: the coordinator's term ended", bulkload.ErrUnavailable)
	}
}

func (m *bulkManager) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.runners)
}

// start registers r and runs it.
func (m *bulkManager) start(r *runner) {
	m.mu.Lock()
	m.mu.runners[r.id] = r
	if m.mu.byTarget[r.target] == nil {
		m.mu.byTarget[r.target] = make(map[string]*runner)
	}
	m.mu.byTarget[r.target][r.id] = r
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r.run(m.ctx)
		m.remove(r)
	}()
}

func (m *bulkManager) remove(r *runner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.runners[r.id] == r {
		delete(m.mu.runners, r.id)
		delete(m.mu.byTarget[r.target], r.id)
		if len(m.mu.byTarget[r.target]) == 0 {
			delete(m.mu.byTarget, r.target)
		}
	}
	m.updateGaugesLocked()
}

// runner returns the runner of a transaction, nil if none.
func (m *bulkManager) runner(id string) *runner {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.runners[id]
}

// runnersOf returns the runners of a target (nil: of every target).
func (m *bulkManager) runnersOf(t *meta.Target) []*runner {
	m.mu.Lock()
	defer m.mu.Unlock()
	var src map[string]*runner
	if t != nil {
		src = m.mu.byTarget[*t]
	} else {
		src = m.mu.runners
	}
	out := slices.Collect(maps.Values(src))
	slices.SortFunc(out, func(a, b *runner) int {
		va, vb := a.view(), b.view()
		if c := cmp.Compare(va.rec.CreatedMs, vb.rec.CreatedMs); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// updateGaugesLocked recounts the transactions by state.
func (m *bulkManager) updateGaugesLocked() {
	counts := map[bulkload.State]int{}
	pending := 0
	for _, r := range m.mu.runners {
		v := r.view()
		counts[v.rec.State]++
		pending += v.restorePending
	}
	for _, s := range []bulkload.State{bulkload.Begun, bulkload.Committing, bulkload.Committed, bulkload.Aborted} {
		m.c.m.bulk.txns.WithLabelValues(s.String()).Set(float64(counts[s]))
	}
	m.c.m.bulk.restoring.Set(float64(pending))
}

func (m *bulkManager) updateGauges() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updateGaugesLocked()
}

// applyAssignments takes an assignment watch delivery and tells the
// runners of the targets concerned.
func (m *bulkManager) applyAssignments(u meta.AssignmentUpdate) {
	m.mu.Lock()
	changed := make(map[meta.Target]bool)
	if u.Reset {
		for t := range m.mu.assigns {
			changed[t] = true
		}
		clear(m.mu.assigns)
	}
	for _, a := range u.Put {
		t := a.Value.Target()
		if cur, ok := m.mu.assigns[t]; ok && cur.Rev > a.Rev {
			continue
		}
		m.mu.assigns[t] = a
		changed[t] = true
	}
	for _, t := range u.Deleted {
		delete(m.mu.assigns, t)
		changed[t] = true
	}
	var rs []*runner
	for t := range changed {
		for _, r := range m.mu.byTarget[t] {
			rs = append(rs, r)
		}
	}
	m.mu.Unlock()
	for _, r := range rs {
		r.holdersMoved()
	}
}

// applyServers takes a live-set delivery and tells every runner.
func (m *bulkManager) applyServers(set meta.ServerSet) {
	m.mu.Lock()
	m.mu.servers = set
	clear(m.mu.addrs)
	for _, s := range set.Servers {
		m.mu.addrs[s.ID] = s.Address
	}
	rs := slices.Collect(maps.Values(m.mu.runners))
	m.mu.Unlock()
	for _, r := range rs {
		r.holdersMoved()
	}
}

// holders returns the replica holders of a target's buckets as the
// manager knows them: the assignment's replicas that are live, with the
// incarnation of their registration; and the assignment's revision (0 if
// the target has none).
func (m *bulkManager) holders(t meta.Target, buckets int) (bulktxn.Holders, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := bulktxn.Holders{Replicas: make([][]string, buckets), Incarnations: make(map[string]int64)}
	a, ok := m.mu.assigns[t]
	if !ok {
		return h, 0
	}
	for b := range min(buckets, len(a.Value.Buckets)) {
		for _, s := range a.Value.Buckets[b].Replicas {
			inc, live := m.mu.servers.Incarnations[s]
			if !live {
				continue
			}
			h.Replicas[b] = append(h.Replicas[b], s)
			h.Incarnations[s] = inc
		}
	}
	return h, a.Rev
}

// assignedBuckets returns how many buckets a target's assignment has. The
// assignment watch may not have delivered a target created a moment ago, so
// when the cached assignment does not cover want buckets it is read from
// etcd (and cached, if no newer revision arrived meanwhile).
func (m *bulkManager) assignedBuckets(ctx context.Context, t meta.Target, want int) (int, error) {
	m.mu.Lock()
	n := len(m.mu.assigns[t].Value.Buckets)
	m.mu.Unlock()
	if n == want {
		return n, nil
	}
	a, err := m.c.store.GetAssignment(ctx, t)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return n, nil
	case err != nil:
		return 0, fmt.Errorf("read the assignment of %s: %w", t, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.mu.assigns[t]; !ok || cur.Rev < a.Rev {
		m.mu.assigns[t] = a
	}
	return len(m.mu.assigns[t].Value.Buckets), nil
}

// address returns a live server's address, "" if it is not live.
func (m *bulkManager) address(server string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.addrs[server]
}

// anonymous is the principal recorded for every transaction. Callers are
// authenticated (Config.Callers) and authorized per target, not per
// transaction: any caller whose grants cover the target may resume (Begin
// with the caller token), commit, abort or get upload credentials for a
// transaction on it, as the caller token alone names the transaction.
var anonymous = bulkload.Principal{Type: "anonymous", Name: "anonymous"}

// begin serves Begin: it finds the transaction of the caller token on the
// target (terminal ones included) or, if the target has no live
// transaction, admits and starts a new one; then it waits for the answer.
func (m *bulkManager) begin(ctx context.Context, ts *targetState, token string, timeout time.Duration) (reply, *runner, error) {
	if err := m.awaitReady(ctx); err != nil {
		return reply{}, nil, err
	}
	tgt := ts.target()
	m.beginMu.Lock()
	var (
		target *runner
		live   *runner
		all    = m.runnersOf(&tgt)
	)
	for _, r := range all {
		v := r.view()
		if v.rec.CallerToken == token && v.rec.Creator == anonymous {
			target = r
			break
		}
		if !v.rec.State.Terminal() {
			live = r
		}
	}
	if target == nil {
		target = live
	}
	if target != nil {
		m.beginMu.Unlock()
		rep, err := target.request(ctx, func(id bulktxn.RequestID, now time.Time) bulktxn.Input {
			return bulktxn.BeginRequested{Req: id, CallerToken: token, Principal: anonymous, Now: now}
		})
		return rep, target, err
	}
	r, err := m.admit(ctx, ts, token, timeout, len(all))
	m.beginMu.Unlock()
	if err != nil {
		return reply{}, nil, err
	}
	rep, err := r.await(ctx, r.firstReq)
	return rep, r, err
}

// admit decides whether a new transaction may begin on ts and starts it.
// The caller holds beginMu.
func (m *bulkManager) admit(ctx context.Context, ts *targetState, token string, timeout time.Duration, targetTxns int) (*runner, error) {
	tgt := ts.target()
	tr := ts.table.Value
	state, heldBy, regRev := tr.DataState, tr.BulkLoadID, ts.table.Rev
	if ts.partition != nil {
		state, heldBy, regRev = ts.partition.Value.DataState, ts.partition.Value.BulkLoadID, ts.partition.Rev
	}
	has, _, err := m.c.store.HasSnapshots(ctx, tgt)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", bulkload.ErrUnavailable, err)
	}
	active := 0
	for _, r := range m.runnersOf(nil) {
		if !r.view().rec.State.Terminal() {
			active++
		}
	}
	assigned, err := m.assignedBuckets(ctx, tgt, tr.Schema.Buckets)
	if err != nil {
		return nil, err
	}
	if err := bulktxn.Admit(bulktxn.AdmissionInput{
		Config:          m.cfg,
		PrimaryKey:      len(tr.Schema.PrimaryKey) > 0,
		Active:          state == meta.Active,
		HeldBy:          heldBy,
		RemoteDataDir:   tr.RemoteDataDir,
		Buckets:         tr.Schema.Buckets,
		AssignedBuckets: assigned,
		HasSnapshots:    has,
		ActiveTxns:      active,
		TargetTxns:      targetTxns,
		BuildTimeout:    timeout,
	}); err != nil {
		return nil, err
	}
	schema, err := jsonOf(tr.Schema)
	if err != nil {
		return nil, err
	}
	id, err := bulkload.NewTxnID()
	if err != nil {
		return nil, err
	}
	holders, assignRev := m.holders(tgt, tr.Schema.Buckets)
	target := bulkload.Target{Database: tr.Database, Table: tr.Name}
	if ts.partition != nil {
		target.Partition = ts.partition.Value.Name
	}
	r := newRunner(m, bulkload.Record{TxnID: id, Target: target, TableID: tgt.TableID, PartitionID: tgt.PartitionID})
	req := r.newRequest()
	mach, effs, err := bulktxn.New(m.cfg, bulktxn.Begin{
		Req: req.id, TxnID: id, CallerToken: token, Principal: anonymous, Now: m.c.clock.Now(),
		Target: target, TableID: tgt.TableID, PartitionID: tgt.PartitionID,
		RemoteDataDir: tr.RemoteDataDir, Schema: schema, BuildTimeout: timeout,
		RegistrationRev: regRev, Holders: holders,
	})
	if err != nil {
		return nil, err
	}
	r.adopt(mach, effs, bulktxn.RegActive, regRev, assignRev, holders)
	r.firstReq = req
	m.log.Info("coordinator begins bulk load", "txn", id, "target", target.String(), "token", token)
	m.start(r)
	return r, nil
}

// lookup returns the runner of a handle's transaction: NOT_FOUND unless
// the transaction is held here and matches the handle's ids.
func (m *bulkManager) lookup(ctx context.Context, h *tierv1.BulkLoadHandle) (*runner, error) {
	if err := m.awaitReady(ctx); err != nil {
		return nil, err
	}
	id := h.GetTxnId()
	if err := bulkload.ValidateTxnID(id); err != nil {
		return nil, err
	}
	r := m.runner(id)
	if r == nil {
		return nil, fmt.Errorf("%w: transaction %s", bulkload.ErrNotFound, id)
	}
	v := r.view()
	switch {
	case h.GetTableId() != 0 && h.GetTableId() != v.rec.TableID,
		h.GetPartitionId() != 0 && h.GetPartitionId() != v.rec.PartitionID:
		return nil, fmt.Errorf("%w: transaction %s is not of table %d partition %d", bulkload.ErrNotFound, id, h.GetTableId(), h.GetPartitionId())
	case h.GetTarget() != nil && !sameTarget(h.GetTarget(), v.rec.Target):
		return nil, fmt.Errorf("%w: transaction %s is not of %s", bulkload.ErrNotFound, id, targetString(h.GetTarget()))
	}
	return r, nil
}

func sameTarget(p *tierv1.TargetPath, t bulkload.Target) bool {
	return p.GetDatabase() == t.Database && p.GetTable() == t.Table && p.GetPartition() == t.Partition
}

// targetOfPath is the target a request names.
func targetOfPath(p *tierv1.TargetPath) bulkload.Target {
	return bulkload.Target{Database: p.GetDatabase(), Table: p.GetTable(), Partition: p.GetPartition()}
}

func targetString(p *tierv1.TargetPath) string { return targetOfPath(p).String() }

// sweepOrphans cleans what every retained aborted transaction left.
func (m *bulkManager) sweepOrphans(ctx context.Context) {
	for _, r := range m.runnersOf(nil) {
		v := r.view()
		if v.rec.State != bulkload.Aborted || v.rec.SnapshotIDs == nil {
			continue
		}
		if _, err := m.cleanAborted(ctx, v.rec); err != nil && ctx.Err() == nil {
			m.log.Warn("coordinator could not clean an aborted bulk load's output", "txn", v.rec.TxnID, "err", err)
		}
	}
}

// errTermEnded answers requests whose runner stopped with its term.
var errTermEnded = errors.New("coordinator: the leadership term ended")
