package tablet

import (
	"context"
	"errors"

	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
)

// sweepLogs deletes, at start and then every ChangelogSweepInterval, the
// changelogs whose table or partition has been dropped. Dropping a target
// deletes its logs as its replicas close (loop.deleteDroppedLog); the
// sweep catches what that misses: logs of targets dropped while this
// server was down, and Kafka topics that a replica still restoring on
// another host re-created after their deletion.
func (s *Server) sweepLogs(ctx context.Context) {
	if s.cfg.ChangelogSweepInterval < 0 {
		return
	}
	periodic.Every(ctx, 0, s.cfg.ChangelogSweepInterval, func() {
		if err := s.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("changelog sweep failed; trying again at the next", "err", err, "interval", s.cfg.ChangelogSweepInterval)
		}
	})
}

// sweepOnce lists the provider's logs, asks the metadata which of their
// targets are dropped, and deletes those logs. A log still open here (a
// replica of the dropped target still closing) is left for the replica's
// own deletion. thaw_tablet_changelogs_swept_total counts only the logs
// this server's Delete removed, so that the sum over servers is the number
// of logs swept. Logs whose ids the metadata never allocated are left
// alone (meta.Store.DroppedTargets).
func (s *Server) sweepOnce(ctx context.Context) error {
	ids, err := s.deps.Changelog.List(ctx)
	if err != nil {
		return err
	}
	byTarget := map[meta.Target][]changelog.BucketLogID{}
	var targets []meta.Target
	for _, id := range ids {
		if id.Partitioned && id.PartitionID == 0 {
			continue // partition ids start at 1: no target of this tier
		}
		t := meta.Target{TableID: id.TableID, PartitionID: id.PartitionID}
		if t.Validate() != nil {
			continue
		}
		if byTarget[t] == nil {
			targets = append(targets, t)
		}
		byTarget[t] = append(byTarget[t], id)
	}
	if len(targets) == 0 {
		return nil
	}
	dropped, err := s.deps.Meta.DroppedTargets(ctx, targets)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range dropped {
		for _, id := range byTarget[t] {
			switch deleted, err := s.deps.Changelog.Delete(ctx, id); {
			case err == nil && deleted:
				s.m.logsSwept.Inc()
				s.log.Info("changelog of a dropped target deleted by the sweep", "log", id.String())
			case err == nil:
				// Another tablet server of this host (sharing the local log)
				// or of the cluster (the Kafka changelog) deleted it between
				// List and Delete: not this sweep's deletion.
			case errors.Is(err, changelog.ErrInUse):
			default:
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
