package kv

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

// unhex decodes hex written with spaces or '|' between bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func mustType(t testing.TB, s string) Type {
	t.Helper()
	typ, err := ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

func mustTable(t testing.TB, s TableSchema) *Table {
	t.Helper()
	tbl, err := NewTable(s)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// col is shorthand for a column from a type string.
func col(t testing.TB, name, typ string, nullable bool) Column {
	t.Helper()
	return Column{Name: name, Type: mustType(t, typ), Nullable: nullable}
}

// valuesEqual compares Row values: decimals by value, floats by bits (so NaN equals
// itself), everything else with ==.
func valuesEqual(a, b any) bool {
	switch x := a.(type) {
	case Decimal:
		y, ok := b.(Decimal)
		return ok && x.Equal(y)
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return a == b
}

func rowsEqual(a, b Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !valuesEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// wantErr fails unless err is non-nil and its message contains fragment.
func wantErr(t testing.TB, err error, fragment string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragment)
	}
	if !strings.Contains(err.Error(), fragment) {
		t.Fatalf("error %q does not contain %q", err, fragment)
	}
	if !strings.HasPrefix(err.Error(), "kv: ") {
		t.Fatalf("error %q is not prefixed with \"kv: \"", err)
	}
}
