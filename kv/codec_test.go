package kv

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"testing"
)

// codecTable has a column of every kind; only id is in the key.
func codecTable(t testing.TB) *Table {
	return mustTable(t, TableSchema{
		SchemaID: 3,
		Columns: append([]Column{col(t, "id", "INT", false), col(t, "big", "DECIMAL(38,4)", true)},
			allTypesColumns(t, true)...),
		PrimaryKey: []string{"id"},
		Buckets:    4,
	})
}

func TestEncodeRowErrors(t *testing.T) {
	tbl := codecTable(t)
	base := func() Row { return append(Row{int32(1), nil}, allTypesRow()...) }
	for _, tc := range []struct {
		name, column, fragment string
		edit                   func(r Row)
	}{
		{"null key", "id", "null value in a non-nullable column", func(r Row) { r[0] = nil }},
		{"wrong Go type", "id", "Go type int64 does not match INT, want int32", func(r Row) { r[0] = int64(1) }},
		{"wrong Go type for DATE", "f7", "want kv.Date", func(r Row) { r[9] = int32(1) }},
		{"invalid UTF-8", "f12", "string is not valid UTF-8", func(r Row) { r[14] = "a\xffb" }},
		{"CHAR too long", "f11", "string of 3 characters is longer than CHAR(2)", func(r Row) { r[13] = "héé" }},
		{"BINARY too long", "f9", "21 bytes are longer than BINARY(20)", func(r Row) { r[11] = make([]byte, 21) }},
		{"decimal too long", "f13", "unscaled value -100000 has more than 5 digits", func(r Row) { r[15] = DecimalFromInt64(-100000) }},
		{"big decimal too long", "big", "has more than 38 digits", func(r Row) { r[1] = DecimalFromBig(bigPow10[38]) }},
		{"negative TIME", "f8", "TIME -1 ms is outside 0..86399999", func(r Row) { r[10] = Time(-1) }},
		{"TIME past midnight", "f8", "TIME 86400000 ms is outside", func(r Row) { r[10] = Time(86400000) }},
		{"nanos out of range", "f16", "nano-of-millisecond 1000000 is outside 0..999999", func(r Row) { r[18] = Timestamp{NanoOfMilli: 1000000} }},
		{"negative nanos", "f18", "nano-of-millisecond -1 is outside", func(r Row) { r[20] = Timestamp{NanoOfMilli: -1} }},
		{"nanos lost at precision 1", "f15", "nano-of-millisecond 5 cannot be stored in TIMESTAMP(1)", func(r Row) { r[17] = Timestamp{NanoOfMilli: 5} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := base()
			tc.edit(row)
			_, _, _, err := tbl.NewEncoder().Encode(RowFields(row))
			wantErr(t, err, tc.fragment)
			var re *RowError
			if !errors.As(err, &re) || re.Column != tc.column || !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("%v: want a *RowError for column %q wrapping ErrInvalidRow", err, tc.column)
			}
			wantErr(t, err, `column "`+tc.column+`"`)
			if _, err := tbl.EncodeValue(row); err == nil {
				t.Fatal("EncodeValue accepted the row")
			}
		})
	}

	_, err := tbl.EncodeValue(Row{int32(1)})
	wantErr(t, err, "row has 1 values, the table has 21 columns")
	if !errors.Is(err, ErrInvalidRow) {
		t.Fatal("row length error does not wrap ErrInvalidRow")
	}
}

// The convenience forms read only the columns they need.
func TestEncodeKeyReadsOnlyKeyColumns(t *testing.T) {
	tbl := codecTable(t)
	row := make(Row, tbl.NumColumns())
	row[0] = int32(300)
	row[3] = "not a bool" // wrong type, but not a key column
	key, err := tbl.EncodeKey(row)
	if err != nil || !bytes.Equal(key, unhex(t, "ac 02")) {
		t.Fatalf("EncodeKey = % x, %v", key, err)
	}
	b, err := tbl.Bucket(row)
	if err != nil || b != FlussBucket(key, 4) {
		t.Fatalf("Bucket = %d, %v", b, err)
	}
	if _, err := tbl.EncodeValue(row); err == nil {
		t.Fatal("EncodeValue accepted a wrong type in a value column")
	}
}

