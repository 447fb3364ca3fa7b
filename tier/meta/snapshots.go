package meta

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/kv"
)

// The snapshot registry. Snapshot ids come from one sequence per bucket,
// shared by a tablet server's own snapshots and bulk-load snapshots, and
// start at 1. Every registry write requires the target's assignment key,
// which exists from the target's creation until its drop begins, so
// nothing is added to a target that is being dropped.

func checkBucket(t Target, bucket int) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if bucket < 0 || bucket >= kv.MaxBuckets {
		return fmt.Errorf("%w: %s bucket %d (want 0..%d)", ErrInvalid, t, bucket, kv.MaxBuckets-1)
	}
	return nil
}

// NextSnapshotID allocates the next snapshot id of a bucket. It fails with
// ErrNotFound if the target has no assignment (dropped, or being dropped).
// An id is allocated once the call succeeds; one lost to a failure after
// that is only a gap.
func (s *Store) NextSnapshotID(ctx context.Context, g Guard, t Target, bucket int) (int64, error) {
	if err := checkBucket(t, bucket); err != nil {
		return 0, err
	}
	ids, err := s.allocateSnapshotIDs(ctx, g, t, []int{bucket})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// AllocateSnapshotIDs allocates one snapshot id for each of buckets
// 0..buckets-1 of a target, as bulk-load Begin needs, in transactions of
// snapshotIDBatch buckets. It is not idempotent: calling it again
// allocates new ids, so persist the result before relying on it.
func (s *Store) AllocateSnapshotIDs(ctx context.Context, g Guard, t Target, buckets int) ([]int64, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if buckets < 1 || buckets > kv.MaxBuckets {
		return nil, fmt.Errorf("%w: allocate snapshot ids of %s: %d buckets (want 1..%d)", ErrInvalid, t, buckets, kv.MaxBuckets)
	}
	ids := make([]int64, 0, buckets)
	batch := make([]int, 0, snapshotIDBatch)
	for b := 0; b < buckets; b += snapshotIDBatch {
		batch = batch[:0]
		for i := b; i < min(b+snapshotIDBatch, buckets); i++ {
			batch = append(batch, i)
		}
		got, err := s.allocateSnapshotIDs(ctx, g, t, batch)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// allocateSnapshotIDs advances the sequences of the given buckets in one
// guarded compare-and-swap transaction, retried while another allocation
// moves one of them.
func (s *Store) allocateSnapshotIDs(ctx context.Context, g Guard, t Target, buckets []int) ([]int64, error) {
	akey := s.k.assignment(t)
	reads := make([]clientv3.Op, len(buckets))
	for i, b := range buckets {
		reads[i] = clientv3.OpGet(s.k.seqSnapshot(t, b))
	}
	for {
		rresp, err := s.cli.Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return nil, fmt.Errorf("meta: read snapshot id sequences of %s: %w", t, err)
		}
		ids := make([]int64, len(buckets))
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(akey), ">", 0)}
		then := make([]clientv3.Op, len(buckets))
		for i, r := range rresp.Responses {
			key, rev := s.k.seqSnapshot(t, buckets[i]), int64(0)
			ids[i] = 1
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) > 0 {
				if ids[i], err = parseSeqValue(key, kvs[0].Value); err != nil {
					return nil, err
				}
				rev = kvs[0].ModRevision
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
			then[i] = clientv3.OpPut(key, seqValue(ids[i]+1))
		}
		resp, err := s.txn(ctx, g, cmps, then, []clientv3.Op{clientv3.OpGet(akey, clientv3.WithCountOnly())})
		switch {
		case failed(err) && count(resp, 0) == 0:
			return nil, fmt.Errorf("%w: %s has no assignment (dropped or being dropped)", ErrNotFound, t)
		case failed(err):
			continue // another allocation moved a sequence
		case err != nil:
			return nil, fmt.Errorf("meta: allocate snapshot ids of %s: %w", t, err)
		}
		return ids, nil
	}
}

