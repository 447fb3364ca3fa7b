package kv

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestValidatePartitionName(t *testing.T) {
	for _, ok := range []string{"2024-01-01", "a$b$c", "A_z-9", strings.Repeat("x", 200), "-", "_"} {
		if err := ValidatePartitionName(ok); err != nil {
			t.Errorf("ValidatePartitionName(%q): %v", ok, err)
		}
	}
	for _, tc := range []struct{ name, fragment string }{
		{"", `name "": empty value`},
		{".", `value "." is not allowed`},
		{"..", `value ".." is not allowed`},
		{"a$..", `value ".." is not allowed`},
		{"a/b", `value "a/b" has characters other than [A-Za-z0-9_-]`},
		{"a b", `value "a b" has characters`},
		{"é", `value "é" has characters`},
		{"a$", `name "a$": empty value`},
		{"$a", "empty value"},
		{"a$$b", "empty value"},
		{strings.Repeat("x", 201), "is longer than 200 characters"},
	} {
		err := ValidatePartitionName(tc.name)
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidPartition) {
			t.Errorf("%q: %v does not wrap ErrInvalidPartition", tc.name, err)
		}
	}
}

// The string of every partition type, following Fluss's convertValueOfType
// (cross-checked against a transcription run on JDK 25).
func TestPartitionValueStrings(t *testing.T) {
	ts := func(ms int64, nanos int32) Timestamp { return Timestamp{Millis: ms, NanoOfMilli: nanos} }
	for _, tc := range []struct {
		typ  string
		v    any
		want string
	}{
		{"STRING", "eu-west_1", "eu-west_1"},
		{"CHAR(3)", "ab", "ab"},
		{"BOOLEAN", true, "true"},
		{"BOOLEAN", false, "false"},
		{"BINARY(2)", []byte{0x01, 0xab}, "01ab"},
		{"BYTES", []byte{0xff, 0x00, 0x10}, "ff0010"},
		{"TINYINT", int8(-5), "-5"},
		{"SMALLINT", int16(300), "300"},
		{"INT", int32(math.MinInt32), "-2147483648"},
		{"BIGINT", int64(math.MaxInt64), "9223372036854775807"},
		{"DATE", Date(19655), "2023-10-25"},
		{"DATE", Date(0), "1970-01-01"},
		{"DATE", Date(-1), "1969-12-31"},
		{"DATE", Date(-719162), "0001-01-01"},
		{"DATE", Date(2932896), "9999-12-31"},
		{"TIME", Time(34200000), "09-30-00_000"},
		{"TIME(3)", Time(0), "00-00-00_000"},
		{"TIME", Time(86399999), "23-59-59_999"},
		{"FLOAT", float32(13.2), "13_2"},
		{"FLOAT", float32(1), "1_0"},
		{"FLOAT", float32(-0.0), "0_0"},
		{"FLOAT", float32(math.Copysign(0, -1)), "-0_0"},
		{"FLOAT", float32(1e10), "1_0E10"},
		{"FLOAT", float32(1e7), "1_0E7"},
		{"FLOAT", float32(1234567), "1234567_0"},
		{"FLOAT", float32(0.001), "0_001"},
		{"FLOAT", float32(1e-4), "1_0E-4"},
		{"FLOAT", float32(math.SmallestNonzeroFloat32), "1_4E-45"},
		{"FLOAT", float32(math.MaxFloat32), "3_4028235E38"},
		{"FLOAT", float32(math.NaN()), "NaN"},
		{"FLOAT", float32(math.Inf(1)), "Inf"},
		{"DOUBLE", math.Inf(-1), "-Inf"},
		{"DOUBLE", 15.21, "15_21"},
		{"DOUBLE", 100.0, "100_0"},
		{"DOUBLE", point1 + 0.2, "0_30000000000000004"},
		{"DOUBLE", 123456789.0, "1_23456789E8"},
		{"DOUBLE", 1e21, "1_0E21"},
		{"DOUBLE", 2e-3, "0_002"},
		{"DOUBLE", math.SmallestNonzeroFloat64, "4_9E-324"},
		{"DOUBLE", math.MaxFloat64, "1_7976931348623157E308"},
		{"TIMESTAMP(3)", ts(1698235273182, 0), "2023-10-25-12-01-13_182"},
		{"TIMESTAMP(9)", ts(1698235273182, 456789), "2023-10-25-12-01-13_182456789"},
		{"TIMESTAMP(6)", ts(1698235273000, 1000), "2023-10-25-12-01-13_000001"},
		{"TIMESTAMP(0)", ts(1698235273000, 0), "2023-10-25-12-01-13_"},
		{"TIMESTAMP(3)", ts(0, 0), "1970-01-01-00-00-00_"},
		{"TIMESTAMP(3)", ts(-1, 0), "1969-12-31-23-59-59_999"},
		{"TIMESTAMP_LTZ(3)", ts(1698235273182, 0), "2023-10-25-12-01-13_182"},
		{"TIMESTAMP_LTZ(6)", ts(-62135596800000, 0), "0001-01-01-00-00-00_"},
		{"TIMESTAMP_LTZ(9)", ts(253402300799999, 999999), "9999-12-31-23-59-59_999999999"},
	} {
		typ := mustType(t, tc.typ)
		got, err := PartitionValueString(typ, tc.v)
		if err != nil || got != tc.want {
			t.Errorf("PartitionValueString(%s, %v) = %q, %v; want %q", tc.typ, tc.v, got, err, tc.want)
			continue
		}
		back, err := ParsePartitionValue(typ, got)
		if err != nil {
			t.Errorf("ParsePartitionValue(%s, %q): %v", tc.typ, got, err)
		} else if !valuesEqual(back, tc.v) && !isNaN(back) {
			t.Errorf("ParsePartitionValue(%s, %q) = %v (%T), want %v", tc.typ, got, back, back, tc.v)
		}
	}
}

