package kv

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Partition names [UP metadata/ResolvedPartitionSpec.java, utils/PartitionUtils.java,
// types/PartitionNameConverters.java, metadata/TablePath.java]: the partition values,
// each converted to a string by PartitionUtils.convertValueOfType, joined by "$".

const (
	maxPartitionName   = 200
	partitionSeparator = '$'
	minPartitionYear   = 1
	maxPartitionYear   = 9999
)

var (
	minPartitionTime = time.Date(minPartitionYear, 1, 1, 0, 0, 0, 0, time.UTC)
	maxPartitionTime = time.Date(maxPartitionYear+1, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Millisecond)
)

// MaxNameLen bounds a database or table name.
const MaxNameLen = 200

// CheckName checks a database or table name: 1..MaxNameLen characters
// [A-Za-z0-9_-] (what names it in the error: "database", "table").
func CheckName(what, name string) error {
	ok := name != "" && len(name) <= MaxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%s name %s is not 1..%d characters [A-Za-z0-9_-]", what, quoteShort(name), MaxNameLen)
	}
	return nil
}

// quoteShort quotes s for an error message, cut after 100 bytes: a name in
// a request may be megabytes long, and the error goes back to the caller
// and into logs.
func quoteShort(s string) string {
	const max = 100
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// ValidatePartitionName checks a partition name: at most 200 characters; each
// "$"-separated value non-empty, made only of [A-Za-z0-9_-] and so never "." or
// "..". The error quotes the name.
func ValidatePartitionName(name string) error {
	if len(name) > maxPartitionName {
		return fmt.Errorf("%w: name %s is longer than %d characters", ErrInvalidPartition, quoteShort(name), maxPartitionName)
	}
	for rest, more := name, true; more; {
		var value string
		value, rest, more = strings.Cut(rest, string(partitionSeparator))
		if err := checkPartitionValue(value); err != nil {
			return fmt.Errorf("%w: name %q: %v", ErrInvalidPartition, name, err)
		}
	}
	return nil
}

// checkPartitionValue checks one value of a partition name.
func checkPartitionValue[S ~string | ~[]byte](v S) error {
	switch string(v) {
	case "":
		return errors.New("empty value")
	case ".", "..":
		return fmt.Errorf("value %q is not allowed", v)
	}
	if len(v) > maxPartitionName {
		return fmt.Errorf("value %q is longer than %d characters", v, maxPartitionName)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !isIdentChar(c) && c != '-' {
			return fmt.Errorf("value %q has characters other than [A-Za-z0-9_-]", v)
		}
	}
	return nil
}

func checkPartitionType(t Type) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.Kind == KindDecimal {
		return fmt.Errorf("%w: type %s cannot be a partition key", ErrInvalidPartition, t)
	}
	return nil
}

// PartitionValueString converts a value of type t (the Go type a Row holds) to its
// partition-name string; see docs/formats.md for the rule of each type. A value that
// does not give a valid partition value is an error wrapping ErrInvalidPartition that
// quotes it.
func PartitionValueString(t Type, v any) (string, error) {
	if err := checkPartitionType(t); err != nil {
		return "", err
	}
	if v == nil {
		return "", fmt.Errorf("%w: null value", ErrInvalidPartition)
	}
	if err := checkGoType(t.Kind, v); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidPartition, err)
	}
	b, err := appendPartitionValue(nil, t, rowFields{v}, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidPartition, err)
	}
	return string(b), nil
}

// ParsePartitionValue is the inverse of PartitionValueString: it returns the value of
// type t (the Go type a Row holds) whose string is s. Only the canonical string is
// accepted, so the mapping is one to one.
func ParsePartitionValue(t Type, s string) (any, error) {
	if err := checkPartitionType(t); err != nil {
		return nil, err
	}
	v, err := parsePartitionValue(t, s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPartition, err)
	}
	return v, nil
}

func parsePartitionValue(t Type, s string) (any, error) {
	if err := checkPartitionValue(s); err != nil {
		return nil, err
	}
	v, err := parseValueString(t, s)
	if err != nil {
		return nil, fmt.Errorf("value %q does not parse as %s: %v", s, t, err)
	}
	canonical, err := appendPartitionValue(nil, t, rowFields{v}, 0)
	if err != nil {
		return nil, err
	}
	if string(canonical) != s {
		return nil, fmt.Errorf("value %q is not canonical, want %q", s, canonical)
	}
	return v, nil
}