func TestDecimalEncoding(t *testing.T) {
	big70 := new(big.Int).Lsh(big.NewInt(1), 70)
	max38 := new(big.Int).Sub(bigPow10[38], big.NewInt(1))
	for _, tc := range []struct {
		typ  string
		d    Decimal
		want string
	}{
		{"DECIMAL(5,2)", DecimalFromInt64(9), "09"},
		{"DECIMAL(5,2)", DecimalFromInt64(-1), "ff ff ff ff ff ff ff ff ff 01"},
		{"DECIMAL(18,0)", DecimalFromInt64(999999999999999999), "ff ff 8f bb ba d6 ad f0 0d"},
		{"DECIMAL(20,0)", DecimalFromInt64(0), "01 00"},
		{"DECIMAL(20,0)", DecimalFromInt64(10), "01 0a"},
		{"DECIMAL(20,0)", DecimalFromInt64(-1), "01 ff"},
		{"DECIMAL(20,0)", DecimalFromInt64(127), "01 7f"},
		{"DECIMAL(20,0)", DecimalFromInt64(128), "02 00 80"},
		{"DECIMAL(20,0)", DecimalFromInt64(-128), "01 80"},
		{"DECIMAL(20,0)", DecimalFromInt64(-129), "02 ff 7f"},
		{"DECIMAL(20,0)", DecimalFromInt64(math.MinInt64), "08 80 00 00 00 00 00 00 00"},
		{"DECIMAL(38,0)", DecimalFromBig(big70), "09 40 00 00 00 00 00 00 00 00"},
		{"DECIMAL(38,0)", DecimalFromBig(new(big.Int).Neg(big70)), "09 c0 00 00 00 00 00 00 00 00"},
		{"DECIMAL(38,0)", DecimalFromBig(new(big.Int).Sub(new(big.Int).Neg(big70), big.NewInt(1))), "09 bf ff ff ff ff ff ff ff ff"},
		{"DECIMAL(38,0)", DecimalFromBig(max38), "10 4b 3b 4c a8 5a 86 c4 7a 09 8a 22 3f ff ff ff ff"},
		{"DECIMAL(38,0)", DecimalFromBig(new(big.Int).Neg(max38)), "10 b4 c4 b3 57 a5 79 3b 85 f6 75 dd c0 00 00 00 01"},
	} {
		typ := mustType(t, tc.typ)
		w := NewKeyWriter()
		if err := w.WriteDecimal(tc.d, typ.Precision); err != nil {
			t.Fatal(err)
		}
		if want := unhex(t, tc.want); !bytes.Equal(w.Bytes(), want) {
			t.Errorf("%s %s = % x, want % x", tc.typ, tc.d.String(0), w.Bytes(), want)
		}
		r := reader{b: w.Bytes()}
		got, err := r.decimal(typ)
		if err != nil || !got.Equal(tc.d) || r.checkEnd() != nil {
			t.Errorf("decode %s = %s, %v", tc.want, got.String(0), err)
		}
	}
	err := NewKeyWriter().WriteDecimal(DecimalFromInt64(1000), 3)
	if !errors.Is(err, ErrInvalidRow) {
		t.Fatalf("WriteDecimal(1000, 3) = %v", err)
	}
	wantErr(t, err, "more than 3 digits")
}

