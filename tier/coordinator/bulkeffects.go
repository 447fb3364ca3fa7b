package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/meta"
)

// The effects a runner performs on goroutines of their own. Each returns
// the input to feed back, or nil to feed nothing (the term ended, or the
// test hook stopped the step).

// failed turns an error of an operation into its Failed input: a failed
// comparison halts the machine, and so does a Begin whose target is gone
// (a drop marked it between the Begin's admission and its first write:
// retrying could never succeed); a fenced coordinator feeds nothing (its
// term is ending); anything else is an unknown outcome, retried.
func (r *runner) failed(op bulktxn.Op, err error) bulktxn.Input {
	if fencing.IsFenced(err) {
		r.log.Info("coordinator lost its term during a bulk-load step", "op", op.String(), "err", err)
		return nil
	}
	pre := errors.Is(err, fencing.ErrPreconditionFailed) || (op == bulktxn.OpBegin && errors.Is(err, meta.ErrNotFound))
	if !pre {
		r.log.Warn("coordinator bulk-load step failed; retrying", "op", op.String(), "err", err)
	}
	return bulktxn.Failed{Op: op, Err: err, Precondition: pre}
}

// persist performs a PersistRecord: the record write, with the
// registration change or the adoptions, comparing the revisions of the
// registration (the fence) and of the assignment the holders came from.
func (r *runner) persist(ctx context.Context, w bulktxn.PersistRecord, assignRev, regRev int64) bulktxn.Input {
	mw := meta.BulkLoadWrite{Record: w.Record, ExpectRev: w.ExpectRecordRev, AssignmentRev: assignRev, RegistrationRev: regRev}
	if reg := w.Registration; reg != nil {
		state, id := meta.Loading, r.id
		switch reg.To {
		case bulktxn.RegActiveWithID:
			state = meta.Active
		case bulktxn.RegActive:
			state, id = meta.Active, ""
		}
		mw.Registration = &meta.BulkLoadRegistration{Target: r.name, Rev: reg.ExpectRev, State: state, BulkLoadID: id}
		mw.RegistrationRev = 0 // SetDataState compares it
	}
	for _, a := range w.Adopt {
		mw.Adopt = append(mw.Adopt, meta.BulkLoadAdoption{Bucket: a.Bucket, Snapshot: meta.BucketSnapshot{
			SnapshotID: a.SnapshotID, LogOffset: a.LogOffset, MetadataPath: a.MetadataPath,
		}})
	}
	ctx, cancel := context.WithTimeout(ctx, r.m.c.cfg.TabletTimeout)
	defer cancel()
	rev, err := r.m.c.store.PutBulkLoad(ctx, r.m.t.guard, mw)
	if err != nil {
		return r.failed(w.Op, err)
	}
	if !r.hookOK("persisted:" + w.Op.String()) {
		return nil
	}
	return bulktxn.Persisted{Op: w.Op, Rev: rev}
}

// deleteRecord performs DeleteRecord (result garbage collection): the
// output an aborted transaction left, then the manifest, then the record.
func (r *runner) deleteRecord(ctx context.Context, w bulktxn.DeleteRecord, rec bulkload.Record) bulktxn.Input {
	if rec.State == bulkload.Aborted && rec.SnapshotIDs != nil {
		// The record is what finds the output: forgotten, its files
		// would stay for good. A failed cleaning is retried with the
		// expiry for up to cleanRetryFor, then left.
		if _, err := r.m.cleanAborted(ctx, rec); err != nil {
			now := r.m.c.clock.Now().UnixMilli()
			first := r.cleanFailedMs.Load()
			if first == 0 {
				r.cleanFailedMs.Store(now)
				first = now
			}
			if time.Duration(now-first)*time.Millisecond < cleanRetryFor {
				return r.failed(bulktxn.OpExpire, fmt.Errorf("clean the aborted bulk load's output: %w", err))
			}
			r.log.Error("coordinator gives up cleaning an aborted bulk load's output; its files stay", "err", err, "for", cleanRetryFor)
		}
	}
	if objs := r.m.c.bulkObjects; objs != nil && w.ManifestPath != "" {
		if key, err := objs.Key(w.ManifestPath); err == nil {
			if err := objs.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return r.failed(bulktxn.OpExpire, err)
			}
		}
	}
	if err := r.m.c.store.DeleteBulkLoad(ctx, r.m.t.guard, r.target, r.id, w.ExpectRecordRev); err != nil {
		return r.failed(bulktxn.OpExpire, err)
	}
	if !r.hookOK("persisted:" + bulktxn.OpExpire.String()) {
		return nil
	}
	return bulktxn.Persisted{Op: bulktxn.OpExpire}
}

