package meta

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/bulkload"
)

// Bulk-load transaction records (bulkload.Record, its own strict JSON) are
// kept at {p}/bulkload/txn/{tableId}[/p{partitionId}]/{txnId}. Every write
// is one guarded etcd transaction (the coordinator epoch) that compares
// the record's mod revision (or its absence, to create it), optionally
// the target's assignment revision and registration revision, and changes
// the target's registration (SetDataState, which compares its revision)
// or registers snapshots in the same transaction.

// BulkLoadRegistration changes the target's registration together with a
// record write: the data state and bulk-load id to set, and the mod
// revision of the registration (table record of a non-partitioned table,
// else partition record) the change is based on.
type BulkLoadRegistration struct {
	Target     TargetName
	Rev        int64
	State      DataState
	BulkLoadID string
}

// BulkLoadAdoption is one bucket snapshot a record write adds to the
// snapshot registry.
type BulkLoadAdoption struct {
	Bucket   int
	Snapshot BucketSnapshot
}

// MaxBulkLoadAdoptions bounds the adoptions of one write: each costs one
// comparison and one put of the transaction.
const MaxBulkLoadAdoptions = 64

// BulkLoadWrite is one persisted step of a bulk-load transaction.
type BulkLoadWrite struct {
	// Record is the record to write, under the key its target and id name.
	Record bulkload.Record
	// ExpectRev is the record's mod revision the write is based on; 0
	// creates the record, which must not exist.
	ExpectRev int64
	// AssignmentRev, when positive, must be the mod revision of the
	// target's assignment: the holders the step relied on have not moved.
	AssignmentRev int64
	// Registration, when set, changes the target's registration in the
	// same transaction (SetDataState with the record write as If/Then).
	Registration *BulkLoadRegistration
	// RegistrationRev, when positive and Registration is nil, must be the
	// mod revision of the target's registration (the table record of a
	// non-partitioned table, else the partition record): the fence the
	// step relies on has not moved.
	RegistrationRev int64
	// Adopt registers these bucket snapshots in the same transaction:
	// each entry is created, or must already hold exactly these bytes (a
	// repeated adoption). Not with Registration; at most
	// MaxBulkLoadAdoptions.
	Adopt []BulkLoadAdoption
}

// BulkLoadTarget returns the target a record is of.
func BulkLoadTarget(r *bulkload.Record) Target {
	return Target{TableID: r.TableID, PartitionID: r.PartitionID}
}

// PutBulkLoad performs w in one guarded etcd transaction and returns the
// revision it applied at (the new mod revision of the record, and of the
// registration and adopted entries it wrote). Errors:
// fencing.ErrPreconditionFailed (the record, registration or assignment
// moved, the record exists on create, or a registry entry appeared),
// fencing.ErrNotLeader, ErrInvalid (a record bulkload.EncodeRecord refuses,
// a bad adoption), ErrConflict (a registry entry exists with other bytes),
// ErrNotFound (the target or its assignment is gone). After any other
// error the outcome is unknown.
func (s *Store) PutBulkLoad(ctx context.Context, g Guard, w BulkLoadWrite) (int64, error) {
	b, err := bulkload.EncodeRecord(w.Record)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	t := BulkLoadTarget(&w.Record)
	if err := t.Validate(); err != nil {
		return 0, err
	}
	key := s.k.bulkLoad(t, w.Record.TxnID)
	what := fmt.Sprintf("bulk load %s of %s", w.Record.TxnID, t)
	switch {
	case w.ExpectRev < 0 || w.AssignmentRev < 0 || w.RegistrationRev < 0:
		return 0, fmt.Errorf("%w: write %s: revisions %d, %d and %d", ErrInvalid, what, w.ExpectRev, w.AssignmentRev, w.RegistrationRev)
	case w.Registration != nil && len(w.Adopt) > 0:
		return 0, fmt.Errorf("%w: write %s: a registration change and adoptions in one write", ErrInvalid, what)
	case len(w.Adopt) > MaxBulkLoadAdoptions:
		return 0, fmt.Errorf("%w: write %s: %d adoptions, limit %d", ErrInvalid, what, len(w.Adopt), MaxBulkLoadAdoptions)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", w.ExpectRev)}
	if w.ExpectRev == 0 {
		cmps[0] = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	akey := s.k.assignment(t)
	if w.AssignmentRev > 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(akey), "=", w.AssignmentRev))
	}
	put := clientv3.OpPut(key, string(b))

	if r := w.Registration; r != nil {
		rev, err := s.SetDataState(ctx, g, DataStateChange{
			Target: r.Target, Rev: r.Rev, State: r.State, BulkLoadID: r.BulkLoadID,
			If: cmps, Then: []clientv3.Op{put},
		})
		if err != nil {
			return 0, fmt.Errorf("meta: write %s: %w", what, err)
		}
		return rev, nil
	}

	if w.RegistrationRev > 0 {
		rkey := s.k.table(w.Record.Target.Database, w.Record.Target.Table)
		if w.Record.Target.Partition != "" {
			rkey = s.k.partition(w.Record.TableID, w.Record.Target.Partition)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(rkey), "=", w.RegistrationRev))
	}
	ops := []clientv3.Op{put}
	if len(w.Adopt) > 0 {
		if w.AssignmentRev == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(akey), ">", 0))
		}
		adoptCmps, adoptOps, err := s.adoptions(ctx, t, w.Adopt)
		if err != nil {
			return 0, fmt.Errorf("meta: write %s: %w", what, err)
		}
		cmps, ops = append(cmps, adoptCmps...), append(ops, adoptOps...)
	}
	resp, err := s.txn(ctx, g, cmps, ops, []clientv3.Op{clientv3.OpGet(akey, clientv3.WithCountOnly())})
	switch {
	case failed(err) && count(resp, 0) == 0:
		return 0, fmt.Errorf("%w: write %s: the target has no assignment (dropped or being dropped)", ErrNotFound, what)
	case err != nil:
		return 0, fmt.Errorf("meta: write %s: %w", what, err)
	}
	return resp.Header.Revision, nil
}

