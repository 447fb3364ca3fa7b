package kv

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf8"
)

// source derives choices deterministically from fuzz bytes; once they run out every
// choice is zero.
type source struct{ b []byte }

func (s *source) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *source) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(s.byte())
	}
	return v
}

func (s *source) intn(n int) int { return int(s.uint64()>>1) % n }
func (s *source) bit() bool      { return s.byte()&1 == 1 }

var fuzzRunes = []rune{'a', 'Z', '0', '-', '_', ' ', '/', 'é', 'ß', '日', '本', '😀'}

func (s *source) string(maxRunes int) string {
	r := make([]rune, s.intn(maxRunes+1))
	for i := range r {
		r[i] = fuzzRunes[s.intn(len(fuzzRunes))]
	}
	return string(r)
}

func (s *source) bytes(max int) []byte {
	b := make([]byte, s.intn(max+1))
	for i := range b {
		b[i] = s.byte()
	}
	return b
}

func (s *source) typ() Type {
	switch k := Kind(1 + s.intn(int(KindTimestampLTZ))); k {
	case KindDecimal:
		p := 1 + s.intn(maxDecimalPrecision)
		return Type{Kind: k, Precision: p, Scale: s.intn(p + 1)}
	case KindChar, KindBinary:
		return Type{Kind: k, Length: 1 + s.intn(5)}
	case KindTime, KindTimestamp, KindTimestampLTZ:
		return Type{Kind: k, Precision: s.intn(maxTimePrecision + 1)}
	default:
		return Type{Kind: k}
	}
}

// value returns a valid non-null value of type t.
func (s *source) value(t Type) any {
	switch t.Kind {
	case KindBoolean:
		return s.bit()
	case KindTinyInt:
		return int8(s.byte())
	case KindSmallInt:
		return int16(s.uint64())
	case KindInt:
		return int32(s.uint64())
	case KindBigInt:
		return int64(s.uint64())
	case KindFloat:
		return math.Float32frombits(uint32(s.uint64()))
	case KindDouble:
		return math.Float64frombits(s.uint64())
	case KindDecimal:
		x := new(big.Int).SetUint64(s.uint64())
		x.Lsh(x, 64).Or(x, new(big.Int).SetUint64(s.uint64()))
		x.Mod(x, bigPow10[t.Precision])
		if s.bit() {
			x.Neg(x)
		}
		return DecimalFromBig(x)
	case KindChar:
		return s.string(t.Length)
	case KindString:
		return s.string(12)
	case KindBinary:
		return s.bytes(t.Length)
	case KindBytes:
		return s.bytes(12)
	case KindDate:
		return Date(int32(s.uint64()))
	case KindTime:
		return Time(s.intn(millisPerDay))
	case KindTimestamp, KindTimestampLTZ:
		ts := Timestamp{Millis: int64(s.uint64())}
		if t.Precision > maxCompactTimestamp {
			ts.NanoOfMilli = int32(s.intn(maxNanoOfMilli + 1))
		}
		return ts
	}
	panic("unknown kind")
}

// tableAndRow derives a valid schema and a valid row from fuzz bytes.
func tableAndRow(t *testing.T, data []byte) (*Table, Row) {
	s := &source{b: data}
	n := 1 + s.intn(8)
	schema := TableSchema{SchemaID: int16(s.intn(math.MaxInt16 + 1)), Buckets: 1 + s.intn(MaxBuckets)}
	pkLen := 1 + s.intn(n)
	for i := range n {
		c := Column{Name: string(rune('a' + i)), Type: s.typ(), Nullable: i >= pkLen && s.bit()}
		schema.Columns = append(schema.Columns, c)
		if i < pkLen {
			schema.PrimaryKey = append(schema.PrimaryKey, c.Name)
			if i > 0 && c.Type.Kind != KindDecimal && s.intn(4) == 0 {
				schema.PartitionKeys = append(schema.PartitionKeys, c.Name)
			}
		}
	}
	var physical []string
	for _, name := range schema.PrimaryKey {
		if !slices.Contains(schema.PartitionKeys, name) {
			physical = append(physical, name)
		}
	}
	schema.Bucketing = Bucketing(s.intn(3))
	switch {
	case schema.Bucketing == BucketingIceberg:
		schema.Bucketing = BucketingFluss
		for _, name := range physical {
			if icebergKeyKind(schema.Columns[name[0]-'a'].Type.Kind) {
				schema.Bucketing, schema.BucketKey = BucketingIceberg, []string{name}
				break
			}
		}
	case s.intn(3) == 0:
		for _, name := range physical {
			if s.bit() {
				schema.BucketKey = append(schema.BucketKey, name)
			}
		}
	}
	tbl, err := NewTable(schema)
	if err != nil {
		t.Fatalf("generated an invalid schema %+v: %v", schema, err)
	}
	row := make(Row, n)
	for i, c := range schema.Columns {
		if !c.Nullable || !s.bit() {
			row[i] = s.value(c.Type)
		}
	}
	if tbl.Bucketing() == BucketingIceberg { // Fluss rejects empty iceberg bucket keys
		switch i := tbl.bucketKey[0]; v := row[i].(type) {
		case string:
			if v == "" {
				row[i] = "x"
			}
		case []byte:
			if len(v) == 0 {
				row[i] = []byte{0}
			}
		}
	}
	return tbl, row
}

