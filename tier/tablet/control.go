package tablet

import (
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// statusFanout bounds the replicas whose status one request reads at once
// (each may read the changelog's offsets).
const statusFanout = 8

// admitEpoch admits a coordinator epoch through the server's gate.
func (s *Server) admitEpoch(epoch int64) error {
	if err := s.gate.Admit(fencing.Epoch(epoch)); err != nil {
		return errStaleCoordinator(err)
	}
	return nil
}

// cmpErr returns the first non-nil error.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// controlErr maps an error of s.call.
func controlErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotRunning):
		return errUnavailable("%s: the server is not running", what)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return replicaErr(what, err)
	}
	return err
}

// NotifyAssignment applies a pushed assignment (if it is newer than the
// one held) and answers with the target's replicas here.
func (h *service) NotifyAssignment(ctx context.Context, req *connect.Request[tierv1.NotifyAssignmentRequest]) (_ *connect.Response[tierv1.NotifyAssignmentResponse], err error) {
	s := h.s
	defer func() { s.m.control.WithLabelValues("notify_assignment", resultOf(err)).Inc() }()
	m := req.Msg
	t, cerr := targetOf(m.GetTarget())
	if cerr != nil {
		return nil, cerr
	}
	var (
		info  pushedInfo
		state dataState
	)
	routes := make(map[int32]bucketRoute, len(m.GetBuckets()))
	if len(m.GetBuckets()) > 0 {
		if info, err = pushedInfoOf(t, m); err != nil {
			return nil, errInvalid("notify assignment of %s: %v", t, err)
		}
		if state, err = dataStateOf(m.GetDataState(), m.GetBulkLoadId(), m.GetStateRevision()); err != nil {
			return nil, errInvalid("notify assignment of %s: %v", t, err)
		}
		for _, b := range m.GetBuckets() {
			if b.GetBucket() < 0 || int(b.GetBucket()) >= info.table.Buckets() {
				return nil, errInvalid("notify assignment of %s: bucket %d of %d", t, b.GetBucket(), info.table.Buckets())
			}
			routes[b.GetBucket()] = bucketRoute{replicas: b.GetReplicas(), leader: b.GetLeaderId(), leaderAddr: b.GetLeaderAddress(), epoch: b.GetLeaderEpoch()}
		}
	}
	var (
		entries []*replicaEntry
		tv      *targetView
		rev     int64
	)
	var res error
	err = s.call(ctx, func(l *loop) {
		if res = s.admitEpoch(m.GetCoordinatorEpoch()); res != nil {
			return
		}
		if len(routes) > 0 {
			if _, gone := l.deleted[t]; !gone {
				l.pushed[t] = info
			}
			if l.pushAllowed(t, state) {
				l.applyState(t, state)
			}
		}
		l.putAssignment(t, &assignRec{rev: m.GetAssignmentRevision(), routes: routes})
		l.reconcile()
		entries, tv = l.entriesOf(t), l.s.mu.targets[t]
		if a := l.assigns[t]; a != nil {
			rev = a.rev
		} else {
			rev = max(m.GetAssignmentRevision(), l.deleted[t])
		}
	})
	if err = cmpErr(controlErr("notify assignment", err), res); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.NotifyAssignmentResponse{AssignmentRevision: rev, Replicas: s.statuses(ctx, tv, entries)}), nil
}

