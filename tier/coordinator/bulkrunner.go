package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/meta"
)

// runner is the driver of one transaction: one goroutine (run) owns its
// bulktxn.Machine, feeds it requests, results, reports, holder changes and
// ticks, and performs the effects it returns. Effects that do I/O run on
// goroutines of their own and post their result back, tagged with the
// machine's generation; a result of an earlier generation (a machine
// replaced after a halt) is dropped. Handlers read the published view.
type runner struct {
	m      *bulkManager
	id     string
	target meta.Target
	name   meta.TargetName
	log    *slog.Logger

	inbox chan event
	kick  chan struct{} // one slot: the holders may have moved
	done  chan struct{}

	nextReq  atomic.Uint64
	firstReq *pendingRequest // the Begin that created the transaction
	// cleanFailedMs is when cleaning an aborted transaction's output at
	// its expiry first failed (deleteRecord), 0 before.
	cleanFailedMs atomic.Int64
	pub           atomic.Pointer[runnerView]
	// sending holds the servers a round command of this transaction is
	// in flight to (sendRound): a server that does not answer holds one
	// call of it, not one more at every resend.
	sending sync.Map // server id -> struct{}

	// Owned by the run goroutine.
	mach        *bulktxn.Machine
	initial     []bulktxn.Effect // New's effects, performed when run starts
	rec         bulkload.Record  // as last known (the machine's, or the record read)
	gen         uint64
	reg         bulktxn.Registration
	regRev      int64
	assignRev   int64
	holders     bulktxn.Holders
	outstanding *bulktxn.RegistrationWrite // of the write in flight
	replies     map[bulktxn.RequestID]chan reply
	timer       Timer
	needRecover bool
	forgotten   bool
	lastErr     string
	invalid     bool // the frozen manifest was found invalid
	phase       string
	phaseSince  time.Time

	restoreRound uint64
	restored     map[replicaKey]bool
	progress     map[replicaKey]*tierv1.ReplicaStatus
}

type replicaKey struct {
	bucket int
	server string
}

// runnerView is what handlers read of a runner.
type runnerView struct {
	rec            bulkload.Record
	reg            bulktxn.Registration
	phase          string
	info           *bulkload.TargetInfo
	lastErr        string
	progress       []*tierv1.BulkLoadBucketProgress
	restorePending int
}

// event is one input of the run goroutine.
type event struct {
	gen     uint64        // of the effect a result answers; 0 for the rest
	in      bulktxn.Input // a result, a report
	req     *pendingRequest
	build   func(bulktxn.RequestID, time.Time) bulktxn.Input
	tick    bool
	restore []*tierv1.ReplicaStatus // statuses a restore call returned
}

// pendingRequest is a caller waiting for the machine's reply.
type pendingRequest struct {
	id bulktxn.RequestID
	ch chan reply
}

// reply is a machine's Reply as the handler sees it. retry says the
// machine halted (a precondition moved) and is being recovered: the
// request may be repeated as is.
type reply struct {
	rep   bulktxn.Reply
	retry bool
	view  runnerView
}

func newRunner(m *bulkManager, rec bulkload.Record) *runner {
	name := meta.TargetName{Database: rec.Target.Database, Table: rec.Target.Table, Partition: rec.Target.Partition}
	r := &runner{
		m: m, id: rec.TxnID, target: meta.BulkLoadTarget(&rec), name: name,
		log:   m.log.With("txn", rec.TxnID, "target", rec.Target.String()),
		inbox: make(chan event, 256), kick: make(chan struct{}, 1), done: make(chan struct{}),
		rec: rec, replies: make(map[bulktxn.RequestID]chan reply), needRecover: true,
	}
	r.publish()
	return r
}

// adopt makes mach the runner's machine (New's, before run starts).
func (r *runner) adopt(mach *bulktxn.Machine, effs []bulktxn.Effect, reg bulktxn.Registration, regRev, assignRev int64, h bulktxn.Holders) {
	r.mach, r.initial, r.needRecover = mach, effs, false
	r.rec, r.reg, r.regRev, r.assignRev, r.holders = mach.Record(), reg, regRev, assignRev, h
	r.gen++
	r.publish()
}