var point1 = 0.1 // a variable, so that point1 + 0.2 is computed in float64

func isNaN(v any) bool {
	switch x := v.(type) {
	case float32:
		return x != x
	case float64:
		return x != x
	}
	return false
}

func TestPartitionValueErrors(t *testing.T) {
	for _, tc := range []struct {
		typ      string
		v        any
		fragment string
	}{
		{"STRING", "a b", `value "a b" has characters other than [A-Za-z0-9_-]`},
		{"STRING", "a$b", `value "a$b" has characters`},
		{"STRING", "", "empty value"},
		{"STRING", ".", `value "." is not allowed`},
		{"STRING", strings.Repeat("a", 201), "is longer than 200 characters"},
		{"CHAR(2)", "abc", "longer than CHAR(2)"},
		{"BYTES", []byte{}, "empty value"},
		{"BINARY(1)", []byte{1, 2}, "2 bytes are longer than BINARY(1)"},
		{"DATE", Date(-719163), "DATE -719163 (days since 1970-01-01) is outside years 0001..9999"},
		{"DATE", Date(2932897), "outside years 0001..9999"},
		{"TIME", Time(-1), "TIME -1 ms is outside"},
		{"TIMESTAMP(3)", Timestamp{Millis: 253402300800000}, "timestamp 253402300800000 ms is outside years 0001..9999"},
		{"TIMESTAMP(3)", Timestamp{NanoOfMilli: 1}, "cannot be stored in TIMESTAMP(3)"},
		{"DECIMAL(10,2)", DecimalFromInt64(1), "type DECIMAL(10,2) cannot be a partition key"},
		{"INT", nil, "null value"},
		{"INT", int64(1), "Go type int64 does not match INT"},
	} {
		_, err := PartitionValueString(mustType(t, tc.typ), tc.v)
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidPartition) {
			t.Errorf("%s %v: %v does not wrap ErrInvalidPartition", tc.typ, tc.v, err)
		}
	}
}

