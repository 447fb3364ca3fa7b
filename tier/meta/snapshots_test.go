package meta_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/thawdb/thaw/tier/meta"
)

func TestSnapshotRegistry(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tg := e.createTable("d", "t", 4, false).Value.Target()

	// One sequence per bucket, from 1.
	for _, want := range []struct {
		bucket int
		id     int64
	}{{0, 1}, {0, 2}, {1, 1}, {0, 3}, {3, 1}} {
		if id, err := e.s.NextSnapshotID(ctx, e.g, tg, want.bucket); err != nil || id != want.id {
			t.Fatalf("next id of bucket %d: %d, %v; want %d", want.bucket, id, err, want.id)
		}
	}
	ids, err := e.s.AllocateSnapshotIDs(ctx, e.g, tg, 4)
	if err != nil || !slices.Equal(ids, []int64{4, 2, 1, 2}) {
		t.Fatalf("allocate: %v, %v", ids, err)
	}

	s2 := meta.BucketSnapshot{SnapshotID: 2, LogOffset: 100, MetadataPath: "file:///remote/kv/d/t-1/0/snap-2/_METADATA"}
	rev, err := e.s.AddSnapshot(ctx, e.g, tg, 0, s2)
	if err != nil {
		t.Fatal(err)
	}
	// A repeated adoption with the same bytes succeeds and changes nothing.
	if again, err := e.s.AddSnapshot(ctx, e.g, tg, 0, s2); err != nil || again != rev {
		t.Fatalf("add the same snapshot again: %d, %v; want %d", again, err, rev)
	}
	before := e.dump()
	diff := s2
	diff.LogOffset = 101
	if _, err := e.s.AddSnapshot(ctx, e.g, tg, 0, diff); !errors.Is(err, meta.ErrConflict) {
		t.Fatalf("add different bytes at the same id: %v", err)
	}
	for name, snap := range map[string]meta.BucketSnapshot{
		"unallocated id": {SnapshotID: 5, MetadataPath: "file:///m"},
		"id 0":           {SnapshotID: 0, MetadataPath: "file:///m"},
		"no path":        {SnapshotID: 1},
		"bad version":    {Version: 2, SnapshotID: 1, MetadataPath: "file:///m"},
	} {
		if _, err := e.s.AddSnapshot(ctx, e.g, tg, 0, snap); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("add snapshot with %s: %v; want ErrInvalid", name, err)
		}
	}
	if _, err := e.s.AddSnapshot(ctx, e.g, meta.Target{TableID: 99}, 0, s2); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("add to an unknown target: %v", err)
	}
	if _, err := e.s.NextSnapshotID(ctx, e.g, meta.Target{TableID: 99}, 0); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("snapshot id of an unknown target: %v", err)
	}
	if _, err := e.s.AddSnapshot(ctx, e.g, tg, 4096, s2); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("add to bucket 4096: %v", err)
	}
	e.unchanged(before, "rejected snapshots")

	// Ids order numerically, not as text: 10 after 2.
	for range 6 {
		if _, err := e.s.NextSnapshotID(ctx, e.g, tg, 0); err != nil {
			t.Fatal(err)
		}
	}
	s10 := meta.BucketSnapshot{Version: 1, SnapshotID: 10, LogOffset: 500, MetadataPath: "file:///m10"}
	if _, err := e.s.AddSnapshot(ctx, e.g, tg, 0, s10); err != nil {
		t.Fatal(err)
	}
	s2.Version = 1
	list, err := e.s.ListSnapshots(ctx, tg, 0)
	if err != nil || len(list) != 2 || list[0].Value != s2 || list[1].Value != s10 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if latest, err := e.s.LatestSnapshot(ctx, tg, 0); err != nil || latest != list[1] {
		t.Fatalf("latest: %+v, %v", latest, err)
	}
	if _, err := e.s.LatestSnapshot(ctx, tg, 1); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("latest of a bucket without snapshots: %v", err)
	}
	if err := e.s.DeleteSnapshot(ctx, e.g, tg, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteSnapshot(ctx, e.g, tg, 0, 10); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if latest, err := e.s.LatestSnapshot(ctx, tg, 0); err != nil || latest.Value != s2 {
		t.Fatalf("latest after delete: %+v, %v", latest, err)
	}
	// The stored bytes are Fluss's.
	resp, err := e.cli.Get(ctx, e.prefix+"/snapshots/1/0/00000000000000000002")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != `{"version":1,"snapshot_id":2,"log_offset":100,"metadata_path":"file:///remote/kv/d/t-1/0/snap-2/_METADATA"}` {
		t.Fatalf("stored %v, %v", resp, err)
	}
}

// TestConcurrentSnapshotIDs allocates from many goroutines: no id is
// handed out twice.
func TestConcurrentSnapshotIDs(t *testing.T) {
	e := newEnv(t)
	e.createDB("d")
	tg := e.createTable("d", "t", 2, false).Value.Target()
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 5 {
				id, err := e.s.NextSnapshotID(t.Context(), e.g, tg, 1)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("id %d handed out twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id := int64(1); id <= 30; id++ {
		if !seen[id] {
			t.Fatalf("ids %v: %d missing", seen, id)
		}
	}
}

// TestLargeTarget runs a 4096-bucket, three-replica target through the
// operations that touch every bucket, within etcd's transaction limits.
func TestLargeTarget(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	spec := tableSpec("d", "big", 4096, false)
	spec.Buckets = assign(4096, "tablet-server-0001", "tablet-server-0002", "tablet-server-0003", "tablet-server-0004")
	tbl, err := e.s.CreateTable(ctx, e.g, spec)
	if err != nil {
		t.Fatal(err)
	}
	tg := tbl.Value.Target()
	ids, err := e.s.AllocateSnapshotIDs(ctx, e.g, tg, 4096)
	if err != nil || len(ids) != 4096 || ids[0] != 1 || ids[4095] != 1 {
		t.Fatalf("allocate 4096: %d ids, %v", len(ids), err)
	}
	for b := range 4096 {
		if b%512 == 0 { // a sample: every bucket costs a round trip
			if _, err := e.s.AddSnapshot(ctx, e.g, tg, b, meta.BucketSnapshot{SnapshotID: ids[b], MetadataPath: "file:///m"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := e.s.GetAssignment(ctx, tg)
	if err != nil || len(a.Value.Buckets) != 4096 {
		t.Fatalf("assignment: %d buckets, %v", len(a.Value.Buckets), err)
	}
	a.Value.Buckets[4095].LeaderEpoch++
	if _, err := e.s.PutAssignment(ctx, e.g, a.Value, a.Rev); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DropTable(ctx, e.g, "d", "big"); err != nil {
		t.Fatal(err)
	}
	if got := e.keys(); !slices.Equal(got, []string{"/databases/d", "/dropped/1", "/seq/table"}) {
		t.Fatalf("after drop: %d keys, first %v", len(got), got[:min(5, len(got))])
	}
}
