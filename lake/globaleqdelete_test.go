package lake

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// TestGlobalEqDeleteChangesEveryPartition: an equality delete written
// under an unpartitioned spec of a partitioned table (the partition field
// dropped, then a merge-on-read delete) is global: Iceberg applies it to
// the data files of every partition written before it, and the scan drops
// the row. Partitions credited it to its own (unpartitioned, data-less)
// partition only, so the partitions whose rows it deleted kept their last
// update, and the promoter its identity: "already promoted" while the tier
// served the deleted row. Each live partition written before it now counts
// it as its last update; one written after it keeps its own.
func TestGlobalEqDeleteChangesEveryPartition(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl, before := daysThenUnpartitioned(t, l, "g", []any{int64(1), int64(2)}, []any{day(1, 1), day(2, 1)})
	if len(before) != 2 {
		t.Fatalf("partitions before the delete: %+v", before)
	}
	tbl = eqDelete(t, tbl, []int{1}, `[{"id":1,"ts":"2024-03-01T01:00:00Z","payload":null}]`)
	del := tbl.CurrentSnapshot()
	if got := fmt.Sprint(scan(t, l, "t.g", ScanOptions{}).col(t, "id")); got != "[2]" {
		t.Fatalf("scan ids %s, want [2]", got)
	}
	after, err := l.Partitions(ctx, "t.g", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 2 {
		t.Fatalf("partitions after the delete: %+v", after)
	}
	for i, a := range after {
		if a.Ref() != before[i].Ref() || a.LastUpdatedSnapshotID != del.SnapshotID || a.LastUpdatedSequenceNumber != del.SequenceNumber {
			t.Errorf("partition %s after a global equality delete (snapshot %d, seq %d): last updated by %d at seq %d",
				a.Path, del.SnapshotID, del.SequenceNumber, a.LastUpdatedSnapshotID, a.LastUpdatedSequenceNumber)
		}
	}

	// A partition written after the delete is its own last update.
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("ts", iceberg.DayTransform{}, "ts_day").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tbl = appendRows(t, tbl, []any{int64(3)}, []any{day(3, 1)}, []any{"c"})
	later, err := l.Partitions(ctx, "t.g", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range later {
		if p.LastUpdatedSnapshotID == tbl.CurrentSnapshot().SnapshotID {
			found = true
			if p.LastUpdatedSequenceNumber != tbl.CurrentSnapshot().SequenceNumber {
				t.Errorf("partition written after the delete: %+v", p)
			}
		} else if p.LastUpdatedSnapshotID != del.SnapshotID {
			t.Errorf("partition %s (spec %d) after a later append: last updated by %d, want the delete's %d", p.Path, p.SpecID, p.LastUpdatedSnapshotID, del.SnapshotID)
		}
	}
	if !found {
		t.Errorf("no partition of the append after the delete in %+v", later)
	}
}

// daysThenUnpartitioned creates table t.name (id, ts, payload) partitioned
// by day(ts), appends rows of ids at times tss, then drops the partition
// field (the default spec is unpartitioned again, as a merge-on-read delete
// then writes its delete files): the table, and its partitions before.
func daysThenUnpartitioned(t *testing.T, l *Lake, name string, ids, tss []any) (*table.Table, []PartitionStats) {
	t.Helper()
	ctx := t.Context()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 3, Name: "payload", Type: iceberg.PrimitiveTypes.String})
	tbl, err := l.cat.CreateTable(ctx, table.Identifier{"t", name}, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("ts", iceberg.DayTransform{}, "ts_day").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	payload := make([]any, len(ids))
	for i := range payload {
		payload[i] = string(rune('a' + i))
	}
	tbl = appendRows(t, tbl, ids, tss, payload)
	before, err := l.Partitions(ctx, "t."+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx = tbl.NewTransaction()
	if err := tx.UpdateSpec(true).RemoveField("ts_day").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return tbl, before
}
