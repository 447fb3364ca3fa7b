package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLakeScanLimitTrailer: thaw lake scan --limit N ends "(first N rows)"
// only when the table has more than N rows (with exactly N it said so too,
// as if rows were left out), and "(N rows)" when it printed them all.
func TestLakeScanLimitTrailer(t *testing.T) {
	dir := t.TempDir()
	if out, err := lakeCmd(t, "sample", "--dir", dir, "--rows", "50", "--days", "1", "--append-only"); err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	uri := filepath.Join(dir, "catalog.db")
	last := func(out string) string {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return lines[len(lines)-1]
	}
	all, err := lakeCmd(t, "scan", "lake.events", "--uri", uri, "--columns", "id", "--limit", "0")
	if err != nil {
		t.Fatal(err)
	}
	n := len(strings.Split(strings.TrimSpace(all), "\n")) - 2 // header and "(N rows)"
	if want := "(" + strconv.Itoa(n) + " rows)"; last(all) != want || n < 2 {
		t.Fatalf("the whole table: %q, want %q", last(all), want)
	}
	for limit, want := range map[int]string{
		n:     "(" + strconv.Itoa(n) + " rows)",
		n + 1: "(" + strconv.Itoa(n) + " rows)",
		n - 1: "(first " + strconv.Itoa(n-1) + " rows)",
	} {
		out, err := lakeCmd(t, "scan", "lake.events", "--uri", uri, "--columns", "id", "--limit", strconv.Itoa(limit))
		if err != nil {
			t.Fatal(err)
		}
		if last(out) != want {
			t.Errorf("--limit %d of %d rows ends %q, want %q", limit, n, last(out), want)
		}
	}
}
