package lake

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// TestDamagedFooterIsAnError: footerFieldTypes (the footer read of the
// equality-delete check, on the scan's own goroutine) turns arrow-go's
// panics on a damaged footer into an error naming the file. The damage
// is found by mutating footer bytes with a fixed seed until arrow-go
// panics on one.
func TestDamagedFooterIsAnError(t *testing.T) {
	field := func(name string, typ arrow.DataType, id string) arrow.Field {
		return arrow.Field{Name: name, Type: typ, Nullable: true, Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{id})}
	}
	sc := arrow.NewSchema([]arrow.Field{
		field("k", arrow.PrimitiveTypes.Int64, "1"),
		field("ts", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, "2"),
		field("v", arrow.BinaryTypes.String, "3"),
	}, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc,
		strings.NewReader(`[{"k":1,"ts":"2024-01-02T03:04:05Z","v":"a"},{"k":2,"ts":null,"v":"b"}]`))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := pqarrow.WriteTable(array.NewTableFromRecords(sc, []arrow.RecordBatch{rec}), &buf, 2, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	types, err := footerFieldTypes("good.parquet", bytes.NewReader(good))
	if want := map[int]parquet.Type{1: parquet.Types.Int64, 2: parquet.Types.Int64, 3: parquet.Types.ByteArray}; err != nil || fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("undamaged footer: %v %v, want %v", types, err, want)
	}

	panics := func(b []byte) (p any) {
		defer func() { p = recover() }()
		if r, err := file.NewParquetReader(bytes.NewReader(b)); err == nil {
			sc := r.MetaData().Schema
			for i := range sc.NumColumns() {
				_ = sc.Column(i).SchemaNode().FieldID()
			}
		}
		return nil
	}
	n := int(binary.LittleEndian.Uint32(good[len(good)-8:]))
	start := len(good) - 8 - n
	rng := rand.New(rand.NewPCG(45, 1))
	found := 0
	for try := 0; try < 20000 && found < 3; try++ {
		bad := bytes.Clone(good)
		for range 1 + rng.IntN(3) {
			bad[start+rng.IntN(n)] = byte(rng.IntN(256))
		}
		p := panics(bad)
		if p == nil {
			continue
		}
		found++
		types, err := footerFieldTypes("bad.parquet", bytes.NewReader(bad))
		if err == nil || !strings.Contains(err.Error(), "read the footer of bad.parquet: damaged Parquet footer: ") {
			t.Fatalf("footer on which arrow-go panics (%v): %v %v", p, types, err)
		}
	}
	if found == 0 {
		t.Fatal("no mutation of the footer made arrow-go panic: the test tests nothing")
	}
}