// AddSnapshot registers a completed snapshot of a bucket at its snapshot
// id and returns the key's mod revision. The entry is create-only: if it
// exists with the same bytes AddSnapshot succeeds again (a repeated
// adoption), with other bytes it fails with ErrConflict. The id must have
// been allocated by NextSnapshotID or AllocateSnapshotIDs (ErrInvalid
// otherwise), and the target must have its assignment (ErrNotFound). A zero
// Version is written as RecordVersion.
func (s *Store) AddSnapshot(ctx context.Context, g Guard, t Target, bucket int, snap BucketSnapshot) (int64, error) {
	if snap.Version == 0 {
		snap.Version = RecordVersion
	}
	if err := checkBucket(t, bucket); err != nil {
		return 0, err
	}
	if snap.SnapshotID < 1 {
		return 0, fmt.Errorf("%w: %s bucket %d: snapshot id %d", ErrInvalid, t, bucket, snap.SnapshotID)
	}
	b, err := Marshal(snap)
	if err != nil {
		return 0, err
	}
	key, akey, seq := s.k.snapshot(t, bucket, snap.SnapshotID), s.k.assignment(t), s.k.seqSnapshot(t, bucket)
	resp, err := s.txn(ctx, g,
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(akey), ">", 0),
			clientv3.Compare(clientv3.Value(seq), ">", seqValue(snap.SnapshotID)), // allocated
		},
		[]clientv3.Op{clientv3.OpPut(key, string(b))},
		[]clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(akey, clientv3.WithCountOnly())})
	what := fmt.Sprintf("snapshot %d of %s bucket %d", snap.SnapshotID, t, bucket)
	if failed(err) {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			if bytes.Equal(kvs[0].Value, b) {
				return kvs[0].ModRevision, nil
			}
			return 0, fmt.Errorf("%w: %s is registered as %s, not %s", ErrConflict, what, kvs[0].Value, b)
		}
		if count(resp, 1) == 0 {
			return 0, fmt.Errorf("%w: %s has no assignment (dropped or being dropped)", ErrNotFound, t)
		}
		return 0, fmt.Errorf("%w: %s: the id was never allocated", ErrInvalid, what)
	}
	if err != nil {
		return 0, fmt.Errorf("meta: add %s: %w", what, err)
	}
	return resp.Header.Revision, nil
}

// ListSnapshots returns the registered snapshots of a bucket by id.
func (s *Store) ListSnapshots(ctx context.Context, t Target, bucket int) ([]Versioned[BucketSnapshot], error) {
	if err := checkBucket(t, bucket); err != nil {
		return nil, err
	}
	var out []Versioned[BucketSnapshot]
	if _, err := s.scan(ctx, s.k.snapshots(t, bucket), listPage, func(kv *mvccpb.KeyValue) error {
		v, err := s.decodeSnapshot(kv)
		out = append(out, v)
		return err
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// LatestSnapshot returns the registered snapshot of a bucket with the
// highest id; ErrNotFound if there is none.
func (s *Store) LatestSnapshot(ctx context.Context, t Target, bucket int) (Versioned[BucketSnapshot], error) {
	if err := checkBucket(t, bucket); err != nil {
		return Versioned[BucketSnapshot]{}, err
	}
	prefix := s.k.snapshots(t, bucket)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return Versioned[BucketSnapshot]{}, fmt.Errorf("meta: read latest snapshot of %s bucket %d: %w", t, bucket, err)
	}
	if len(resp.Kvs) == 0 {
		return Versioned[BucketSnapshot]{}, fmt.Errorf("%w: no snapshot of %s bucket %d", ErrNotFound, t, bucket)
	}
	return s.decodeSnapshot(resp.Kvs[0])
}

// DeleteSnapshot removes a snapshot from the registry; ErrNotFound if it is
// not registered.
func (s *Store) DeleteSnapshot(ctx context.Context, g Guard, t Target, bucket int, snapshotID int64) error {
	if err := checkBucket(t, bucket); err != nil {
		return err
	}
	key := s.k.snapshot(t, bucket, snapshotID)
	what := fmt.Sprintf("snapshot %d of %s bucket %d", snapshotID, t, bucket)
	_, err := s.txn(ctx, g, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}, []clientv3.Op{clientv3.OpDelete(key)}, nil)
	switch {
	case failed(err):
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case err != nil:
		return fmt.Errorf("meta: delete %s: %w", what, err)
	}
	return nil
}

// decodeSnapshot decodes a registry entry and checks that its key names
// its id.
func (s *Store) decodeSnapshot(kv *mvccpb.KeyValue) (Versioned[BucketSnapshot], error) {
	v, err := decodeKV[BucketSnapshot](kv)
	if err == nil && !strings.HasSuffix(string(kv.Key), "/"+seqValue(v.Value.SnapshotID)) {
		err = fmt.Errorf("%w: key %s holds snapshot %d", ErrCorrupt, kv.Key, v.Value.SnapshotID)
	}
	return v, err
}
