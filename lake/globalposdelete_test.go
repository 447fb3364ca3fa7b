package lake

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
)

// TestGlobalPositionDeleteAppliesToEveryPartition: a merge-on-read delete
// after the table's partition field was dropped writes its position
// deletes under the unpartitioned default spec. They apply to the data
// files of the old partition (iceberg-go's planning paired them with
// their own spec's files only: the deleted row came back, in a whole
// scan and in a scan of the partition), and they change that partition:
// its last update moves to the delete, as for a global equality delete
// (TestGlobalEqDeleteChangesEveryPartition), so the promoter promotes it
// again.
func TestGlobalPositionDeleteAppliesToEveryPartition(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl, before := daysThenUnpartitioned(t, l, "gp", []any{int64(1), int64(2)}, []any{day(1, 1), day(1, 2)})
	if len(before) != 1 {
		t.Fatalf("partitions before: %+v", before)
	}
	tx := tbl.NewTransaction()
	if err := tx.Delete(ctx, iceberg.EqualTo(iceberg.Reference("id"), int64(1)), nil); err != nil {
		t.Fatal(err)
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	del := tbl.CurrentSnapshot()
	after, err := l.Partitions(ctx, "t.gp", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(scan(t, l, "t.gp", ScanOptions{}).col(t, "id")); got != "[2]" {
		t.Errorf("scan ids %s, want [2]", got)
	}
	if got := fmt.Sprint(scan(t, l, "t.gp", ScanOptions{Partitions: []PartitionRef{before[0].Ref()}}).col(t, "id")); got != "[2]" {
		t.Errorf("scan of %s: ids %s, want [2]", before[0].Path, got)
	}
	for _, a := range after {
		if a.Ref() == before[0].Ref() {
			if a.LastUpdatedSnapshotID != del.SnapshotID {
				t.Fatalf("partition %s lost row id=1 to the delete (snapshot %d, seq %d) but is still last updated by %d (seq %d): the promoter sees no change",
					a.Path, del.SnapshotID, del.SequenceNumber, a.LastUpdatedSnapshotID, a.LastUpdatedSequenceNumber)
			}
			return
		}
	}
	t.Fatalf("partition %s gone: %+v", before[0].Path, after)
}