// Only canonical strings parse, so value <-> string is one to one.
func TestParsePartitionValueRejects(t *testing.T) {
	for _, tc := range []struct{ typ, s, fragment string }{
		{"INT", "01", `value "01" is not canonical, want "1"`},
		{"INT", "+1", `value "+1" has characters other than`},
		{"INT", "-0", "is not canonical"},
		{"INT", "2147483648", "does not parse as INT"},
		{"INT", "x", `value "x" does not parse as INT`},
		{"TINYINT", "128", "does not parse as TINYINT"},
		{"BOOLEAN", "TRUE", `value "TRUE" is not canonical, want "true"`},
		{"BOOLEAN", "1", "is not canonical"},
		{"BOOLEAN", "yes", "does not parse as BOOLEAN"},
		{"BYTES", "AB", `value "AB" is not canonical, want "ab"`},
		{"BYTES", "abc", "does not parse as BYTES"},
		{"BINARY(1)", "abcd", "longer than BINARY(1)"},
		{"CHAR(1)", "ab", "longer than CHAR(1)"},
		{"DATE", "2023-02-30", `value "2023-02-30" is not canonical, want "2023-03-02"`},
		{"DATE", "2023-1-01", "want yyyy-MM-dd"},
		{"DATE", "0000-01-01", "outside years 0001..9999"},
		{"TIME", "24-00-00_000", "TIME 86400000 ms is outside"},
		{"TIME", "09-30-00", "want HH-mm-ss_SSS"},
		{"TIME", "09-60-00_000", "is not canonical"},
		{"FLOAT", "1_00", `value "1_00" is not canonical, want "1_0"`},
		{"FLOAT", "1E10", "is not canonical"},
		{"FLOAT", "Infinity", "is not canonical"},
		{"FLOAT", "nan", "is not canonical"},
		{"FLOAT", "1_0E39", "does not parse as FLOAT"},
		{"DOUBLE", "0x1p-2", "is not canonical"},
		{"DOUBLE", "1_5e3", "is not canonical"},
		{"TIMESTAMP(3)", "2023-10-25-12-01-13_1820", `is not canonical, want "2023-10-25-12-01-13_182"`},
		{"TIMESTAMP(3)", "2023-10-25", "want yyyy-MM-dd-HH-mm-ss_"},
		{"TIMESTAMP(3)", "2023-10-25-12-01-13_182456", "cannot be stored in TIMESTAMP(3)"},
		{"TIMESTAMP(9)", "2023-10-25-12-01-13_1234567890", "want yyyy-MM-dd-HH-mm-ss_"},
		{"TIMESTAMP(9)", "2023-10-25-12-01-13-1", "want yyyy-MM-dd-HH-mm-ss_"},
		{"STRING", "a.b", "has characters other than"},
		{"DECIMAL(5,2)", "1", "cannot be a partition key"},
		{"STRING", "", "empty value"},
	} {
		_, err := ParsePartitionValue(mustType(t, tc.typ), tc.s)
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidPartition) {
			t.Errorf("%s %q: %v does not wrap ErrInvalidPartition", tc.typ, tc.s, err)
		}
	}
}

// randomPartitionValue returns a random value of typ that has a partition string.
func randomPartitionValue(r *rand.Rand, typ Type) any {
	const alphabet = "abcXYZ019_-"
	str := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	bytesOf := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	switch typ.Kind {
	case KindChar:
		return str(1 + r.IntN(typ.Length))
	case KindString:
		return str(1 + r.IntN(40))
	case KindBoolean:
		return r.IntN(2) == 1
	case KindBinary:
		return bytesOf(1 + r.IntN(typ.Length))
	case KindBytes:
		return bytesOf(1 + r.IntN(40))
	case KindTinyInt:
		return int8(r.Uint32())
	case KindSmallInt:
		return int16(r.Uint32())
	case KindInt:
		return int32(r.Uint32())
	case KindBigInt:
		return int64(r.Uint64())
	case KindFloat:
		return math.Float32frombits(r.Uint32())
	case KindDouble:
		return math.Float64frombits(r.Uint64())
	case KindDate:
		return Date(r.IntN(2932896+719162+1) - 719162)
	case KindTime:
		return Time(r.IntN(millisPerDay))
	case KindTimestamp, KindTimestampLTZ:
		ts := Timestamp{Millis: r.Int64N(253402300799999+62135596800000+1) - 62135596800000}
		if typ.Precision > maxCompactTimestamp {
			ts.NanoOfMilli = int32(r.IntN(maxNanoOfMilli + 1))
		}
		return ts
	}
	panic("no partition values for " + typ.String())
}

var partitionTypes = []string{"CHAR(5)", "STRING", "BOOLEAN", "BINARY(4)", "BYTES", "TINYINT", "SMALLINT",
	"INT", "BIGINT", "FLOAT", "DOUBLE", "DATE", "TIME(3)", "TIMESTAMP(3)", "TIMESTAMP(9)",
	"TIMESTAMP_LTZ(0)", "TIMESTAMP_LTZ(6)"}

func TestPartitionValueRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, ts := range partitionTypes {
		typ := mustType(t, ts)
		for range 2000 {
			v := randomPartitionValue(r, typ)
			s, err := PartitionValueString(typ, v)
			if err != nil {
				t.Fatalf("PartitionValueString(%s, %v): %v", typ, v, err)
			}
			back, err := ParsePartitionValue(typ, s)
			if err != nil {
				t.Fatalf("ParsePartitionValue(%s, %q): %v", typ, s, err)
			}
			if !valuesEqual(back, v) && !(isNaN(back) && isNaN(v)) {
				t.Fatalf("%s: %v -> %q -> %v", typ, v, s, back)
			}
		}
	}
}

