package snapshotbuild

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"

	"github.com/thawdb/thaw/kv"
)

// ErrSchemaMismatch reports an Arrow schema that does not match the table:
// a missing or extra column, or an Arrow type that cannot carry the column's
// kv type. The message names the column.
var ErrSchemaMismatch = errors.New("snapshotbuild: arrow schema does not match the table")

// ErrWrongPartition reports a row of a partitioned table whose partition
// values name another partition than the target's.
var ErrWrongPartition = errors.New("snapshotbuild: row belongs to another partition")

// ErrUnsupportedArrowType reports an Arrow type with no kv mapping
// (nested, interval, unsigned, ...).
var ErrUnsupportedArrowType = errors.New("snapshotbuild: unsupported arrow type")

// plainBatch returns rec with its extension columns as their storage and
// its dictionary columns decoded into their value type (a Parquet column
// written from a pandas category or any Arrow dictionary reads back as one,
// a Parquet UUID as the arrow.uuid extension), and a release for what it
// made; a batch without such columns is returned as it is.
func plainBatch(rec arrow.RecordBatch) (arrow.RecordBatch, func(), error) {
	plain := func(dt arrow.DataType) bool {
		id := dt.ID()
		return id != arrow.EXTENSION && id != arrow.DICTIONARY
	}
	if !slices.ContainsFunc(rec.Schema().Fields(), func(f arrow.Field) bool { return !plain(f.Type) }) {
		return rec, func() {}, nil
	}
	var made []arrow.Array
	release := func() {
		for _, a := range made {
			a.Release()
		}
	}
	fields := slices.Clone(rec.Schema().Fields())
	cols := slices.Clone(rec.Columns())
	for i := range cols {
		// An extension's storage may be a dictionary, a dictionary's
		// values an extension: a few rounds, then the type is refused
		// as it stands.
		for range 4 {
			switch col := cols[i].(type) {
			case array.ExtensionArray:
				cols[i] = col.Storage()
			case *array.Dictionary:
				vals, err := compute.TakeArray(context.Background(), col.Dictionary(), col.Indices())
				if err != nil {
					release()
					return nil, nil, fmt.Errorf("%w: column %q: decode dictionary %s: %v", ErrUnsupportedArrowType, fields[i].Name, col.DataType(), err)
				}
				made = append(made, vals)
				cols[i] = vals
			}
		}
		fields[i].Type = cols[i].DataType()
	}
	md := rec.Schema().Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	return out, func() {
		out.Release()
		release()
	}, nil
}