func checkRoundTrip(t *testing.T, data []byte) {
	tbl, row := tableAndRow(t, data)
	key, value, bucket, err := tbl.NewEncoder().Encode(RowFields(row))
	if err != nil {
		t.Fatalf("Encode(%v) with %+v: %v", row, tbl.Schema(), err)
	}
	id, got, err := tbl.DecodeValue(value)
	if err != nil || id != tbl.SchemaID() || !rowsEqual(got, row) {
		t.Fatalf("DecodeValue = %d, %v, %v; want %d, %v", id, got, err, tbl.SchemaID(), row)
	}
	keyValues, err := tbl.DecodeKey(key)
	if err != nil {
		t.Fatalf("DecodeKey(% x): %v", key, err)
	}
	for j, i := range tbl.physKey {
		if !valuesEqual(keyValues[j], row[i]) {
			t.Fatalf("DecodeKey = %v, row %v", keyValues, row)
		}
	}
	if again, err := tbl.EncodeValue(got); err != nil || !bytes.Equal(again, value) {
		t.Fatalf("re-encoding the decoded row = % x, %v; want % x", again, err, value)
	}
	if b, err := tbl.Bucket(row); err != nil || b != bucket || bucket < 0 || bucket >= tbl.Buckets() {
		t.Fatalf("Bucket = %d, %v; Encode said %d of %d", b, err, bucket, tbl.Buckets())
	}
	if slices.Equal(tbl.bucketKey, tbl.physKey) {
		if b, err := tbl.BucketOfKey(key); err != nil || b != bucket {
			t.Fatalf("BucketOfKey = %d, %v; want %d", b, err, bucket)
		}
	}
	name, err := tbl.PartitionName(row)
	if err != nil {
		if !errors.Is(err, ErrInvalidPartition) {
			t.Fatalf("PartitionName: %v", err)
		}
		return // e.g. a string with a '/', or a date beyond year 9999
	}
	if len(tbl.partKeys) == 0 {
		if name != "" {
			t.Fatalf("PartitionName = %q for a non-partitioned table", name)
		}
		return
	}
	values, err := tbl.ParsePartitionName(name)
	if err != nil {
		t.Fatalf("ParsePartitionName(%q): %v", name, err)
	}
	for j, i := range tbl.partKeys {
		if !valuesEqual(values[j], row[i]) && !(isNaN(values[j]) && isNaN(row[i])) {
			t.Fatalf("partition %q parsed to %v, row %v", name, values, row)
		}
	}
}

func seedBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x7468617720))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// FuzzEncodeDecode checks decode(encode(row)) == row, and that the key, bucket and
// partition name agree with the row, for schemas and rows derived from the input.
func FuzzEncodeDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 300))
	for i := range 32 {
		f.Add(seedBytes(uint64(i), 64+i*16))
	}
	f.Fuzz(checkRoundTrip)
}

// TestRoundTripRandom runs the FuzzEncodeDecode property over many seeded inputs.
func TestRoundTripRandom(t *testing.T) {
	for i := range 3000 {
		checkRoundTrip(t, seedBytes(uint64(1000+i), 400))
	}
}

func decodeTables(t testing.TB) []*Table {
	return []*Table{
		codecTable(t),
		partitionedTable(t),
		mustTable(t, benchSchema(t, BucketingFluss)),
		mustTable(t, TableSchema{Columns: allTypesColumns(t, false), PrimaryKey: []string{"f2", "f12", "f16", "f14"}, Buckets: 1}),
	}
}

