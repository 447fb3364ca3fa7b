package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	"testing"
)

// The test vectors of reference/fluss-bulkload.md sections 4.2-4.4.

func TestKeyVectors(t *testing.T) {
	intKey := mustTable(t, TableSchema{
		Columns:    []Column{col(t, "a", "INT", false), col(t, "b", "BIGINT", false), col(t, "c", "INT", false)},
		PrimaryKey: []string{"a", "b", "c"},
		Buckets:    1,
	})
	strKey := mustTable(t, TableSchema{
		Columns:    []Column{col(t, "a", "INT", false), col(t, "s", "STRING", false)},
		PrimaryKey: []string{"a", "s"},
		Buckets:    1,
	})
	onlyStr := mustTable(t, TableSchema{
		Columns:    []Column{col(t, "s", "STRING", false), col(t, "v", "INT", true)},
		PrimaryKey: []string{"s"},
		Buckets:    1,
	})
	for _, tc := range []struct {
		table *Table
		row   Row
		want  string
	}{
		{intKey, Row{int32(1), int64(3), int32(2)}, "01 03 02"},
		{intKey, Row{int32(2), int64(5), int32(6)}, "02 05 06"},
		{strKey, Row{int32(1), "a2"}, "01 02 61 32"},
		{onlyStr, Row{"a2", nil}, "02 61 32"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			key, err := tc.table.EncodeKey(tc.row)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, tc.want); !bytes.Equal(key, want) {
				t.Fatalf("key = % x, want % x", key, want)
			}
			got, err := tc.table.DecodeKey(key)
			if err != nil {
				t.Fatal(err)
			}
			var want Row
			for _, i := range tc.table.PhysicalKey() {
				want = append(want, tc.row[i])
			}
			if !rowsEqual(got, want) {
				t.Fatalf("DecodeKey = %v, want %v", got, want)
			}
		})
	}
}

// allTypesColumns are the 19 scalar columns of Fluss's encoded_key.hex test.
func allTypesColumns(t testing.TB, nullable bool) []Column {
	types := []string{"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DATE", "TIME",
		"BINARY(20)", "BYTES", "CHAR(2)", "STRING", "DECIMAL(5,2)", "DECIMAL(20,0)",
		"TIMESTAMP(1)", "TIMESTAMP(5)", "TIMESTAMP_LTZ(1)", "TIMESTAMP_LTZ(5)"}
	cols := make([]Column, len(types))
	for i, typ := range types {
		cols[i] = col(t, fmt.Sprintf("f%d", i), typ, nullable)
	}
	return cols
}

func allTypesRow() Row {
	ts := Timestamp{Millis: 1698235273182}
	return Row{true, int8(2), int16(10), int32(100), int64(-6101065172474983726), float32(13.2), 15.21,
		Date(19655), Time(34200000), []byte("1234567890"), []byte("20"), "1", "hello",
		DecimalFromInt64(9), DecimalFromInt64(10), ts, ts, ts, ts}
}

const allTypesFields = `01 | 02 | 0A 00 | 64 | D2 95 FC D8 CE B1 AA AA AB 01 | 33 33 53 41 |
	EC 51 B8 1E 85 6B 2E 40 | C7 99 01 | C0 B3 A7 10 | 0A 31 32 33 34 35 36 37 38 39 30 |
	02 32 30 | 01 31 | 05 68 65 6C 6C 6F | 09 | 01 0A | DE 9F D7 B5 B6 31 |
	DE 9F D7 B5 B6 31 00 | DE 9F D7 B5 B6 31 | DE 9F D7 B5 B6 31 00`

func TestAllTypesVector(t *testing.T) {
	cols := allTypesColumns(t, false)
	var pk []string
	for _, c := range cols {
		pk = append(pk, c.Name)
	}
	tbl := mustTable(t, TableSchema{SchemaID: 1, Columns: cols, PrimaryKey: pk, Buckets: 3})
	row := allTypesRow()
	fields := unhex(t, allTypesFields)

	// As a key: the field encodings concatenated, no header.
	key, err := tbl.EncodeKey(row)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(key, fields) {
		t.Fatalf("key\n got % x\nwant % x", key, fields)
	}

	// As a value: schema id 1 (LE), a 3-byte null header with no bits set, the fields.
	wantValue := append(unhex(t, "01 00 | 00 00 00"), fields...)
	value, err := tbl.EncodeValue(row)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(value, wantValue) {
		t.Fatalf("value\n got % x\nwant % x", value, wantValue)
	}

	// The encoder gives the same bytes, and they decode back to the row.
	k, v, _, err := tbl.NewEncoder().Encode(RowFields(row))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k, fields) || !bytes.Equal(v, wantValue) {
		t.Fatalf("Encode = % x / % x", k, v)
	}
	id, got, err := tbl.DecodeValue(value)
	if err != nil {
		t.Fatal(err)
	}
	if id != 1 || !rowsEqual(got, row) {
		t.Fatalf("DecodeValue = %d, %v; want 1, %v", id, got, row)
	}
	gotKey, err := tbl.DecodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !rowsEqual(gotKey, row) {
		t.Fatalf("DecodeKey = %v, want %v", gotKey, row)
	}
}