// parseValueString parses s leniently; parsePartitionValue then insists on the
// canonical form by converting the value back.
func parseValueString(t Type, s string) (any, error) {
	switch t.Kind {
	case KindChar, KindString:
		return s, nil
	case KindBoolean:
		return strconv.ParseBool(s)
	case KindBinary, KindBytes:
		return hex.DecodeString(s)
	case KindTinyInt:
		v, err := strconv.ParseInt(s, 10, 8)
		return int8(v), err
	case KindSmallInt:
		v, err := strconv.ParseInt(s, 10, 16)
		return int16(v), err
	case KindInt:
		v, err := strconv.ParseInt(s, 10, 32)
		return int32(v), err
	case KindBigInt:
		return strconv.ParseInt(s, 10, 64)
	case KindFloat:
		v, err := parseJavaFloat(s, 32)
		return float32(v), err
	case KindDouble:
		return parseJavaFloat(s, 64)
	case KindDate:
		return parseDate(s)
	case KindTime:
		return parseTime(s)
	case KindTimestamp, KindTimestampLTZ:
		return parseTimestamp(s)
	}
	return nil, fmt.Errorf("type %s cannot be a partition key", t)
}

// appendPartitionValue appends the partition-name string of non-null field i of type
// t, following Fluss's PartitionUtils.convertValueOfType, and checks it is a valid
// partition value.
func appendPartitionValue(dst []byte, t Type, f Fields, i int) ([]byte, error) {
	start := len(dst)
	var err error
	switch t.Kind {
	case KindChar, KindString:
		b := f.Bytes(i)
		if err = checkString(t, b); err == nil {
			dst = append(dst, b...)
		}
	case KindBoolean:
		dst = strconv.AppendBool(dst, f.Bool(i))
	case KindBinary, KindBytes:
		b := f.Bytes(i)
		if err = checkBinary(t, b); err == nil {
			dst = hex.AppendEncode(dst, b)
		}
	case KindTinyInt:
		dst = strconv.AppendInt(dst, int64(f.Int8(i)), 10)
	case KindSmallInt:
		dst = strconv.AppendInt(dst, int64(f.Int16(i)), 10)
	case KindInt:
		dst = strconv.AppendInt(dst, int64(f.Int32(i)), 10)
	case KindBigInt:
		dst = strconv.AppendInt(dst, f.Int64(i), 10)
	case KindFloat:
		dst = appendJavaFloat(dst, float64(f.Float32(i)), 32)
	case KindDouble:
		dst = appendJavaFloat(dst, f.Float64(i), 64)
	case KindDate:
		dst, err = appendDate(dst, f.Int32(i))
	case KindTime:
		ms := f.Int32(i)
		if err = checkTime(ms); err == nil {
			dst = appendTime(dst, ms)
		}
	case KindTimestamp, KindTimestampLTZ:
		ts := f.Timestamp(i)
		if err = checkTimestamp(t, ts); err == nil {
			dst, err = appendTimestamp(dst, ts)
		}
	default:
		err = fmt.Errorf("type %s cannot be a partition key", t)
	}
	if err == nil {
		err = checkPartitionValue(dst[start:])
	}
	return dst, err
}

// appendDate appends days since the epoch as yyyy-MM-dd (PartitionNameConverters.dayToString).
func appendDate(dst []byte, days int32) ([]byte, error) {
	d := time.Unix(int64(days)*secondsPerDay, 0).UTC()
	if d.Before(minPartitionTime) || d.After(maxPartitionTime) {
		return dst, fmt.Errorf("DATE %d (days since 1970-01-01) is outside years %04d..%04d",
			days, minPartitionYear, maxPartitionYear)
	}
	return appendYMD(dst, d), nil
}

const secondsPerDay = 86_400

func appendYMD(dst []byte, d time.Time) []byte {
	y, m, day := d.Date()
	dst = appendPadded(dst, y, 4)
	dst = append(dst, '-')
	dst = appendPadded(dst, int(m), 2)
	dst = append(dst, '-')
	return appendPadded(dst, day, 2)
}