// Add routes, encodes and buffers every row of rec. Columns are matched to
// the table's columns by name; every table column must be present and no
// other, except that a build of one partition takes a batch without some
// or all of the partition-key columns and gives every row the partition's
// values there (as Hive-style files, which keep them in their paths).
// Accepted Arrow types per kv type:
//
//	BOOLEAN          bool
//	TINYINT..BIGINT  int8, int16, int32, int64 (exactly)
//	FLOAT, DOUBLE    float32, float64 (every NaN stored as Java's, kv.NaN)
//	DECIMAL(p,s)     decimal32/64/128/256 with scale s (values checked against p)
//	CHAR, STRING     utf8, large_utf8, utf8_view
//	BINARY, BYTES    binary, large_binary, binary_view, fixed_size_binary
//	DATE             date32, date64 (whole days)
//	TIME             time32[s|ms], time64[us|ns] (whole milliseconds)
//	TIMESTAMP        timestamp[any unit] without time zone
//	TIMESTAMP_LTZ    timestamp[any unit] with a time zone
//
// A dictionary column is read as its value type and an extension column
// (arrow.uuid, ...) as its storage type.
// A row that cannot be encoded fails the build with a *RowError naming the
// batch, row and column. Add does not retain rec.
func (b *Builder) Add(ctx context.Context, rec arrow.RecordBatch) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil {
		return err
	}
	if b.target.Table == nil {
		return b.failLocked(fmt.Errorf("%w: Add needs Target.Table", ErrInvalidOptions))
	}
	if b.mu.enc == nil {
		b.mu.enc = NewRowEncoder(b.target.Table, b.target.Snapshot.Partition)
	}
	batch := b.mu.batches
	b.mu.batches++
	err := b.mu.enc.Encode(rec, batch, func(row, bucket int, key, value []byte) error {
		if !b.owned[bucket] {
			if b.opts.OtherBuckets == OtherBucketsSkip {
				b.skippedRows.Add(1)
				return nil
			}
			return &NotOwnedError{Batch: batch, Row: row, Bucket: bucket}
		}
		if err := b.addLocked(ctx, bucket, key, value); err != nil {
			return err
		}
		if row&4095 == 4095 {
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		return b.failLocked(err)
	}
	return nil
}

// RowEncoder converts Arrow record batches into a table's key/value pairs
// and buckets, with the column mapping and checks of Builder.Add. The
// builder uses one; it is exported for routing-only uses (and the
// benchmark's encode stage). Not safe for concurrent use.
type RowEncoder struct {
	t           *kv.Table
	enc         *kv.Encoder
	conv        *arrowConverter
	partition   string
	partitioned bool
}

// NewRowEncoder returns an encoder for rows of t. For a partitioned table,
// partition is the target partition's name and rows of any other partition
// are errors (ErrWrongPartition); a partition-key column a batch lacks
// takes the partition's value.
func NewRowEncoder(t *kv.Table, partition string) *RowEncoder {
	return &RowEncoder{t: t, enc: t.NewEncoder(), partition: partition, partitioned: len(t.PartitionKeys()) > 0}
}

// Encode calls fn for every row of rec, in order, with the row's index, its
// bucket and its key and value bytes (valid only during the call). batch is
// the batch number errors report. An invalid row stops Encode with a
// *RowError; an error from fn stops it and is returned as is.
func (e *RowEncoder) Encode(rec arrow.RecordBatch, batch int64, fn func(row, bucket int, key, value []byte) error) error {
	rec, release, err := plainBatch(rec)
	if err != nil {
		return fmt.Errorf("batch %d: %w", batch, err)
	}
	defer release()
	conv := e.conv
	if conv == nil || !conv.schema.Equal(rec.Schema()) {
		c, err := newArrowConverter(e.t, rec.Schema(), e.partition)
		if err != nil {
			return fmt.Errorf("batch %d: %w", batch, err)
		}
		e.conv, conv = c, c
	}
	conv.bind(rec)
	defer conv.unbind()
	n := int(rec.NumRows())
	var row kv.Fields = &conv.row
	if conv.filled != nil {
		row = &filledRow{arrowRow: &conv.row, filled: conv.filled, consts: conv.consts}
	}
	checks := len(conv.checks) > 0
	for i := range n {
		conv.row.i = i
		if checks {
			if err := conv.check(i); err != nil {
				return rowErr(batch, i, err)
			}
		}
		key, value, bucket, err := e.enc.Encode(row)
		if err != nil {
			return rowErr(batch, i, err)
		}
		if e.partitioned {
			p, err := e.enc.PartitionName(row)
			if err != nil {
				return rowErr(batch, i, err)
			}
			if p != e.partition {
				return rowErr(batch, i, fmt.Errorf("%w: row of partition %q, the target is partition %q",
					ErrWrongPartition, p, e.partition))
			}
		}
		if err := fn(i, bucket, key, value); err != nil {
			return err
		}
	}
	return nil
}

func rowErr(batch int64, row int, err error) error {
	re := &RowError{Batch: batch, Row: row, Err: err}
	var kre *kv.RowError
	if errors.As(err, &kre) {
		re.Column = kre.Column
	}
	var ce *columnError
	if errors.As(err, &ce) {
		re.Column = ce.column
		re.Err = ce.err
	}
	return re
}

type columnError struct {
	column string
	err    error
}

func (e *columnError) Error() string { return fmt.Sprintf("column %q: %v", e.column, e.err) }
func (e *columnError) Unwrap() error { return e.err }

// How an Arrow column is read.
type arrowKind uint8

const (
	akBool arrowKind = iota + 1
	akInt8
	akInt16
	akInt32
	akInt64
	akFloat32
	akFloat64
	akDecimal32
	akDecimal64
	akDecimal128
	akDecimal256
	akString
	akLargeString
	akStringView
	akBinary
	akLargeBinary
	akBinaryView
	akFixedBinary
	akDate32
	akDate64
	akTime32
	akTime64
	akTimestamp
	akFilled // not in the batch: the target partition's value (filledRow)
)

type arrowColumn struct {
	name  string
	kind  arrowKind
	field int   // index in the record batch
	unit  int64 // time units per second (time/timestamp)

	// Bound per batch.
	valid  []byte // validity bitmap, nil when no nulls
	offset int
	arr    arrow.Array
	b      *array.Boolean
	i8     []int8
	i16    []int16
	i32    []int32
	i64    []int64
	f32    []float32
	f64    []float64
	d32    *array.Decimal32
	d64    *array.Decimal64
	d128   []decimal128.Num
	d256   []decimal256.Num
	str    *array.String
	lstr   *array.LargeString
	vstr   *array.StringView
	bin    *array.Binary
	lbin   *array.LargeBinary
	vbin   *array.BinaryView
	fbin   *array.FixedSizeBinary
	needCk bool // values need a per-row range check (see check)
}

// arrowConverter maps one Arrow schema onto a table; columns are indexed by
// table column.
type arrowConverter struct {
	schema *arrow.Schema
	cols   []arrowColumn
	checks []int // table columns whose values need a per-row check
	row    arrowRow
	// filled marks the partition-key columns the schema lacks (nil when
	// none), consts holds their values (the target partition's).
	filled []bool
	consts kv.Fields
}

// newArrowConverter maps s onto t; partition is the target partition's
// name ("" for none), whose values fill partition-key columns s lacks.
func newArrowConverter(t *kv.Table, s *arrow.Schema, partition string) (*arrowConverter, error) {
	c := &arrowConverter{schema: s, cols: make([]arrowColumn, t.NumColumns())}
	seen := make([]bool, s.NumFields())
	var consts kv.Row
	for i := range t.NumColumns() {
		col := t.Column(i)
		idx := s.FieldIndices(col.Name)
		if len(idx) == 0 && partition != "" && slices.Contains(t.PartitionKeys(), i) {
			if consts == nil {
				values, err := t.ParsePartitionName(partition)
				if err != nil {
					return nil, fmt.Errorf("%w: column %q is missing and the target partition %q gives no value: %w", ErrSchemaMismatch, col.Name, partition, err)
				}
				consts = make(kv.Row, t.NumColumns())
				for j, k := range t.PartitionKeys() {
					consts[k] = values[j]
				}
				c.filled = make([]bool, t.NumColumns())
			}
			c.filled[i] = true
			c.cols[i] = arrowColumn{name: col.Name, kind: akFilled}
			continue
		}
		if len(idx) == 0 {
			return nil, fmt.Errorf("%w: column %q is missing", ErrSchemaMismatch, col.Name)
		}
		if len(idx) > 1 {
			return nil, fmt.Errorf("%w: column %q appears %d times", ErrSchemaMismatch, col.Name, len(idx))
		}
		f := s.Field(idx[0])
		seen[idx[0]] = true
		ac, err := mapArrowType(col, f.Type)
		if err != nil {
			return nil, err
		}
		ac.field = idx[0]
		ac.name = col.Name
		c.cols[i] = ac
		if ac.needCk {
			c.checks = append(c.checks, i)
		}
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("%w: arrow column %q is not a table column", ErrSchemaMismatch, s.Field(i).Name)
		}
	}
	c.row.c = c
	if consts != nil {
		c.consts = kv.RowFields(consts)
	}
	return c, nil
}

