package tablet

import (
	"context"
	"errors"
	"hash/fnv"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
)

// snapshotLoop takes a snapshot of e every SnapshotInterval while e's
// replica leads its bucket, the target is ACTIVE and the replica changed
// since its last snapshot. The first one comes after a delay spread over
// [interval/2, interval) by bucket, so that replicas opened together do
// not snapshot together.
func (s *Server) snapshotLoop(ctx context.Context, e *replicaEntry) {
	interval := s.cfg.SnapshotInterval
	h := fnv.New64a()
	_, _ = h.Write([]byte(e.rid.String()))
	first := interval/2 + time.Duration(h.Sum64()%uint64(max(interval/2, 1)))
	periodic.Every(ctx, first, interval, func() {
		if epoch, ok := s.leading(e.key); ok && e.state.get().state == meta.Active && s.changed(e) {
			if _, err := s.takeSnapshot(ctx, e, epoch, "periodic"); err != nil && ctx.Err() == nil {
				s.log.Warn("tablet periodic snapshot failed", append(logAttrs(e.key), "epoch", epoch, "err", err)...)
			}
		}
	})
}

// leading reports whether this server leads the bucket, and its epoch.
func (s *Server) leading(k bucketKey) (int32, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	tv := s.mu.targets[k.target]
	if tv == nil {
		return 0, false
	}
	r, ok := tv.routes[k.bucket]
	return r.epoch, ok && r.leader == s.cfg.ID
}

// changed reports whether e's replica applied records since its last
// snapshot (taken or restored).
func (s *Server) changed(e *replicaEntry) bool {
	rep := e.rep.Load()
	if rep == nil {
		return false
	}
	e.snap.Lock()
	defer e.snap.Unlock()
	return rep.AppliedOffset()+1 != e.snap.lastOffset
}

// takeSnapshot takes an ordinary snapshot of e's replica under leader
// epoch epoch: a snapshot id from the bucket's sequence (under the current
// coordinator's guard), the checkpoint and its upload (replica.Snapshot,
// incremental over the previous snapshot), then ReportSnapshot; with the
// oldest retained log offset the coordinator answers, it lets the
// changelog drop what no retained snapshot needs. Snapshots of a replica
// run one at a time. It gives up when e is stopped.
func (s *Server) takeSnapshot(ctx context.Context, e *replicaEntry, epoch int32, trigger string) (_ *tierv1.BucketSnapshot, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	e.snap.Lock()
	defer e.snap.Unlock()
	start := time.Now()
	defer func() {
		s.m.snapshotSeconds.WithLabelValues(trigger, resultOf(err)).Observe(time.Since(start).Seconds())
	}()
	rep := e.rep.Load()
	if rep == nil {
		return nil, errUnavailable("snapshot of %v: the replica is not ready", e.rid)
	}
	guard, err := s.coordinatorGuard(ctx)
	if err != nil {
		return nil, errUnavailable("snapshot of %v: %v", e.rid, err)
	}
	id, err := s.deps.Meta.NextSnapshotID(ctx, guard, e.key.target, int(e.key.bucket))
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return nil, errNotFound("snapshot of %v: %v", e.rid, err)
	case err != nil:
		return nil, errUnavailable("snapshot of %v: allocate a snapshot id: %v", e.rid, err)
	}
	md, path, err := rep.Snapshot(ctx, id, e.snap.prev)
	if err != nil {
		return nil, replicaErr("snapshot", err)
	}
	s.m.snapshotBytes.Add(float64(md.IncrementalSize))
	resp, err := s.deps.Coordinator.ReportSnapshot(ctx, connect.NewRequest(&tierv1.ReportSnapshotRequest{
		Target:       targetProto(e.key.target),
		Bucket:       e.key.bucket,
		LeaderEpoch:  epoch,
		SnapshotId:   id,
		LogOffset:    md.LogOffset,
		MetadataPath: path,
		ServerId:     s.cfg.ID,
	}))
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, err // the coordinator's own reason (STALE_EPOCH, TARGET_LOADING, ...)
		}
		return nil, errUnavailable("snapshot %d of %v: report to the coordinator: %v", id, e.rid, err)
	}
	e.snap.prev, e.snap.lastOffset = md, md.LogOffset
	e.latestID.Store(id)
	log := s.log.With(logAttrs(e.key)...)
	if oldest := resp.Msg.GetOldestRetainedLogOffset(); oldest > 0 {
		if err := rep.TruncateLog(ctx, oldest); err != nil && !errors.Is(err, replica.ErrClosed) {
			log.Warn("tablet could not truncate the changelog", "before", oldest, "err", err)
		}
	}
	log.Info("tablet snapshot registered", "snapshot", id, "log_offset", md.LogOffset, "epoch", epoch,
		"uploaded_bytes", md.IncrementalSize, "trigger", trigger)
	return &tierv1.BucketSnapshot{Bucket: e.key.bucket, SnapshotId: id, LogOffset: md.LogOffset, MetadataPath: path}, nil
}