// adoptions returns the comparisons and puts that register adopt: an
// absent entry is created (compared absent), an existing identical one is
// kept (compared unchanged), an existing different one is ErrConflict.
func (s *Store) adoptions(ctx context.Context, t Target, adopt []BulkLoadAdoption) ([]clientv3.Cmp, []clientv3.Op, error) {
	keys := make([]string, len(adopt))
	vals := make([][]byte, len(adopt))
	reads := make([]clientv3.Op, 2*len(adopt)) // the entries, then their buckets' id sequences
	seen := make(map[string]bool, len(adopt))
	for i, a := range adopt {
		snap := a.Snapshot
		if snap.Version == 0 {
			snap.Version = RecordVersion
		}
		if err := checkBucket(t, a.Bucket); err != nil {
			return nil, nil, err
		}
		if snap.SnapshotID < 1 {
			return nil, nil, fmt.Errorf("%w: adopt bucket %d: snapshot id %d", ErrInvalid, a.Bucket, snap.SnapshotID)
		}
		b, err := Marshal(snap)
		if err != nil {
			return nil, nil, err
		}
		keys[i], vals[i] = s.k.snapshot(t, a.Bucket, snap.SnapshotID), b
		if seen[keys[i]] {
			return nil, nil, fmt.Errorf("%w: adopt bucket %d snapshot %d twice", ErrInvalid, a.Bucket, snap.SnapshotID)
		}
		seen[keys[i]] = true
		reads[i] = clientv3.OpGet(keys[i])
		reads[len(adopt)+i] = clientv3.OpGet(s.k.seqSnapshot(t, a.Bucket))
	}
	rresp, err := s.cli.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("read registry entries: %w", err)
	}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for i, r := range rresp.Responses[:len(adopt)] {
		// Only an id the bucket's sequence handed out may be registered, as
		// AddSnapshot requires: a higher one would be handed out again and
		// would hide the newer snapshots taken before that.
		seq := s.k.seqSnapshot(t, adopt[i].Bucket)
		next := int64(1)
		if kvs := rresp.Responses[len(adopt)+i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if next, err = parseSeqValue(seq, kvs[0].Value); err != nil {
				return nil, nil, err
			}
		}
		if id := adopt[i].Snapshot.SnapshotID; id >= next {
			return nil, nil, fmt.Errorf("%w: adopt snapshot %d of %s bucket %d: the id was never allocated", ErrInvalid, id, t, adopt[i].Bucket)
		}
		kvs := r.GetResponseRange().GetKvs()
		switch {
		case len(kvs) == 0:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0))
			ops = append(ops, clientv3.OpPut(keys[i], string(vals[i])))
		case bytes.Equal(kvs[0].Value, vals[i]):
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keys[i]), "=", kvs[0].ModRevision))
		default:
			return nil, nil, fmt.Errorf("%w: registry entry %s holds %s, not %s", ErrConflict, keys[i], kvs[0].Value, vals[i])
		}
	}
	return cmps, ops, nil
}