func mismatch(col kv.Column, dt arrow.DataType) error {
	return fmt.Errorf("%w: column %q of type %s cannot be read from arrow %s", ErrSchemaMismatch, col.Name, col.Type, dt)
}

func timeUnitsPerSecond(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1
	case arrow.Millisecond:
		return 1e3
	case arrow.Microsecond:
		return 1e6
	default:
		return 1e9
	}
}

func mapArrowType(col kv.Column, dt arrow.DataType) (arrowColumn, error) {
	var ac arrowColumn
	id := dt.ID()
	switch id {
	case arrow.DICTIONARY, arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST, arrow.STRUCT, arrow.MAP,
		arrow.SPARSE_UNION, arrow.DENSE_UNION, arrow.EXTENSION, arrow.RUN_END_ENCODED, arrow.LIST_VIEW,
		arrow.LARGE_LIST_VIEW, arrow.INTERVAL_MONTHS, arrow.INTERVAL_DAY_TIME, arrow.INTERVAL_MONTH_DAY_NANO,
		arrow.DURATION, arrow.FLOAT16, arrow.NULL, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return ac, fmt.Errorf("%w: column %q: arrow %s (the column is %s)", ErrUnsupportedArrowType, col.Name, dt, col.Type)
	}
	want := func(ids ...arrow.Type) bool {
		for _, x := range ids {
			if id == x {
				return true
			}
		}
		return false
	}
	switch col.Type.Kind {
	case kv.KindBoolean:
		if !want(arrow.BOOL) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akBool
	case kv.KindTinyInt:
		if !want(arrow.INT8) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akInt8
	case kv.KindSmallInt:
		if !want(arrow.INT16) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akInt16
	case kv.KindInt:
		if !want(arrow.INT32) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akInt32
	case kv.KindBigInt:
		if !want(arrow.INT64) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akInt64
	case kv.KindFloat:
		if !want(arrow.FLOAT32) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akFloat32
	case kv.KindDouble:
		if !want(arrow.FLOAT64) {
			return ac, mismatch(col, dt)
		}
		ac.kind = akFloat64
	case kv.KindDecimal:
		d, ok := dt.(arrow.DecimalType)
		if !ok {
			return ac, mismatch(col, dt)
		}
		if int(d.GetScale()) != col.Type.Scale {
			return ac, fmt.Errorf("%w: column %q of type %s cannot be read from arrow %s: scale %d, want %d",
				ErrSchemaMismatch, col.Name, col.Type, dt, d.GetScale(), col.Type.Scale)
		}
		switch id {
		case arrow.DECIMAL32:
			ac.kind = akDecimal32
		case arrow.DECIMAL64:
			ac.kind = akDecimal64
		case arrow.DECIMAL128:
			ac.kind = akDecimal128
		default:
			ac.kind = akDecimal256
		}
	case kv.KindChar, kv.KindString:
		switch id {
		case arrow.STRING:
			ac.kind = akString
		case arrow.LARGE_STRING:
			ac.kind = akLargeString
		case arrow.STRING_VIEW:
			ac.kind = akStringView
		default:
			return ac, mismatch(col, dt)
		}
	case kv.KindBinary, kv.KindBytes:
		switch id {
		case arrow.BINARY:
			ac.kind = akBinary
		case arrow.LARGE_BINARY:
			ac.kind = akLargeBinary
		case arrow.BINARY_VIEW:
			ac.kind = akBinaryView
		case arrow.FIXED_SIZE_BINARY:
			ac.kind = akFixedBinary
		default:
			return ac, mismatch(col, dt)
		}
	case kv.KindDate:
		switch id {
		case arrow.DATE32:
			ac.kind = akDate32
		case arrow.DATE64:
			ac.kind, ac.needCk = akDate64, true
		default:
			return ac, mismatch(col, dt)
		}
	case kv.KindTime:
		switch t := dt.(type) {
		case *arrow.Time32Type:
			ac.kind, ac.unit = akTime32, timeUnitsPerSecond(t.Unit)
		case *arrow.Time64Type:
			ac.kind, ac.unit = akTime64, timeUnitsPerSecond(t.Unit)
		default:
			return ac, mismatch(col, dt)
		}
		ac.needCk = ac.kind != akTime32 || ac.unit != 1e3 // whole milliseconds of time32[ms] need none (a time64[ms] may pass 32 bits)
	case kv.KindTimestamp, kv.KindTimestampLTZ:
		t, ok := dt.(*arrow.TimestampType)
		if !ok {
			return ac, mismatch(col, dt)
		}
		ltz := col.Type.Kind == kv.KindTimestampLTZ
		if ltz != (t.TimeZone != "") {
			return ac, fmt.Errorf("%w: column %q of type %s cannot be read from arrow %s: %s",
				ErrSchemaMismatch, col.Name, col.Type, dt,
				map[bool]string{true: "TIMESTAMP_LTZ needs a timestamp with a time zone", false: "TIMESTAMP needs a timestamp without a time zone"}[ltz])
		}
		ac.kind, ac.unit = akTimestamp, timeUnitsPerSecond(t.Unit)
		ac.needCk = ac.unit == 1 // seconds may overflow milliseconds
	default:
		return ac, fmt.Errorf("%w: column %q: kv type %s", ErrUnsupportedArrowType, col.Name, col.Type)
	}
	return ac, nil
}

