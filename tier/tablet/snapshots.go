package tablet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
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
	// A leader promoted from a lagging follower (a TakeSnapshot right after
	// the promotion) snapshots what the changelog holds, not what it had
	// applied: the snapshot then covers every acknowledged write, and never
	// lies below what the log still holds.
	if err := rep.CatchUp(ctx); err != nil {
		return nil, replicaErr("snapshot: catch up", err)
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
	base := s.incrementalBase(ctx, e)
	md, path, err := rep.Snapshot(ctx, id, base)
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
			if ce.Code() == connect.CodeInvalidArgument {
				// Refused as built (say, on shared files the store no
				// longer holds): the next one uploads every file.
				e.snap.full = true
			}
			s.dropRefused(ctx, e, id, md, path, err)
			return nil, err // the coordinator's own reason (STALE_EPOCH, TARGET_LOADING, ...)
		}
		return nil, errUnavailable("snapshot %d of %v: report to the coordinator: %v", id, e.rid, err)
	}
	e.snap.prev, e.snap.lastOffset, e.snap.full = md, md.LogOffset, false
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

// dropRefused deletes what snapshot id uploaded (its _METADATA, its
// private files, the shared files named after it: no other snapshot
// references those) when the coordinator refused its report before
// registering it (stale epoch, loading target, refused as built) and the
// registry confirms it is not there: no retention pass would ever find
// them. Failures are logged; the objects are then left.
func (s *Server) dropRefused(ctx context.Context, e *replicaEntry, id int64, md *snapshot.Metadata, path string, refusal error) {
	switch tierpb.ReasonOf(refusal) {
	case tierpb.ReasonStaleEpoch, tierpb.ReasonTargetLoading, tierpb.ReasonInvalidArgument:
	default:
		return
	}
	log := s.log.With(logAttrs(e.key)...).With("snapshot", id)
	vs, err := s.deps.Meta.ListSnapshots(ctx, e.key.target, int(e.key.bucket))
	if err != nil {
		log.Warn("tablet leaves the files of a refused snapshot: the registry cannot be read", "err", err)
		return
	}
	if slices.ContainsFunc(vs, func(v meta.Versioned[meta.BucketSnapshot]) bool { return v.Value.SnapshotID == id }) {
		return
	}
	own := fmt.Sprintf("-s%d.sst", id)
	var uris []string
	for _, f := range md.PrivateFiles {
		uris = append(uris, f.Handle.Path)
	}
	for _, f := range md.SharedFiles {
		if strings.HasSuffix(f.Handle.Path, own) {
			uris = append(uris, f.Handle.Path)
		}
	}
	if err := replica.DeleteFiles(ctx, s.deps.Objects, append(uris, path)); err != nil {
		log.Warn("tablet could not delete the files of a refused snapshot", "err", err)
	}
}

// incrementalBase returns the snapshot a new snapshot of e builds on (its
// shared files that the replica still holds are referenced, not uploaded
// again): e's previous one, taken or restored, while the bucket's registry
// still holds it; else the bucket's latest registered one. Retention
// deletes the shared files of snapshots it drops, so a replica that
// restored long ago and leads now (after the old leader's snapshots and
// retention went on) must not build on the one it restored. Nil, for a
// snapshot that uploads every file, when the bucket has no registered
// snapshot, after a report the coordinator refused as built, or when the
// registry or the latest document cannot be read (logged). e.snap is
// locked.
func (s *Server) incrementalBase(ctx context.Context, e *replicaEntry) *snapshot.Metadata {
	if e.snap.full {
		return nil
	}
	prev := e.snap.prev
	log := s.log.With(logAttrs(e.key)...)
	vs, err := s.deps.Meta.ListSnapshots(ctx, e.key.target, int(e.key.bucket))
	if err != nil {
		log.Warn("tablet snapshot uploads every file: the bucket's registered snapshots cannot be read", "err", err)
		return nil
	}
	if len(vs) == 0 {
		return nil
	}
	if prev != nil && slices.ContainsFunc(vs, func(v meta.Versioned[meta.BucketSnapshot]) bool { return v.Value.SnapshotID == prev.SnapshotID }) {
		return prev
	}
	latest := slices.MaxFunc(vs, func(a, b meta.Versioned[meta.BucketSnapshot]) int {
		return cmp.Compare(a.Value.SnapshotID, b.Value.SnapshotID)
	}).Value
	md, err := s.readMetadata(ctx, latest.MetadataPath)
	if err == nil && md.SnapshotID != latest.SnapshotID {
		err = fmt.Errorf("_METADATA at %s names snapshot %d, want %d", latest.MetadataPath, md.SnapshotID, latest.SnapshotID)
	}
	if err != nil {
		log.Warn("tablet snapshot uploads every file: the latest registered snapshot cannot be read", "snapshot", latest.SnapshotID, "err", err)
		return nil
	}
	log.Info("tablet snapshot builds on the latest registered snapshot", "snapshot", latest.SnapshotID, "previous", snapshotIDOf(prev))
	return md
}
