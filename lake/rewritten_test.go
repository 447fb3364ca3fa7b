package lake

import (
	"slices"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestRewrittenFiles: a key updated by a plain append comes newest last,
// until a copy-on-write delete of another row in the older file rewrites
// it: the rewrite takes the new snapshot's sequence number, the stale
// version is read last, and RewrittenFiles counts the file (so that a
// last-wins build can refuse, promoter.ErrUnorderedDuplicates). Before the
// delete it counts none.
func TestRewrittenFiles(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl := newRegionTable(t, l, "cow")
	tbl = appendRows(t, tbl, []any{int64(1), int64(2)}, []any{"eu", "eu"}, []any{"old", "x"})
	tbl = appendRows(t, tbl, []any{int64(1)}, []any{"eu"}, []any{"new"})
	if n, err := l.RewrittenFiles(ctx, "t.cow", ScanOptions{}); err != nil || n != 0 {
		t.Fatalf("before the delete: %d, %v", n, err)
	}
	before := scan(t, l, "t.cow", ScanOptions{})
	if vs := before.col(t, "v"); !slices.Equal(vs, []any{"old", "x", "new"}) {
		t.Fatalf("before the delete: %v", vs)
	}
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{"write.delete.mode": "copy-on-write"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete(ctx, iceberg.EqualTo(iceberg.Reference("id"), int64(2)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := scan(t, l, "t.cow", ScanOptions{})
	if vs := after.col(t, "v"); !slices.Equal(vs, []any{"new", "old"}) {
		t.Fatalf("after the delete the scan reads %v: the test no longer shows the reordering", vs)
	}
	if n, err := l.RewrittenFiles(ctx, "t.cow", ScanOptions{}); err != nil || n != 1 {
		t.Fatalf("after the copy-on-write delete: %d rewritten files, %v; want 1", n, err)
	}
}

// TestPartitionsSeeWholeFileDeletes: a delete that removes whole data
// files of a partition (adding none) changes the partition: it was last
// updated by the delete's snapshot. The partition's newest live file alone
// left its identity unchanged, so the promoter's plan called it already
// promoted while the tier held the deleted rows.
func TestPartitionsSeeWholeFileDeletes(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl := newRegionTable(t, l, "wfd")
	tbl = appendRows(t, tbl, []any{int64(1), int64(2)}, []any{"eu", "eu"}, []any{"a", "b"})
	tbl = appendRows(t, tbl, []any{int64(3)}, []any{"eu"}, []any{"c"})
	before, err := l.Partitions(ctx, "t.wfd", nil)
	if err != nil || len(before) != 1 {
		t.Fatalf("partitions %v, %v", before, err)
	}
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{"write.delete.mode": "copy-on-write"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete(ctx, iceberg.LessThan(iceberg.Reference("id"), int64(3)), nil); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	del := tbl.CurrentSnapshot()
	after, err := l.Partitions(ctx, "t.wfd", nil)
	if err != nil || len(after) != 1 {
		t.Fatalf("partitions %v, %v", after, err)
	}
	if after[0].FileCount != 1 || after[0].RecordCount != 1 {
		t.Fatalf("after the delete: %+v (the delete rewrote a file? the test wants whole files removed)", after[0])
	}
	if after[0].LastUpdatedSnapshotID != del.SnapshotID || after[0].LastUpdatedSequenceNumber != del.SequenceNumber {
		t.Fatalf("after a delete of whole files the partition was last updated by %d (seq %d), was %d; want the delete's %d (seq %d)",
			after[0].LastUpdatedSnapshotID, after[0].LastUpdatedSequenceNumber, before[0].LastUpdatedSnapshotID, del.SnapshotID, del.SequenceNumber)
	}
}