// bind points every column at rec's arrays.
func (c *arrowConverter) bind(rec arrow.RecordBatch) {
	for i := range c.cols {
		ac := &c.cols[i]
		if ac.kind == akFilled {
			continue
		}
		a := rec.Column(ac.field)
		ac.arr = a
		ac.offset = a.Data().Offset()
		ac.valid = nil
		if a.NullN() > 0 {
			ac.valid = a.NullBitmapBytes()
		}
		switch ac.kind {
		case akBool:
			ac.b = a.(*array.Boolean)
		case akInt8:
			ac.i8 = a.(*array.Int8).Values()
		case akInt16:
			ac.i16 = a.(*array.Int16).Values()
		case akInt32:
			ac.i32 = a.(*array.Int32).Values()
		case akInt64:
			ac.i64 = a.(*array.Int64).Values()
		case akFloat32:
			ac.f32 = a.(*array.Float32).Values()
		case akFloat64:
			ac.f64 = a.(*array.Float64).Values()
		case akDecimal32:
			ac.d32 = a.(*array.Decimal32)
		case akDecimal64:
			ac.d64 = a.(*array.Decimal64)
		case akDecimal128:
			ac.d128 = a.(*array.Decimal128).Values()
		case akDecimal256:
			ac.d256 = a.(*array.Decimal256).Values()
		case akString:
			ac.str = a.(*array.String)
		case akLargeString:
			ac.lstr = a.(*array.LargeString)
		case akStringView:
			ac.vstr = a.(*array.StringView)
		case akBinary:
			ac.bin = a.(*array.Binary)
		case akLargeBinary:
			ac.lbin = a.(*array.LargeBinary)
		case akBinaryView:
			ac.vbin = a.(*array.BinaryView)
		case akFixedBinary:
			ac.fbin = a.(*array.FixedSizeBinary)
		case akDate32:
			ac.i32 = asInt32(a.(*array.Date32).Date32Values())
		case akDate64:
			ac.i64 = asInt64(a.(*array.Date64).Date64Values())
		case akTime32:
			ac.i32 = asInt32(a.(*array.Time32).Time32Values())
		case akTime64:
			ac.i64 = asInt64(a.(*array.Time64).Time64Values())
		case akTimestamp:
			ac.i64 = asInt64(a.(*array.Timestamp).TimestampValues())
		}
	}
}

