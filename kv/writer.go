package kv

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"slices"
)

// RowWriter writes Fluss's compacted format [UP row/compacted/CompactedRowWriter.java]:
// a row (NewRowWriter) starts with a null bit set of (numFields+7)/8 bytes, a key
// (NewKeyWriter) has no header; then each non-null field follows in order. Fields
// must be written in column order, skipping null ones. A RowWriter reuses its buffer
// across Reset calls and is not safe for concurrent use.
type RowWriter struct {
	buf    []byte
	header int
	tmp    big.Int // scratch for negative decimals beyond int64
}

// NewRowWriter returns a writer for rows of numFields fields, with a null header.
func NewRowWriter(numFields int) *RowWriter {
	w := &RowWriter{header: (numFields + 7) / 8}
	w.Reset()
	return w
}

// NewKeyWriter returns a writer for keys: no null header, and SetNull must not be called.
func NewKeyWriter() *RowWriter { return &RowWriter{} }

// Reset starts a new row, keeping the buffer.
func (w *RowWriter) Reset() {
	w.buf = slices.Grow(w.buf[:0], w.header)[:w.header]
	clear(w.buf)
}

// Bytes returns the row written since Reset. It aliases the writer's buffer and is
// valid until the next Reset or write.
func (w *RowWriter) Bytes() []byte { return w.buf }

// SetNull marks field pos null; pos must be below the writer's numFields.
func (w *RowWriter) SetNull(pos int) { w.buf[pos>>3] |= 1 << (pos & 7) }

// WriteBool writes one byte, 1 or 0.
func (w *RowWriter) WriteBool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	w.buf = append(w.buf, b)
}

// WriteInt8 writes one byte.
func (w *RowWriter) WriteInt8(v int8) { w.buf = append(w.buf, byte(v)) }

// WriteInt16 writes two bytes, little-endian.
func (w *RowWriter) WriteInt16(v int16) { w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(v)) }

// WriteInt32 writes the unsigned LEB128 varint of the 32-bit two's complement value:
// 1 to 5 bytes, negative values take 5. It is also the encoding of DATE and TIME.
func (w *RowWriter) WriteInt32(v int32) { w.buf = binary.AppendUvarint(w.buf, uint64(uint32(v))) }

// WriteInt64 writes the unsigned LEB128 varint of the 64-bit two's complement value:
// 1 to 10 bytes.
func (w *RowWriter) WriteInt64(v int64) { w.buf = binary.AppendUvarint(w.buf, uint64(v)) }

// WriteFloat32 writes the IEEE 754 bits, little-endian.
func (w *RowWriter) WriteFloat32(v float32) {
	w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(v))
}

// WriteFloat64 writes the IEEE 754 bits, little-endian.
func (w *RowWriter) WriteFloat64(v float64) {
	w.buf = binary.LittleEndian.AppendUint64(w.buf, math.Float64bits(v))
}

// WriteBytes writes a varint length and the bytes; strings are written as their UTF-8
// bytes.
func (w *RowWriter) WriteBytes(b []byte) {
	w.WriteInt32(int32(len(b)))
	w.buf = append(w.buf, b...)
}

// WriteDecimal writes d as a DECIMAL of the given precision: for precision <= 18 the
// unscaled value as a WriteInt64 varint, otherwise a varint length and the unscaled
// value as minimal big-endian two's complement. A value with more than precision
// digits is an error wrapping ErrInvalidRow.
func (w *RowWriter) WriteDecimal(d Decimal, precision int) error {
	if err := w.writeDecimal(d, precision); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRow, err)
	}
	return nil
}

func (w *RowWriter) writeDecimal(d Decimal, precision int) error {
	if precision < 1 || precision > maxDecimalPrecision {
		return fmt.Errorf("decimal precision %d is out of range 1..%d", precision, maxDecimalPrecision)
	}
	if err := d.checkPrecision(precision); err != nil {
		return err
	}
	if precision <= maxCompactDecimal {
		w.WriteInt64(d.small)
		return nil
	}
	// At most 16 bytes follow, so the varint length is always one byte.
	lenAt := len(w.buf)
	w.buf = d.appendUnscaledBytes(append(w.buf, 0), &w.tmp)
	w.buf[lenAt] = byte(len(w.buf) - lenAt - 1)
	return nil
}

// WriteTimestamp writes the milliseconds as a WriteInt64 varint and, for precision
// above 3, the nano-of-millisecond as a WriteInt32 varint.
func (w *RowWriter) WriteTimestamp(ts Timestamp, precision int) {
	w.WriteInt64(ts.Millis)
	if precision > maxCompactTimestamp {
		w.WriteInt32(ts.NanoOfMilli)
	}
}
