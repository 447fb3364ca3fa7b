package lake

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
)

// TestIdentityColumnFromPartitionMetadata: a data file without its
// identity-partitioned column (a Hive table migrated to Iceberg keeps
// partition values in paths, and the migration records them in the
// manifest) reads that column from the file's partition tuple, as the
// Iceberg spec's column projection says; files that have the column keep
// their values.
func TestIdentityColumnFromPartitionMetadata(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	tbl := newRegionTable(t, l, "migrated")
	tbl = appendRows(t, tbl, []any{int64(1), int64(2)}, []any{"us", "us"}, []any{"a", "b"})

	// A file of region=eu with columns id and v only (Iceberg field ids
	// 1 and 3), added with its partition tuple.
	path := filepath.Join(t.TempDir(), "region=eu", "part-0.parquet")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	fid := func(id string) arrow.Metadata { return arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{id}) }
	as := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: fid("1")},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: fid("3")},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, as)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{10, 11, 12}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"x", "y", ""}, []bool{true, true, false})
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(as, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	dfb, err := iceberg.NewDataFileBuilder(tbl.Spec(), iceberg.EntryContentData, "file://"+path, iceberg.ParquetFile,
		map[int]any{1000: "eu"}, nil, nil, 3, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.AddDataFiles(ctx, []iceberg.DataFile{dfb.Build()}, nil); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	info, err := l.Describe(ctx, "t.migrated")
	if err != nil {
		t.Fatal(err)
	}
	ts, pm, err := MapSchema(info, MappingOptions{Buckets: 2})
	if err != nil {
		t.Fatal(err)
	}
	tierTable, err := kv.NewTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := l.Partitions(ctx, "t.migrated", nil)
	if err != nil {
		t.Fatal(err)
	}
	byRegion := map[string][]any{}
	for _, p := range parts {
		r := scan(t, l, "t.migrated", ScanOptions{Partitions: []PartitionRef{p.Ref()}, Mapping: &pm})
		byRegion[p.Values[0].Human] = r.col(t, "region")
		// What the promoter does with the scan: every row encodes into
		// the tier partition the lake partition maps to.
		name, err := pm.PartitionName(p)
		if err != nil {
			t.Fatal(err)
		}
		_, seq, err := l.Scan(ctx, "t.migrated", ScanOptions{Partitions: []PartitionRef{p.Ref()}, Mapping: &pm})
		if err != nil {
			t.Fatal(err)
		}
		enc, n := snapshotbuild.NewRowEncoder(tierTable, name), 0
		for rec, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			err = enc.Encode(rec, 0, func(int, int, []byte, []byte) error { n++; return nil })
			rec.Release()
			if err != nil {
				t.Fatalf("tier partition %s: %v", name, err)
			}
		}
		if n != r.n {
			t.Errorf("tier partition %s: %d rows encoded, the scan has %d", name, n, r.n)
		}
	}
	if got := byRegion["eu"]; !slices.Equal(got, []any{"eu", "eu", "eu"}) {
		t.Errorf("region of the file without the column: %v, want eu three times", got)
	}
	if got := byRegion["us"]; !slices.Equal(got, []any{"us", "us"}) {
		t.Errorf("region of the written rows: %v", got)
	}
	// A scan of the whole table has no one partition to take values from:
	// the column reads as iceberg-go gives it (null).
	all := scan(t, l, "t.migrated", ScanOptions{Mapping: &pm})
	if nulls := slices.Index(all.col(t, "region"), nil); all.n != 5 || nulls < 0 {
		t.Errorf("whole-table scan: %d rows, region %v", all.n, all.col(t, "region"))
	}
}

// TestConstantColumn builds the partition-value columns of every type the
// fill takes, and none for a value of the wrong Go type or another type.
func TestConstantColumn(t *testing.T) {
	for _, tc := range []struct {
		dt   arrow.DataType
		v    any
		want any // GetOneForMarshal of each row; nil: no column
	}{
		{arrow.BinaryTypes.String, "eu", "eu"},
		{arrow.BinaryTypes.LargeString, "eu", "eu"},
		{arrow.FixedWidthTypes.Boolean, true, true},
		{arrow.PrimitiveTypes.Int32, int32(7), int32(7)},
		{arrow.PrimitiveTypes.Int64, int64(-7), int64(-7)},
		{arrow.PrimitiveTypes.Float32, float32(1.5), float32(1.5)},
		{arrow.PrimitiveTypes.Float64, 2.5, 2.5},
		{arrow.FixedWidthTypes.Date32, int32(19723), "2024-01-01"},
		{&arrow.TimestampType{Unit: arrow.Microsecond}, int64(1_704_067_200_000_000), "2024-01-01T00:00:00"},
		{arrow.BinaryTypes.Binary, []byte{1, 2}, []byte{1, 2}},
		{arrow.PrimitiveTypes.Int64, int32(7), nil},
		{arrow.BinaryTypes.String, int64(1), nil},
		{&arrow.FixedSizeBinaryType{ByteWidth: 2}, []byte{1, 2}, nil},
	} {
		a := constant(memory.DefaultAllocator, tc.dt, tc.v, 3)
		if tc.want == nil {
			if a != nil {
				a.Release()
				t.Errorf("%s from %T: built a column", tc.dt, tc.v)
			}
			continue
		}
		if a == nil || a.Len() != 3 || a.NullN() != 0 {
			t.Errorf("%s from %T: %v", tc.dt, tc.v, a)
			continue
		}
		for i := range 3 {
			if got := a.GetOneForMarshal(i); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s row %d: %#v, want %#v", tc.dt, i, got, tc.want)
			}
		}
		a.Release()
	}
}

// newRegionTable creates the format-v2 table t.{name} (id BIGINT key,
// region STRING, v STRING) partitioned by identity(region) in l.
func newRegionTable(t *testing.T, l *Lake, name string) *table.Table {
	t.Helper()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "region", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "v", Type: iceberg.PrimitiveTypes.String})
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "region", Transform: iceberg.IdentityTransform{}})
	tbl, err := l.cat.CreateTable(t.Context(), table.Identifier{"t", name}, schema, v2(), catalog.WithPartitionSpec(&spec))
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}