// asInt32 and asInt64 view Arrow's named integer slices (arrow.Date32, ...)
// as plain integers: same layout, no copy.
func asInt32[T ~int32](s []T) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func asInt64[T ~int64](s []T) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

func (c *arrowConverter) unbind() {
	for i := range c.cols {
		c.cols[i] = arrowColumn{name: c.cols[i].name, kind: c.cols[i].kind, field: c.cols[i].field,
			unit: c.cols[i].unit, needCk: c.cols[i].needCk}
	}
}

// check validates the values that Fields cannot report errors for: values
// that do not convert exactly to the kv representation.
func (c *arrowConverter) check(row int) error {
	for _, i := range c.checks {
		ac := &c.cols[i]
		if ac.isNull(row) {
			continue
		}
		switch ac.kind {
		case akDate64:
			v := ac.i64[row]
			if v%86_400_000 != 0 {
				return &columnError{ac.name, fmt.Errorf("date64 value %d ms is not a whole day", v)}
			}
			if d := v / 86_400_000; d < math.MinInt32 || d > math.MaxInt32 {
				return &columnError{ac.name, fmt.Errorf("date64 value %d ms is outside the DATE range (a 32-bit day count)", v)}
			}
		case akTime32, akTime64:
			// Int32 narrows the value to milliseconds: a value beyond a
			// day would wrap into another time of day, so it is refused
			// here, before any narrowing.
			v := ac.rawTime(row)
			if ac.unit == 1 {
				if v < 0 || v >= 86_400 {
					return &columnError{ac.name, fmt.Errorf("time value %d s is outside a day (0 to 86399)", v)}
				}
				continue
			}
			if v%(ac.unit/1000) != 0 {
				return &columnError{ac.name, fmt.Errorf("time value %d (1/%d s) has a sub-millisecond part; TIME stores milliseconds", v, ac.unit)}
			}
			if ms := v / (ac.unit / 1000); ms < 0 || ms >= 86_400_000 {
				return &columnError{ac.name, fmt.Errorf("time value %d (1/%d s) is outside a day", v, ac.unit)}
			}
		case akTimestamp:
			v := ac.i64[row]
			if v > math.MaxInt64/1000 || v < math.MinInt64/1000 {
				return &columnError{ac.name, fmt.Errorf("timestamp %d s overflows milliseconds", v)}
			}
		}
	}
	return nil
}

