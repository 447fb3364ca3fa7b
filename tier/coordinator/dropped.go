package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/meta"
)

// cleanDroppedLoop deletes the object-store data of dropped tables and
// partitions while the term lasts: once at its start, then every
// DroppedDataCleanInterval.
func (c *Coordinator) cleanDroppedLoop(ctx context.Context, t *term) error {
	if c.cfg.DroppedDataCleanInterval < 0 {
		return nil
	}
	periodic.Every(ctx, 0, c.cfg.DroppedDataCleanInterval, func() {
		if err := c.cleanDropped(ctx, t); err != nil && ctx.Err() == nil {
			c.log.Warn("coordinator could not delete all data of dropped targets; trying again at the next pass",
				"err", err, "interval", c.cfg.DroppedDataCleanInterval)
		}
	})
	return nil
}

// finishDropsLoop runs finishDrops at the start of a term, and again
// whenever a drop of this term failed midway (term.dropFailed): each time
// with backoff until it succeeds or the term ends.
func (c *Coordinator) finishDropsLoop(ctx context.Context, t *term) {
	for ctx.Err() == nil {
		backoff := newBackoff(100*time.Millisecond, 30*time.Second)
		for ctx.Err() == nil {
			err := c.finishDrops(ctx, t)
			if err == nil || ctx.Err() != nil {
				break
			}
			c.log.Warn("coordinator could not finish the drops that did not complete; retrying", "err", err)
			backoff.wait(ctx)
		}
		select {
		case <-ctx.Done():
		case <-t.unfinishedDrop:
		}
	}
}

// finishDrops finishes the drops of tables and partitions that were
// marked Dropping but not completed (an earlier term's coordinator died or
// lost its term between the steps; a drop request of this term whose
// context ended or whose etcd call failed midway): each is dropped again,
// which finishes it.
// Until then such a table reads as gone, yet its name cannot be created
// again and its database cannot be dropped.
func (c *Coordinator) finishDrops(ctx context.Context, t *term) error {
	tables, err := c.store.ListTables(ctx, "")
	if err != nil {
		return err
	}
	var errs []error
	finish := func(what string, drop func() error) {
		switch err := drop(); {
		case err == nil, errors.Is(err, meta.ErrNotFound):
			c.log.Info("coordinator finished a drop that had not completed", "what", what)
		default:
			errs = append(errs, fmt.Errorf("finish the drop of %s: %w", what, err))
		}
	}
	for _, tv := range tables {
		tr := tv.Value
		name := tr.Database + "." + tr.Name
		if tr.Dropping {
			finish("table "+name, func() error { return c.store.DropTableID(ctx, t.guard, tr.Database, tr.Name, tr.ID) })
			continue
		}
		ps, err := c.store.ListPartitions(ctx, tr.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("partitions of %s: %w", name, err))
			continue
		}
		for _, pv := range ps {
			if pv.Value.Dropping {
				part, id := pv.Value.Name, pv.Value.ID
				finish("partition "+part+" of "+name, func() error { return c.store.DropPartitionID(ctx, t.guard, tr.Database, tr.Name, part, tr.ID, id) })
			}
		}
	}
	return errors.Join(errs...)
}

// cleanDropped makes one pass over the dropped targets' records
// (meta.DroppedData, written when the drop began): it deletes every object
// under each one's snapshot directory, and forgets a target once a pass
// found nothing left to delete at least DroppedDataGrace after its drop
// (a snapshot upload in flight when the drop began, on a tablet server
// that had not yet seen it, may still land in between).
func (c *Coordinator) cleanDropped(ctx context.Context, t *term) error {
	ds, err := c.store.ListDroppedData(ctx)
	if err != nil {
		return err
	}
	c.m.droppedPending.Set(float64(len(ds)))
	if len(ds) == 0 {
		return nil
	}
	if c.bulkObjects == nil {
		return errors.New("coordinator: the object store cannot list objects: dropped targets' data is left")
	}
	var errs []error
	forgotten := 0
	for _, d := range ds {
		tgt := d.Value.Target()
		log := c.log.With("target", tgt.String(), "dir", d.Value.Dir)
		n, err := c.deleteUnder(ctx, d.Value.Dir)
		c.m.droppedFilesDeleted.Add(float64(n))
		if n > 0 {
			log.Info("coordinator deleted data of a dropped target", "objects", n)
		}
		if errors.Is(err, objstore.ErrOutsideStore) {
			// A table created when the tier had another object store:
			// nothing here can delete it, so say so once and forget it.
			log.Error("coordinator cannot delete the data of a dropped target: it lies outside the object store; delete it by hand", "err", err)
			if err := c.store.DeleteDroppedData(ctx, t.guard, tgt, d.Rev); err != nil {
				errs = append(errs, err)
			} else {
				forgotten++
			}
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tgt, err))
			continue
		}
		if n > 0 || c.clock.Now().Sub(time.UnixMilli(d.Value.DroppedMs)) < c.cfg.DroppedDataGrace {
			continue
		}
		if err := c.store.DeleteDroppedData(ctx, t.guard, tgt, d.Rev); err != nil {
			errs = append(errs, err)
			continue
		}
		forgotten++
		log.Info("coordinator finished deleting the data of a dropped target")
	}
	c.m.droppedPending.Set(float64(len(ds) - forgotten))
	return errors.Join(errs...)
}

// deleteUnder deletes every object under dir (a directory URI without a
// trailing slash), _METADATA objects last (deleteObjects), and returns how
// many it deleted.
func (c *Coordinator) deleteUnder(ctx context.Context, dir string) (int, error) {
	prefix, err := c.bulkObjects.Key(dir)
	if err != nil {
		return 0, fmt.Errorf("coordinator: delete %s: %w", dir, err)
	}
	prefix += "/"
	var uris []string
	for a, err := range c.bulkObjects.List(ctx, prefix) {
		if err != nil {
			return 0, fmt.Errorf("coordinator: list %s: %w", dir, err)
		}
		uris = append(uris, dir+"/"+strings.TrimPrefix(a.Key, prefix))
	}
	return c.deleteObjects(ctx, uris)
}
