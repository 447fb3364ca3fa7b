package snapshotbuild

import (
	"bytes"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/thawdb/thaw/kv"
)

// TestArrowNaNKeys: a NaN in an Arrow FLOAT or DOUBLE key column, whatever
// its bits (Go's math.NaN(), x86's 0/0, a negative quiet NaN, a signalling
// one), gets the key of "NaN", which parses to Java's NaN: a lookup of
// "NaN" finds the row, and two NaN rows are one key (their bits were
// stored as they were).
func TestArrowNaNKeys(t *testing.T) {
	zero := 0.0
	nans := []float64{math.NaN(), zero / zero, math.Float64frombits(0xfff8000000000000), math.Float64frombits(0x7ff0000000000001)}
	for _, typ := range []string{"DOUBLE", "FLOAT"} {
		t.Run(typ, func(t *testing.T) {
			tbl, err := kv.NewTable(kv.TableSchema{Columns: []kv.Column{{Name: "k", Type: mustType(t, typ)}}, PrimaryKey: []string{"k"}, Buckets: 1})
			if err != nil {
				t.Fatal(err)
			}
			// What `thaw get` and the JSON rows make of "NaN".
			var v any = kv.NaN()
			if typ == "FLOAT" {
				v = float32(kv.NaN())
			}
			want, _, _, err := tbl.NewEncoder().Encode(kv.RowFields(kv.Row{v}))
			if err != nil {
				t.Fatal(err)
			}
			want = bytes.Clone(want)
			for _, nan := range nans {
				var col arrow.Array
				field := arrow.Field{Name: "k", Type: arrow.PrimitiveTypes.Float64}
				if typ == "FLOAT" {
					b := array.NewFloat32Builder(memory.DefaultAllocator)
					b.Append(math.Float32frombits(uint32(math.Float64bits(nan)>>32) | 1)) // a NaN of other bits too
					col, field.Type = b.NewArray(), arrow.PrimitiveTypes.Float32
				} else {
					b := array.NewFloat64Builder(memory.DefaultAllocator)
					b.Append(nan)
					col = b.NewArray()
				}
				rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{field}, nil), []arrow.Array{col}, 1)
				err := NewRowEncoder(tbl, "").Encode(rec, 0, func(_, _ int, key, _ []byte) error {
					if !bytes.Equal(key, want) {
						t.Errorf("NaN %#x: key %x, the key of \"NaN\" is %x", math.Float64bits(nan), key, want)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
