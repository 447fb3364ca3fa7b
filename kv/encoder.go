package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
)

// Encoder encodes rows of one table. It reuses its buffers, so encoding a row
// allocates nothing in steady state. It is not safe for concurrent use: use one
// Encoder per goroutine.
type Encoder struct {
	t        *Table
	row      *RowWriter // the compacted row of the last Encode
	offsets  []int      // offsets[i]: where column i starts in row; offsets[n]: the end
	scratch  *RowWriter // key writer for EncodeKey and Bucket
	key      []byte
	val      []byte
	bkey     []byte
	part     []byte
	lastPart string
	tmp      big.Int // scratch for negative decimals beyond int64
}

// NewEncoder returns an encoder for rows of t.
func (t *Table) NewEncoder() *Encoder {
	return &Encoder{
		t:       t,
		row:     NewRowWriter(len(t.cols)),
		offsets: make([]int, len(t.cols)+1),
		scratch: NewKeyWriter(),
	}
}

// Encode checks the row and returns its key bytes (compacted physical primary key),
// value bytes (int16 little-endian schema id + compacted row) and bucket. The returned
// slices are valid until the next call.
//
// The row is checked against the schema: NULL only in nullable columns; CHAR(n) and
// STRING valid UTF-8, CHAR(n) at most n characters; BINARY(n) at most n bytes;
// DECIMAL(p,s) at most p digits; TIME within a day; timestamps' nano-of-millisecond
// within 0..999,999 and zero at precision <= 3; with iceberg bucketing, a non-empty
// CHAR/STRING/BINARY/BYTES bucket key, as Fluss requires. A violation is a *RowError
// naming the column.
func (e *Encoder) Encode(f Fields) (key, value []byte, bucket int, err error) {
	if err := e.encodeRow(f); err != nil {
		return nil, nil, 0, err
	}
	e.key = e.gather(e.key[:0], e.t.physKey)
	bkey := e.key
	switch {
	case e.t.schema.Bucketing == BucketingIceberg:
		i := e.t.bucketKey[0]
		if e.bkey, err = icebergBucketKey(e.bkey[:0], e.t.cols[i], f, i, &e.tmp); err != nil {
			return nil, nil, 0, err
		}
		bkey = e.bkey
	case !e.t.bucketIsKey:
		e.bkey = e.gather(e.bkey[:0], e.t.bucketKey)
		bkey = e.bkey
	}
	return e.key, e.value(), e.t.bucketOf(bkey), nil
}

// encodeRow checks every column and writes the compacted row, recording where each
// column's field starts.
func (e *Encoder) encodeRow(f Fields) error {
	if err := checkRowFields(e.t, f, e.t.all); err != nil {
		return err
	}
	e.row.Reset()
	for i, c := range e.t.cols {
		e.offsets[i] = len(e.row.Bytes())
		if f.IsNull(i) {
			if !c.Nullable {
				return rowError(c.Name, errNull)
			}
			e.row.SetNull(i)
			continue
		}
		if err := e.encodeField(e.row, i, f); err != nil {
			return err
		}
	}
	e.offsets[len(e.t.cols)] = len(e.row.Bytes())
	return nil
}

// value returns the schema id and the row written by encodeRow.
func (e *Encoder) value() []byte {
	e.val = binary.LittleEndian.AppendUint16(e.val[:0], uint16(e.t.schema.SchemaID))
	e.val = append(e.val, e.row.Bytes()...)
	return e.val
}

// gather appends the compacted fields of the given columns, taken from the row
// written by encodeRow: a field's key encoding is its row encoding.
func (e *Encoder) gather(dst []byte, columns []int) []byte {
	row := e.row.Bytes()
	for _, i := range columns {
		dst = append(dst, row[e.offsets[i]:e.offsets[i+1]]...)
	}
	return dst
}

// encodeColumns checks the given columns and writes them to w as a key.
func (e *Encoder) encodeColumns(w *RowWriter, columns []int, f Fields) error {
	if err := checkRowFields(e.t, f, columns); err != nil {
		return err
	}
	w.Reset()
	for _, i := range columns {
		if f.IsNull(i) {
			return rowError(e.t.cols[i].Name, errNull)
		}
		if err := e.encodeField(w, i, f); err != nil {
			return err
		}
	}
	return nil
}