// appendTime appends milliseconds of the day as HH-mm-ss_SSS (PartitionNameConverters.milliToString).
func appendTime(dst []byte, ms int32) []byte {
	v := int(ms)
	dst = appendPadded(dst, v/3_600_000, 2)
	dst = append(dst, '-')
	dst = appendPadded(dst, v/60_000%60, 2)
	dst = append(dst, '-')
	dst = appendPadded(dst, v/1000%60, 2)
	dst = append(dst, '_')
	return appendPadded(dst, v%1000, 3)
}

// appendTimestamp appends yyyy-MM-dd-HH-mm-ss_ and the nano-of-second without trailing
// zeros, nothing when it is zero (PartitionNameConverters.timestampToString).
func appendTimestamp(dst []byte, ts Timestamp) ([]byte, error) {
	d := time.UnixMilli(ts.Millis).UTC()
	if d.Before(minPartitionTime) || d.After(maxPartitionTime) {
		return dst, fmt.Errorf("timestamp %d ms is outside years %04d..%04d", ts.Millis, minPartitionYear, maxPartitionYear)
	}
	dst = appendYMD(dst, d)
	for _, v := range [...]int{d.Hour(), d.Minute(), d.Second()} {
		dst = append(dst, '-')
		dst = appendPadded(dst, v, 2)
	}
	dst = append(dst, '_')
	nanos := d.Nanosecond() + int(ts.NanoOfMilli)
	if nanos == 0 {
		return dst, nil
	}
	digits := 9
	for nanos%10 == 0 {
		nanos /= 10
		digits--
	}
	return appendPadded(dst, nanos, digits), nil
}

// appendPadded appends the non-negative v with at least width digits.
func appendPadded(dst []byte, v, width int) []byte {
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], int64(v), 10)
	for n := len(s); n < width; n++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

func parseDate(s string) (Date, error) {
	f, ok := fixedFields(s, "0000-00-00")
	if !ok {
		return 0, errors.New("want yyyy-MM-dd")
	}
	d := time.Date(f[0], time.Month(f[1]), f[2], 0, 0, 0, 0, time.UTC)
	return Date(d.Unix() / secondsPerDay), nil
}

func parseTime(s string) (Time, error) {
	f, ok := fixedFields(s, "00-00-00_000")
	if !ok {
		return 0, errors.New("want HH-mm-ss_SSS")
	}
	return Time(((f[0]*60+f[1])*60+f[2])*1000 + f[3]), nil
}

func parseTimestamp(s string) (Timestamp, error) {
	const layout = "0000-00-00-00-00-00_"
	if len(s) < len(layout) || len(s) > len(layout)+9 {
		return Timestamp{}, errors.New("want yyyy-MM-dd-HH-mm-ss_ and up to 9 fraction digits")
	}
	f, ok := fixedFields(s[:len(layout)], layout)
	frac := s[len(layout):]
	nanos, fracOK := fixedFields(frac, strings.Repeat("0", len(frac)))
	if !ok || !fracOK {
		return Timestamp{}, errors.New("want yyyy-MM-dd-HH-mm-ss_ and up to 9 fraction digits")
	}
	n := 0
	if len(frac) > 0 {
		n = nanos[0]
		for range 9 - len(frac) {
			n *= 10
		}
	}
	d := time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], 0, time.UTC)
	return Timestamp{Millis: d.UnixMilli() + int64(n/1_000_000), NanoOfMilli: int32(n % 1_000_000)}, nil
}

// fixedFields parses s against layout, where '0' stands for a digit and any other
// byte must match; it returns the numbers formed by the runs of digits.
func fixedFields(s, layout string) ([]int, bool) {
	if len(s) != len(layout) {
		return nil, false
	}
	var fields []int
	inRun := false
	for i := 0; i < len(s); i++ {
		if layout[i] != '0' {
			if s[i] != layout[i] {
				return nil, false
			}
			inRun = false
			continue
		}
		if s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		if !inRun {
			fields = append(fields, 0)
			inRun = true
		}
		fields[len(fields)-1] = fields[len(fields)-1]*10 + int(s[i]-'0')
	}
	return fields, true
}