// GetBulkLoad reads one transaction record; ErrNotFound if there is none.
func (s *Store) GetBulkLoad(ctx context.Context, t Target, txnID string) (Versioned[bulkload.Record], error) {
	if err := t.Validate(); err != nil {
		return Versioned[bulkload.Record]{}, err
	}
	key := s.k.bulkLoad(t, txnID)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Versioned[bulkload.Record]{}, fmt.Errorf("meta: read bulk load %s of %s: %w", txnID, t, err)
	}
	if len(resp.Kvs) == 0 {
		return Versioned[bulkload.Record]{}, fmt.Errorf("%w: bulk load %s of %s", ErrNotFound, txnID, t)
	}
	return s.decodeBulkLoad(resp.Kvs[0])
}

// ListBulkLoads returns every transaction record, in key order (by table
// id, partition id, transaction id), read at one revision.
func (s *Store) ListBulkLoads(ctx context.Context) ([]Versioned[bulkload.Record], error) {
	return s.listBulkLoads(ctx, s.k.bulkLoads(), func(Target) bool { return true })
}

// ListTargetBulkLoads returns the transaction records of one target.
func (s *Store) ListTargetBulkLoads(ctx context.Context, t Target) ([]Versioned[bulkload.Record], error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return s.listBulkLoads(ctx, s.k.bulkLoadTarget(t), func(rt Target) bool { return rt == t })
}

func (s *Store) listBulkLoads(ctx context.Context, prefix string, keep func(Target) bool) ([]Versioned[bulkload.Record], error) {
	var out []Versioned[bulkload.Record]
	_, err := s.scan(ctx, prefix, listPage, func(kv *mvccpb.KeyValue) error {
		v, err := s.decodeBulkLoad(kv)
		if err != nil {
			return err
		}
		if keep(BulkLoadTarget(&v.Value)) {
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteBulkLoad deletes a transaction record if its mod revision is still
// rev (the result garbage collection). fencing.ErrPreconditionFailed if it
// moved or is gone.
func (s *Store) DeleteBulkLoad(ctx context.Context, g Guard, t Target, txnID string, rev int64) error {
	if err := t.Validate(); err != nil {
		return err
	}
	key := s.k.bulkLoad(t, txnID)
	_, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
	if err != nil {
		return fmt.Errorf("meta: delete bulk load %s of %s: %w", txnID, t, err)
	}
	return nil
}

// HasSnapshots reports whether the snapshot registry holds a snapshot of
// any bucket of a target, and the key of one if so.
func (s *Store) HasSnapshots(ctx context.Context, t Target) (bool, string, error) {
	if err := t.Validate(); err != nil {
		return false, "", err
	}
	prefix := s.k.snapshotTargets(t)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return false, "", fmt.Errorf("meta: read snapshots of %s: %w", t, err)
	}
	if len(resp.Kvs) == 0 {
		return false, "", nil
	}
	return true, strings.TrimPrefix(string(resp.Kvs[0].Key), s.k.p), nil
}

// decodeBulkLoad decodes a record and checks that its key names it.
func (s *Store) decodeBulkLoad(kv *mvccpb.KeyValue) (Versioned[bulkload.Record], error) {
	r, err := bulkload.DecodeRecord(kv.Value)
	if err != nil {
		return Versioned[bulkload.Record]{}, fmt.Errorf("%w: key %s: %w", ErrCorrupt, kv.Key, err)
	}
	if want := s.k.bulkLoad(BulkLoadTarget(&r), r.TxnID); want != string(kv.Key) {
		return Versioned[bulkload.Record]{}, fmt.Errorf("%w: key %s holds bulk load %s of %s", ErrCorrupt, kv.Key, r.TxnID, BulkLoadTarget(&r))
	}
	return Versioned[bulkload.Record]{Value: r, Rev: kv.ModRevision}, nil
}