func (ac *arrowColumn) isNull(row int) bool {
	return ac.valid != nil && !bitutil.BitIsSet(ac.valid, ac.offset+row)
}

func (ac *arrowColumn) rawTime(row int) int64 {
	if ac.kind == akTime32 {
		return int64(ac.i32[row])
	}
	return ac.i64[row]
}

// arrowRow is kv.Fields over one row of the bound batch.
type arrowRow struct {
	c *arrowConverter
	i int
}

var _ kv.Fields = (*arrowRow)(nil)

// filledRow is an arrowRow whose filled columns read consts instead.
type filledRow struct {
	*arrowRow
	filled []bool
	consts kv.Fields
}

func (r *filledRow) src(i int) kv.Fields {
	if r.filled[i] {
		return r.consts
	}
	return r.arrowRow
}

func (r *filledRow) IsNull(i int) bool            { return r.src(i).IsNull(i) }
func (r *filledRow) Bool(i int) bool              { return r.src(i).Bool(i) }
func (r *filledRow) Int8(i int) int8              { return r.src(i).Int8(i) }
func (r *filledRow) Int16(i int) int16            { return r.src(i).Int16(i) }
func (r *filledRow) Int32(i int) int32            { return r.src(i).Int32(i) }
func (r *filledRow) Int64(i int) int64            { return r.src(i).Int64(i) }
func (r *filledRow) Float32(i int) float32        { return r.src(i).Float32(i) }
func (r *filledRow) Float64(i int) float64        { return r.src(i).Float64(i) }
func (r *filledRow) Bytes(i int) []byte           { return r.src(i).Bytes(i) }
func (r *filledRow) Decimal(i int) kv.Decimal     { return r.src(i).Decimal(i) }
func (r *filledRow) Timestamp(i int) kv.Timestamp { return r.src(i).Timestamp(i) }

func (r *arrowRow) IsNull(i int) bool { return r.c.cols[i].isNull(r.i) }
func (r *arrowRow) Bool(i int) bool   { return r.c.cols[i].b.Value(r.i) }
func (r *arrowRow) Int8(i int) int8   { return r.c.cols[i].i8[r.i] }
func (r *arrowRow) Int16(i int) int16 { return r.c.cols[i].i16[r.i] }

