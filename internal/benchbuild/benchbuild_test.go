package benchbuild

import (
	"bytes"
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSmoke runs the harness on a small input: it must complete and end
// with the ratio line. Nothing is asserted about time.
func TestSmoke(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	err := Run(t.Context(), &out, []string{
		"--rows", "20000", "--key-bytes", "16", "--value-bytes", "100", "--buckets", "3",
		"--workers", "2", "--memory", "1MiB", "--dir", dir, "--batch-rows", "1000",
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^ratio full/limit: [0-9]+\.[0-9]+$`).MatchString(last) {
		t.Fatalf("last line %q is not the ratio line", last)
	}
	for _, want := range []string{"(a) raw sstable write", "(b) encode + route", "(c) full build", "rows/s", "MB/s", "share", "peak RSS", "20000 snapshot rows"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q", want)
		}
	}
	if strings.Contains(out.String(), "(c1)") || strings.Contains(out.String(), "workers/1 worker") {
		t.Fatal("worker comparison printed without --compare-workers")
	}
	// The spill path ran (1 MiB budget for ~2.8 MB of pairs).
	if regexp.MustCompile(`\b0 spill runs`).MatchString(out.String()) {
		t.Fatal("no spill runs with a 1 MiB budget")
	}
}

// TestCompareWorkers: --compare-workers adds the 1-worker build and its
// ratio line, and the full/limit ratio stays the last line.
func TestCompareWorkers(t *testing.T) {
	var out bytes.Buffer
	err := Run(t.Context(), &out, []string{
		"--rows", "20000", "--buckets", "3", "--workers", "2", "--memory", "1MiB",
		"--dir", t.TempDir(), "--batch-rows", "1000", "--compare-workers",
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if n := len(lines); n < 2 ||
		!regexp.MustCompile(`^ratio 2 workers/1 worker: [0-9]+\.[0-9]+$`).MatchString(lines[n-2]) ||
		!regexp.MustCompile(`^ratio full/limit: [0-9]+\.[0-9]+$`).MatchString(lines[n-1]) {
		t.Fatalf("last lines %q", lines[max(0, len(lines)-2):])
	}
	for _, want := range []string{"(c1) full build, 1 worker", "(c) full build, 2 workers"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q", want)
		}
	}
	if got := strings.Count(out.String(), "20000 snapshot rows"); got != 2 {
		t.Fatalf("%d builds reported 20000 snapshot rows, want 2", got)
	}
}

// TestPairs: --pairs N runs the 1-worker and the 2-worker build N times
// each, reports every pair's ratio, and the speedup line is their median.
func TestPairs(t *testing.T) {
	var out bytes.Buffer
	err := Run(t.Context(), &out, []string{
		"--rows", "5000", "--buckets", "2", "--workers", "2", "--dir", t.TempDir(),
		"--batch-rows", "1000", "--compare-workers", "--pairs", "3",
	})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if got := strings.Count(out.String(), "5000 snapshot rows"); got != 2 {
		t.Fatalf("the table shows %d builds, want the last pair's 2", got)
	}
	per := regexp.MustCompile(`(?m)^ratio 2 workers/1 worker per pair: ([0-9.]+) ([0-9.]+) ([0-9.]+)$`).FindStringSubmatch(out.String())
	med := regexp.MustCompile(`(?m)^ratio 2 workers/1 worker: ([0-9.]+) \(median of 3 pairs; lowest ([0-9.]+), highest ([0-9.]+)\)$`).FindStringSubmatch(out.String())
	if per == nil || med == nil || !regexp.MustCompile(`(?m)^3 alternating pairs: 1 worker( [0-9.]+s){3}; 2 workers( [0-9.]+s){3}$`).MatchString(out.String()) {
		t.Fatalf("pair lines missing:\n%s", out.String())
	}
	rs := []string{per[1], per[2], per[3]}
	slices.SortFunc(rs, func(a, b string) int {
		x, _ := strconv.ParseFloat(a, 64)
		y, _ := strconv.ParseFloat(b, 64)
		return cmp.Compare(x, y)
	})
	if med[1] != rs[1] || med[2] != rs[0] || med[3] != rs[2] {
		t.Fatalf("median line %q does not summarize the pairs %q", med[0], per[0])
	}
	if err := Run(t.Context(), &bytes.Buffer{}, []string{"--rows", "10", "--pairs", "2"}); err == nil || !strings.Contains(err.Error(), "--compare-workers") {
		t.Fatalf("--pairs without --compare-workers: %v", err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rows", "0"},
		{"--memory", "lots"},
		{"--compression", "lz4"},
		{"--buckets", "0"},
		{"extra"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	// Accepted, these measured something else than they said: short keys
	// collided (fewer rows built than counted) or came out of order, a
	// zero budget printed 0 B and built with the default, a comparison
	// with one worker compared nothing.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rows", "10", "--key-bytes", "4"}, "--key-bytes must be in [8, 1MiB]"},
		{[]string{"--rows", "10", "--memory", "0"}, "--memory must be at least 64.0 KiB"},
		{[]string{"--rows", "10", "--compare-workers", "--workers", "1"}, "want at least 2"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	for in, want := range map[string]int64{"123": 123, "64KiB": 64 << 10, "256MiB": 256 << 20, "1GiB": 1 << 30, "2M": 2 << 20} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
