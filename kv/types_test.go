package kv

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Type
	}{
		{"BOOLEAN", Type{Kind: KindBoolean}},
		{"tinyint", Type{Kind: KindTinyInt}},
		{"SmallInt", Type{Kind: KindSmallInt}},
		{"INT", Type{Kind: KindInt}},
		{"integer", Type{Kind: KindInt}},
		{"  BIGINT  ", Type{Kind: KindBigInt}},
		{"FLOAT", Type{Kind: KindFloat}},
		{"DOUBLE", Type{Kind: KindDouble}},
		{"decimal(10, 2)", Type{Kind: KindDecimal, Precision: 10, Scale: 2}},
		{"DECIMAL ( 38 , 38 )", Type{Kind: KindDecimal, Precision: 38, Scale: 38}},
		{"DECIMAL(5)", Type{Kind: KindDecimal, Precision: 5}},
		{"DECIMAL", Type{Kind: KindDecimal, Precision: 10}},
		{"CHAR(4)", Type{Kind: KindChar, Length: 4}},
		{"CHAR", Type{Kind: KindChar, Length: 1}},
		{"STRING", Type{Kind: KindString}},
		{"BINARY(16)", Type{Kind: KindBinary, Length: 16}},
		{"BINARY", Type{Kind: KindBinary, Length: 1}},
		{"BYTES", Type{Kind: KindBytes}},
		{"DATE", Type{Kind: KindDate}},
		{"TIME", Type{Kind: KindTime}},
		{"TIME(3)", Type{Kind: KindTime, Precision: 3}},
		{"TIMESTAMP", Type{Kind: KindTimestamp, Precision: 6}},
		{"TIMESTAMP(0)", Type{Kind: KindTimestamp}},
		{"timestamp_ltz(9)", Type{Kind: KindTimestampLTZ, Precision: 9}},
		{"TIMESTAMP_LTZ", Type{Kind: KindTimestampLTZ, Precision: 6}},
	} {
		got, err := ParseType(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseType(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTypeErrors(t *testing.T) {
	for _, tc := range []struct{ in, fragment string }{
		{"", "missing type name"},
		{"   ", "missing type name"},
		{"(3)", "missing type name"},
		{"VARCHAR(3)", "unknown type name VARCHAR"},
		{"INT(3)", "INT takes no parameters"},
		{"DECIMAL(1,2,3)", "at most 2 parameters"},
		{"DECIMAL(40,2)", "precision 40 is out of range 1..38"},
		{"DECIMAL(0)", "precision 0 is out of range 1..38"},
		{"DECIMAL(5,6)", "scale 6 is out of range 0..5"},
		{"DECIMAL(-1,0)", `parameter "-1" is not a non-negative integer`},
		{"DECIMAL(10,)", `parameter "" is not a non-negative integer`},
		{"DECIMAL(10", "missing )"},
		{"CHAR(0)", "length 0 is out of range"},
		{"CHAR(99999999999999999999)", "is out of range"},
		{"TIMESTAMP(10)", "precision 10 is out of range 0..9"},
		{"TIME(3) NOT NULL", `unexpected "NOT NULL" after the type`},
		{"BIGINT x", `unexpected "x" after the type`},
		{"CHAR(3) x", `unexpected "x" after the type`},
	} {
		_, err := ParseType(tc.in)
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidType) {
			t.Errorf("ParseType(%q): %v does not wrap ErrInvalidType", tc.in, err)
		}
	}
}

func TestParseTypeNested(t *testing.T) {
	for _, tc := range []struct{ in, name string }{
		{"ARRAY<INT>", "ARRAY"},
		{"map<string, int>", "MAP"},
		{"ROW<a INT>", "ROW"},
		{"ROW(a INT)", "ROW"},
		{" MULTISET<STRING>", "MULTISET"},
		{"array", "ARRAY"},
	} {
		_, err := ParseType(tc.in)
		if !errors.Is(err, ErrNestedType) {
			t.Fatalf("ParseType(%q) = %v, want ErrNestedType", tc.in, err)
		}
		wantErr(t, err, tc.name)
	}
}

func TestTypeStringRoundTrip(t *testing.T) {
	for _, s := range []string{"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE",
		"DECIMAL(10,2)", "CHAR(4)", "STRING", "BINARY(3)", "BYTES", "DATE", "TIME(0)", "TIMESTAMP(3)",
		"TIMESTAMP_LTZ(6)"} {
		typ := mustType(t, s)
		if typ.String() != s {
			t.Errorf("ParseType(%q).String() = %q", s, typ.String())
		}
		b, err := json.Marshal(typ)
		if err != nil {
			t.Fatal(err)
		}
		var back Type
		if err := json.Unmarshal(b, &back); err != nil || back != typ {
			t.Errorf("JSON round trip of %s: %s -> %+v, %v", s, b, back, err)
		}
	}
}

func TestTypeValidate(t *testing.T) {
	for _, tc := range []struct {
		typ      Type
		fragment string
	}{
		{Type{}, "unknown kind"},
		{Type{Kind: 99}, "Kind(99): unknown kind"},
		{Type{Kind: KindInt, Precision: 3}, "INT takes no precision"},
		{Type{Kind: KindTimestamp, Precision: 3, Scale: 1}, "TIMESTAMP takes no scale"},
		{Type{Kind: KindDecimal, Precision: 3, Length: 1}, "DECIMAL takes no length"},
		{Type{Kind: KindChar}, "length 0 is out of range"},
		{Type{Kind: KindTime, Precision: -1}, "precision -1 is out of range 0..9"},
	} {
		err := tc.typ.Validate()
		wantErr(t, err, tc.fragment)
		if !errors.Is(err, ErrInvalidType) {
			t.Errorf("%+v: %v does not wrap ErrInvalidType", tc.typ, err)
		}
		if _, err := tc.typ.MarshalText(); err == nil {
			t.Errorf("MarshalText(%+v) succeeded", tc.typ)
		}
	}
}

func TestBucketingText(t *testing.T) {
	for b, name := range map[Bucketing]string{BucketingFluss: "fluss", BucketingIceberg: "iceberg", BucketingPaimon: "paimon"} {
		got, err := ParseBucketing(name)
		if err != nil || got != b || b.String() != name {
			t.Errorf("ParseBucketing(%q) = %v, %v", name, got, err)
		}
		var back Bucketing
		if err := json.Unmarshal([]byte(`"`+name+`"`), &back); err != nil || back != b {
			t.Errorf("unmarshal %q = %v, %v", name, back, err)
		}
	}
	if b, err := ParseBucketing("Iceberg"); err != nil || b != BucketingIceberg {
		t.Errorf("ParseBucketing(Iceberg) = %v, %v", b, err)
	}
	_, err := ParseBucketing("hudi")
	wantErr(t, err, `unknown bucketing "hudi"`)
	if _, err := Bucketing(9).MarshalText(); err == nil {
		t.Error("MarshalText(9) succeeded")
	}
}
