package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
)

// Bucketing functions [UP bucketing/*.java, utils/MurmurHashUtils.java, utils/MathUtils.java].
// Each maps non-empty bucket-key bytes to a bucket in [0, n); n must be positive.

const (
	murmurC1   = 0xcc9e2d51
	murmurC2   = 0x1b873593
	flussSeed  = 42
	murmurN    = 0xe6546b64
	fmixMul1   = 0x85ebca6b
	fmixMul2   = 0xc2b2ae35
	murmurRotK = 15
	murmurRotH = 13
)

func mixK1(k uint32) uint32 { return bits.RotateLeft32(k*murmurC1, murmurRotK) * murmurC2 }

func mixH1(h, k uint32) uint32 { return bits.RotateLeft32(h^k, murmurRotH)*5 + murmurN }

func fmix(h uint32) uint32 {
	h ^= h >> 16
	h *= fmixMul1
	h ^= h >> 13
	h *= fmixMul2
	h ^= h >> 16
	return h
}

// HashUnsafeBytes is Fluss's (and Flink's) MurmurHashUtils.hashUnsafeBytes: murmur3
// over 4-byte little-endian words, but each tail byte is mixed on its own,
// sign-extended, with a full mixK1/mixH1 round; then fmix(h ^ len).
func HashUnsafeBytes(b []byte, seed uint32) int32 {
	h := seed
	aligned := len(b) &^ 3
	for i := 0; i < aligned; i += 4 {
		h = mixH1(h, mixK1(binary.LittleEndian.Uint32(b[i:])))
	}
	for _, c := range b[aligned:] {
		h = mixH1(h, mixK1(uint32(int32(int8(c)))))
	}
	return int32(fmix(h ^ uint32(len(b))))
}

// murmurHash is Fluss's MathUtils.murmurHash: one more murmur round over an int and
// its absolute value, with MinInt32 mapped to 0.
func murmurHash(code int32) int32 {
	h := int32(fmix(mixH1(0, mixK1(uint32(code))) ^ 4))
	switch {
	case h >= 0:
		return h
	case h == math.MinInt32:
		return 0
	}
	return -h
}

// FlussBucket is Fluss's default bucketing: murmurHash(hashUnsafeBytes(key, 42)) % n.
func FlussBucket(key []byte, n int) int {
	return int(murmurHash(HashUnsafeBytes(key, flussSeed))) % n
}

// PaimonBucket is Paimon's bucketing: abs(hashUnsafeBytes(key, 42) % n), with Java's
// signed remainder.
func PaimonBucket(key []byte, n int) int {
	b := int(HashUnsafeBytes(key, flussSeed)) % n
	if b < 0 {
		return -b
	}
	return b
}

// IcebergBucket is the Iceberg spec's bucket transform over Iceberg-encoded key bytes:
// (murmur3_32(key, seed 0) & MaxInt32) % n.
func IcebergBucket(key []byte, n int) int {
	return int(Murmur3_32(key, 0)&math.MaxInt32) % n
}

// Murmur3_32 is standard MurmurHash3 x86 32-bit, as Guava's murmur3_32_fixed.
func Murmur3_32(b []byte, seed uint32) uint32 {
	h := seed
	aligned := len(b) &^ 3
	for i := 0; i < aligned; i += 4 {
		h = mixH1(h, mixK1(binary.LittleEndian.Uint32(b[i:])))
	}
	var k uint32
	switch tail := b[aligned:]; len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		h ^= mixK1(k)
	}
	return fmix(h ^ uint32(len(b)))
}

// icebergKeyKind reports whether Fluss's Iceberg key encoder supports kind k
// [UP row/encode/iceberg/IcebergBinaryRowWriter.java].
func icebergKeyKind(k Kind) bool {
	switch k {
	case KindInt, KindDate, KindTime, KindBigInt, KindFloat, KindDouble, KindTimestamp,
		KindDecimal, KindChar, KindString, KindBinary, KindBytes:
		return true
	}
	return false
}

// AppendIcebergKey appends the Iceberg single-column key encoding of field i of f,
// of type t [UP row/encode/iceberg/IcebergKeyEncoder.java]: INT and DATE as 8-byte
// little-endian longs, TIME as microseconds in 8 bytes, BIGINT 8 bytes, FLOAT and
// DOUBLE their little-endian bits, TIMESTAMP as microseconds in 8 bytes, DECIMAL its
// unscaled minimal big-endian two's complement, CHAR/STRING/BINARY/BYTES their raw
// bytes. Hashed with Murmur3_32 this is the Iceberg spec's bucket hash. Other types,
// TIMESTAMP_LTZ included (as in Fluss), and NULL are errors wrapping ErrInvalidRow.
func AppendIcebergKey(dst []byte, t Type, f Fields, i int) ([]byte, error) {
	if r, ok := f.(rowFields); ok && r[i] != nil {
		if err := checkGoType(t.Kind, r[i]); err != nil {
			return dst, fmt.Errorf("%w: %v", ErrInvalidRow, err)
		}
	}
	out, err := appendIcebergKey(dst, t, f, i, nil)
	if err != nil {
		return dst, fmt.Errorf("%w: %v", ErrInvalidRow, err)
	}
	return out, nil
}

func appendIcebergKey(dst []byte, t Type, f Fields, i int, tmp *big.Int) ([]byte, error) {
	if f.IsNull(i) {
		return dst, errors.New("a null value cannot be a bucket key")
	}
	le := binary.LittleEndian
	switch t.Kind {
	case KindInt, KindDate:
		return le.AppendUint64(dst, uint64(int64(f.Int32(i)))), nil
	case KindTime:
		return le.AppendUint64(dst, uint64(int64(f.Int32(i))*1000)), nil
	case KindBigInt:
		return le.AppendUint64(dst, uint64(f.Int64(i))), nil
	case KindFloat:
		return le.AppendUint32(dst, math.Float32bits(f.Float32(i))), nil
	case KindDouble:
		return le.AppendUint64(dst, math.Float64bits(f.Float64(i))), nil
	case KindTimestamp:
		ts := f.Timestamp(i)
		return le.AppendUint64(dst, uint64(ts.Millis*1000+int64(ts.NanoOfMilli/1000))), nil
	case KindDecimal:
		return f.Decimal(i).appendUnscaledBytes(dst, tmp), nil
	case KindChar, KindString, KindBinary, KindBytes:
		return append(dst, f.Bytes(i)...), nil
	}
	return dst, fmt.Errorf("type %s cannot be an iceberg bucket key", t)
}
