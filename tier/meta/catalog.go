package meta

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/kv"
)

// CreateDatabase creates a database; ErrExists if it exists.
func (s *Store) CreateDatabase(ctx context.Context, g Guard, name string) (Versioned[DatabaseRecord], error) {
	rec := DatabaseRecord{Version: RecordVersion, Name: name, CreatedMs: s.nowMs()}
	key := s.k.database(name)
	op, err := put(key, rec)
	if err != nil {
		return Versioned[DatabaseRecord]{}, err
	}
	resp, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, []clientv3.Op{op}, nil)
	switch {
	case failed(err):
		return Versioned[DatabaseRecord]{}, fmt.Errorf("%w: database %s", ErrExists, name)
	case err != nil:
		return Versioned[DatabaseRecord]{}, fmt.Errorf("meta: create database %s: %w", name, err)
	}
	return Versioned[DatabaseRecord]{Value: rec, Rev: resp.Header.Revision}, nil
}

// GetDatabase reads a database; ErrNotFound if it does not exist.
func (s *Store) GetDatabase(ctx context.Context, name string) (Versioned[DatabaseRecord], error) {
	return get[DatabaseRecord](ctx, s, s.k.database(name), "database "+name)
}

// ListDatabases returns every database, by name.
func (s *Store) ListDatabases(ctx context.Context) ([]Versioned[DatabaseRecord], error) {
	dbs, _, err := list[DatabaseRecord](ctx, s, s.k.databases(), listPage)
	return dbs, err
}

// DropDatabase deletes a database. Without cascade it fails with
// ErrNotEmpty while the database holds tables; with cascade it drops them
// first (DropTable, which fails with ErrLoading on a loading target).
func (s *Store) DropDatabase(ctx context.Context, g Guard, name string, cascade bool) error {
	key, tables := s.k.database(name), s.k.tables(name)
	for {
		if cascade {
			ts, err := s.ListTables(ctx, name)
			if err != nil {
				return err
			}
			for _, t := range ts {
				// A table another caller dropped meanwhile is gone either way.
				if err := s.DropTableID(ctx, g, name, t.Value.Name, t.Value.ID); err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			}
		}
		// The database goes only while it holds no table key; CreateTable
		// in turn requires the database key.
		resp, err := s.txn(ctx, g,
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(key), ">", 0),
				clientv3.Compare(clientv3.CreateRevision(tables), "=", 0).WithPrefix(),
			},
			[]clientv3.Op{clientv3.OpDelete(key)},
			[]clientv3.Op{
				clientv3.OpGet(key, clientv3.WithCountOnly()),
				clientv3.OpGet(tables, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			})
		switch {
		case failed(err) && count(resp, 0) == 0:
			return fmt.Errorf("%w: database %s", ErrNotFound, name)
		case failed(err) && !cascade:
			return fmt.Errorf("%w: database %s holds %d tables", ErrNotEmpty, name, count(resp, 1))
		case failed(err):
			continue // a table was created meanwhile: drop it too
		case err != nil:
			return fmt.Errorf("meta: drop database %s: %w", name, err)
		}
		return nil
	}
}

// TableSpec is what CreateTable needs of a new table.
type TableSpec struct {
	Database, Name    string
	Schema            kv.TableSchema
	ReplicationFactor int
	RemoteDataDir     string // the remote root of the table's snapshots (snapshot.Target.RemoteDir)
	// Buckets is the initial assignment of a non-partitioned table, one
	// entry per bucket of the schema with at most ReplicationFactor
	// replicas each. A partitioned table has none: each partition gets its
	// own in CreatePartition.
	Buckets []BucketAssignment
}

