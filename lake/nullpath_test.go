package lake

import (
	"slices"
	"testing"
)

// TestNullVersusNullString: an identity partition of the null value and
// one of the string "null" are two partitions with two paths (they shared
// "region=null" and were merged: the string's rows were never promoted, or
// the null's were scanned into the string's partition and failed every
// attempt), whichever was written first.
func TestNullVersusNullString(t *testing.T) {
	for _, nullFirst := range []bool{false, true} {
		l := scratch(t)
		ctx := t.Context()
		tbl := newRegionTable(t, l, "nn")
		writes := [][]any{{int64(1), "null", "a"}, {int64(2), nil, "b"}}
		if nullFirst {
			slices.Reverse(writes)
		}
		for _, w := range writes {
			tbl = appendRows(t, tbl, []any{w[0]}, []any{w[1]}, []any{w[2]})
		}
		parts, err := l.Partitions(ctx, "t.nn", nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]any{}
		for _, p := range parts {
			got[p.Path] = scan(t, l, "t.nn", ScanOptions{Partitions: []PartitionRef{p.Ref()}}).col(t, "v")
		}
		if len(got) != 2 || !slices.Equal(got["region=null"], []any{"b"}) || !slices.Equal(got["region=%6Eull"], []any{"a"}) {
			t.Fatalf("nullFirst=%v: partitions and their rows %v, want region=null [b] and region=%%6Eull [a]", nullFirst, got)
		}
	}
}
