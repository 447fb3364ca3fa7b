package tablet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
)

// runEntry is the worker of one replica entry. It waits until the bucket's
// previous replica on this server is gone, restores the replica, then
// serves it (tails the changelog, takes periodic snapshots) until the
// entry is stopped; then it closes and removes the replica. A failed
// restore or tail is retried with backoff from the bucket's latest
// snapshot; a failed explicit restore (RestoreSnapshot) stays FAILED until
// the coordinator asks again.
func (s *Server) runEntry(e *replicaEntry, prev <-chan struct{}) {
	defer close(e.done)
	ctx := e.ctx
	log := s.log.With(logAttrs(e.key)...)
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			// e.done stands for "every earlier replica of the bucket is
			// gone" (the loop keeps only the last stopped entry's): an
			// entry stopped while it waits closes it only after prev.
			<-prev
			return
		}
	}
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	src := e.source
	served := false // a restore of this entry succeeded
	for ctx.Err() == nil {
		rep, err := s.restore(ctx, e, src, log)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.m.replicaFailures.Inc()
			e.setStatus(entryStatus{state: failedState, err: err.Error(), restoringID: -1})
			log.Warn("tablet replica restore failed", "err", err)
			if src.explicit && !served && src.bulkLoadID == "" {
				// The coordinator's restore: its next RestoreSnapshot of
				// the snapshot replaces this entry.
				<-ctx.Done()
				return
			}
			if src.explicit && !served {
				// A bulk load's restore: while the load holds the target,
				// its next RestoreSnapshot replaces this entry; once it no
				// longer does (published, or aborted), none comes (the
				// replica stayed FAILED for good): restore from the
				// registry.
				wait := backoff{min: s.cfg.RetryMin, max: max(s.cfg.RetryMin, time.Second)}
				for s.bulkLoading(e.key.target) && wait.sleep(ctx) {
				}
				if ctx.Err() != nil {
					return
				}
				log.Info("tablet replica's bulk-load restore failed and the load no longer holds the target; restoring from the registry")
				src = restoreSource{}
				continue
			}
			// A restore of this entry's own, after a failed tail: nobody
			// asks again (the coordinator confirmed the first one), so it
			// is retried (it waited FAILED for good, and the load's
			// publish round with it), from the registry once the load no
			// longer holds the target.
			b.sleep(ctx)
			if src.explicit && !s.bulkLoading(e.key.target) {
				src = restoreSource{}
			}
			continue
		}
		served = true
		b.reset()
		e.rep.Store(rep)
		e.setStatus(entryStatus{state: readyState, restoringID: -1})
		log.Info("tablet replica ready", "applied", rep.AppliedOffset(), "rows", rep.RowCount(), "snapshot", e.latestID.Load())

		err = s.serveReplica(ctx, e, rep)
		e.rep.Store(nil)
		e.snap.Lock() // let a running snapshot finish with the replica
		derr := rep.Destroy()
		e.snap.Unlock()
		if derr != nil {
			log.Warn("tablet could not remove a replica", "err", derr)
		}
		if err == nil {
			return // stopped
		}
		if errors.Is(err, changelog.ErrOutOfRange) && s.bulkLoading(e.key.target) {
			// A bulk load's restore of another replica moved the bucket's
			// changelog to the load's snapshot. This replica's own restore
			// comes with the load's RestoreSnapshot, which replaces this
			// entry: wait for it rather than restore what the load is about
			// to replace. Only if the target stops loading without it, go
			// on as after any failed tail.
			e.setStatus(entryStatus{state: restoringState, restoringID: -1})
			log.Info("tablet replica's changelog was moved by a bulk load; waiting for the load to restore the replica", "err", err)
			wait := backoff{min: s.cfg.RetryMin, max: max(s.cfg.RetryMin, time.Second)}
			for s.bulkLoading(e.key.target) && wait.sleep(ctx) {
			}
			src = restoreSource{}
			continue
		}
		s.m.replicaFailures.Inc()
		e.setStatus(entryStatus{state: failedState, err: err.Error(), restoringID: -1})
		log.Warn("tablet replica stopped tailing the changelog; restoring it again", "err", err)
		src = restoreSource{}
		if e.source.explicit && e.source.bulkLoadID != "" && s.bulkLoading(e.key.target) {
			// The load's snapshot is registered only at its commit: the
			// latest registered one is not what the load installs (an
			// empty replica of a new target, which then claimed the
			// load's snapshot and was confirmed without its rows).
			src = e.source
		}
		b.sleep(ctx)
	}
}

// bulkLoading reports whether a bulk load holds target (data state
// LOADING) as far as this server knows.
func (s *Server) bulkLoading(target meta.Target) bool {
	s.mu.RLock()
	tv := s.mu.targets[target]
	s.mu.RUnlock()
	return tv != nil && tv.state.get().state == meta.Loading
}

