package meta

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// DataStateChange asks SetDataState to change a target's data state.
type DataStateChange struct {
	Target TargetName
	// Rev is the mod revision of the target's registration (the table
	// record of a non-partitioned table, else the partition record) the
	// change is based on, as read by GetTable or GetPartition.
	Rev        int64
	State      DataState
	BulkLoadID string // required with LOADING; may stay with ACTIVE while a bulk load publishes
	// If and Then are the caller's own comparisons and writes, applied in
	// the same etcd transaction: the bulk-load transaction record that
	// must change together with the fence. A failed comparison fails the
	// change with fencing.ErrPreconditionFailed. Up to maxTxnOps-2 each.
	If   []clientv3.Cmp
	Then []clientv3.Op
}

// SetDataState sets a target's data state and bulk-load id if its
// registration still has revision c.Rev, in one guarded transaction
// together with c.If and c.Then, and returns the new revision. A bulk-load
// id is never replaced by another: the registration must carry none, or
// the same one. Errors: ErrInvalid (bad state or id, a partition of a
// non-partitioned table or no partition of a partitioned one), ErrNotFound
// (no such target, or being dropped), fencing.ErrPreconditionFailed (the
// registration moved, or c.If failed), fencing.ErrNotLeader.
func (s *Store) SetDataState(ctx context.Context, g Guard, c DataStateChange) (int64, error) {
	what := c.Target.String()
	if err := checkDataState(what, c.State, c.BulkLoadID); err != nil {
		return 0, err
	}
	if len(c.If) > maxTxnOps-2 || len(c.Then) > maxTxnOps-2 {
		return 0, fmt.Errorf("%w: set data state of %s: %d comparisons and %d writes of the caller's, limit %d", ErrInvalid, what, len(c.If), len(c.Then), maxTxnOps-2)
	}
	tkey := s.k.table(c.Target.Database, c.Target.Table)
	tcur, err := s.GetTable(ctx, c.Target.Database, c.Target.Table)
	switch {
	case err != nil:
		return 0, err
	case tcur.Value.Dropping:
		return 0, fmt.Errorf("%w: table %s.%s is being dropped", ErrNotFound, c.Target.Database, c.Target.Table)
	case tcur.Value.Partitioned() != (c.Target.Partition != ""):
		return 0, fmt.Errorf("%w: %s: a partitioned table's targets are its partitions, and only they", ErrInvalid, what)
	}

	// The table record is compared even for a partition: a drop of the
	// table marks it first.
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(tkey), "=", tcur.Rev)}
	var op clientv3.Op
	if c.Target.Partition == "" {
		rec := tcur.Value
		if err := checkChange(what, tcur.Rev, rec.BulkLoadID, c); err != nil {
			return 0, err
		}
		rec.DataState, rec.BulkLoadID, rec.ModifiedMs = c.State, c.BulkLoadID, s.nowMs()
		op, err = put(tkey, rec)
	} else {
		key := s.k.partition(tcur.Value.ID, c.Target.Partition)
		pcur, perr := get[PartitionRecord](ctx, s, key, what)
		switch {
		case perr != nil:
			return 0, perr
		case pcur.Value.Dropping:
			return 0, fmt.Errorf("%w: %s is being dropped", ErrNotFound, what)
		}
		rec := pcur.Value
		if err := checkChange(what, pcur.Rev, rec.BulkLoadID, c); err != nil {
			return 0, err
		}
		rec.DataState, rec.BulkLoadID, rec.ModifiedMs = c.State, c.BulkLoadID, s.nowMs()
		op, err = put(key, rec)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", c.Rev))
	}
	if err != nil {
		return 0, err
	}
	resp, err := s.txn(ctx, g, append(cmps, c.If...), append([]clientv3.Op{op}, c.Then...), nil)
	if err != nil {
		return 0, fmt.Errorf("meta: set data state of %s to %s %q: %w", what, c.State, c.BulkLoadID, err)
	}
	return resp.Header.Revision, nil
}

// checkChange checks a change against the registration as read: at the
// revision the caller expects, and not replacing one bulk-load id by
// another.
func checkChange(what string, rev int64, oldID string, c DataStateChange) error {
	if rev != c.Rev {
		return fmt.Errorf("meta: set data state of %s: %w: revision %d, expected %d", what, fencing.ErrPreconditionFailed, rev, c.Rev)
	}
	if oldID != "" && c.BulkLoadID != "" && oldID != c.BulkLoadID {
		return fmt.Errorf("%w: %s: holds bulk load %q, not %q", ErrInvalid, what, oldID, c.BulkLoadID)
	}
	return nil
}