func TestNullHeader(t *testing.T) {
	cols := append([]Column{col(t, "id", "INT", false)}, allTypesColumns(t, true)...)
	tbl := mustTable(t, TableSchema{SchemaID: 7, Columns: cols, PrimaryKey: []string{"id"}, Buckets: 1})
	row := append(Row{int32(5)}, allTypesRow()...)
	row[1], row[9], row[19] = nil, nil, nil // bit 1 of byte 0, bit 1 of byte 1, bit 3 of byte 2
	value, err := tbl.EncodeValue(row)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "07 00 | 02 02 08"); !bytes.Equal(value[:5], want) {
		t.Fatalf("value starts % x, want % x", value[:5], want)
	}
	_, got, err := tbl.DecodeValue(value)
	if err != nil {
		t.Fatal(err)
	}
	if !rowsEqual(got, row) {
		t.Fatalf("DecodeValue = %v, want %v", got, row)
	}
}

func TestVarintVectors(t *testing.T) {
	for _, tc := range []struct {
		v    int32
		want string
	}{
		{127, "7f"}, {128, "80 01"}, {300, "ac 02"}, {-1, "ff ff ff ff 0f"}, {0, "00"},
	} {
		w := NewKeyWriter()
		w.WriteInt32(tc.v)
		if want := unhex(t, tc.want); !bytes.Equal(w.Bytes(), want) {
			t.Errorf("WriteInt32(%d) = % x, want % x", tc.v, w.Bytes(), want)
		}
	}
}

func TestBucketingVectors(t *testing.T) {
	for _, tc := range []struct {
		key                    []byte
		n                      int
		fluss, paimon, iceberg int
	}{
		{unhex(t, "00 0A"), 7, 1, 1, 3},
		{unhex(t, "00 0A 0A 0A"), 12, 0, 11, 4},
		{[]byte("2bb87d68-baf9-4e64-90f9-f80910419fa6"), 16, 6, 12, 12},
		{[]byte("The quick brown fox jumps over the lazy dog"), 8, 6, 0, 3},
	} {
		if got := FlussBucket(tc.key, tc.n); got != tc.fluss {
			t.Errorf("FlussBucket(% x, %d) = %d, want %d", tc.key, tc.n, got, tc.fluss)
		}
		if got := PaimonBucket(tc.key, tc.n); got != tc.paimon {
			t.Errorf("PaimonBucket(% x, %d) = %d, want %d", tc.key, tc.n, got, tc.paimon)
		}
		if got := IcebergBucket(tc.key, tc.n); got != tc.iceberg {
			t.Errorf("IcebergBucket(% x, %d) = %d, want %d", tc.key, tc.n, got, tc.iceberg)
		}
	}
}

// Fluss table without a lake: the bucket of a row by its primary key.
func TestDerivedBucketExamples(t *testing.T) {
	for _, tc := range []struct {
		typ       string
		id        any
		key       string
		of4, of16 int
	}{
		{"INT", int32(1), "01", 0, 12},
		{"INT", int32(2), "02", 2, 10},
		{"INT", int32(42), "2a", 2, 10},
		{"STRING", "hello", "05 68 65 6c 6c 6f", 3, 15},
	} {
		for n, want := range map[int]int{4: tc.of4, 16: tc.of16} {
			tbl := mustTable(t, TableSchema{
				Columns:    []Column{col(t, "id", tc.typ, false), col(t, "v", "STRING", true)},
				PrimaryKey: []string{"id"},
				Buckets:    n,
			})
			key, _, bucket, err := tbl.NewEncoder().Encode(RowFields(Row{tc.id, nil}))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(key, unhex(t, tc.key)) || bucket != want {
				t.Errorf("%v of %d: key % x bucket %d, want %s bucket %d", tc.id, n, key, bucket, tc.key, want)
			}
			if b, err := tbl.BucketOfKey(key); err != nil || b != want {
				t.Errorf("BucketOfKey(% x) = %d, %v; want %d", key, b, err, want)
			}
		}
	}
}

func TestIcebergSpecHashes(t *testing.T) {
	long34 := binary.LittleEndian.AppendUint64(nil, 34)
	if got := int32(Murmur3_32(long34, 0)); got != 2017239379 {
		t.Errorf("murmur3_32(long 34) = %d, want 2017239379", got)
	}
	if got := int32(Murmur3_32([]byte("iceberg"), 0)); got != 1210000089 {
		t.Errorf("murmur3_32(\"iceberg\") = %d, want 1210000089", got)
	}
	for _, tc := range []struct {
		typ  string
		id   any
		want int
	}{
		{"INT", int32(34), 3}, {"BIGINT", int64(34), 3}, {"INT", int32(1), 4}, {"BIGINT", int64(1), 4},
	} {
		tbl := mustTable(t, TableSchema{
			Columns:    []Column{col(t, "id", tc.typ, false)},
			PrimaryKey: []string{"id"},
			Buckets:    16,
			Bucketing:  BucketingIceberg,
		})
		_, _, bucket, err := tbl.NewEncoder().Encode(RowFields(Row{tc.id}))
		if err != nil {
			t.Fatal(err)
		}
		if bucket != tc.want {
			t.Errorf("iceberg bucket of %s %v = %d, want %d", tc.typ, tc.id, bucket, tc.want)
		}
	}
}