// FuzzDecode checks that decoding arbitrary bytes never panics, and that whatever
// decodes is canonical: encoding the result gives the same bytes back.
func FuzzDecode(f *testing.F) {
	for _, tbl := range decodeTables(f) {
		for _, row := range [][]Row{benchRows(3), {append(Row{int32(1), nil}, allTypesRow()...)}} {
			for _, r := range row {
				if v, err := tbl.EncodeValue(r); err == nil {
					f.Add(v)
					k, _ := tbl.EncodeKey(r)
					f.Add(k)
				}
			}
		}
	}
	allTypes := append(unhex(f, "01 00 | 00 00 00"), unhex(f, allTypesFields)...)
	f.Add(allTypes)
	f.Add(unhex(f, allTypesFields))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	tables := decodeTables(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tbl := range tables {
			if _, row, err := tbl.DecodeValue(data); err == nil {
				if v, err := tbl.EncodeValue(row); err != nil || !bytes.Equal(v[2:], data[2:]) {
					t.Fatalf("value % x decoded to %v, which encodes to % x, %v", data, row, v, err)
				}
			} else if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeValue error %v does not wrap ErrCorrupt", err)
			}
			if values, err := tbl.DecodeKey(data); err == nil {
				row := make(Row, tbl.NumColumns())
				for j, i := range tbl.physKey {
					row[i] = values[j]
				}
				if k, err := tbl.EncodeKey(row); err != nil || !bytes.Equal(k, data) {
					t.Fatalf("key % x decoded to %v, which encodes to % x, %v", data, values, k, err)
				}
			} else if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeKey error %v does not wrap ErrCorrupt", err)
			}
		}
	})
}

// FuzzParseType checks that ParseType never panics and that what it accepts prints
// back to an equal type.
func FuzzParseType(f *testing.F) {
	for _, s := range []string{"BIGINT", "decimal(10, 2)", "TIMESTAMP_LTZ(6)", "CHAR(4)", "ARRAY<INT>",
		"DECIMAL(38,38)", "TIME ( 9 )", "INT(", "MAP<a,b>", "x(1,2,3)", "TIMESTAMP(99999999999999999999)", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := ParseType(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidType) && !errors.Is(err, ErrNestedType) {
				t.Fatalf("ParseType(%q) = %v, wrapping no sentinel", s, err)
			}
			return
		}
		if err := typ.Validate(); err != nil {
			t.Fatalf("ParseType(%q) = %+v, which is invalid: %v", s, typ, err)
		}
		if back, err := ParseType(typ.String()); err != nil || back != typ {
			t.Fatalf("ParseType(%q) = %s, which parses back as %+v, %v", s, typ, back, err)
		}
	})
}

func partitionTables(t testing.TB) []*Table {
	tables := []*Table{partitionedTable(t)}
	for _, ts := range partitionTypes {
		tables = append(tables, mustTable(t, TableSchema{
			Columns:       []Column{col(t, "id", "INT", false), col(t, "p", ts, false)},
			PrimaryKey:    []string{"id", "p"},
			PartitionKeys: []string{"p"},
			Buckets:       1,
		}))
	}
	return tables
}

// FuzzParsePartitionName checks that ParsePartitionName never panics and that what
// it accepts names back to the same string.
func FuzzParsePartitionName(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tbl := range partitionTables(f) {
		row := make(Row, tbl.NumColumns())
		for _, i := range tbl.partKeys {
			row[i] = randomPartitionValue(r, tbl.cols[i].Type)
		}
		name, err := tbl.PartitionName(row)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(name)
	}
	for _, s := range []string{"", ".", "$", "NaN", "-Inf", "1_0E10", "2024-02-30", "9999-12-31-23-59-59_999999999", "ab$cd"} {
		f.Add(s)
	}
	tables := partitionTables(f)
	f.Fuzz(func(t *testing.T, name string) {
		if err := ValidatePartitionName(name); err == nil && !utf8.ValidString(name) {
			t.Fatalf("ValidatePartitionName accepted invalid UTF-8 %q", name)
		}
		for _, tbl := range tables {
			values, err := tbl.ParsePartitionName(name)
			if err != nil {
				if !errors.Is(err, ErrInvalidPartition) {
					t.Fatalf("ParsePartitionName(%q) = %v, not wrapping ErrInvalidPartition", name, err)
				}
				continue
			}
			row := make(Row, tbl.NumColumns())
			for j, i := range tbl.partKeys {
				row[i] = values[j]
			}
			if back, err := tbl.PartitionName(row); err != nil || back != name {
				t.Fatalf("ParsePartitionName(%q) = %v, which names %q, %v", name, values, back, err)
			}
		}
	})
}