// CreateTable allocates the next table id and writes the table record (a
// non-partitioned table ACTIVE) and its initial assignment in one
// transaction. The schema is validated with kv.NewTable and stored in its
// normalized form (bucket key filled in). It fails with ErrInvalid on a bad
// spec, ErrNotFound if the database does not exist and ErrExists if the
// table does (also while it is being dropped).
func (s *Store) CreateTable(ctx context.Context, g Guard, spec TableSpec) (Versioned[TableRecord], error) {
	what := spec.Database + "." + spec.Name
	t, err := kv.NewTable(spec.Schema)
	if err != nil {
		return Versioned[TableRecord]{}, fmt.Errorf("%w: table %s: %w", ErrInvalid, what, err)
	}
	now := s.nowMs()
	rec := TableRecord{
		Version: RecordVersion, ID: 1, Database: spec.Database, Name: spec.Name, Schema: t.Schema(),
		ReplicationFactor: spec.ReplicationFactor, RemoteDataDir: spec.RemoteDataDir,
		CreatedMs: now, ModifiedMs: now,
	}
	if !rec.Partitioned() {
		rec.DataState = Active
	}
	if err := rec.Validate(); err != nil {
		return Versioned[TableRecord]{}, err
	}
	if rec.Partitioned() && spec.Buckets != nil {
		return Versioned[TableRecord]{}, fmt.Errorf("%w: table %s is partitioned: its partitions are assigned, not the table", ErrInvalid, what)
	}
	if !rec.Partitioned() {
		if msg := checkBuckets(spec.Buckets, t.Buckets(), rec.ReplicationFactor); msg != "" {
			return Versioned[TableRecord]{}, fmt.Errorf("%w: table %s: assignment: %s", ErrInvalid, what, msg)
		}
	}
	dbKey, key, seqKey := s.k.database(spec.Database), s.k.table(spec.Database, spec.Name), s.k.seqTable()
	for {
		id, seqRev, err := s.readSeq(ctx, seqKey)
		if err != nil {
			return Versioned[TableRecord]{}, err
		}
		rec.ID = id
		recOp, err := put(key, rec)
		if err != nil {
			return Versioned[TableRecord]{}, err
		}
		then := []clientv3.Op{clientv3.OpPut(seqKey, seqValue(id+1)), recOp}
		if !rec.Partitioned() {
			op, err := put(s.k.assignment(rec.Target()), Assignment{Version: RecordVersion, TableID: id, Buckets: spec.Buckets})
			if err != nil {
				return Versioned[TableRecord]{}, err
			}
			then = append(then, op)
		}
		resp, err := s.txn(ctx, g,
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(seqKey), "=", seqRev),
				clientv3.Compare(clientv3.CreateRevision(dbKey), ">", 0),
				clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			},
			then,
			[]clientv3.Op{clientv3.OpGet(dbKey, clientv3.WithCountOnly()), clientv3.OpGet(key, clientv3.WithCountOnly())})
		switch {
		case failed(err) && count(resp, 0) == 0:
			return Versioned[TableRecord]{}, fmt.Errorf("%w: database %s", ErrNotFound, spec.Database)
		case failed(err) && count(resp, 1) > 0:
			return Versioned[TableRecord]{}, fmt.Errorf("%w: table %s", ErrExists, what)
		case failed(err):
			continue // the sequence moved: another create took id
		case err != nil:
			return Versioned[TableRecord]{}, fmt.Errorf("meta: create table %s: %w", what, err)
		}
		return Versioned[TableRecord]{Value: rec, Rev: resp.Header.Revision}, nil
	}
}

// GetTable reads a table; ErrNotFound if it does not exist. A table being
// dropped is returned with Dropping set.
func (s *Store) GetTable(ctx context.Context, db, name string) (Versioned[TableRecord], error) {
	return get[TableRecord](ctx, s, s.k.table(db, name), "table "+db+"."+name)
}

// ListTables returns the tables of a database, by name, or of every
// database with db "", by database and name. Tables being dropped are
// included, with Dropping set.
func (s *Store) ListTables(ctx context.Context, db string) ([]Versioned[TableRecord], error) {
	ts, _, err := list[TableRecord](ctx, s, s.k.tables(db), listPage)
	return ts, err
}

// DropTable removes a table and everything kept under its id: partitions,
// assignments, snapshot registry entries and snapshot id sequences. It
// fails with ErrLoading while the table or one of its partitions is
// LOADING or carries a bulk-load id.
//
// It runs in bounded steps: mark the record Dropping and delete the table's
// assignment (one transaction; from then on no partition, snapshot or
// snapshot id can be added), delete the keys under the id in batches of
// sweepBatch, then delete the record. Each step is guarded and conditional
// on the marked record, and a drop that was interrupted is finished by
// calling DropTable again.
func (s *Store) DropTable(ctx context.Context, g Guard, db, name string) error {
	return s.DropTableID(ctx, g, db, name, 0)
}