func TestDecimalValues(t *testing.T) {
	for _, tc := range []struct {
		in        string
		p, s      int
		str       string
		small     int64
		fitsInt64 bool
	}{
		{"12.5", 10, 2, "12.50", 1250, true},
		{"-0.05", 3, 2, "-0.05", -5, true},
		{"+7", 5, 0, "7", 7, true},
		{".5", 2, 1, "0.5", 5, true},
		{"0", 1, 0, "0", 0, true},
		{"12345678901234567890.1234", 38, 4, "12345678901234567890.1234", 0, false},
	} {
		d, err := ParseDecimal(tc.in, tc.p, tc.s)
		if err != nil {
			t.Fatalf("ParseDecimal(%q): %v", tc.in, err)
		}
		if got := d.String(tc.s); got != tc.str {
			t.Errorf("ParseDecimal(%q).String = %q, want %q", tc.in, got, tc.str)
		}
		if v, ok := d.Int64(); ok != tc.fitsInt64 || (ok && v != tc.small) {
			t.Errorf("Int64 of %q = %d, %v", tc.in, v, ok)
		}
		if d.Unscaled().String() != DecimalFromBig(d.Unscaled()).Unscaled().String() {
			t.Errorf("Unscaled round trip of %q", tc.in)
		}
	}
	for _, tc := range []struct {
		in       string
		p, s     int
		fragment string
	}{
		{"1.234", 10, 2, "more than 2 fractional digits"},
		{"1000", 3, 0, "more than 3 digits"},
		{"1e5", 10, 0, "not a plain decimal number"},
		{"--1", 10, 0, "more than one sign"},
		{"", 10, 0, "not a plain decimal number"},
		{"1", 40, 0, "precision 40 is out of range"},
	} {
		_, err := ParseDecimal(tc.in, tc.p, tc.s)
		wantErr(t, err, tc.fragment)
	}
	if DecimalFromInt64(5).Equal(DecimalFromBig(big.NewInt(6))) || !DecimalFromInt64(5).Equal(DecimalFromBig(big.NewInt(5))) {
		t.Error("Equal is wrong")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	tbl := mustTable(t, TableSchema{
		Columns: []Column{
			col(t, "id", "INT", false),
			col(t, "b", "BOOLEAN", true),
			col(t, "s", "CHAR(2)", true),
			col(t, "d", "DECIMAL(20,0)", true),
			col(t, "t", "TIME", true),
			col(t, "ts", "TIMESTAMP(6)", true),
			col(t, "n", "BIGINT", false),
		},
		PrimaryKey: []string{"id"},
		Buckets:    1,
	})
	// A valid value: id=1, b=true, s="a", d=5, t=0, ts={1, 2}, n=3.
	valid := "01 00 | 00 | 01 | 01 | 01 61 | 01 05 | 00 | 01 02 | 03"
	if _, row, err := tbl.DecodeValue(unhex(t, valid)); err != nil || !rowsEqual(row,
		Row{int32(1), true, "a", DecimalFromInt64(5), Time(0), Timestamp{1, 2}, int64(3)}) {
		t.Fatalf("valid value: %v, %v", row, err)
	}
	for _, tc := range []struct{ name, value, fragment string }{
		{"too short", "01", "shorter than its 2-byte schema id"},
		{"no header", "01 00", "shorter than its 1-byte null header"},
		{"unused null bit", "01 00 | 80 | 01 | 01 | 01 61 | 01 05 | 00 | 01 02 | 03", "null bits set beyond column 7"},
		{"null in non-nullable", "01 00 | 01 | 01 | 01 61 | 01 05 | 00 | 01 02 | 03", `column "id": null value in a non-nullable column`},
		{"truncated", "01 00 | 00 | 01 | 01 | 01 61 | 01 05 | 00 | 01 02", `column "n" at byte 12: truncated`},
		{"trailing", valid + " 00", "1 trailing bytes"},
		{"boolean 2", "01 00 | 00 | 01 | 02 | 01 61 | 01 05 | 00 | 01 02 | 03", "boolean byte 0x2 is not 0 or 1"},
		{"non-minimal varint", "01 00 | 00 | 81 00 | 01 | 01 61 | 01 05 | 00 | 01 02 | 03", "varint is not minimal"},
		{"int varint overflow", "01 00 | 00 | ff ff ff ff 1f | 01 | 01 61 | 01 05 | 00 | 01 02 | 03", "varint overflows"},
		{"long varint overflow", "01 00 | 00 | 01 | 01 | 01 61 | 01 05 | 00 | 01 02 | ff ff ff ff ff ff ff ff ff 02", "varint overflows"},
		{"negative length", "01 00 | 00 | 01 | 01 | ff ff ff ff 0f 61 | 01 05 | 00 | 01 02 | 03", "negative length -1"},
		{"length past end", "01 00 | 00 | 01 | 01 | 09 61", "truncated"},
		{"invalid UTF-8", "01 00 | 00 | 01 | 01 | 01 ff | 01 05 | 00 | 01 02 | 03", "not valid UTF-8"},
		{"CHAR too long", "01 00 | 00 | 01 | 01 | 03 61 62 63 | 01 05 | 00 | 01 02 | 03", "longer than CHAR(2)"},
		{"empty decimal", "01 00 | 00 | 01 | 01 | 01 61 | 00 | 00 | 01 02 | 03", "empty unscaled decimal"},
		{"non-minimal decimal", "01 00 | 00 | 01 | 01 | 01 61 | 02 00 05 | 00 | 01 02 | 03", "not minimal two's complement"},
		{"decimal too long", "01 00 | 00 | 01 | 01 | 01 61 | 09 7f ff ff ff ff ff ff ff ff | 00 | 01 02 | 03", "more than 20 digits"},
		{"decimal too many bytes", "01 00 | 00 | 01 | 01 | 01 61 | 11 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 | 00 | 01 02 | 03", "17 bytes exceeds 16"},
		{"TIME out of range", "01 00 | 00 | 01 | 01 | 01 61 | 01 05 | 80 b8 99 29 | 01 02 | 03", "TIME 86400000 ms is outside"},
		{"nanos out of range", "01 00 | 00 | 01 | 01 | 01 61 | 01 05 | 00 | 01 c0 84 3d | 03", "nano-of-millisecond 1000000 is outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tbl.DecodeValue(unhex(t, tc.value))
			wantErr(t, err, tc.fragment)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%v does not wrap ErrCorrupt", err)
			}
		})
	}

	// Every strict prefix of a valid value or key is corrupt.
	value := unhex(t, valid)
	for n := range len(value) {
		if _, _, err := tbl.DecodeValue(value[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeValue of %d-byte prefix: %v", n, err)
		}
	}
	for _, key := range []string{"", "80", "01 00"} {
		if _, err := tbl.DecodeKey(unhex(t, key)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeKey(%s): %v", key, err)
		}
	}
	if _, err := tbl.BucketOfKey(nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("BucketOfKey(nil): %v", err)
	}
}

func TestSmallIntAndFloats(t *testing.T) {
	w := NewRowWriter(9)
	w.SetNull(8)
	w.WriteInt16(-2)
	w.WriteFloat32(float32(math.Inf(-1)))
	w.WriteFloat64(-0.0)
	w.WriteInt8(-1)
	w.WriteBool(false)
	w.WriteInt64(-1)
	w.WriteBytes(nil)
	w.WriteTimestamp(Timestamp{Millis: -1, NanoOfMilli: 7}, 9)
	want := unhex(t, "00 01 | fe ff | 00 00 80 ff | 00 00 00 00 00 00 00 00 | ff | 00 | ff ff ff ff ff ff ff ff ff 01 | 00 | ff ff ff ff ff ff ff ff ff 01 07")
	if !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("row\n got % x\nwant % x", w.Bytes(), want)
	}
	w.Reset()
	if !bytes.Equal(w.Bytes(), []byte{0, 0}) {
		t.Fatalf("Reset left % x", w.Bytes())
	}
}