func (r *arrowRow) Int32(i int) int32 {
	ac := &r.c.cols[i]
	switch ac.kind {
	case akTime32, akTime64:
		v := ac.rawTime(r.i)
		if ac.unit >= 1000 {
			return int32(v / (ac.unit / 1000))
		}
		return int32(v * 1000) // seconds
	case akDate64:
		return int32(ac.i64[r.i] / 86_400_000)
	default: // INT, DATE32
		return ac.i32[r.i]
	}
}

func (r *arrowRow) Int64(i int) int64 { return r.c.cols[i].i64[r.i] }

// Float32 and Float64 give every NaN as Java's (kv.NaN): a NaN's bits are
// part of a key, and a key "NaN" (parsed to Java's) must find the row
// whatever NaN its writer stored (Go's math.NaN(), x86's 0/0 are others).
func (r *arrowRow) Float32(i int) float32 {
	if v := r.c.cols[i].f32[r.i]; v == v {
		return v
	}
	return float32(kv.NaN())
}

func (r *arrowRow) Float64(i int) float64 {
	if v := r.c.cols[i].f64[r.i]; v == v {
		return v
	}
	return kv.NaN()
}

func (r *arrowRow) Bytes(i int) []byte {
	ac := &r.c.cols[i]
	switch ac.kind {
	case akString:
		return stringBytes(ac.str.Value(r.i))
	case akLargeString:
		return stringBytes(ac.lstr.Value(r.i))
	case akStringView:
		return stringBytes(ac.vstr.Value(r.i))
	case akBinary:
		return ac.bin.Value(r.i)
	case akLargeBinary:
		return ac.lbin.Value(r.i)
	case akBinaryView:
		return ac.vbin.Value(r.i)
	default:
		return ac.fbin.Value(r.i)
	}
}

// stringBytes aliases s: kv.Fields.Bytes results are read, never retained
// or modified.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (r *arrowRow) Decimal(i int) kv.Decimal {
	ac := &r.c.cols[i]
	switch ac.kind {
	case akDecimal32:
		return kv.DecimalFromInt64(int64(ac.d32.Value(r.i)))
	case akDecimal64:
		return kv.DecimalFromInt64(int64(ac.d64.Value(r.i)))
	case akDecimal128:
		n := ac.d128[r.i]
		lo, hi := n.LowBits(), n.HighBits()
		if (hi == 0 && lo <= math.MaxInt64) || (hi == -1 && lo > math.MaxInt64) {
			return kv.DecimalFromInt64(int64(lo))
		}
		return kv.DecimalFromBig(n.BigInt())
	default:
		n := ac.d256[r.i]
		w := n.Array()
		if (w[1] == 0 && w[2] == 0 && w[3] == 0 && w[0] <= math.MaxInt64) ||
			(w[1] == math.MaxUint64 && w[2] == math.MaxUint64 && w[3] == math.MaxUint64 && w[0] > math.MaxInt64) {
			return kv.DecimalFromInt64(int64(w[0]))
		}
		return kv.DecimalFromBig(n.BigInt())
	}
}

func (r *arrowRow) Timestamp(i int) kv.Timestamp {
	ac := &r.c.cols[i]
	v := ac.i64[r.i]
	switch ac.unit {
	case 1:
		return kv.Timestamp{Millis: v * 1000}
	case 1e3:
		return kv.Timestamp{Millis: v}
	case 1e6:
		ms, rem := floorDivMod(v, 1000)
		return kv.Timestamp{Millis: ms, NanoOfMilli: int32(rem * 1000)}
	default:
		ms, rem := floorDivMod(v, 1_000_000)
		return kv.Timestamp{Millis: ms, NanoOfMilli: int32(rem)}
	}
}

func floorDivMod(v, d int64) (int64, int64) {
	q, r := v/d, v%d
	if r < 0 {
		q--
		r += d
	}
	return q, r
}