// bucket checks the bucket-key columns and returns the row's bucket.
func (e *Encoder) bucket(f Fields) (int, error) {
	if err := e.encodeColumns(e.scratch, e.t.bucketKey, f); err != nil {
		return 0, err
	}
	bkey := e.scratch.Bytes()
	if e.t.schema.Bucketing == BucketingIceberg {
		i := e.t.bucketKey[0]
		var err error
		if bkey, err = icebergBucketKey(e.bkey[:0], e.t.cols[i], f, i, &e.tmp); err != nil {
			return 0, err
		}
	}
	return e.t.bucketOf(bkey), nil
}

// encodeField checks non-null field i and writes it to w.
func (e *Encoder) encodeField(w *RowWriter, i int, f Fields) error {
	c := &e.t.cols[i]
	var err error
	switch c.Type.Kind {
	case KindBoolean:
		w.WriteBool(f.Bool(i))
	case KindTinyInt:
		w.WriteInt8(f.Int8(i))
	case KindSmallInt:
		w.WriteInt16(f.Int16(i))
	case KindInt, KindDate:
		w.WriteInt32(f.Int32(i))
	case KindTime:
		v := f.Int32(i)
		if err = checkTime(v); err == nil {
			w.WriteInt32(v)
		}
	case KindBigInt:
		w.WriteInt64(f.Int64(i))
	case KindFloat:
		w.WriteFloat32(f.Float32(i))
	case KindDouble:
		w.WriteFloat64(f.Float64(i))
	case KindDecimal:
		err = w.writeDecimal(f.Decimal(i), c.Type.Precision)
	case KindChar, KindString:
		b := f.Bytes(i)
		if err = checkString(c.Type, b); err == nil {
			w.WriteBytes(b)
		}
	case KindBinary, KindBytes:
		b := f.Bytes(i)
		if err = checkBinary(c.Type, b); err == nil {
			w.WriteBytes(b)
		}
	case KindTimestamp, KindTimestampLTZ:
		ts := f.Timestamp(i)
		if err = checkTimestamp(c.Type, ts); err == nil {
			w.WriteTimestamp(ts, c.Type.Precision)
		}
	default:
		err = fmt.Errorf("unsupported type %s", c.Type)
	}
	if err != nil {
		return rowError(c.Name, err)
	}
	return nil
}

var errEmptyIcebergKey = errors.New("an empty value cannot be a bucket key: Fluss's iceberg bucketing rejects empty bucket keys")

// icebergBucketKey appends the Iceberg encoding of field i of column c, which must
// not be empty. tmp is scratch space for decimals; nil allocates.
func icebergBucketKey(dst []byte, c Column, f Fields, i int, tmp *big.Int) ([]byte, error) {
	start := len(dst)
	dst, err := appendIcebergKey(dst, c.Type, f, i, tmp)
	if err == nil && len(dst) == start {
		err = errEmptyIcebergKey
	}
	if err != nil {
		return dst[:start], rowError(c.Name, err)
	}
	return dst, nil
}

// PartitionName returns the partition name of the row: its partition-key values
// converted to strings and joined by "$" (see docs/formats.md), or "" for a
// non-partitioned table. Repeated calls for the same partition return the same
// string without allocating. A value that cannot be named is a *RowError wrapping
// ErrInvalidPartition.
func (e *Encoder) PartitionName(f Fields) (string, error) {
	if len(e.t.partKeys) == 0 {
		return "", nil
	}
	if err := checkRowFields(e.t, f, e.t.partKeys); err != nil {
		return "", err
	}
	e.part = e.part[:0]
	for j, i := range e.t.partKeys {
		if j > 0 {
			e.part = append(e.part, partitionSeparator)
		}
		c := e.t.cols[i]
		if f.IsNull(i) {
			return "", partitionError(c.Name, errNull)
		}
		var err error
		if e.part, err = appendPartitionValue(e.part, c.Type, f, i); err != nil {
			return "", partitionError(c.Name, err)
		}
	}
	if len(e.part) > maxPartitionName {
		return "", fmt.Errorf("%w: name %q is longer than %d characters", ErrInvalidPartition, e.part, maxPartitionName)
	}
	if string(e.part) != e.lastPart {
		e.lastPart = string(e.part)
	}
	return e.lastPart, nil
}
