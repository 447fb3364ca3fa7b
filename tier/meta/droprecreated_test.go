package meta_test

import (
	"errors"
	"testing"

	"github.com/thawdb/thaw/tier/meta"
)

// TestConcurrentDropSparesRecreatedTable: two drops of d.t run at
// once (a user's DropTable and the next term's finishDrops, or a cascade).
// Drop A finishes first; the user then creates d.t again (a new table id).
// Drop B's retry loop re-reads the table by name and drops the NEW table.
func TestConcurrentDropSparesRecreatedTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	old := e.createTable("d", "t", 2, false)

	// Store B: same client, same prefix; its drop pauses after marking.
	b, err := meta.New(e.cli, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	var fresh meta.Versioned[meta.TableRecord]
	meta.SetAfterMark(b, func() error {
		meta.SetAfterMark(b, nil)
		// Drop A (another caller) finishes the drop ...
		if err := e.s.DropTable(ctx, e.g, "d", "t"); err != nil {
			t.Fatalf("drop A: %v", err)
		}
		// ... and the user creates d.t again.
		fresh = e.createTable("d", "t", 2, false)
		return nil
	})
	if err := b.DropTable(ctx, e.g, "d", "t"); err != nil {
		t.Fatalf("drop B: %v", err)
	}
	if fresh.Value.ID == old.Value.ID {
		t.Fatalf("same id")
	}
	got, err := e.s.GetTable(ctx, "d", "t")
	if err != nil {
		t.Fatalf("the re-created table d.t (id %d, created after drop A finished) was dropped by the stale drop B of id %d: %v",
			fresh.Value.ID, old.Value.ID, err)
	}
	if got.Value.ID != fresh.Value.ID || got.Value.Dropping {
		t.Fatalf("d.t is %+v, want the fresh table id %d live", got.Value, fresh.Value.ID)
	}
}

// TestConcurrentDropSparesRecreatedPartition: the same for partitions.
func TestConcurrentDropSparesRecreatedPartition(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "p", 2, true)
	old := e.createPartition("d", "p", "x", 2)

	b, err := meta.New(e.cli, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	var fresh meta.Versioned[meta.PartitionRecord]
	meta.SetAfterMark(b, func() error {
		meta.SetAfterMark(b, nil)
		if err := e.s.DropPartition(ctx, e.g, "d", "p", "x"); err != nil {
			t.Fatalf("drop A: %v", err)
		}
		fresh = e.createPartition("d", "p", "x", 2)
		return nil
	})
	if err := b.DropPartition(ctx, e.g, "d", "p", "x"); err != nil {
		t.Fatalf("drop B: %v", err)
	}
	got, err := e.s.GetPartition(ctx, old.Value.TableID, "x")
	if err != nil {
		t.Fatalf("the re-created partition x (id %d) was dropped by the stale drop of id %d: %v", fresh.Value.ID, old.Value.ID, err)
	}
	if got.Value.ID != fresh.Value.ID || got.Value.Dropping {
		t.Fatalf("partition x is %+v, want the fresh partition id %d live", got.Value, fresh.Value.ID)
	}
}

// TestFinishingADropSparesRecreatedTable: the coordinator's
// finishDrops (tier/coordinator/dropped.go) lists the half-dropped tables
// of an earlier term, then finishes each with DropTable(db, name). If a
// user finished that drop meanwhile (DropTable retried after the leader
// change) and created the table again, the by-name call drops the new one.
func TestFinishingADropSparesRecreatedTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "t", 2, false)
	crash := errors.New("crash")
	meta.SetAfterMark(e.s, func() error { return crash })
	if err := e.s.DropTable(ctx, e.g, "d", "t"); !errors.Is(err, crash) {
		t.Fatal(err)
	}
	meta.SetAfterMark(e.s, nil)
	// finishDrops lists the tables: d.t is Dropping.
	ts, err := e.s.ListTables(ctx, "")
	if err != nil || len(ts) != 1 || !ts[0].Value.Dropping {
		t.Fatalf("list: %+v %v", ts, err)
	}
	// The user's retried DropTable finishes it; the user re-creates d.t.
	if err := e.s.DropTable(ctx, e.g, "d", "t"); err != nil {
		t.Fatal(err)
	}
	fresh := e.createTable("d", "t", 2, false)
	// finishDrops gets to d.t.
	if err := e.s.DropTableID(ctx, e.g, ts[0].Value.Database, ts[0].Value.Name, ts[0].Value.ID); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("finishing the drop of a gone table: %v", err)
	}
	if got, err := e.s.GetTable(ctx, "d", "t"); err != nil || got.Value.ID != fresh.Value.ID || got.Value.Dropping {
		t.Fatalf("finishing the drop of table id %d dropped the re-created table id %d: %+v, %v", ts[0].Value.ID, fresh.Value.ID, got.Value, err)
	}

	// The same for a partition of a partitioned table.
	e.createTable("d", "p", 2, true)
	e.createPartition("d", "p", "x", 2)
	meta.SetAfterMark(e.s, func() error { return crash })
	if err := e.s.DropPartition(ctx, e.g, "d", "p", "x"); !errors.Is(err, crash) {
		t.Fatal(err)
	}
	meta.SetAfterMark(e.s, nil)
	p, err := e.s.GetTable(ctx, "d", "p")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := e.s.ListPartitions(ctx, p.Value.ID)
	if err != nil || len(ps) != 1 || !ps[0].Value.Dropping {
		t.Fatalf("partitions: %+v %v", ps, err)
	}
	if err := e.s.DropPartition(ctx, e.g, "d", "p", "x"); err != nil {
		t.Fatal(err)
	}
	freshPart := e.createPartition("d", "p", "x", 2)
	if err := e.s.DropPartitionID(ctx, e.g, "d", "p", "x", p.Value.ID, ps[0].Value.ID); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("finishing the drop of a gone partition: %v", err)
	}
	if got, err := e.s.GetPartition(ctx, p.Value.ID, "x"); err != nil || got.Value.ID != freshPart.Value.ID || got.Value.Dropping {
		t.Fatalf("finishing the drop of partition id %d dropped the re-created one id %d: %+v, %v", ps[0].Value.ID, freshPart.Value.ID, got.Value, err)
	}
}
