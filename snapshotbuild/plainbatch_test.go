package snapshotbuild

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/thawdb/thaw/kv"
)

// TestDictionaryAndExtensionColumns: a dictionary-encoded column (a pandas
// category, a Parquet column whose stored Arrow schema says dictionary),
// nulls in it included, and an extension column (arrow.uuid, as a Parquet
// UUID reads back) give exactly the pairs of the same rows in plain
// columns (both were refused as unsupported Arrow types).
func TestDictionaryAndExtensionColumns(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{Columns: []kv.Column{
		{Name: "id", Type: mustType(t, "BINARY(16)")},
		{Name: "color", Type: mustType(t, "STRING"), Nullable: true},
		{Name: "size", Type: mustType(t, "INT"), Nullable: true},
	}, PrimaryKey: []string{"id"}, Buckets: 4})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	const n = 100
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%d", i))
	}
	color := func(i int) (string, bool) { return []string{"red", "green", "blue"}[i%3], i%7 != 0 }

	fancy := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: extensions.NewUUIDType()},
		{Name: "color", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
		{Name: "size", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.PrimitiveTypes.Int32}, Nullable: true},
	}, nil))
	defer fancy.Release()
	plain := array.NewRecordBuilder(mem, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}},
		{Name: "color", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "size", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil))
	defer plain.Release()
	for i := range n {
		fancy.Field(0).(*extensions.UUIDBuilder).Append(ids[i])
		plain.Field(0).(*array.FixedSizeBinaryBuilder).Append(ids[i][:])
		if c, ok := color(i); ok {
			if err := fancy.Field(1).(*array.BinaryDictionaryBuilder).AppendString(c); err != nil {
				t.Fatal(err)
			}
			plain.Field(1).(*array.StringBuilder).Append(c)
		} else {
			fancy.Field(1).AppendNull()
			plain.Field(1).AppendNull()
		}
		if err := fancy.Field(2).(*array.Int32DictionaryBuilder).Append(int32(i % 5)); err != nil {
			t.Fatal(err)
		}
		plain.Field(2).(*array.Int32Builder).Append(int32(i % 5))
	}
	pairs := func(rec arrow.RecordBatch) []string {
		defer rec.Release()
		var out []string
		err := NewRowEncoder(tbl, "").Encode(rec, 0, func(row, bucket int, key, value []byte) error {
			out = append(out, fmt.Sprintf("%d %d %x %x", row, bucket, bytes.Clone(key), bytes.Clone(value)))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := pairs(fancy.NewRecordBatch()), pairs(plain.NewRecordBatch())
	if len(got) != n || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dictionary and extension columns gave\n%v\nwant\n%v", got, want)
	}
}
