package lake

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// TestScanEqDeleteAfterPromotion: an equality delete keyed on a column
// that was promoted (int to long) is refused with ErrUnmappable, since
// iceberg-go would not apply it to data files written before the
// promotion (the deleted row came back); without the promotion it
// applies.
func TestScanEqDeleteAfterPromotion(t *testing.T) {
	for _, promote := range []bool{false, true} {
		t.Run(fmt.Sprint("promote=", promote), func(t *testing.T) { eqPromo(t, promote) })
	}
}

func eqPromo(t *testing.T, promote bool) {
	l := scratch(t)
	ctx := t.Context()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.PrimitiveTypes.Int32, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	tbl, err := l.cat.CreateTable(ctx, table.Identifier{"t", "ep"}, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	tbl = appendJSON(t, tbl, `[{"k":1,"v":"a"},{"k":2,"v":"b"}]`)
	var tx *table.Transaction
	if promote {
		tx = tbl.NewTransaction()
		if err := tx.UpdateSchema(true, false).UpdateColumn([]string{"k"}, table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: iceberg.PrimitiveTypes.Int64}}).Commit(); err != nil {
			t.Fatal(err)
		}
		if tbl, err = tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eqDelete(t, tbl, []int{1}, `[{"k":1,"v":null}]`)
	if promote {
		_, _, err := l.Scan(ctx, "t.ep", ScanOptions{})
		if !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), "equality deletes on column k (field 1), whose type changed from int to long") {
			t.Fatalf("scan with equality deletes on a promoted column: %v", err)
		}
		return
	}
	r := scan(t, l, "t.ep", ScanOptions{})
	if got := fmt.Sprint(r.col(t, "k"), r.col(t, "v")); got != "[2] [b]" {
		t.Errorf("rows %s, want [2] [b]", got)
	}
}

// TestScanEqDeleteAfterPromotionSchemaRemoved: the same, once the schema
// before the promotion is gone from the metadata (Java's
// cleanExpiredMetadata removes it when no snapshot uses it) while a data
// file written under it is still live: the schemas no longer show the
// change, the files do. The deleted row came back.
func TestScanEqDeleteAfterPromotionSchemaRemoved(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	id := table.Identifier{"t", "ep"}
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.PrimitiveTypes.Int32, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	tbl, err := l.cat.CreateTable(ctx, id, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	tbl = appendJSON(t, tbl, `[{"k":1,"v":"a"},{"k":2,"v":"b"}]`)
	tx := tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).UpdateColumn([]string{"k"}, table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: iceberg.PrimitiveTypes.Int64}}).Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tbl = appendJSON(t, tbl, `[{"k":3,"v":"c"}]`)
	tx = tbl.NewTransaction()
	if err := tx.ExpireSnapshots(table.WithRetainLast(1), table.WithOlderThan(0), table.WithPostCommit(false)); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.cat.CommitTable(ctx, id, nil, []table.Update{table.NewRemoveSchemasUpdate([]int{0})}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = l.cat.LoadTable(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Schemas()); n != 1 {
		t.Fatalf("%d schemas after removing the first", n)
	}
	eqDelete(t, tbl, []int{1}, `[{"k":1,"v":null}]`)
	_, _, err = l.Scan(ctx, "t.ep", ScanOptions{})
	if !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), "equality deletes on column k (field 1): data file") || !strings.Contains(err.Error(), "as INT32, delete file") {
		t.Fatalf("scan with equality deletes on a promoted column whose old schema is gone: %v", err)
	}
}

// eqDelete commits equality deletes on the fields ids of the rows of a
// JSON array.
func eqDelete(t *testing.T, tbl *table.Table, ids []int, js string) *table.Table {
	t.Helper()
	tx := tbl.NewTransaction()
	if err := tx.CommitEqualityDeletes(t.Context(), ids, oneBatch(jsonRecord(t, tbl, js)), nil); err != nil {
		t.Fatal(err)
	}
	out, err := tx.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appendJSON appends the rows of a JSON array to tbl.
func appendJSON(t *testing.T, tbl *table.Table, js string) *table.Table {
	t.Helper()
	rec := jsonRecord(t, tbl, js)
	defer rec.Release()
	return appendRecord(t, tbl, rec)
}

// jsonRecord is the rows of a JSON array in tbl's schema.
func jsonRecord(t *testing.T, tbl *table.Table, js string) arrow.RecordBatch {
	t.Helper()
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestScanEqDeleteOnAddedColumnRefused: an equality delete keyed on a
// column added after some data files were written applies to those files
// with the column read as null, which iceberg-go cannot do: it failed the
// read of the first such file, after streaming the files before it. The
// scan is refused before any row, naming the column and the file, and the
// table's other reads are unaffected.
func TestScanEqDeleteOnAddedColumnRefused(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	schema := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, err := l.cat.CreateTable(ctx, table.Identifier{"t", "en"}, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	tbl = appendJSON(t, tbl, `[{"k":1},{"k":2}]`)
	tx := tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).AddColumn([]string{"g"}, iceberg.PrimitiveTypes.String, "", false, nil).Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tbl = appendJSON(t, tbl, `[{"k":3,"g":"x"}]`)
	before := tbl.CurrentSnapshot().SnapshotID
	eqDelete(t, tbl, []int{2}, `[{"k":0,"g":null}]`)
	_, _, err = l.Scan(ctx, "t.en", ScanOptions{})
	if !errors.Is(err, ErrUnmappable) || !strings.Contains(err.Error(), "equality deletes on column g (field 2): data file ") ||
		!strings.Contains(err.Error(), "written before the column existed") {
		t.Fatalf("scan with an equality delete on a column older files lack: %v", err)
	}
	if got := fmt.Sprint(scan(t, l, "t.en", ScanOptions{SnapshotID: &before}).col(t, "k")); got != "[1 2 3]" {
		t.Fatalf("scan of the snapshot before the delete: %s", got)
	}
}
