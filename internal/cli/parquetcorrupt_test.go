package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/thawdb/thaw/kv"
)

// TestCorruptParquetIsAnError: bytes damaged anywhere in a Parquet file
// (footer, page headers, data) give an error naming the file, or rows,
// never a panic. arrow-go panics on some (a slice of a negative length, a
// nil page header, row counts that disagree): thaw load died with a stack
// trace, after Begin when the damage was past the footer (in a parallel
// decoding goroutine, which no recover reaches), leaving its target held
// until the build deadline.
func TestCorruptParquetIsAnError(t *testing.T) {
	tbl, err := kv.NewTable(itemsTable(t, false))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	read := func(path string) (rows int64, err error) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("%s: panic: %v", path, p)
			}
		}()
		in, err := openParquetInput([]string{path})
		if err != nil {
			return 0, err
		}
		if err := checkParquet(in, tbl, ""); err != nil {
			return 0, err
		}
		r, err := openParquet(in.files[0], tbl, "")
		if err != nil {
			return 0, err
		}
		defer r.close()
		err = r.each(t.Context(), func(_ int64, rec arrow.RecordBatch) error {
			rows += rec.NumRows()
			return nil
		})
		return rows, err
	}
	for _, codec := range []compress.Compression{compress.Codecs.Uncompressed, compress.Codecs.Snappy} {
		base := filepath.Join(dir, fmt.Sprintf("base-%v.parquet", codec))
		writeSmallPages(t, base, codec)
		orig, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := read(base); err != nil || n != 300 {
			t.Fatalf("the undamaged file: %d rows, %v", n, err)
		}
		rng := rand.New(rand.NewPCG(7, uint64(codec)))
		p := filepath.Join(dir, "damaged.parquet")
		for range 1500 {
			b := append([]byte(nil), orig...)
			for range 1 + rng.IntN(3) {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _ = read(p) // an error or rows; a panic fails the test
		}
	}
}

// writeSmallPages writes 300 rows of the items table (id, name, qty) in row
// groups of 100 and small pages, so that damage lands in every part.
func writeSmallPages(t *testing.T, path string, codec compress.Compression) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range 300 {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("n%d", i%17))
		if i%5 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Int32Builder).Append(int32(i))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithMaxRowGroupLength(100), parquet.WithDataPageSize(256))
	w, err := pqarrow.NewFileWriter(schema, f, props, pqarrow.DefaultWriterProps())
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
