package lake

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// TestPartitionsDeleteOnly: a partition left with delete files only (its
// data file deleted under a newer spec; a rewrite without
// remove-dangling-deletes leaves the same) holds no row and is not
// listed live. It was, mapped to the tier partition of the live data, and the
// promoter's scan requiring every listed partition of the group was
// refused for ever (no data file in this snapshot).
func TestPartitionsDeleteOnly(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 3, Name: "payload", Type: iceberg.PrimitiveTypes.String})
	spec, err := iceberg.NewPartitionSpecOpts(iceberg.AddPartitionFieldBySourceID(2, "ts_day", iceberg.DayTransform{}, schema, nil))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := l.cat.CreateTable(ctx, table.Identifier{"t", "do"}, schema, catalog.WithPartitionSpec(&spec), v2())
	if err != nil {
		t.Fatal(err)
	}
	tbl = appendRows(t, tbl, []any{int64(1)}, []any{day(1, 1)}, []any{"a"})
	tbl = eqDelete(t, tbl, []int{1}, `[{"id":9,"ts":"2024-03-01T02:00:00Z","payload":null}]`)
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("id", iceberg.BucketTransform{NumBuckets: 4}, "id_bucket").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tbl = appendRows(t, tbl, []any{int64(2)}, []any{day(1, 5)}, []any{"b"})
	tx = tbl.NewTransaction()
	if err := tx.Delete(ctx, iceberg.EqualTo(iceberg.Reference("id"), int64(1)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	parts, err := l.Partitions(ctx, "t.do", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Describe(ctx, "t.do")
	if err != nil {
		t.Fatal(err)
	}
	_, pm, err := MapSchema(info, MappingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The old partition's data file was removed (the delete of id 1):
	// listed as Removed, for its removal to count in the identity of the
	// tier partition it shares; Live drops it.
	if n := len(parts) - len(Live(parts)); n != 1 {
		t.Errorf("%d removed partitions listed: %+v", n, parts)
	}
	var refs []PartitionRef
	for _, p := range Live(parts) {
		if p.FileCount == 0 {
			t.Errorf("partition %d/%s listed with no data file (%d equality delete files)", p.SpecID, p.Path, p.EqualityDeleteFiles)
		}
		if name, err := pm.PartitionName(p); err == nil && name == "2024-03-01" {
			refs = append(refs, p.Ref())
		}
	}
	if len(refs) != 1 {
		t.Fatalf("lake partitions of tier partition 2024-03-01: %v, want the one with data", refs)
	}
	r := scan(t, l, "t.do", ScanOptions{SnapshotID: info.CurrentSnapshotID, Partitions: refs, RequirePartitions: true, Mapping: &pm})
	if got := fmt.Sprint(r.col(t, "id")); got != "[2]" {
		t.Fatalf("rows of tier partition 2024-03-01: ids %s, want [2]", got)
	}
}