// serveReplica tails the changelog into rep and, on a leader, takes
// periodic snapshots, until ctx is done (nil) or tailing fails.
func (s *Server) serveReplica(ctx context.Context, e *replicaEntry, rep *replica.Replica) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if s.cfg.SnapshotInterval > 0 {
		wg.Go(func() { s.snapshotLoop(ctx, e) })
	}
	err := rep.Follow(ctx)
	cancel()
	wg.Wait()
	return err
}

// restore opens the replica of e from src, under the server's restore
// limit: the snapshot is downloaded and verified (size and SHA-256 of
// every file), opened, and the changelog replayed from its log offset.
func (s *Server) restore(ctx context.Context, e *replicaEntry, src restoreSource, log *slog.Logger) (_ *replica.Replica, err error) {
	select {
	case s.restoreSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.restoreSem }()
	start := time.Now()
	defer func() {
		result := "ok"
		if err != nil {
			result = "error"
			if ctx.Err() != nil {
				result = "canceled"
			}
		}
		s.m.restoreSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}()

	e.setStatus(entryStatus{state: restoringState, restoringID: src.restoringID()})
	md, err := s.snapshotToRestore(ctx, e, src)
	if err != nil {
		return nil, fmt.Errorf("tablet: restore %v: %w", e.rid, err)
	}
	if md != nil {
		var total int64
		for _, fs := range [][]snapshot.KvFileHandle{md.SharedFiles, md.PrivateFiles} {
			for _, f := range fs {
				total += f.Handle.Size
			}
		}
		e.setStatus(entryStatus{state: restoringState, restoringID: md.SnapshotID, totalBytes: total})
		if src.explicit && src.bulkLoadID != "" {
			if err := s.positionBulkLog(ctx, e.rid, md.LogOffset); err != nil {
				return nil, fmt.Errorf("tablet: restore %v: %w", e.rid, err)
			}
		}
	}
	log.Info("tablet replica restoring", "snapshot", snapshotIDOf(md), "explicit", src.explicit)
	rep, err := s.host.Open(ctx, e.rid, md)
	if err != nil {
		return nil, fmt.Errorf("tablet: restore %v: %w", e.rid, err)
	}
	e.snap.Lock()
	e.snap.prev, e.snap.lastOffset = md, 0
	if md != nil {
		e.snap.lastOffset = md.LogOffset
	}
	e.latestID.Store(snapshotIDOf(md)) // what it holds now, none for an empty one
	e.snap.Unlock()
	return rep, nil
}

func snapshotIDOf(md *snapshot.Metadata) int64 {
	if md == nil {
		return 0
	}
	return md.SnapshotID
}

// snapshotToRestore returns the metadata of the snapshot src names: the
// explicit one, or the bucket's latest registered one (nil if it has none,
// for a new, empty replica).
func (s *Server) snapshotToRestore(ctx context.Context, e *replicaEntry, src restoreSource) (*snapshot.Metadata, error) {
	id, path := src.snapshotID, src.metadataPath
	if !src.explicit {
		v, err := s.deps.Meta.LatestSnapshot(ctx, e.key.target, int(e.key.bucket))
		if errors.Is(err, meta.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the latest snapshot: %w", err)
		}
		id, path = v.Value.SnapshotID, v.Value.MetadataPath
	}
	md, err := s.readMetadata(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("snapshot %d: %w", id, err)
	}
	if md.SnapshotID != id {
		return nil, fmt.Errorf("%w: _METADATA at %s names snapshot %d, want %d", replica.ErrBadSnapshot, path, md.SnapshotID, id)
	}
	return md, nil
}

// readMetadata reads and decodes a _METADATA document.
func (s *Server) readMetadata(ctx context.Context, uri string) (*snapshot.Metadata, error) {
	key, err := s.deps.Objects.Key(uri)
	if err != nil {
		return nil, fmt.Errorf("metadata path: %w", err)
	}
	b, err := s.deps.Objects.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", uri, err)
	}
	md, err := snapshot.DecodeMetadata(b)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", uri, err)
	}
	return md, nil
}

// positionBulkLog prepares the changelog for a bulk-loaded snapshot: a log
// that holds no records starts at the snapshot's log offset (ResetTo), even
// if it ended above it. A log that holds records is left alone (the
// restore then replays it from the offset, or fails if it cannot).
func (s *Server) positionBulkLog(ctx context.Context, rid replica.ReplicaID, offset int64) (err error) {
	l, err := s.deps.Changelog.Open(ctx, rid.LogID())
	if err != nil {
		return fmt.Errorf("open changelog: %w", err)
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	start, end, err := l.Offsets(ctx)
	if err != nil {
		return fmt.Errorf("changelog offsets: %w", err)
	}
	if start == end && end != offset {
		if err := l.ResetTo(ctx, offset); err != nil {
			return fmt.Errorf("reset changelog to %d: %w", offset, err)
		}
	}
	return nil
}