// DropTableID is DropTable of the table of that name whose id is id, as
// the caller read it (0: the one there when it is called); ErrNotFound if
// another table of the name is there instead. Once begun, a drop drops
// only the table it began with: after a concurrent step it reads the
// table again by name, and a table created again under the name since
// (a new id) means its own is gone.
func (s *Store) DropTableID(ctx context.Context, g Guard, db, name string, id int64) error {
	key := s.k.table(db, name)
	for i := 0; ; i++ {
		cur, err := s.GetTable(ctx, db, name)
		other := err == nil && id != 0 && cur.Value.ID != id
		switch {
		case i > 0 && (errors.Is(err, ErrNotFound) || other):
			return nil // finished by a concurrent drop
		case other:
			return fmt.Errorf("%w: table %s.%s of id %d (the table of that name now has id %d)", ErrNotFound, db, name, id, cur.Value.ID)
		case err != nil:
			return err
		}
		id = cur.Value.ID
		if err = s.dropTable(ctx, g, key, cur); !failed(err) {
			return err
		}
	}
}

func (s *Store) dropTable(ctx context.Context, g Guard, key string, cur Versioned[TableRecord]) error {
	rec, rev := cur.Value, cur.Rev
	what := rec.Database + "." + rec.Name
	if !rec.Dropping {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
		if rec.Partitioned() {
			parts, at, err := list[PartitionRecord](ctx, s, s.k.partitions(rec.ID), listPage)
			if err != nil {
				return err
			}
			for _, p := range parts {
				if busy(p.Value.DataState, p.Value.BulkLoadID) {
					return &LoadingError{What: "table " + what + " partition " + p.Value.Name, State: p.Value.DataState, BulkLoadID: p.Value.BulkLoadID}
				}
			}
			// No partition may have changed since it was checked.
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k.partitions(rec.ID)), "<", at+1).WithPrefix())
		} else if busy(rec.DataState, rec.BulkLoadID) {
			return &LoadingError{What: "table " + what, State: rec.DataState, BulkLoadID: rec.BulkLoadID}
		}
		rec.Dropping, rec.ModifiedMs = true, s.nowMs()
		op, err := put(key, rec)
		if err != nil {
			return err
		}
		dop, err := put(s.k.dropped(rec.Target()), DroppedData{Version: RecordVersion, TableID: rec.ID, Dir: rec.SnapshotTarget().Dir(), DroppedMs: rec.ModifiedMs})
		if err != nil {
			return err
		}
		ops := []clientv3.Op{op, clientv3.OpDelete(s.k.assignment(rec.Target())), dop}
		if rec.Partitioned() {
			// The partitions' assignments go with the mark too: they are
			// what snapshot ids, snapshots and assignment writes check,
			// and what tablet servers serve by.
			ops = append(ops, clientv3.OpDelete(s.k.assignment(rec.Target())+"/", clientv3.WithPrefix()))
		}
		resp, err := s.txn(ctx, g, cmps, ops, nil)
		if err != nil {
			return fmt.Errorf("meta: drop table %s: mark dropping: %w", what, err)
		}
		rev = resp.Header.Revision
		if err := s.afterMark(); err != nil {
			return err
		}
	}
	for _, prefix := range s.k.tableChildren(rec.ID) {
		if err := s.sweep(ctx, g, prefix, key, rev); err != nil {
			return fmt.Errorf("meta: drop table %s: %w", what, err)
		}
	}
	_, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
	if err != nil {
		return fmt.Errorf("meta: drop table %s: delete record: %w", what, err)
	}
	return nil
}

// busy reports whether a target's data state forbids dropping it.
func busy(state DataState, bulkLoadID string) bool { return state != Active || bulkLoadID != "" }

// afterMark runs the test hook between marking a drop and sweeping.
func (s *Store) afterMark() error {
	if s.testAfterMark != nil {
		return s.testAfterMark()
	}
	return nil
}

