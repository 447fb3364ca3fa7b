package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Decoding is strict: it accepts exactly the bytes the encoder produces. Varints must
// be minimal, booleans 0 or 1, null bits only on nullable columns, unused header bits
// zero, and every value must pass the checks the encoder applies. Trailing bytes are
// an error.

var errTruncated = errors.New("truncated")

// reader reads compacted fields from b.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, errTruncated
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// uvarint reads a minimal unsigned LEB128 varint of at most maxBytes bytes whose last
// byte is at most lastMax.
func (r *reader) uvarint(maxBytes int, lastMax byte) (uint64, error) {
	var x uint64
	for i := 0; i < maxBytes; i++ {
		if r.pos >= len(r.b) {
			return 0, errTruncated
		}
		c := r.b[r.pos]
		r.pos++
		if i == maxBytes-1 && c > lastMax {
			return 0, errors.New("varint overflows")
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, errors.New("varint is not minimal")
			}
			return x, nil
		}
	}
	return 0, errors.New("varint overflows") // unreachable: lastMax < 0x80
}

func (r *reader) int32() (int32, error) {
	v, err := r.uvarint(5, 0x0f)
	return int32(uint32(v)), err
}

func (r *reader) int64() (int64, error) {
	v, err := r.uvarint(10, 0x01)
	return int64(v), err
}

// lenBytes reads a varint length and that many bytes, aliasing r.b.
func (r *reader) lenBytes() ([]byte, error) {
	n, err := r.int32()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("negative length %d", n)
	}
	return r.next(int(n))
}

// field reads one non-null field of type t as its Row value.
func (r *reader) field(t Type) (any, error) {
	switch t.Kind {
	case KindBoolean:
		b, err := r.next(1)
		if err != nil {
			return nil, err
		}
		if b[0] > 1 {
			return nil, fmt.Errorf("boolean byte %#x is not 0 or 1", b[0])
		}
		return b[0] == 1, nil
	case KindTinyInt:
		b, err := r.next(1)
		if err != nil {
			return nil, err
		}
		return int8(b[0]), nil
	case KindSmallInt:
		b, err := r.next(2)
		if err != nil {
			return nil, err
		}
		return int16(binary.LittleEndian.Uint16(b)), nil
	case KindInt:
		return r.int32()
	case KindDate:
		v, err := r.int32()
		return Date(v), err
	case KindTime:
		v, err := r.int32()
		if err == nil {
			err = checkTime(v)
		}
		return Time(v), err
	case KindBigInt:
		return r.int64()
	case KindFloat:
		b, err := r.next(4)
		if err != nil {
			return nil, err
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	case KindDouble:
		b, err := r.next(8)
		if err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	case KindDecimal:
		return r.decimal(t)
	case KindChar, KindString:
		b, err := r.lenBytes()
		if err == nil {
			err = checkString(t, b)
		}
		if err != nil {
			return nil, err
		}
		return string(b), nil
	case KindBinary, KindBytes:
		b, err := r.lenBytes()
		if err == nil {
			err = checkBinary(t, b)
		}
		if err != nil {
			return nil, err
		}
		return append([]byte{}, b...), nil
	case KindTimestamp, KindTimestampLTZ:
		return r.timestamp(t)
	}
	return nil, fmt.Errorf("unsupported type %s", t)
}

func (r *reader) decimal(t Type) (Decimal, error) {
	var d Decimal
	if t.Precision <= maxCompactDecimal {
		v, err := r.int64()
		if err != nil {
			return Decimal{}, err
		}
		d = DecimalFromInt64(v)
	} else {
		b, err := r.lenBytes()
		if err != nil {
			return Decimal{}, err
		}
		if d, err = decimalFromUnscaledBytes(b); err != nil {
			return Decimal{}, err
		}
	}
	return d, d.checkPrecision(t.Precision)
}

func (r *reader) timestamp(t Type) (Timestamp, error) {
	var ts Timestamp
	var err error
	if ts.Millis, err = r.int64(); err != nil {
		return Timestamp{}, err
	}
	if t.Precision > maxCompactTimestamp {
		if ts.NanoOfMilli, err = r.int32(); err != nil {
			return Timestamp{}, err
		}
	}
	return ts, checkTimestamp(t, ts)
}

// decodeRow decodes the compacted row (null header + fields) that starts at b[start:],
// reporting positions within b.
func (t *Table) decodeRow(b []byte, start int) (Row, error) {
	n := len(t.cols)
	header := (n + 7) / 8
	if len(b)-start < header {
		return nil, fmt.Errorf("%w: row of %d bytes is shorter than its %d-byte null header", ErrCorrupt, len(b)-start, header)
	}
	nulls := b[start : start+header]
	if n%8 != 0 && nulls[header-1]>>(n%8) != 0 {
		return nil, fmt.Errorf("%w: null bits set beyond column %d", ErrCorrupt, n)
	}
	r := reader{b: b, pos: start + header}
	row := make(Row, n)
	for i, c := range t.cols {
		if nulls[i>>3]&(1<<(i&7)) != 0 {
			if !c.Nullable {
				return nil, fmt.Errorf("%w: column %q: %v", ErrCorrupt, c.Name, errNull)
			}
			continue
		}
		if err := r.decodeInto(row, i, c); err != nil {
			return nil, err
		}
	}
	if err := r.checkEnd(); err != nil {
		return nil, err
	}
	return row, nil
}

// decodeInto reads column c's field into row[i].
func (r *reader) decodeInto(row Row, i int, c Column) error {
	at := r.pos
	v, err := r.field(c.Type)
	if err != nil {
		return fmt.Errorf("%w: column %q at byte %d: %v", ErrCorrupt, c.Name, at, err)
	}
	row[i] = v
	return nil
}

func (r *reader) checkEnd() error {
	if extra := len(r.b) - r.pos; extra != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, extra)
	}
	return nil
}

// DecodeValue decodes value bytes (int16 little-endian schema id + compacted row)
// with this table's columns, whatever the schema id; the caller checks the id. It
// never panics: malformed input is an error wrapping ErrCorrupt.
func (t *Table) DecodeValue(b []byte) (schemaID int16, r Row, err error) {
	if len(b) < 2 {
		return 0, nil, fmt.Errorf("%w: value of %d bytes is shorter than its 2-byte schema id", ErrCorrupt, len(b))
	}
	r, err = t.decodeRow(b, 2)
	if err != nil {
		return 0, nil, err
	}
	return int16(binary.LittleEndian.Uint16(b)), r, nil
}

// DecodeKey decodes key bytes into the values of the physical key columns, in
// PhysicalKey order. It never panics: malformed input is an error wrapping ErrCorrupt.
func (t *Table) DecodeKey(b []byte) (Row, error) {
	r := reader{b: b}
	row := make(Row, len(t.physKey))
	for j, i := range t.physKey {
		if err := r.decodeInto(row, j, t.cols[i]); err != nil {
			return nil, err
		}
	}
	if err := r.checkEnd(); err != nil {
		return nil, err
	}
	return row, nil
}
