package kv

import (
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// Row holds one Go value per column, in column order; nil is NULL. The Go type of
// each value follows the column's kind:
//
//	BOOLEAN bool          TINYINT int8          SMALLINT int16      INT int32
//	BIGINT int64          FLOAT float32         DOUBLE float64      DECIMAL Decimal
//	CHAR, STRING string   BINARY, BYTES []byte  DATE Date           TIME Time
//	TIMESTAMP, TIMESTAMP_LTZ Timestamp
type Row []any

// Date is a number of days since 1970-01-01.
type Date int32

// Time is a number of milliseconds since midnight, 0 to 86,399,999.
type Time int32

// Timestamp is an instant (TIMESTAMP_LTZ) or a wall-clock date-time (TIMESTAMP) as
// milliseconds since 1970-01-01T00:00:00 plus nanoseconds within the millisecond.
type Timestamp struct {
	Millis      int64
	NanoOfMilli int32 // 0..999,999
}

// Fields reads one row's fields by column index without boxing. Accessors are only
// called for non-null fields of the matching kind. The snapshot builder implements it
// over an Arrow record batch; RowFields implements it over a Row.
type Fields interface {
	IsNull(i int) bool
	Bool(i int) bool
	Int8(i int) int8
	Int16(i int) int16
	Int32(i int) int32 // INT, DATE (days), TIME (millis)
	Int64(i int) int64
	Float32(i int) float32
	Float64(i int) float64
	Bytes(i int) []byte // CHAR/STRING (UTF-8), BINARY/BYTES; may alias, not retained
	Decimal(i int) Decimal
	Timestamp(i int) Timestamp
}

// RowFields returns Fields over r. Its accessors panic on a value of the wrong Go
// type, but every Table and Encoder method checks the Go types of a RowFields first
// and returns a *RowError instead.
func RowFields(r Row) Fields { return rowFields(r) }

type rowFields Row

func (r rowFields) IsNull(i int) bool         { return r[i] == nil }
func (r rowFields) Bool(i int) bool           { return r[i].(bool) }
func (r rowFields) Int8(i int) int8           { return r[i].(int8) }
func (r rowFields) Int16(i int) int16         { return r[i].(int16) }
func (r rowFields) Int64(i int) int64         { return r[i].(int64) }
func (r rowFields) Float32(i int) float32     { return r[i].(float32) }
func (r rowFields) Float64(i int) float64     { return r[i].(float64) }
func (r rowFields) Decimal(i int) Decimal     { return r[i].(Decimal) }
func (r rowFields) Timestamp(i int) Timestamp { return r[i].(Timestamp) }

func (r rowFields) Int32(i int) int32 {
	switch v := r[i].(type) {
	case Date:
		return int32(v)
	case Time:
		return int32(v)
	}
	return r[i].(int32)
}

// Bytes aliases a string's bytes instead of copying them; the encoder only reads them.
func (r rowFields) Bytes(i int) []byte {
	if s, ok := r[i].(string); ok {
		return unsafe.Slice(unsafe.StringData(s), len(s))
	}
	return r[i].([]byte)
}

// goTypeNames names the Go type a Row holds for each kind.
var goTypeNames = [...]string{
	KindBoolean:      "bool",
	KindTinyInt:      "int8",
	KindSmallInt:     "int16",
	KindInt:          "int32",
	KindBigInt:       "int64",
	KindFloat:        "float32",
	KindDouble:       "float64",
	KindDecimal:      "kv.Decimal",
	KindChar:         "string",
	KindString:       "string",
	KindBinary:       "[]byte",
	KindBytes:        "[]byte",
	KindDate:         "kv.Date",
	KindTime:         "kv.Time",
	KindTimestamp:    "kv.Timestamp",
	KindTimestampLTZ: "kv.Timestamp",
}

// checkGoType reports whether the non-nil v is the Go type a Row holds for kind k.
func checkGoType(k Kind, v any) error {
	var ok bool
	switch k {
	case KindBoolean:
		_, ok = v.(bool)
	case KindTinyInt:
		_, ok = v.(int8)
	case KindSmallInt:
		_, ok = v.(int16)
	case KindInt:
		_, ok = v.(int32)
	case KindBigInt:
		_, ok = v.(int64)
	case KindFloat:
		_, ok = v.(float32)
	case KindDouble:
		_, ok = v.(float64)
	case KindDecimal:
		_, ok = v.(Decimal)
	case KindChar, KindString:
		_, ok = v.(string)
	case KindBinary, KindBytes:
		_, ok = v.([]byte)
	case KindDate:
		_, ok = v.(Date)
	case KindTime:
		_, ok = v.(Time)
	case KindTimestamp, KindTimestampLTZ:
		_, ok = v.(Timestamp)
	}
	if !ok {
		return fmt.Errorf("Go type %T does not match %s, want %s", v, k, goTypeNames[k])
	}
	return nil
}

// checkRowFields checks the Go types of the given columns when f is a RowFields; other
// Fields implementations are trusted to return the right types.
func checkRowFields(t *Table, f Fields, columns []int) error {
	r, ok := f.(rowFields)
	if !ok {
		return nil
	}
	if len(r) != len(t.cols) {
		return fmt.Errorf("%w: row has %d values, the table has %d columns", ErrInvalidRow, len(r), len(t.cols))
	}
	for _, i := range columns {
		if r[i] == nil {
			continue
		}
		if err := checkGoType(t.cols[i].Type.Kind, r[i]); err != nil {
			return rowError(t.cols[i].Name, err)
		}
	}
	return nil
}

var errNull = errors.New("null value in a non-nullable column")

// checkString checks a CHAR or STRING value: valid UTF-8, and at most n characters
// for CHAR(n).
func checkString(t Type, b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("string is not valid UTF-8")
	}
	if t.Kind == KindChar {
		if n := utf8.RuneCount(b); n > t.Length {
			return fmt.Errorf("string of %d characters is longer than %s", n, t)
		}
	}
	return nil
}

// checkBinary checks that a BINARY(n) value has at most n bytes.
func checkBinary(t Type, b []byte) error {
	if t.Kind == KindBinary && len(b) > t.Length {
		return fmt.Errorf("%d bytes are longer than %s", len(b), t)
	}
	return nil
}

// checkTime checks that a TIME value is a time of day.
func checkTime(ms int32) error {
	if ms < 0 || ms >= millisPerDay {
		return fmt.Errorf("TIME %d ms is outside 0..%d", ms, millisPerDay-1)
	}
	return nil
}

// checkTimestamp checks the nanosecond part: 0..999,999, and zero at precision <= 3,
// where the compacted format keeps milliseconds only and would silently drop it.
func checkTimestamp(t Type, ts Timestamp) error {
	if ts.NanoOfMilli < 0 || ts.NanoOfMilli > maxNanoOfMilli {
		return fmt.Errorf("nano-of-millisecond %d is outside 0..%d", ts.NanoOfMilli, maxNanoOfMilli)
	}
	if t.Precision <= maxCompactTimestamp && ts.NanoOfMilli != 0 {
		return fmt.Errorf("nano-of-millisecond %d cannot be stored in %s", ts.NanoOfMilli, t)
	}
	return nil
}

const (
	millisPerDay   = 86_400_000
	maxNanoOfMilli = 999_999
)
