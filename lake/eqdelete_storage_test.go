package lake

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// TestEqDeleteKeyStoredByOtherWriters: a decimal(9,2) key is INT32 in
// files written by Java (parquet-mr) or with StoreDecimalAsInteger,
// FIXED_LEN_BYTE_ARRAY in iceberg-go's: both read as the same Arrow
// decimal, and the delete applies. The check for keys whose type was
// promoted (6490f19) took any difference of the footers' physical types
// for one and refused the table for good.
func TestEqDeleteKeyStoredByOtherWriters(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	id := table.Identifier{"t", "dec"}
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.DecimalTypeOf(9, 2), Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	tbl, err := l.cat.CreateTable(ctx, id, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	// A data file as a Java writer writes it: the decimal as INT32.
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: &arrow.Decimal128Type{Precision: 9, Scale: 2}, Nullable: false,
			Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"1"})},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true,
			Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"2"})},
	}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(`[{"k":"1.00","v":"a"},{"k":"2.00","v":"b"}]`))
	if err != nil {
		t.Fatal(err)
	}
	at := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	fs, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := tbl.Location() + "/data/java-written.parquet"
	fo, err := fs.(icebergio.WriteFileIO).Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pqarrow.WriteTable(at, fo, at.NumRows(), parquet.NewWriterProperties(parquet.WithStoreDecimalAsInteger(true)), pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.AddFiles(ctx, []string{path}, nil, false); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// An equality delete written by iceberg-go: FIXED_LEN_BYTE_ARRAY.
	eqDelete(t, tbl, []int{1}, `[{"k":"1.00","v":null}]`)
	got := scan(t, l, "t.dec", ScanOptions{})
	if s := fmt.Sprint(got.col(t, "v")); s != "[b]" {
		t.Errorf("rows %s, want [b]", s)
	}
}
