package snapshotbuild

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/thawdb/thaw/kv"
)

func mustType(t *testing.T, s string) kv.Type {
	t.Helper()
	ty, err := kv.ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}

// allTypesTable has a column of every kv type; the primary key is
// (id BIGINT, code CHAR(4)).
func allTypesTable(t *testing.T, buckets int) *kv.Table {
	t.Helper()
	cols := []struct {
		name, typ string
		null      bool
	}{
		{"id", "BIGINT", false}, {"code", "CHAR(4)", false}, {"b", "BOOLEAN", true},
		{"ti", "TINYINT", true}, {"si", "SMALLINT", true}, {"i", "INT", true},
		{"f", "FLOAT", true}, {"d", "DOUBLE", true}, {"dec", "DECIMAL(10,2)", true},
		{"bigdec", "DECIMAL(30,4)", true}, {"s", "STRING", true}, {"bin", "BINARY(3)", true},
		{"by", "BYTES", true}, {"dt", "DATE", true}, {"tm", "TIME(3)", true},
		{"ts", "TIMESTAMP(6)", true}, {"ltz", "TIMESTAMP_LTZ(9)", true},
	}
	s := kv.TableSchema{SchemaID: 3, PrimaryKey: []string{"id", "code"}, Buckets: buckets}
	for _, c := range cols {
		s.Columns = append(s.Columns, kv.Column{Name: c.name, Type: mustType(t, c.typ), Nullable: c.null})
	}
	tbl, err := kv.NewTable(s)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// arrowTypes are the Arrow types of allTypesTable's columns; variant 1 uses
// the alternative Arrow type where there is one.
func arrowTypes(variant int) []arrow.DataType {
	if variant == 0 {
		return []arrow.DataType{
			arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String, arrow.FixedWidthTypes.Boolean,
			arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32,
			arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64, &arrow.Decimal128Type{Precision: 10, Scale: 2},
			&arrow.Decimal256Type{Precision: 30, Scale: 4}, arrow.BinaryTypes.String, &arrow.FixedSizeBinaryType{ByteWidth: 3},
			arrow.BinaryTypes.Binary, arrow.FixedWidthTypes.Date32, arrow.FixedWidthTypes.Time32ms,
			&arrow.TimestampType{Unit: arrow.Microsecond}, &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"},
		}
	}
	return []arrow.DataType{
		arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.LargeString, arrow.FixedWidthTypes.Boolean,
		arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32,
		arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64, &arrow.Decimal64Type{Precision: 10, Scale: 2},
		&arrow.Decimal128Type{Precision: 30, Scale: 4}, arrow.BinaryTypes.StringView, arrow.BinaryTypes.BinaryView,
		arrow.BinaryTypes.LargeBinary, arrow.FixedWidthTypes.Date64, arrow.FixedWidthTypes.Time64us,
		&arrow.TimestampType{Unit: arrow.Nanosecond}, &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"},
	}
}

// randomRow makes a valid row; id is drawn from a small range so there are
// duplicates.
func randomRow(rng *rand.Rand, i int) kv.Row {
	null := func(v any) any {
		if rng.IntN(6) == 0 {
			return nil
		}
		return v
	}
	bigUnscaled := new(big.Int).Mul(big.NewInt(rng.Int64N(1<<62)), big.NewInt(1_000_000_000))
	if rng.IntN(2) == 0 {
		bigUnscaled.Neg(bigUnscaled)
	}
	return kv.Row{
		int64(rng.IntN(400)) - 200,
		[]string{"ab", "cd", "éü", "wxyz"}[rng.IntN(4)],
		null(rng.IntN(2) == 0),
		null(int8(rng.IntN(256) - 128)),
		null(int16(rng.IntN(65536) - 32768)),
		null(rng.Int32() - 1<<30),
		null(float32(rng.NormFloat64())),
		null(rng.NormFloat64() * 1e6),
		null(kv.DecimalFromInt64(rng.Int64N(1e10) - 5e9)),
		null(kv.DecimalFromBig(bigUnscaled)),
		null(fmt.Sprintf("row %d %s", i, strings.Repeat("x", rng.IntN(40)))),
		null([]byte{byte(i), byte(i >> 8), byte(rng.IntN(256))}),
		null(bytes.Repeat([]byte{byte(i)}, rng.IntN(20))),
		null(kv.Date(rng.IntN(40000) - 10000)),
		null(kv.Time(rng.IntN(86_400_000))),
		null(kv.Timestamp{Millis: rng.Int64N(4e12) - 1e12, NanoOfMilli: int32(rng.IntN(1000)) * 1000}),
		null(kv.Timestamp{Millis: rng.Int64N(4e12) - 1e12, NanoOfMilli: int32(rng.IntN(1_000_000))}),
	}
}

// toArrow builds a record batch of rows with the given column types. For
// variant-1 types the values must be representable (whole millis etc.).
func toArrow(t *testing.T, tbl *kv.Table, types []arrow.DataType, rows []kv.Row) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	for i := range tbl.NumColumns() {
		fields = append(fields, arrow.Field{Name: tbl.Column(i).Name, Type: types[i], Nullable: true})
	}
	schema := arrow.NewSchema(fields, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	for _, r := range rows {
		for i, v := range r {
			appendValue(t, rb.Field(i), types[i], v)
		}
	}
	return rb.NewRecordBatch()
}

func appendValue(t *testing.T, fb array.Builder, dt arrow.DataType, v any) {
	t.Helper()
	if v == nil {
		fb.AppendNull()
		return
	}
	switch b := fb.(type) {
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int16Builder:
		b.Append(v.(int16))
	case *array.Int8Builder:
		b.Append(v.(int8))
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.Float32Builder:
		b.Append(v.(float32))
	case *array.Float64Builder:
		b.Append(v.(float64))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.LargeStringBuilder:
		b.Append(v.(string))
	case *array.StringViewBuilder:
		b.Append(v.(string))
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.BinaryViewBuilder:
		b.Append(v.([]byte))
	case *array.FixedSizeBinaryBuilder:
		b.Append(v.([]byte))
	case *array.Decimal64Builder:
		n, _ := v.(kv.Decimal).Int64()
		b.Append(decimal.Decimal64(n))
	case *array.Decimal128Builder:
		b.Append(decimal128.FromBigInt(v.(kv.Decimal).Unscaled()))
	case *array.Decimal256Builder:
		b.Append(decimal256.FromBigInt(v.(kv.Decimal).Unscaled()))
	case *array.Date32Builder:
		b.Append(arrow.Date32(v.(kv.Date)))
	case *array.Date64Builder:
		b.Append(arrow.Date64(int64(v.(kv.Date)) * 86_400_000))
	case *array.Time32Builder:
		b.Append(arrow.Time32(v.(kv.Time)))
	case *array.Time64Builder:
		b.Append(arrow.Time64(int64(v.(kv.Time)) * 1000))
	case *array.TimestampBuilder:
		ts := v.(kv.Timestamp)
		switch dt.(*arrow.TimestampType).Unit {
		case arrow.Millisecond:
			b.Append(arrow.Timestamp(ts.Millis))
		case arrow.Microsecond:
			b.Append(arrow.Timestamp(ts.Millis*1000 + int64(ts.NanoOfMilli)/1000))
		case arrow.Nanosecond:
			b.Append(arrow.Timestamp(ts.Millis*1_000_000 + int64(ts.NanoOfMilli)))
		default:
			b.Append(arrow.Timestamp(ts.Millis / 1000))
		}
	default:
		t.Fatalf("no appender for %T", fb)
	}
}

// variant1Row adapts a row to what variant-1 Arrow types can carry exactly.
func variant1Row(r kv.Row) kv.Row {
	r = slices.Clone(r)
	if r[16] != nil { // TIMESTAMP_LTZ(9) as ms: drop the sub-millisecond part
		ts := r[16].(kv.Timestamp)
		r[16] = kv.Timestamp{Millis: ts.Millis}
	}
	return r
}

type expectedPair struct {
	bucket int
	k, v   []byte
}

// TestArrowRoundTrip: rows → Arrow batches (two Arrow schemas) → snapshots
// → restored pairs equal kv's own encoding of the last row per key, and
// decode back to those rows.
func TestArrowRoundTrip(t *testing.T) {
	const nb = 3
	tbl := allTypesTable(t, nb)
	rng := rand.New(rand.NewPCG(7, 8))
	var batches []arrow.RecordBatch
	var rows []kv.Row
	for bi := range 6 {
		var br []kv.Row
		for i := range 500 {
			r := randomRow(rng, bi*500+i)
			if bi%2 == 1 {
				r = variant1Row(r)
			}
			br = append(br, r)
		}
		rows = append(rows, br...)
		batches = append(batches, toArrow(t, tbl, arrowTypes(bi%2), br))
	}
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	// Expected content via kv's reference (boxed Row) path, last wins.
	want := make([]map[string][]byte, nb)
	for i := range want {
		want[i] = map[string][]byte{}
	}
	for _, r := range rows {
		k, err := tbl.EncodeKey(r)
		if err != nil {
			t.Fatal(err)
		}
		v, err := tbl.EncodeValue(r)
		if err != nil {
			t.Fatal(err)
		}
		bucket, err := tbl.Bucket(r)
		if err != nil {
			t.Fatal(err)
		}
		want[bucket][string(k)] = v
	}

	s := newTestStore(t)
	tmp := t.TempDir()
	b, err := New(s, Target{Table: tbl, Snapshot: testTarget(s), SnapshotIDs: snapIDs(nb)},
		Options{TempDir: tmp, MemoryBudget: 256 << 10, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, rec := range batches {
		if err := b.Add(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Spills == 0 || st.InputRows != int64(len(rows)) {
		t.Fatalf("stats %+v: want spills and %d input rows", st, len(rows))
	}
	total := 0
	for _, r := range res {
		_, got := restoreBucket(t, s, r)
		if len(got) != len(want[r.Bucket]) {
			t.Fatalf("bucket %d: %d pairs, want %d", r.Bucket, len(got), len(want[r.Bucket]))
		}
		for _, p := range got {
			w, ok := want[r.Bucket][string(p.k)]
			if !ok || !bytes.Equal(w, p.v) {
				t.Fatalf("bucket %d key %x: value differs from kv's encoding of the last row", r.Bucket, p.k)
			}
			id, row, err := tbl.DecodeValue(p.v)
			if err != nil || id != 3 {
				t.Fatalf("decode: schema %d, %v", id, err)
			}
			if k, _ := tbl.EncodeKey(row); !bytes.Equal(k, p.k) {
				t.Fatalf("decoded row's key %x, stored under %x", k, p.k)
			}
			if bk, _ := tbl.Bucket(row); bk != r.Bucket {
				t.Fatalf("row of bucket %d stored in bucket %d", bk, r.Bucket)
			}
		}
		total += len(got)
		if r.Duplicates+r.RowCount == 0 {
			t.Fatalf("bucket %d empty", r.Bucket)
		}
	}
	var dupSum int64
	for _, r := range res {
		dupSum += r.Duplicates
	}
	if int64(total)+dupSum != int64(len(rows)) {
		t.Fatalf("%d rows kept + %d duplicates != %d input rows", total, dupSum, len(rows))
	}
}

// TestArrowErrors: each bad input fails Add with an error naming what is
// wrong, and the build then leaves nothing behind.
func TestArrowErrors(t *testing.T) {
	tbl := allTypesTable(t, 2)
	rng := rand.New(rand.NewPCG(9, 9))
	good := func() []kv.Row {
		var rows []kv.Row
		for i := range 5 {
			rows = append(rows, randomRow(rng, i))
		}
		return rows
	}
	types := arrowTypes(0)
	replaceType := func(i int, dt arrow.DataType) []arrow.DataType {
		ts := slices.Clone(types)
		ts[i] = dt
		return ts
	}
	// rawAt builds good rows with column i of Arrow type dt holding raw
	// value bad at row 2 and ok elsewhere: values toArrow cannot make.
	rawAt := func(i int, dt arrow.DataType, bad, ok any) func() arrow.RecordBatch {
		return func() arrow.RecordBatch {
			rows := good()[:4]
			ts := replaceType(i, dt)
			var fields []arrow.Field
			for c := range tbl.NumColumns() {
				fields = append(fields, arrow.Field{Name: tbl.Column(c).Name, Type: ts[c], Nullable: true})
			}
			rb := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
			defer rb.Release()
			for ri, r := range rows {
				for c, v := range r {
					if c != i {
						appendValue(t, rb.Field(c), ts[c], v)
						continue
					}
					raw := ok
					if ri == 2 {
						raw = bad
					}
					switch b := rb.Field(c).(type) {
					case *array.Time32Builder:
						b.Append(raw.(arrow.Time32))
					case *array.Time64Builder:
						b.Append(raw.(arrow.Time64))
					case *array.Date64Builder:
						b.Append(raw.(arrow.Date64))
					default:
						t.Fatalf("rawAt: builder %T", b)
					}
				}
			}
			return rb.NewRecordBatch()
		}
	}
	for _, tc := range []struct {
		name    string
		rec     func() arrow.RecordBatch
		is      error
		column  string
		row     int
		message string
	}{
		{
			name: "null key column",
			rec: func() arrow.RecordBatch {
				rows := good()
				rows[3][0] = nil
				return toArrow(t, tbl, types, rows)
			},
			is: kv.ErrInvalidRow, column: "id", row: 3,
		},
		{
			name: "decimal out of range",
			rec: func() arrow.RecordBatch {
				rows := good()
				rows[2][8] = kv.DecimalFromInt64(123_456_789_012) // 12 digits in DECIMAL(10,2)
				return toArrow(t, tbl, types, rows)
			},
			is: kv.ErrInvalidRow, column: "dec", row: 2,
		},
		{
			name: "char too long",
			rec: func() arrow.RecordBatch {
				rows := good()
				rows[1][1] = "abcde"
				return toArrow(t, tbl, types, rows)
			},
			is: kv.ErrInvalidRow, column: "code", row: 1,
		},
		{name: "sub-millisecond time", rec: rawAt(14, arrow.FixedWidthTypes.Time64us, arrow.Time64(1500), arrow.Time64(2000)),
			is: ErrInvalidRow, column: "tm", row: 2},
		// Values that would wrap when narrowed to a 32-bit TIME or DATE,
		// landing on a valid other value.
		{name: "time64 beyond a day", rec: rawAt(14, arrow.FixedWidthTypes.Time64us, arrow.Time64((1<<32+5000)*1000), arrow.Time64(2000)),
			is: ErrInvalidRow, column: "tm", row: 2},
		{name: "negative time64", rec: rawAt(14, arrow.FixedWidthTypes.Time64ns, arrow.Time64(-1_000_000), arrow.Time64(2_000_000)),
			is: ErrInvalidRow, column: "tm", row: 2},
		// (Arrow's spec has no time64 of milliseconds, but arrow-go builds
		// one: its values were taken unchecked, as time32[ms]'s.)
		{name: "time64 of milliseconds beyond a day", rec: rawAt(14, &arrow.Time64Type{Unit: arrow.Millisecond}, arrow.Time64(1<<32+5000), arrow.Time64(2000)),
			is: ErrInvalidRow, column: "tm", row: 2},
		{name: "time32 seconds beyond a day", rec: rawAt(14, arrow.FixedWidthTypes.Time32s, arrow.Time32(1<<22+5), arrow.Time32(5)),
			is: ErrInvalidRow, column: "tm", row: 2},
		{name: "date64 beyond DATE", rec: rawAt(13, arrow.FixedWidthTypes.Date64, arrow.Date64((1<<32+5)*86_400_000), arrow.Date64(5*86_400_000)),
			is: ErrInvalidRow, column: "dt", row: 2},
		{
			name:    "missing column",
			rec:     func() arrow.RecordBatch { return dropColumn(t, toArrow(t, tbl, types, good()), "ts") },
			is:      ErrSchemaMismatch,
			message: `column "ts" is missing`,
		},
		{
			name:    "extra column",
			rec:     func() arrow.RecordBatch { return addColumn(t, toArrow(t, tbl, types, good()), "extra") },
			is:      ErrSchemaMismatch,
			message: `"extra" is not a table column`,
		},
		{
			name: "wrong type",
			rec: func() arrow.RecordBatch {
				return toArrow(t, tbl, replaceType(0, arrow.PrimitiveTypes.Int32), intRows(good()))
			},
			is:      ErrSchemaMismatch,
			message: `column "id" of type BIGINT cannot be read from arrow int32`,
		},
		{
			name: "decimal scale",
			rec: func() arrow.RecordBatch {
				return toArrow(t, tbl, replaceType(8, &arrow.Decimal128Type{Precision: 10, Scale: 3}), good())
			},
			is:      ErrSchemaMismatch,
			message: `scale 3, want 2`,
		},
		{
			name: "timestamp zone",
			rec: func() arrow.RecordBatch {
				return toArrow(t, tbl, replaceType(15, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}), good())
			},
			is:      ErrSchemaMismatch,
			message: `TIMESTAMP needs a timestamp without a time zone`,
		},
		{
			name:    "unsupported type",
			rec:     func() arrow.RecordBatch { return uint32Column(t, toArrow(t, tbl, types, good()), "s") },
			is:      ErrUnsupportedArrowType,
			message: `column "s": arrow uint32`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			tmp := t.TempDir()
			b, err := New(s, Target{Table: tbl, Snapshot: testTarget(s), SnapshotIDs: snapIDs(2)}, Options{TempDir: tmp})
			if err != nil {
				t.Fatal(err)
			}
			rec := tc.rec()
			defer rec.Release()
			err = b.Add(t.Context(), rec)
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if tc.column != "" {
				var re *RowError
				if !errors.As(err, &re) || re.Column != tc.column || re.Row != tc.row || re.Batch != 0 {
					t.Fatalf("err = %#v, want row %d column %q", err, tc.row, tc.column)
				}
			}
			if tc.message != "" && !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.message)
			}
			if _, ferr := b.Finish(t.Context()); ferr == nil {
				t.Fatal("Finish after a failed Add succeeded")
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if keys := s.metadataKeys(t); len(keys) != 0 {
				t.Fatalf("_METADATA written: %v", keys)
			}
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("temp files left: %v", left)
			}
		})
	}
}

func intRows(rows []kv.Row) []kv.Row {
	for _, r := range rows {
		if r[0] != nil {
			r[0] = int32(r[0].(int64))
		}
	}
	return rows
}

func dropColumn(t *testing.T, rec arrow.RecordBatch, name string) arrow.RecordBatch {
	t.Helper()
	defer rec.Release()
	i := rec.Schema().FieldIndices(name)[0]
	fields := slices.Delete(slices.Clone(rec.Schema().Fields()), i, i+1)
	cols := slices.Delete(slices.Clone(rec.Columns()), i, i+1)
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

func addColumn(t *testing.T, rec arrow.RecordBatch, name string) arrow.RecordBatch {
	t.Helper()
	defer rec.Release()
	b := array.NewInt32Builder(memory.DefaultAllocator)
	defer b.Release()
	for range rec.NumRows() {
		b.Append(1)
	}
	col := b.NewArray()
	defer col.Release()
	fields := append(slices.Clone(rec.Schema().Fields()), arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int32})
	cols := append(slices.Clone(rec.Columns()), col)
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

// uint32Column replaces column name of rec by a uint32 column (a type no
// kv type takes).
func uint32Column(t *testing.T, rec arrow.RecordBatch, name string) arrow.RecordBatch {
	t.Helper()
	defer rec.Release()
	i := rec.Schema().FieldIndices(name)[0]
	ub := array.NewUint32Builder(memory.DefaultAllocator)
	defer ub.Release()
	for range rec.NumRows() {
		ub.Append(7)
	}
	col := ub.NewArray()
	defer col.Release()
	fields := slices.Clone(rec.Schema().Fields())
	fields[i] = arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Uint32, Nullable: true}
	cols := slices.Clone(rec.Columns())
	cols[i] = col
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

// TestPartitionedTarget: rows of the target partition build (keys without
// the partition column, metadata with the partition id); a row of another
// partition is an error.
func TestPartitionedTarget(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{
		SchemaID: 1,
		Columns: []kv.Column{
			{Name: "day", Type: mustType(t, "STRING")},
			{Name: "id", Type: mustType(t, "INT")},
			{Name: "v", Type: mustType(t, "STRING"), Nullable: true},
		},
		PrimaryKey: []string{"day", "id"}, PartitionKeys: []string{"day"}, Buckets: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	types := []arrow.DataType{arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String}
	s := newTestStore(t)
	st := testTarget(s)
	st.Partition, st.PartitionID = "20240101", 55
	build := func(rows []kv.Row) ([]BucketResult, error) {
		b, err := New(s, Target{Table: tbl, Snapshot: st, SnapshotIDs: snapIDs(2)}, Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		rec := toArrow(t, tbl, types, rows)
		defer rec.Release()
		if err := b.Add(t.Context(), rec); err != nil {
			return nil, err
		}
		return b.Finish(t.Context())
	}
	_, err = build([]kv.Row{{"20240101", int32(1), "a"}, {"20240102", int32(2), "b"}})
	var re *RowError
	if !errors.Is(err, ErrWrongPartition) || !errors.As(err, &re) || re.Row != 1 {
		t.Fatalf("err = %v, want ErrWrongPartition at row 1", err)
	}
	res, err := build([]kv.Row{{"20240101", int32(1), "a"}, {"20240101", int32(2), nil}})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, r := range res {
		m, got := restoreBucket(t, s, r)
		if m.PartitionID == nil || *m.PartitionID != 55 || !strings.Contains(m.SnapshotLocation, "/20240101-p55/") {
			t.Fatalf("metadata %+v", m)
		}
		for _, p := range got {
			key, err := tbl.DecodeKey(p.k)
			if err != nil || len(key) != 1 {
				t.Fatalf("key %x decodes to %v, %v: want the id only", p.k, key, err)
			}
		}
		rows += len(got)
	}
	if rows != 2 {
		t.Fatalf("%d rows", rows)
	}
	if _, err := New(s, Target{Table: tbl, Snapshot: testTarget(s), SnapshotIDs: snapIDs(2)}, Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("partitioned table, unpartitioned target: %v", err)
	}
}

// TestPartitionColumnsFilled: for a build of one partition, a batch
// without some or all of the partition-key columns encodes exactly as the
// same rows with them (the partition's values); a missing column that is
// not a partition key, or a missing partition key without a target
// partition, is still a schema mismatch, and a present partition column
// of another partition is still ErrWrongPartition.
func TestPartitionColumnsFilled(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{
		Columns: []kv.Column{
			{Name: "day", Type: mustType(t, "DATE")},
			{Name: "id", Type: mustType(t, "BIGINT")},
			{Name: "region", Type: mustType(t, "STRING")},
			{Name: "v", Type: mustType(t, "STRING"), Nullable: true},
		},
		PrimaryKey: []string{"day", "region", "id"}, PartitionKeys: []string{"day", "region"}, Buckets: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	types := []arrow.DataType{arrow.FixedWidthTypes.Date32, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String, arrow.BinaryTypes.String}
	var rows []kv.Row
	for i := range int64(300) {
		var v any = fmt.Sprint("v", i)
		if i%7 == 0 {
			v = nil
		}
		rows = append(rows, kv.Row{kv.Date(19723), i * 7919, "eu-west", v})
	}
	part, err := tbl.PartitionName(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	full := toArrow(t, tbl, types, rows)
	defer full.Release()
	// project keeps the named columns of full.
	project := func(names ...string) arrow.RecordBatch {
		var fields []arrow.Field
		var cols []arrow.Array
		for i, f := range full.Schema().Fields() {
			if slices.Contains(names, f.Name) {
				fields = append(fields, f)
				cols = append(cols, full.Column(i))
			}
		}
		return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, full.NumRows())
	}
	type kvb struct {
		bucket     int
		key, value string
	}
	encode := func(partition string, rec arrow.RecordBatch) ([]kvb, error) {
		var out []kvb
		err := NewRowEncoder(tbl, partition).Encode(rec, 0, func(_ int, bucket int, key, value []byte) error {
			out = append(out, kvb{bucket, string(key), string(value)})
			return nil
		})
		return out, err
	}
	want, err := encode(part, full)
	if err != nil || len(want) != len(rows) {
		t.Fatalf("full batch: %d pairs, %v", len(want), err)
	}
	for _, names := range [][]string{{"id", "region", "v"}, {"day", "id", "v"}, {"id", "v"}, {"v", "id"}} {
		rec := project(names...)
		got, err := encode(part, rec)
		rec.Release()
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("batch of %v: %d pairs (equal: %v), %v", names, len(got), slices.Equal(got, want), err)
		}
	}
	for _, tc := range []struct {
		partition string
		names     []string
		want      error
		text      string
	}{
		{part, []string{"day", "region", "v"}, ErrSchemaMismatch, `column "id" is missing`},
		{"", []string{"id", "region", "v"}, ErrSchemaMismatch, `column "day" is missing`},
		{"2024-01-01", []string{"id", "v"}, ErrSchemaMismatch, `target partition "2024-01-01" gives no value`},
	} {
		rec := project(tc.names...)
		_, err := encode(tc.partition, rec)
		rec.Release()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("partition %q, batch of %v: %v, want %v saying %q", tc.partition, tc.names, err, tc.want, tc.text)
		}
	}
	other, err := tbl.PartitionName(kv.Row{kv.Date(19724), int64(0), "eu-west", nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encode(other, full); !errors.Is(err, ErrWrongPartition) {
		t.Errorf("rows of %s into %s: %v, want ErrWrongPartition", part, other, err)
	}
	rec := project("id", "region", "v")
	defer rec.Release()
	// Filled from the target, the rows are the target's.
	if got, err := encode(other, rec); err != nil || len(got) != len(rows) || slices.Equal(got, want) {
		t.Errorf("batch without day into %s: %d pairs, %v; want the rows in that partition", other, len(got), err)
	}
}