func partitionedTable(t testing.TB) *Table {
	return mustTable(t, TableSchema{
		Columns: []Column{
			col(t, "id", "BIGINT", false),
			col(t, "dt", "DATE", false),
			col(t, "region", "STRING", false),
			col(t, "h", "TINYINT", false),
			col(t, "v", "STRING", true),
		},
		PrimaryKey:    []string{"id", "dt", "region", "h"},
		PartitionKeys: []string{"dt", "region", "h"},
		Buckets:       4,
	})
}

func TestTablePartitionName(t *testing.T) {
	tbl := partitionedTable(t)
	row := Row{int64(1), Date(19723), "eu-west", int8(7), nil}
	name, err := tbl.PartitionName(row)
	if err != nil || name != "2024-01-01$eu-west$7" {
		t.Fatalf("PartitionName = %q, %v", name, err)
	}
	values, err := tbl.ParsePartitionName(name)
	if err != nil || !rowsEqual(values, Row{Date(19723), "eu-west", int8(7)}) {
		t.Fatalf("ParsePartitionName = %v, %v", values, err)
	}
	// The key excludes the partition columns.
	key, err := tbl.EncodeKey(row)
	if err != nil || string(key) != "\x01" {
		t.Fatalf("EncodeKey = % x, %v", key, err)
	}

	for _, tc := range []struct {
		edit     func(r Row)
		fragment string
	}{
		{func(r Row) { r[2] = "eu west" }, `kv: invalid partition: column "region": value "eu west" has characters`},
		{func(r Row) { r[2] = strings.Repeat("x", 195) }, "is longer than 200 characters"},
		{func(r Row) { r[1] = "2024-01-01" }, `column "dt": Go type string does not match DATE`},
	} {
		r := append(Row{}, row...)
		tc.edit(r)
		_, err := tbl.PartitionName(r)
		wantErr(t, err, tc.fragment)
	}
	var re *RowError
	if _, err := tbl.NewEncoder().PartitionName(nullFields{RowFields(row), 3}); !errors.As(err, &re) ||
		re.Column != "h" || !errors.Is(err, ErrInvalidPartition) {
		t.Fatalf("null partition value: %v", err)
	}

	for _, tc := range []struct{ name, fragment string }{
		{"2024-01-01$eu-west", `name "2024-01-01$eu-west" has 2 values, the table has 3 partition keys [dt region h]`},
		{"2024-01-01$eu-west$300", `column "h": value "300" does not parse as TINYINT`},
		{"2024-1-01$eu-west$7", `column "dt": value "2024-1-01" does not parse as DATE`},
		{"2024-01-01$eu/west$7", "has characters other than"},
	} {
		_, err := tbl.ParsePartitionName(tc.name)
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidPartition) {
			t.Errorf("%q: %v does not wrap ErrInvalidPartition", tc.name, err)
		}
	}

	plain := codecTable(t)
	if name, err := plain.PartitionName(make(Row, plain.NumColumns())); name != "" || err != nil {
		t.Fatalf("non-partitioned PartitionName = %q, %v", name, err)
	}
	_, err = plain.ParsePartitionName("x")
	wantErr(t, err, `name "x" given for a table without partition keys`)
}

// nullFields reports column null as NULL.
type nullFields struct {
	Fields
	null int
}

func (f nullFields) IsNull(i int) bool { return i == f.null || f.Fields.IsNull(i) }

// TestPartitionNaNIsJavas: a DOUBLE partition value "NaN" is Java's NaN
// (0x7ff8000000000000), the one Arrow and Parquet rows carry: filled from
// the partition name it had Go's math.NaN() bits, other bytes than the
// rows' own.
func TestPartitionNaNIsJavas(t *testing.T) {
	v, err := ParsePartitionValue(mustType(t, "DOUBLE"), "NaN")
	if f, ok := v.(float64); err != nil || !ok || math.Float64bits(f) != 0x7ff8000000000000 {
		t.Fatalf("DOUBLE NaN: %v (%T), %v", v, v, err)
	}
	v, err = ParsePartitionValue(mustType(t, "FLOAT"), "NaN")
	if f, ok := v.(float32); err != nil || !ok || math.Float32bits(f) != 0x7fc00000 {
		t.Fatalf("FLOAT NaN: %v (%T), %v", v, v, err)
	}
}