// cleanRetryFor is how long an expiring aborted transaction's record is
// kept while cleaning its output fails.
const cleanRetryFor = time.Hour

// proveEmpty performs ProveEmpty: no registry snapshot of the target.
func (r *runner) proveEmpty(ctx context.Context) bulktxn.Input {
	has, key, err := r.m.c.store.HasSnapshots(ctx, r.target)
	if err != nil {
		return r.failed(bulktxn.OpProveEmpty, err)
	}
	if has {
		return bulktxn.EmptinessChecked{Detail: "registered snapshot " + key}
	}
	return bulktxn.EmptinessChecked{Empty: true}
}

// allocate performs AllocateSnapshotIDs.
func (r *runner) allocate(ctx context.Context, n int) bulktxn.Input {
	ids, err := r.m.c.store.AllocateSnapshotIDs(ctx, r.m.t.guard, r.target, n)
	if err != nil {
		return r.failed(bulktxn.OpAllocate, err)
	}
	return bulktxn.SnapshotIDsAllocated{IDs: ids}
}

// validate performs ValidateManifest against the object store.
func (r *runner) validate(ctx context.Context, v bulktxn.ValidateManifest) bulktxn.Input {
	objs := r.m.c.bulkObjects
	if objs == nil {
		return r.failed(bulktxn.OpValidate, errors.New("coordinator: the object store cannot serve bulk loads"))
	}
	res, err := validateManifest(ctx, objs, v.Plan, v.Request, r.m.c.cfg.Fanout)
	if err != nil {
		r.m.c.m.bulk.validations.WithLabelValues("error").Inc()
		return r.failed(bulktxn.OpValidate, err)
	}
	result := "valid"
	if len(res.Violations) > 0 {
		result = "invalid"
		r.log.Info("coordinator found a bulk-load manifest invalid", "violations", len(res.Violations), "first", res.Violations[0].Error())
	}
	r.m.c.m.bulk.validations.WithLabelValues(result).Inc()
	if !r.hookOK("validated") {
		return nil
	}
	return res
}

// sendRound sends one round command to one server and posts the reports.
func (r *runner) sendRound(ctx context.Context, gen uint64, kind string, round uint64, server string, buckets []int) {
	if !r.hookOK("send:" + kind) {
		return
	}
	addr := r.m.address(server)
	if addr == "" {
		return // not live: the holders change, or the round resends
	}
	if _, busy := r.sending.LoadOrStore(server, struct{}{}); busy {
		return // the command in flight answers, or the round resends
	}
	rec, regRev := r.rec.Clone(), r.regRev
	epoch := int64(r.m.t.epoch())
	buckets = slices.Clone(buckets)
	go func() {
		defer r.sending.Delete(server)
		// One slot of the manager's fanout, or none: the round resends,
		// and a send never waits behind calls to a server that does not
		// answer (they would hold every slot, for every transaction).
		select {
		case r.m.sem <- struct{}{}:
		default:
			return
		}
		defer func() { <-r.m.sem }()
		cctx, cancel := context.WithTimeout(ctx, r.m.c.cfg.TabletTimeout)
		defer cancel()
		client := r.m.c.tablets(addr)
		tid := &tierv1.TargetId{TableId: rec.TableID, PartitionId: rec.PartitionID}
		var evs []event
		if kind == "restore" {
			evs = r.restoreOn(cctx, client, tid, gen, round, server, buckets, &rec)
		} else {
			req := &tierv1.SetDataStateRequest{CoordinatorEpoch: epoch, Target: tid, DataState: tierv1.DataState_DATA_STATE_ACTIVE, BulkLoadId: rec.TxnID, StateRevision: regRev}
			if kind == "fence" {
				req.DataState = tierv1.DataState_DATA_STATE_LOADING
			}
			resp, err := client.SetDataState(cctx, connect.NewRequest(req))
			if err != nil {
				r.log.Debug("coordinator bulk-load round command failed", "round", kind, "server", server, "err", err)
				return
			}
			if in := roundReport(kind, round, server, buckets, &rec, resp.Msg.GetReplicas()); in != nil {
				evs = append(evs, event{gen: gen, in: in})
			}
		}
		for _, ev := range evs {
			if ctx.Err() != nil || !r.post(ev) {
				return
			}
		}
	}()
}