// The hash examples of the Iceberg spec's "Appendix B", through AppendIcebergKey.
func TestIcebergSpecTypeHashes(t *testing.T) {
	ts := Timestamp{Millis: 1510871468000}
	for _, tc := range []struct {
		typ  string
		v    any
		want int32
	}{
		{"INT", int32(34), 2017239379},
		{"BIGINT", int64(34), 2017239379},
		{"DECIMAL(9,2)", DecimalFromInt64(1420), -500754589},
		{"DATE", Date(17486), -653330422},
		{"TIME(6)", Time(81068000), -662762989},
		{"TIMESTAMP(6)", ts, -2047944441},
		{"TIMESTAMP(6)", Timestamp{Millis: ts.Millis, NanoOfMilli: 1000}, -1207196810},
		{"STRING", "iceberg", 1210000089},
		{"BINARY(4)", []byte{0, 1, 2, 3}, -188683207},
		{"BYTES", []byte{0, 1, 2, 3}, -188683207},
	} {
		b, err := AppendIcebergKey(nil, mustType(t, tc.typ), RowFields(Row{tc.v}), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := int32(Murmur3_32(b, 0)); got != tc.want {
			t.Errorf("hash of %s %v = %d, want %d", tc.typ, tc.v, got, tc.want)
		}
	}
	big19 := DecimalFromBig(new(big.Int).Lsh(big.NewInt(1), 70))
	b, err := AppendIcebergKey(nil, mustType(t, "DECIMAL(38,0)"), RowFields(Row{big19}), 0)
	if err != nil || !bytes.Equal(b, unhex(t, "40 00 00 00 00 00 00 00 00")) {
		t.Errorf("iceberg key of 2^70 = % x, %v", b, err)
	}
}

// Keys with bytes >= 0x80 in the tail, where Fluss's hashUnsafeBytes sign-extends
// each byte (the reference vectors only have ASCII tails). Expected values come from
// running Fluss's MurmurHashUtils.hashUnsafeBytes and MathUtils.murmurHash on a JDK.
func TestHashUnsafeBytesHighBytes(t *testing.T) {
	for _, tc := range []struct {
		key           string
		n             int
		hash          int32
		fluss, paimon int
	}{
		{"ff", 16, 1398487324, 9, 12},
		{"00 80", 7, -544401882, 0, 3},
		{"01 02 03 fe", 12, -566200098, 8, 6},
		{"12 34 56 78 9a bc de f0 f1", 100, -1046023433, 3, 33},
		{"80 81 82 83 84", 4096, 1000199251, 1130, 1107},
		{"e6 97 a5 e6 9c ac", 16, -336983209, 6, 9},
	} {
		key := unhex(t, tc.key)
		if h := HashUnsafeBytes(key, 42); h != tc.hash {
			t.Errorf("HashUnsafeBytes(%s) = %d, want %d", tc.key, h, tc.hash)
		}
		if b := FlussBucket(key, tc.n); b != tc.fluss {
			t.Errorf("FlussBucket(%s, %d) = %d, want %d", tc.key, tc.n, b, tc.fluss)
		}
		if b := PaimonBucket(key, tc.n); b != tc.paimon {
			t.Errorf("PaimonBucket(%s, %d) = %d, want %d", tc.key, tc.n, b, tc.paimon)
		}
	}
}

// Murmur3_32 with bytes >= 0x80 in the tail, which Guava mixes unsigned. Expected
// values come from Guava 31.1's Hashing.murmur3_32_fixed().
func TestMurmur3HighBytes(t *testing.T) {
	for _, tc := range []struct {
		key     string
		n       int
		hash    int32
		iceberg int
	}{
		{"e6 97 a5 e6 9c ac", 16, -992347838, 2},
		{"ff", 7, -43192051, 2},
		{"80 81 82 83 f0", 12, -86556465, 11},
	} {
		key := unhex(t, tc.key)
		if h := int32(Murmur3_32(key, 0)); h != tc.hash {
			t.Errorf("Murmur3_32(%s) = %d, want %d", tc.key, h, tc.hash)
		}
		if b := IcebergBucket(key, tc.n); b != tc.iceberg {
			t.Errorf("IcebergBucket(%s, %d) = %d, want %d", tc.key, tc.n, b, tc.iceberg)
		}
	}
}