// appendJavaFloat appends v as Java's Float.toString (bitSize 32) or Double.toString
// (bitSize 64) render it since JDK 19, with '.' replaced by '_', and NaN and the
// infinities spelled "NaN", "Inf" and "-Inf" (PartitionNameConverters.reformatFloat).
func appendJavaFloat(dst []byte, v float64, bitSize int) []byte {
	switch {
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	case math.IsInf(v, 1):
		return append(dst, "Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	}
	if math.Signbit(v) {
		dst = append(dst, '-')
		v = -v
	}
	if v == 0 {
		return append(dst, "0_0"...)
	}
	var buf [32]byte
	digits, exp := javaDigits(buf[:], v, bitSize)
	if -3 <= exp && exp < 7 { // plain notation
		if exp < 0 {
			dst = append(dst, "0_"...)
			for range -exp - 1 {
				dst = append(dst, '0')
			}
			return append(dst, digits...)
		}
		for k := 0; k <= exp; k++ {
			if k < len(digits) {
				dst = append(dst, digits[k])
			} else {
				dst = append(dst, '0')
			}
		}
		dst = append(dst, '_')
		if len(digits) <= exp+1 {
			return append(dst, '0')
		}
		return append(dst, digits[exp+1:]...)
	}
	dst = append(dst, digits[0], '_')
	if len(digits) == 1 {
		dst = append(dst, '0')
	} else {
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'E')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// javaDigits returns the significant decimal digits Java selects for the positive
// finite v and the exponent of the first one (v ≈ d.ddd × 10^exp): the shortest
// decimal that rounds to v, except that when one digit suffices Java picks the
// closest of the one- and two-digit decimals that round to v (4.9E-324, not 5E-324).
func javaDigits(buf []byte, v float64, bitSize int) (digits []byte, exp int) {
	shortest := func() ([]byte, int) { return splitExp(strconv.AppendFloat(buf[:0], v, 'e', -1, bitSize)) }
	if digits, exp = shortest(); len(digits) > 1 {
		return digits, exp
	}
	two := strconv.AppendFloat(buf[:0], v, 'e', 1, bitSize)
	if r, err := strconv.ParseFloat(string(two), bitSize); err != nil || r != v {
		return shortest()
	}
	if digits, exp = splitExp(two); digits[1] == '0' {
		digits = digits[:1]
	}
	return digits, exp
}

// splitExp splits strconv's 'e' format "d.ddde±XX" into digits "dddd" and exponent.
func splitExp(s []byte) ([]byte, int) {
	e := len(s) - 1
	for s[e] != 'e' {
		e--
	}
	exp := 0
	for _, c := range s[e+2:] {
		exp = exp*10 + int(c-'0')
	}
	if s[e+1] == '-' {
		exp = -exp
	}
	digits := s[:e]
	if len(digits) > 1 { // drop the point after the first digit
		digits = append(digits[:1], digits[2:]...)
	}
	return digits, exp
}

// NaN returns the NaN Java's Double.NaN is (bits 0x7ff8000000000000), as
// Arrow, Parquet and Fluss clients write it. Go's math.NaN() has other bits
// (0x7ff8000000000001), and a DOUBLE's bytes are its bits: a key or value
// parsed from "NaN" must use this one to be the NaN other writers stored.
// (As a FLOAT it converts to Java's Float.NaN, 0x7fc00000.)
func NaN() float64 { return math.Float64frombits(0x7ff8000000000000) }

// parseJavaFloat parses what appendJavaFloat produces (leniently: the caller checks
// the canonical form).
func parseJavaFloat(s string, bitSize int) (float64, error) {
	switch s {
	case "NaN":
		return NaN(), nil
	case "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(strings.ReplaceAll(s, "_", "."), bitSize)
}

// ParsePartitionName parses a partition name of this table into the typed values of
// the partition keys, in PartitionKeys order. Only canonical names are accepted, so
// PartitionName of the result gives name back.
func (t *Table) ParsePartitionName(name string) (Row, error) {
	if len(t.partKeys) == 0 {
		return nil, fmt.Errorf("%w: name %q given for a table without partition keys", ErrInvalidPartition, name)
	}
	if err := ValidatePartitionName(name); err != nil {
		return nil, err
	}
	values := strings.Split(name, string(partitionSeparator))
	if len(values) != len(t.partKeys) {
		return nil, fmt.Errorf("%w: name %q has %d values, the table has %d partition keys %v",
			ErrInvalidPartition, name, len(values), len(t.partKeys), t.names(t.partKeys))
	}
	row := make(Row, len(values))
	for j, i := range t.partKeys {
		v, err := parsePartitionValue(t.cols[i].Type, values[j])
		if err != nil {
			return nil, partitionError(t.cols[i].Name, err)
		}
		row[j] = v
	}
	return row, nil
}