func (r *runner) newRequest() *pendingRequest {
	return &pendingRequest{id: bulktxn.RequestID(r.nextReq.Add(1)), ch: make(chan reply, 1)}
}

// view returns the published view.
func (r *runner) view() runnerView { return *r.pub.Load() }

// post hands an event to the run goroutine; false if it has stopped.
func (r *runner) post(ev event) bool {
	select {
	case r.inbox <- ev:
		return true
	case <-r.done:
		return false
	}
}

// holdersMoved tells the runner to look at the holders again.
func (r *runner) holdersMoved() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// request submits a request built on the run goroutine (which assigns its
// time) and waits for the reply.
func (r *runner) request(ctx context.Context, build func(bulktxn.RequestID, time.Time) bulktxn.Input) (reply, error) {
	pr := r.newRequest()
	if !r.post(event{req: pr, build: build}) {
		return r.stoppedReply(pr.id), nil
	}
	return r.await(ctx, pr)
}

// await waits for the reply to pr. If the runner stops first (its term
// ended, or its transaction was forgotten) the reply says so: unavailable,
// and worth repeating while the term lasts.
func (r *runner) await(ctx context.Context, pr *pendingRequest) (reply, error) {
	select {
	case rep := <-pr.ch:
		return rep, nil
	case <-r.done:
		select {
		case rep := <-pr.ch:
			return rep, nil
		default:
		}
		return r.stoppedReply(pr.id), nil
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// stoppedReply answers a request the runner will never answer: its
// goroutine stopped.
func (r *runner) stoppedReply(id bulktxn.RequestID) reply {
	v := r.view()
	why := errTermEnded
	alive := r.m.ctx != nil && r.m.ctx.Err() == nil
	if alive {
		why = errors.New("coordinator: the transaction's driver stopped")
	}
	return reply{rep: bulktxn.Reply{Req: id, Status: v.rec.Status(),
		Err: fmt.Errorf("%w: transaction %s: %w", bulkload.ErrUnavailable, r.id, why)}, retry: alive, view: v}
}

// run is the runner's goroutine.
func (r *runner) run(ctx context.Context) {
	defer func() {
		if r.timer != nil {
			r.timer.Stop()
		}
		for id, ch := range r.replies {
			ch <- r.stoppedReply(id)
		}
		r.m.c.uploads.reopen(r.id, r)
		close(r.done)
	}()
	if r.mach != nil {
		if r.firstReq != nil {
			r.replies[r.firstReq.id] = r.firstReq.ch
		}
		effs := r.initial
		r.initial = nil
		r.perform(ctx, effs)
		r.publish()
	}
	retry := newBackoff(100*time.Millisecond, 10*time.Second)
	var recoverC <-chan time.Time
	for {
		if r.needRecover && recoverC == nil {
			if err := r.recover(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				r.lastErr = err.Error()
				r.publish()
				recoverC = time.After(retry.next())
			} else {
				retry.reset()
			}
			if r.forgotten {
				return
			}
			// Show the recovered transaction now, not at the next event.
			r.publish()
		}
		select {
		case <-ctx.Done():
			return
		case ev := <-r.inbox:
			r.handle(ctx, ev)
		case <-r.kick:
			r.refreshHolders(ctx)
		case <-recoverC:
			recoverC = nil
		}
		if r.forgotten {
			return
		}
		r.publish()
	}
}

// recover reads the record, registration and holders and resumes the
// transaction with a new machine (generation).
func (r *runner) recover(ctx context.Context) error {
	v, err := r.m.c.store.GetBulkLoad(ctx, r.target, r.id)
	if errors.Is(err, meta.ErrNotFound) {
		r.log.Info("coordinator forgets a bulk load without a record")
		r.forgotten = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("coordinator: recover bulk load %s: %w", r.id, err)
	}
	rec := v.Value
	reg, regRev, err := r.m.registration(ctx, &rec)
	if err != nil {
		return fmt.Errorf("coordinator: recover bulk load %s: %w", r.id, err)
	}
	h, arev := r.m.holders(r.target, rec.Buckets)
	mach, effs, err := bulktxn.Recover(r.m.cfg, rec, bulktxn.Observed{
		RecordRev: v.Rev, Registration: reg, RegistrationRev: regRev, Holders: h, Now: r.m.c.clock.Now(),
	})
	if err != nil {
		r.rec = rec
		r.log.Error("coordinator cannot recover a bulk load", "err", err)
		return fmt.Errorf("coordinator: recover bulk load %s: %w", r.id, err)
	}
	r.mach, r.rec, r.reg, r.regRev, r.assignRev, r.holders = mach, mach.Record(), reg, regRev, arev, h
	if r.rec.Manifest == nil {
		// A freeze that never landed: the gateway may take writes again.
		r.m.c.uploads.reopen(r.id, r)
	}
	r.gen++
	r.needRecover, r.lastErr, r.invalid, r.outstanding = false, "", false, nil
	r.log.Info("coordinator resumes bulk load", "state", rec.State.String(), "registration", reg.String(),
		"fence_ready", rec.FenceReady(), "adopted", rec.AdoptedBuckets, "generation", r.gen)
	r.perform(ctx, effs)
	return nil
}

// registration reads what a transaction's target registration says of it.
func (m *bulkManager) registration(ctx context.Context, rec *bulkload.Record) (bulktxn.Registration, int64, error) {
	tv, err := m.c.store.GetTable(ctx, rec.Target.Database, rec.Target.Table)
	if errors.Is(err, meta.ErrNotFound) && rec.State.Terminal() {
		return bulktxn.RegActive, 0, nil // the table went after the transaction
	}
	if err != nil {
		return 0, 0, err
	}
	if tv.Value.ID != rec.TableID {
		if rec.State.Terminal() {
			return bulktxn.RegActive, 0, nil
		}
		return 0, 0, fmt.Errorf("%w: table %s.%s has id %d, the transaction's is %d", meta.ErrNotFound, rec.Target.Database, rec.Target.Table, tv.Value.ID, rec.TableID)
	}
	state, id, rev := tv.Value.DataState, tv.Value.BulkLoadID, tv.Rev
	if rec.Target.Partition != "" {
		pv, err := m.c.store.GetPartition(ctx, rec.TableID, rec.Target.Partition)
		switch {
		case errors.Is(err, meta.ErrNotFound) && rec.State.Terminal():
			return bulktxn.RegActive, 0, nil
		case err != nil:
			return 0, 0, err
		case pv.Value.ID != rec.PartitionID:
			if rec.State.Terminal() {
				return bulktxn.RegActive, 0, nil
			}
			return 0, 0, fmt.Errorf("%w: partition %s has id %d, the transaction's is %d", meta.ErrNotFound, rec.Target.Partition, pv.Value.ID, rec.PartitionID)
		}
		state, id, rev = pv.Value.DataState, pv.Value.BulkLoadID, pv.Rev
	}
	switch {
	case id != rec.TxnID:
		return bulktxn.RegActive, rev, nil
	case state == meta.Loading:
		return bulktxn.RegLoading, rev, nil
	}
	return bulktxn.RegActiveWithID, rev, nil
}

// handle applies one event.
func (r *runner) handle(ctx context.Context, ev event) {
	if ev.gen != 0 && ev.gen != r.gen {
		r.log.Debug("coordinator drops a result of an earlier machine", "generation", ev.gen, "current", r.gen)
		return
	}
	switch {
	case ev.req != nil:
		r.replies[ev.req.id] = ev.req.ch
		if r.mach == nil {
			r.answer(ev.req.id, fmt.Errorf("%w: transaction %s is being recovered", bulkload.ErrUnavailable, r.id), true)
			return
		}
		r.step(ctx, ev.build(ev.req.id, r.m.c.clock.Now()))
	case ev.tick:
		if r.mach != nil {
			r.step(ctx, bulktxn.Tick{Now: r.m.c.clock.Now()})
		}
	default:
		if ev.restore != nil {
			r.noteRestore(ev.restore)
		}
		if ev.in == nil || r.mach == nil {
			return
		}
		w := r.outstanding
		p, persisted := ev.in.(bulktxn.Persisted)
		prevReg, prevRev := r.reg, r.regRev
		if persisted && w != nil {
			// The registration is at p.Rev now, and the effects of this
			// very step (the fence round after Begin's write) must say
			// so: a tablet ignores a data state no newer than its own,
			// and answers with the old state until its etcd watch
			// catches up, which cost a resend interval per Begin.
			r.reg, r.regRev = w.To, p.Rev
		}
		if !r.step(ctx, ev.in) {
			r.reg, r.regRev = prevReg, prevRev
			return
		}
		if persisted {
			r.outstanding = nil
		}
	}
}

// answer replies to a request outside the machine.
func (r *runner) answer(id bulktxn.RequestID, err error, retry bool) {
	ch := r.replies[id]
	delete(r.replies, id)
	if ch != nil {
		ch <- reply{rep: bulktxn.Reply{Req: id, Status: r.rec.Status(), Err: err}, retry: retry, view: r.view()}
	}
}

// refreshHolders feeds the machine the holders the manager knows now.
func (r *runner) refreshHolders(ctx context.Context) {
	if r.mach == nil {
		return
	}
	h, arev := r.m.holders(r.target, r.rec.Buckets)
	r.assignRev = arev
	if h.Equal(r.holders) {
		return
	}
	r.holders = h
	if !r.rec.State.Terminal() {
		r.log.Info("coordinator sees the bulk load's replica holders change", "assignment_revision", arev)
	}
	r.step(ctx, bulktxn.HoldersChanged{Holders: h})
}

// step applies one input and performs the effects; false if the machine
// refused the input.
func (r *runner) step(ctx context.Context, in bulktxn.Input) bool {
	effs, err := r.mach.Step(in)
	switch {
	case errors.Is(err, bulktxn.ErrStaleReport), errors.Is(err, bulktxn.ErrHalted):
		r.log.Debug("coordinator drops a bulk-load input", "input", fmt.Sprintf("%T", in), "err", err)
		return false
	case err != nil:
		r.log.Warn("coordinator drops an unexpected bulk-load input", "input", fmt.Sprintf("%T", in), "err", err)
		return false
	}
	r.rec = r.mach.Record()
	r.perform(ctx, effs)
	return true
}

// perform carries out effects in order.
func (r *runner) perform(ctx context.Context, effs []bulktxn.Effect) {
	halting := slices.ContainsFunc(effs, func(e bulktxn.Effect) bool { _, ok := e.(bulktxn.Halt); return ok })
	gen := r.gen
	for _, e := range effs {
		switch e := e.(type) {
		case bulktxn.Reply:
			if e.Err != nil && errors.Is(e.Err, bulkload.ErrInvalidRequest) && isViolations(e.Err) {
				r.invalid, r.lastErr = true, e.Err.Error()
			}
			r.answerReply(e, (halting || r.needRecover) && errors.Is(e.Err, bulkload.ErrUnavailable))
		case bulktxn.ScheduleTick:
			r.schedule(e.At)
		case bulktxn.Halt:
			r.needRecover, r.lastErr = true, e.Err.Error()
			r.m.c.m.bulk.halts.Inc()
			r.log.Info("coordinator halts a bulk load to recover it from etcd", "err", e.Err)
		case bulktxn.Forget:
			r.log.Info("coordinator garbage-collected a bulk load's result")
			r.forgotten = true
		case bulktxn.PersistRecord:
			if !r.hookOK("persist:" + e.Op.String()) {
				continue
			}
			r.outstanding = e.Registration
			w, arev, rrev := e, r.assignRev, r.regRev
			r.goEffect(ctx, gen, func(ctx context.Context) bulktxn.Input {
				if w.Op == bulktxn.OpFreeze {
					// What the validation reads must not change under it:
					// the upload gateway takes no more writes of this
					// transaction, and those in flight end first (a
					// store write that hangs fails the step, retried and
					// logged, instead of holding it silently).
					dctx, cancel := context.WithTimeout(ctx, r.m.c.cfg.TabletTimeout)
					err := r.m.c.uploads.closeAndDrain(dctx, r.id, r)
					cancel()
					if err != nil {
						return r.failed(w.Op, err)
					}
				}
				return r.persist(ctx, w, arev, rrev)
			})
		case bulktxn.DeleteRecord:
			if !r.hookOK("delete") {
				continue
			}
			w, rec := e, r.rec
			r.goEffect(ctx, gen, func(ctx context.Context) bulktxn.Input { return r.deleteRecord(ctx, w, rec) })
		case bulktxn.ProveEmpty:
			if !r.hookOK("prove-empty") {
				continue
			}
			r.goEffect(ctx, gen, r.proveEmpty)
		case bulktxn.AllocateSnapshotIDs:
			if !r.hookOK("allocate") {
				continue
			}
			n := e.Buckets
			r.goEffect(ctx, gen, func(ctx context.Context) bulktxn.Input { return r.allocate(ctx, n) })
		case bulktxn.ValidateManifest:
			if !r.hookOK("validate") {
				continue
			}
			r.invalid = false
			v := e
			r.goEffect(ctx, gen, func(ctx context.Context) bulktxn.Input { return r.validate(ctx, v) })
		case bulktxn.SendFence:
			r.sendRound(ctx, gen, "fence", e.Round, e.Server, e.Buckets)
		case bulktxn.SendRestore:
			if e.Round != r.restoreRound {
				r.restoreRound, r.restored, r.progress = e.Round, make(map[replicaKey]bool), make(map[replicaKey]*tierv1.ReplicaStatus)
			}
			r.sendRound(ctx, gen, "restore", e.Round, e.Server, e.Buckets)
		case bulktxn.SendPublish:
			r.sendRound(ctx, gen, "publish", e.Round, e.Server, e.Buckets)
		case bulktxn.SendUnfence:
			r.sendRound(ctx, gen, "unfence", e.Round, e.Server, e.Buckets)
		default:
			r.log.Error("coordinator got an unknown bulk-load effect", "effect", fmt.Sprintf("%T", e))
		}
	}
}

func isViolations(err error) bool {
	var v *snapshot.Violation
	return errors.As(err, &v)
}

func (r *runner) answerReply(e bulktxn.Reply, retry bool) {
	ch := r.replies[e.Req]
	delete(r.replies, e.Req)
	if ch == nil {
		return
	}
	r.publish()
	ch <- reply{rep: e, retry: retry, view: r.view()}
}

// hookOK runs the test hook for a step; false means the step is dropped
// (the test crashes the coordinator there).
func (r *runner) hookOK(step string) bool {
	if r.m.c.hook == nil {
		return true
	}
	if err := r.m.c.hook(step); err != nil {
		r.log.Info("coordinator bulk-load hook stops a step", "step", step, "err", err)
		return false
	}
	return true
}

// goEffect runs an effect's I/O on its own goroutine and posts its result.
func (r *runner) goEffect(ctx context.Context, gen uint64, do func(context.Context) bulktxn.Input) {
	go func() {
		in := do(ctx)
		if in == nil || ctx.Err() != nil {
			return
		}
		r.post(event{gen: gen, in: in})
	}()
}

// schedule (re)arms the runner's one timer.
func (r *runner) schedule(at time.Time) {
	if r.timer != nil {
		r.timer.Stop()
	}
	d := at.Sub(r.m.c.clock.Now())
	r.timer = r.m.c.clock.AfterFunc(max(d, 0), func() { r.post(event{tick: true}) })
}

// noteRestore records what a restore call reported.
func (r *runner) noteRestore(sts []*tierv1.ReplicaStatus) {
	if r.progress == nil {
		return
	}
	for _, st := range sts {
		b := int(st.GetBucket())
		if b < 0 || b >= len(r.rec.SnapshotIDs) {
			// Not a bucket of this load (a tablet's bug or a version
			// skew): noted nowhere, it would index out of range.
			r.log.Warn("coordinator ignores a restore report of a bucket the load does not have",
				"bucket", st.GetBucket(), "server", st.GetServerId(), "buckets", len(r.rec.SnapshotIDs))
			continue
		}
		k := replicaKey{b, st.GetServerId()}
		r.progress[k] = st
		if restoredAt(st, r.rec.SnapshotIDs[b]) {
			r.restored[k] = true
		}
	}
}

// restoredAt reports whether a replica serves snapshot id (or a later one).
func restoredAt(st *tierv1.ReplicaStatus, id int64) bool {
	return st.GetState() == tierv1.ReplicaState_REPLICA_STATE_READY && st.GetLatestSnapshotId() >= id
}

// phaseOf names what the transaction is doing.
func (r *runner) phaseOf() string {
	rec := &r.rec
	switch {
	case r.needRecover && r.mach != nil && r.mach.Halted() != nil:
		return "halted"
	case r.mach == nil:
		return "recovering"
	case rec.State == bulkload.Committed:
		return "committed"
	case rec.State == bulkload.Aborted:
		return "aborted"
	case rec.Aborting():
		return "aborting"
	case rec.State == bulkload.Begun && !rec.FenceReady():
		return "fencing"
	case rec.State == bulkload.Begun && rec.Manifest == nil:
		return "building"
	case rec.State == bulkload.Begun && r.invalid:
		return "invalid"
	case rec.State == bulkload.Begun:
		return "validating"
	case rec.AdoptedBuckets < rec.Buckets:
		return "adopting"
	case r.reg == bulktxn.RegLoading:
		return "restoring"
	}
	return "publishing"
}

// publish computes and publishes the view; it observes phase changes.
func (r *runner) publish() {
	phase := r.phaseOf()
	now := r.m.c.clock.Now()
	if phase != r.phase {
		if r.phase != "" && r.phase != "recovering" && r.phase != "halted" {
			r.m.c.m.bulk.phase.WithLabelValues(r.phase).Observe(now.Sub(r.phaseSince).Seconds())
		}
		r.phase, r.phaseSince = phase, now
	}
	v := &runnerView{rec: r.rec.Clone(), reg: r.reg, phase: phase, lastErr: r.lastErr}
	if r.mach != nil {
		if info, ok := r.mach.TargetInfo(); ok {
			v.info = &info
		}
	}
	if phase == "restoring" && r.progress != nil {
		for b := range r.rec.Buckets {
			if b >= len(r.holders.Replicas) {
				break
			}
			p := &tierv1.BulkLoadBucketProgress{Bucket: int32(b), Replicas: int32(len(r.holders.Replicas[b]))}
			for _, s := range r.holders.Replicas[b] {
				k := replicaKey{b, s}
				if r.restored[k] {
					p.Restored++
					continue
				}
				v.restorePending++
				if st := r.progress[k]; st != nil {
					p.DoneBytes += st.GetRestoreDoneBytes()
					p.TotalBytes += st.GetRestoreTotalBytes()
				}
			}
			v.progress = append(v.progress, p)
		}
	}
	old := r.pub.Swap(v)
	if old == nil || old.rec.State != v.rec.State || old.restorePending != v.restorePending {
		r.m.updateGauges()
	}
}

// jsonOf returns the JSON of a value that always encodes.
func jsonOf(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("coordinator: encode %T: %w", v, err)
	}
	return b, nil
}
