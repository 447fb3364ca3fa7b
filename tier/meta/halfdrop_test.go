package meta_test

import (
	"errors"
	"testing"

	"github.com/thawdb/thaw/tier/meta"
)

// TestHalfDroppedPartitionedTable: once DropTable of a partitioned table
// has marked it (and was then interrupted, as by a crash), nothing can be
// added to its partitions and tablet servers stop serving them: the mark
// deletes the partitions' assignments too. It deleted only the table's
// (which a partitioned table does not have): snapshot ids and snapshots
// were still accepted, into the directory the cleaner was deleting.
func TestHalfDroppedPartitionedTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	targets := e.populate("d")
	partB := targets[2]
	crash := errors.New("crash")
	meta.SetAfterMark(e.s, func() error { return crash })
	if err := e.s.DropTable(ctx, e.g, "d", "parted"); !errors.Is(err, crash) {
		t.Fatalf("interrupted drop: %v", err)
	}
	if _, err := e.s.GetAssignment(ctx, partB); err == nil {
		t.Errorf("assignment of partition b of a half-dropped table still readable (tablet servers keep serving it)")
	}
	id, err := e.s.NextSnapshotID(ctx, e.g, partB, 0)
	if !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("snapshot id of a partition of a half-dropped table: id %d, err %v (want ErrNotFound)", id, err)
	}
	if err == nil {
		if _, err := e.s.AddSnapshot(ctx, e.g, partB, 0, meta.BucketSnapshot{SnapshotID: id, LogOffset: 9, MetadataPath: "file:///x"}); err == nil {
			t.Errorf("snapshot %d registered for a partition of a half-dropped table", id)
		}
	}
}