// CreatePartition allocates the next partition id and writes the partition
// record (ACTIVE) and its initial assignment (one entry per bucket of the
// table) in one transaction. The name must be canonical for the table's
// partition keys (kv.ValidatePartitionName and Table.ParsePartitionName).
// It fails with ErrNotFound if the table does not exist or is being
// dropped, ErrInvalid if it is not partitioned, ErrExists if the partition
// exists.
func (s *Store) CreatePartition(ctx context.Context, g Guard, db, table, partition string, buckets []BucketAssignment) (Versioned[PartitionRecord], error) {
	what := db + "." + table + " partition " + partition
	if err := kv.ValidatePartitionName(partition); err != nil {
		return Versioned[PartitionRecord]{}, fmt.Errorf("%w: %s: %w", ErrInvalid, what, err)
	}
	tkey, seqKey := s.k.table(db, table), s.k.seqPartition()
	for {
		tcur, err := s.livePartitionedTable(ctx, db, table)
		if err != nil {
			return Versioned[PartitionRecord]{}, err
		}
		trec := tcur.Value
		t, err := kv.NewTable(trec.Schema)
		if err != nil {
			return Versioned[PartitionRecord]{}, fmt.Errorf("%w: table %s.%s: %w", ErrCorrupt, db, table, err)
		}
		if _, err := t.ParsePartitionName(partition); err != nil {
			return Versioned[PartitionRecord]{}, fmt.Errorf("%w: %s: %w", ErrInvalid, what, err)
		}
		if msg := checkBuckets(buckets, t.Buckets(), trec.ReplicationFactor); msg != "" {
			return Versioned[PartitionRecord]{}, fmt.Errorf("%w: %s: assignment: %s", ErrInvalid, what, msg)
		}
		id, seqRev, err := s.readSeq(ctx, seqKey)
		if err != nil {
			return Versioned[PartitionRecord]{}, err
		}
		now := s.nowMs()
		rec := PartitionRecord{Version: RecordVersion, ID: id, TableID: trec.ID, Name: partition, DataState: Active, CreatedMs: now, ModifiedMs: now}
		key := s.k.partition(trec.ID, partition)
		recOp, err := put(key, rec)
		if err != nil {
			return Versioned[PartitionRecord]{}, err
		}
		aOp, err := put(s.k.assignment(rec.Target()), Assignment{Version: RecordVersion, TableID: trec.ID, PartitionID: id, Buckets: buckets})
		if err != nil {
			return Versioned[PartitionRecord]{}, err
		}
		resp, err := s.txn(ctx, g,
			[]clientv3.Cmp{
				clientv3.Compare(clientv3.ModRevision(seqKey), "=", seqRev),
				clientv3.Compare(clientv3.ModRevision(tkey), "=", tcur.Rev),
				clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			},
			[]clientv3.Op{clientv3.OpPut(seqKey, seqValue(id+1)), recOp, aOp},
			[]clientv3.Op{clientv3.OpGet(key, clientv3.WithCountOnly())})
		switch {
		case failed(err) && count(resp, 0) > 0:
			return Versioned[PartitionRecord]{}, fmt.Errorf("%w: %s", ErrExists, what)
		case failed(err):
			continue // the sequence or the table moved: read again
		case err != nil:
			return Versioned[PartitionRecord]{}, fmt.Errorf("meta: create %s: %w", what, err)
		}
		return Versioned[PartitionRecord]{Value: rec, Rev: resp.Header.Revision}, nil
	}
}

// livePartitionedTable reads a partitioned table that is not being dropped.
func (s *Store) livePartitionedTable(ctx context.Context, db, table string) (Versioned[TableRecord], error) {
	cur, err := s.GetTable(ctx, db, table)
	switch {
	case err != nil:
		return cur, err
	case cur.Value.Dropping:
		return cur, fmt.Errorf("%w: table %s.%s is being dropped", ErrNotFound, db, table)
	case !cur.Value.Partitioned():
		return cur, fmt.Errorf("%w: table %s.%s is not partitioned", ErrInvalid, db, table)
	}
	return cur, nil
}

// GetPartition reads a partition of a table; ErrNotFound if it does not
// exist. A partition being dropped is returned with Dropping set.
func (s *Store) GetPartition(ctx context.Context, tableID int64, name string) (Versioned[PartitionRecord], error) {
	return get[PartitionRecord](ctx, s, s.k.partition(tableID, name), fmt.Sprintf("partition %s of table id %d", name, tableID))
}