// roundReport turns a SetDataState answer into the round's report: the
// requested replicas that confirmed. Nil if none did.
func roundReport(kind string, round uint64, server string, buckets []int, rec *bulkload.Record, sts []*tierv1.ReplicaStatus) bulktxn.Input {
	var ok []int
	empty, logEnd := true, int64(0)
	var notEmpty []int
	for _, st := range sts {
		b := int(st.GetBucket())
		if !slices.Contains(buckets, b) {
			continue
		}
		ready := st.GetState() == tierv1.ReplicaState_REPLICA_STATE_READY
		active := st.GetDataState() == tierv1.DataState_DATA_STATE_ACTIVE
		switch kind {
		case "fence":
			if !ready || st.GetDataState() != tierv1.DataState_DATA_STATE_LOADING || st.GetBulkLoadId() != rec.TxnID {
				continue
			}
			if !st.GetEmpty() {
				empty = false
				notEmpty = append(notEmpty, b)
			}
			logEnd = max(logEnd, st.GetLogEndOffset())
		case "publish":
			if !ready || !active || b >= len(rec.SnapshotIDs) || !restoredAt(st, rec.SnapshotIDs[b]) {
				continue
			}
		case "unfence":
			if !active {
				continue
			}
		}
		ok = append(ok, b)
	}
	if len(ok) == 0 {
		return nil
	}
	slices.Sort(ok)
	switch kind {
	case "fence":
		slices.Sort(notEmpty)
		return bulktxn.FenceReport{Round: round, Server: server, Buckets: ok, Empty: empty, NotEmpty: notEmpty, LogEnd: logEnd}
	case "publish", "unfence":
		return bulktxn.ActiveReport{Round: round, Server: server, Buckets: ok}
	}
	return nil
}

// restoreCallsPerServer bounds the RestoreSnapshot calls in flight to one
// server in one round command (a call starts a restore, or reports one).
const restoreCallsPerServer = 8

// restoreOn asks a server to restore its replicas of buckets from the
// transaction's snapshots, and returns the events to post: the statuses
// (restore progress) with the report of the replicas that serve the
// snapshot, and a report of those whose restore failed.
func (r *runner) restoreOn(ctx context.Context, client interface {
	RestoreSnapshot(context.Context, *connect.Request[tierv1.RestoreSnapshotRequest]) (*connect.Response[tierv1.RestoreSnapshotResponse], error)
}, tid *tierv1.TargetId, gen, round uint64, server string, buckets []int, rec *bulkload.Record) []event {
	st := snapshot.Target{RemoteDir: rec.RemoteDataDir, Database: rec.Target.Database, Table: rec.Target.Table,
		TableID: rec.TableID, Partition: rec.Target.Partition, PartitionID: rec.PartitionID}
	var (
		mu          sync.Mutex
		sts         []*tierv1.ReplicaStatus
		done, fails []int
		why         string
	)
	epoch := int64(r.m.t.epoch())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(restoreCallsPerServer)
	for _, b := range buckets {
		if b >= len(rec.SnapshotIDs) {
			continue
		}
		id := rec.SnapshotIDs[b]
		g.Go(func() error {
			resp, err := client.RestoreSnapshot(gctx, connect.NewRequest(&tierv1.RestoreSnapshotRequest{
				CoordinatorEpoch: epoch, Target: tid, Bucket: int32(b), SnapshotId: id,
				MetadataPath: st.MetadataPath(b, id), BulkLoadId: rec.TxnID,
			}))
			if err != nil {
				r.log.Debug("coordinator restore command failed", "server", server, "bucket", b, "err", err)
				return nil
			}
			rs := resp.Msg.GetReplica()
			if rs == nil {
				return nil
			}
			if rs.GetServerId() == "" {
				rs.ServerId = server
			}
			mu.Lock()
			defer mu.Unlock()
			sts = append(sts, rs)
			switch {
			case restoredAt(rs, id):
				done = append(done, b)
			case rs.GetState() == tierv1.ReplicaState_REPLICA_STATE_FAILED:
				fails, why = append(fails, b), rs.GetError()
			}
			return nil
		})
	}
	_ = g.Wait() // the calls return nil: a failed one is asked again
	slices.Sort(done)
	slices.Sort(fails)
	var evs []event
	first := event{gen: gen, restore: sts}
	if len(done) > 0 {
		first.in = bulktxn.RestoreReport{Round: round, Server: server, Buckets: done}
	}
	if first.in != nil || len(sts) > 0 {
		evs = append(evs, first)
	}
	if len(fails) > 0 {
		if why == "" {
			why = "restore failed"
		}
		r.log.Warn("coordinator sees a bulk-load restore fail; it is asked again", "server", server, "buckets", fails, "err", why)
		evs = append(evs, event{gen: gen, in: bulktxn.RestoreReport{Round: round, Server: server, Buckets: fails, Err: why}})
	}
	return evs
}