// SetDataState applies a pushed data state (if newer than the one held),
// waits until every request admitted under the previous state has finished
// and, for LOADING, until every replica here has applied the whole
// changelog, then confirms each replica. A replica still opening (the
// fence of a bulk load right after its partition was created) is waited
// for, up to fenceOpenWait, so that it is confirmed in this answer rather
// than at the coordinator's next resend.
func (h *service) SetDataState(ctx context.Context, req *connect.Request[tierv1.SetDataStateRequest]) (_ *connect.Response[tierv1.SetDataStateResponse], err error) {
	s := h.s
	defer func() { s.m.control.WithLabelValues("set_data_state", resultOf(err)).Inc() }()
	m := req.Msg
	t, cerr := targetOf(m.GetTarget())
	if cerr != nil {
		return nil, cerr
	}
	want, err := dataStateOf(m.GetDataState(), m.GetBulkLoadId(), m.GetStateRevision())
	if err != nil {
		return nil, errInvalid("set data state of %s: %v", t, err)
	}
	var (
		st      *targetState
		entries []*replicaEntry
		tv      *targetView
		rev     int64
	)
	var res error
	err = s.call(ctx, func(l *loop) {
		if res = s.admitEpoch(m.GetCoordinatorEpoch()); res != nil {
			return
		}
		st = l.stateOf(t)
		if _, gone := l.deleted[t]; !gone && l.pushAllowed(t, want) && st.apply(want) {
			l.log.Info("tablet data state", "table", t.TableID, "partition", t.PartitionID,
				"state", string(want.state), "bulk_load", want.bulkLoadID, "rev", want.rev)
		}
		entries, tv = l.entriesOf(t), l.s.mu.targets[t]
		if a := l.assigns[t]; a != nil {
			rev = a.rev
		}
	})
	if err = cmpErr(controlErr("set data state", err), res); err != nil {
		return nil, err
	}
	st.drain()
	loading := st.get().state == meta.Loading
	// For LOADING, whether each replica is empty, read right after its
	// catch-up: the coordinator aborts a load whose target a confirmed
	// replica says is not, so it is never left to a best-effort status
	// read (a failed one read as "not empty").
	var fenced []fenceView
	if loading {
		fenced = make([]fenceView, len(entries))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(statusFanout)
		for i, e := range entries {
			g.Go(func() error {
				awaitRestore(gctx, e, fenceOpenWait)
				rep := e.rep.Load()
				if rep == nil {
					return nil
				}
				if err := rep.CatchUp(gctx); err != nil {
					return replicaErr("set data state: catch up", err)
				}
				start, end, err := rep.LogOffsets(gctx)
				if err != nil {
					return replicaErr("set data state: log offsets", err)
				}
				fenced[i] = fenceView{rep: rep, empty: rep.RowCount() == 0 && start == end}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
	}
	sts := s.statusesWith(ctx, tv, entries, st)
	for i, rs := range sts {
		switch {
		case !loading:
		case fenced[i].rep != nil && fenced[i].rep == entries[i].rep.Load():
			rs.Empty = fenced[i].empty
		case rs.State == readyState:
			// No replica open to prove it (stopped, being replaced):
			// not confirmed in this answer; the coordinator resends.
			rs.State, rs.Empty = restoringState, false
		}
	}
	return connect.NewResponse(&tierv1.SetDataStateResponse{AssignmentRevision: rev, Replicas: sts}), nil
}

// fenceView is what SetDataState(LOADING) proved of one replica.
type fenceView struct {
	rep   *replica.Replica // nil: none was open
	empty bool
}

// RestoreSnapshot starts (or reports) the restore of one replica from a
// given snapshot: the same snapshot id reports the restore's progress (and
// restarts a failed one), a higher one replaces the replica, a lower one
// than the replica's latest is INVALID_ARGUMENT. It answers once the
// replica is READY or FAILED, or after restoreWait (less near the request's
// deadline) with the restore still running.
func (h *service) RestoreSnapshot(ctx context.Context, req *connect.Request[tierv1.RestoreSnapshotRequest]) (_ *connect.Response[tierv1.RestoreSnapshotResponse], err error) {
	s := h.s
	defer func() { s.m.control.WithLabelValues("restore_snapshot", resultOf(err)).Inc() }()
	m := req.Msg
	t, cerr := targetOf(m.GetTarget())
	if cerr != nil {
		return nil, cerr
	}
	if m.GetSnapshotId() < 1 || m.GetMetadataPath() == "" {
		return nil, errInvalid("restore snapshot: snapshot id %d, metadata path %q", m.GetSnapshotId(), m.GetMetadataPath())
	}
	key := bucketKey{t, m.GetBucket()}
	src := restoreSource{explicit: true, snapshotID: m.GetSnapshotId(), metadataPath: m.GetMetadataPath(), bulkLoadID: m.GetBulkLoadId()}
	var (
		e  *replicaEntry
		tv *targetView
	)
	var res error
	err = s.call(ctx, func(l *loop) {
		if res = s.admitEpoch(m.GetCoordinatorEpoch()); res != nil {
			return
		}
		e, tv = l.entries[key], l.s.mu.targets[t]
		switch {
		case e == nil || tv == nil:
			res = errNotFound("restore snapshot: no replica of %s bucket %d here", t, key.bucket)
			return
		case src.bulkLoadID != "" && (tv.state.get().bulkLoadID != src.bulkLoadID || tv.state.get().state != meta.Loading):
			// Also once the load published (ACTIVE, still carrying its
			// id): the coordinator sends its restores only while the
			// target is LOADING, and a late one (a call delayed past its
			// round) would replace a replica restored since with the
			// load's snapshot, which retention may have dropped.
			ds := tv.state.get()
			res = errInvalid("restore snapshot: bulk load %s does not hold %s (data state %s, bulk load %q)", src.bulkLoadID, t, ds.state, ds.bulkLoadID)
			return
		}
		st := e.getStatus()
		switch latest := e.latestID.Load(); {
		case e.source.explicit && e.source.snapshotID == src.snapshotID:
			if st.state == failedState {
				e = l.replace(e, src)
			}
		case src.snapshotID == latest && st.state == readyState:
			// already restored (or taken) here
		case src.snapshotID < latest:
			res = errInvalid("restore snapshot: snapshot %d is older than the replica's latest, %d", src.snapshotID, latest)
		default:
			e = l.replace(e, src)
		}
	})
	if err = cmpErr(controlErr("restore snapshot", err), res); err != nil {
		return nil, err
	}
	awaitRestore(ctx, e, restoreWait)
	return connect.NewResponse(&tierv1.RestoreSnapshotResponse{Replica: s.statusesWith(ctx, tv, []*replicaEntry{e}, tv.state)[0]}), nil
}

// restoreWait bounds how long RestoreSnapshot waits for the restore it
// started or reports to finish, so that the coordinator's round learns of a
// quick restore at once instead of at its next poll (the resend interval).
const restoreWait = 2 * time.Second

// fenceOpenWait bounds how long a LOADING push waits for a replica that is
// still opening: a new, empty replica opens in milliseconds; one restoring
// a large snapshot is answered unconfirmed after this, and the
// coordinator asks again, without holding one of its calls for long.
const fenceOpenWait = 500 * time.Millisecond

// awaitRestore waits until e is READY or FAILED, ctx ends, or max has
// passed (less a margin before ctx's deadline, so the answer still arrives).
func awaitRestore(ctx context.Context, e *replicaEntry, max time.Duration) {
	if dl, ok := ctx.Deadline(); ok {
		max = min(max, time.Until(dl)/2)
	}
	if max <= 0 {
		return
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		changed := e.statusChanged()
		if st := e.getStatus().state; st == readyState || st == failedState {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		case <-e.ctx.Done():
			return
		}
	}
}

// TakeSnapshot takes an ordinary snapshot of a bucket this server leads.
func (h *service) TakeSnapshot(ctx context.Context, req *connect.Request[tierv1.TakeSnapshotRequest]) (_ *connect.Response[tierv1.TakeSnapshotResponse], err error) {
	s := h.s
	defer func() { s.m.control.WithLabelValues("take_snapshot", resultOf(err)).Inc() }()
	m := req.Msg
	if err := s.admitEpoch(m.GetCoordinatorEpoch()); err != nil {
		return nil, err
	}
	r, err := s.resolve(m.GetTarget(), m.GetBucket())
	if err != nil {
		return nil, err
	}
	if r.e == nil && r.route.leader == s.cfg.ID {
		return nil, errUnavailable("take snapshot: the replica of %s bucket %d is not open yet", r.key.target, r.key.bucket)
	}
	if r.e == nil || r.route.leader != s.cfg.ID {
		return nil, tierpb.NewNotLeaderError(tabletMsg("take snapshot: %s bucket %d is not led here", r.key.target, r.key.bucket), r.hint())
	}
	if ds := r.tv.state.get(); ds.state != meta.Active {
		return nil, errLoading(ds, "take snapshot: %s is loading", r.key.target)
	}
	snap, err := s.takeSnapshot(ctx, r.e, r.route.epoch, "request")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.TakeSnapshotResponse{Snapshot: snap}), nil
}

// ReplicaStatus reports the replicas of a target here.
func (h *service) ReplicaStatus(ctx context.Context, req *connect.Request[tierv1.ReplicaStatusRequest]) (_ *connect.Response[tierv1.ReplicaStatusResponse], err error) {
	s := h.s
	defer func() { s.m.control.WithLabelValues("replica_status", resultOf(err)).Inc() }()
	m := req.Msg
	t, cerr := targetOf(m.GetTarget())
	if cerr != nil {
		return nil, cerr
	}
	s.mu.RLock()
	tv := s.mu.targets[t]
	var entries []*replicaEntry
	for k, e := range s.mu.replicas {
		if k.target == t && (len(m.GetBuckets()) == 0 || slices.Contains(m.GetBuckets(), k.bucket)) {
			entries = append(entries, e)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(entries, func(a, b *replicaEntry) int { return int(a.key.bucket) - int(b.key.bucket) })
	resp := &tierv1.ReplicaStatusResponse{}
	if tv != nil {
		resp.AssignmentRevision = tv.assignRev
	}
	resp.Replicas = s.statuses(ctx, tv, entries)
	return connect.NewResponse(resp), nil
}

// statuses reports entries with the data state of their target.
func (s *Server) statuses(ctx context.Context, tv *targetView, entries []*replicaEntry) []*tierv1.ReplicaStatus {
	if len(entries) == 0 {
		return nil
	}
	return s.statusesWith(ctx, tv, entries, entries[0].state)
}

// statusesWith reports entries; tv (may be nil) gives their roles, st the
// data state they enforce.
func (s *Server) statusesWith(ctx context.Context, tv *targetView, entries []*replicaEntry, st *targetState) []*tierv1.ReplicaStatus {
	out := make([]*tierv1.ReplicaStatus, len(entries))
	ds := st.get()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(statusFanout)
	for i, e := range entries {
		g.Go(func() error {
			out[i] = s.status(gctx, tv, e, ds)
			return nil
		})
	}
	_ = g.Wait() // status never fails: what it cannot read it leaves out
	return out
}

// status reports one replica. empty holds when the replica has no row and
// its changelog no record.
func (s *Server) status(ctx context.Context, tv *targetView, e *replicaEntry, ds dataState) *tierv1.ReplicaStatus {
	st := e.getStatus()
	rs := &tierv1.ReplicaStatus{
		Bucket:     e.key.bucket,
		ServerId:   s.cfg.ID,
		Role:       tierv1.ReplicaRole_REPLICA_ROLE_FOLLOWER,
		State:      st.state,
		DataState:  ds.proto(),
		BulkLoadId: ds.bulkLoadID,
		Error:      st.err,
	}
	if tv != nil {
		r := tv.routes[e.key.bucket]
		rs.LeaderEpoch = r.epoch
		if r.leader == s.cfg.ID {
			rs.Role = tierv1.ReplicaRole_REPLICA_ROLE_LEADER
		}
	}
	if id := e.latestID.Load(); id > 0 {
		rs.LatestSnapshotId = &id
	}
	if st.state == restoringState && st.restoringID >= 0 {
		id := st.restoringID
		rs.RestoringSnapshotId = &id
		rs.RestoreDoneBytes, rs.RestoreTotalBytes = st.doneBytes, st.totalBytes
	}
	if rep := e.rep.Load(); rep != nil {
		rs.LogEndOffset = rep.AppliedOffset() + 1
		if start, end, err := rep.LogOffsets(ctx); err == nil {
			rs.Empty = rep.RowCount() == 0 && start == end
		}
	}
	return rs
}