// ListPartitions returns the partitions of a table, by name.
func (s *Store) ListPartitions(ctx context.Context, tableID int64) ([]Versioned[PartitionRecord], error) {
	ps, _, err := list[PartitionRecord](ctx, s, s.k.partitions(tableID), listPage)
	return ps, err
}

// DropPartition removes a partition, its assignment, snapshot registry
// entries and snapshot id sequences, in bounded steps like DropTable (mark
// Dropping and delete the assignment, sweep, delete the record); calling it
// again finishes an interrupted drop. It fails with ErrLoading while the
// partition is LOADING or carries a bulk-load id.
func (s *Store) DropPartition(ctx context.Context, g Guard, db, table, partition string) error {
	return s.DropPartitionID(ctx, g, db, table, partition, 0, 0)
}

// DropPartitionID is DropPartition of the partition whose table has id
// tableID and which has id partitionID, as the caller read them (0: those
// there when it is called); ErrNotFound if the table or partition of those
// names has another id. Like DropTableID, a drop never goes on to a
// partition (or table) created again under the name while it runs.
func (s *Store) DropPartitionID(ctx context.Context, g Guard, db, table, partition string, tableID, partitionID int64) error {
	for i := 0; ; i++ {
		tcur, err := s.livePartitionedTable(ctx, db, table)
		if err == nil && tableID != 0 && tcur.Value.ID != tableID {
			if i > 0 {
				return nil // the table went, and the partition with it
			}
			return fmt.Errorf("%w: table %s.%s of id %d (the table of that name now has id %d)", ErrNotFound, db, table, tableID, tcur.Value.ID)
		}
		if err != nil {
			return err
		}
		tableID = tcur.Value.ID
		key := s.k.partition(tcur.Value.ID, partition)
		cur, err := s.GetPartition(ctx, tcur.Value.ID, partition)
		other := err == nil && partitionID != 0 && cur.Value.ID != partitionID
		switch {
		case i > 0 && (errors.Is(err, ErrNotFound) || other):
			return nil // finished by a concurrent drop
		case other:
			return fmt.Errorf("%w: partition %s of table %s.%s of id %d (the partition of that name now has id %d)", ErrNotFound, partition, db, table, partitionID, cur.Value.ID)
		case err != nil:
			return err
		}
		partitionID = cur.Value.ID
		if err = s.dropPartition(ctx, g, key, cur, tcur.Value); !failed(err) {
			return err
		}
	}
}

func (s *Store) dropPartition(ctx context.Context, g Guard, key string, cur Versioned[PartitionRecord], table TableRecord) error {
	rec, rev := cur.Value, cur.Rev
	what := fmt.Sprintf("partition %s of table id %d", rec.Name, rec.TableID)
	if !rec.Dropping {
		if busy(rec.DataState, rec.BulkLoadID) {
			return &LoadingError{What: what, State: rec.DataState, BulkLoadID: rec.BulkLoadID}
		}
		rec.Dropping, rec.ModifiedMs = true, s.nowMs()
		op, err := put(key, rec)
		if err != nil {
			return err
		}
		st := table.SnapshotTarget()
		st.Partition, st.PartitionID = rec.Name, rec.ID
		dop, err := put(s.k.dropped(rec.Target()), DroppedData{Version: RecordVersion, TableID: rec.TableID, PartitionID: rec.ID, Dir: st.Dir(), DroppedMs: rec.ModifiedMs})
		if err != nil {
			return err
		}
		resp, err := s.txn(ctx, g,
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
			[]clientv3.Op{op, clientv3.OpDelete(s.k.assignment(rec.Target())), dop}, nil)
		if err != nil {
			return fmt.Errorf("meta: drop %s: mark dropping: %w", what, err)
		}
		rev = resp.Header.Revision
		if err := s.afterMark(); err != nil {
			return err
		}
	}
	for _, prefix := range []string{s.k.snapshotTargets(rec.Target()), s.k.seqSnapshots(rec.Target())} {
		if err := s.sweep(ctx, g, prefix, key, rev); err != nil {
			return fmt.Errorf("meta: drop %s: %w", what, err)
		}
	}
	_, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
	if err != nil {
		return fmt.Errorf("meta: drop %s: delete record: %w", what, err)
	}
	return nil
}
