package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/thawdb/thaw/kv"
)

func writeArrowParquet(t *testing.T, path string, rec arrow.RecordBatch, store bool) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	aprops := pqarrow.DefaultWriterProps()
	if store {
		aprops = pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	}
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(), aprops)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestParquetDictionaryColumn: a Parquet file whose STRING column was
// written from a dictionary-encoded Arrow column (a pandas category,
// pyarrow and arrow-go dictionary arrays) with the Arrow schema stored in
// the footer (pyarrow's default) reads back as a dictionary: thaw load
// takes it for a STRING column (it was refused as an unsupported Arrow
// type, for a plain UTF8 column on disk).
func TestParquetDictionaryColumn(t *testing.T) {
	tbl, err := kv.NewTable(itemsTable(t, false))
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.DefaultAllocator
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: dt},
		{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i := range 10 {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString([]string{"red", "green"}[i%2]); err != nil {
			t.Fatal(err)
		}
		b.Field(2).(*array.Int32Builder).Append(int32(i))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "cat.parquet")
	writeArrowParquet(t, path, rec, true)
	in, err := openParquetInput([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkParquet(in, tbl, ""); err != nil {
		t.Fatalf("a Parquet UTF8 column (written from a dictionary array, Arrow schema stored) refused for a STRING column: %v", err)
	}
}

// TestParquetUUIDColumn: a Parquet FIXED_LEN_BYTE_ARRAY(16) UUID column
// reads back as the arrow.uuid extension: thaw load takes it for a
// BINARY(16) column, as the lake maps Iceberg uuid (it was refused).
func TestParquetUUIDColumn(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{Columns: []kv.Column{
		{Name: "id", Type: mustParseType(t, "BINARY(16)")},
		{Name: "qty", Type: mustParseType(t, "INT"), Nullable: true},
	}, PrimaryKey: []string{"id"}, Buckets: 1})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: extensions.NewUUIDType()},
		{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	b.Field(0).(*extensions.UUIDBuilder).Append(uuid.New())
	b.Field(1).(*array.Int32Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "uuid.parquet")
	writeArrowParquet(t, path, rec, false)
	in, err := openParquetInput([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkParquet(in, tbl, ""); err != nil {
		t.Fatalf("a Parquet UUID column refused for a BINARY(16) column: %v", err)
	}
}
