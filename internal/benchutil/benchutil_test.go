package benchutil

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thawdb/thaw/kv"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1536, "1.5 KiB"}, {5 << 20, "5.0 MiB"}, {3 << 30, "3.00 GiB"}} {
		if got := FmtBytes(tc.n); got != tc.want {
			t.Errorf("FmtBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if FmtRSS(-1) != "n/a" || FmtRSS(300<<20) != "300 MiB" {
		t.Errorf("FmtRSS: %q %q", FmtRSS(-1), FmtRSS(300<<20))
	}
}

func TestMeasurements(t *testing.T) {
	buf := make([]byte, 32<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	if rss := PeakRSS(); rss < int64(len(buf)) {
		t.Errorf("PeakRSS = %d after touching %d bytes", rss, len(buf))
	}
	if CPUTime() <= 0 {
		t.Error("CPUTime is not positive")
	}
	if f := strings.Fields(LoadAvg()); len(f) != 5 {
		t.Errorf("LoadAvg = %q", LoadAvg())
	}
	if SplitMix(1) == SplitMix(2) || SplitMix(0) == 0 {
		t.Error("SplitMix does not mix")
	}
}

func TestProcBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(path, []byte("MemTotal:       24684160 kB\nDirty:              1024 kB\nWriteback:            12 kB\nHugePages_Total:       0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names []string
		want  int64
	}{
		{[]string{"Dirty", "Writeback"}, 1036 << 10},
		{[]string{"MemTotal"}, 24684160 << 10},
		{[]string{"Dirty", "Missing"}, -1},
		{[]string{"HugePages_Total"}, -1}, // no kB unit
	} {
		if got := procBytes(path, tc.names...); got != tc.want {
			t.Errorf("procBytes(%v) = %d, want %d", tc.names, got, tc.want)
		}
	}
	if got := procBytes(filepath.Join(t.TempDir(), "none"), "Dirty"); got != -1 {
		t.Errorf("missing file: %d", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := slices.Clone(tc.in)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Median reordered its input: %v", in)
		}
	}
	if got := FmtRatios([]float64{1, 2.346, 17.18}); got != "1.00 2.35 17.18" {
		t.Errorf("FmtRatios: %q", got)
	}
}

// TestShortKeys: keys of fewer than 8 bytes are unique over the rows
// their width allows and come in a scattered order, as the harnesses
// promise; they were the row number, so every bucket loaded in ascending
// key order, which is cheaper for both paths than random.
func TestShortKeys(t *testing.T) {
	row := make(kv.Row, 2)
	for n := 1; n < 8; n++ {
		rows := min(int64(1)<<(8*n), 20000)
		if err := (RowGenConfig{Buckets: 8, KeyBytes: n, ValueBytes: 10, Seed: 1}).Validate(rows); err != nil {
			t.Fatal(err)
		}
		g := NewRowGen(RowGenConfig{Buckets: 8, KeyBytes: n, ValueBytes: 10, Seed: 1})
		seen := make(map[string]bool, rows)
		ascending := 0
		var prev []byte
		for i := range rows {
			g.Row(row, i)
			k := row[0].([]byte)
			if len(k) != n || seen[string(k)] {
				t.Fatalf("--key-bytes %d: row %d has key %x (length %d, seen before: %v)", n, i, k, len(k), seen[string(k)])
			}
			seen[string(k)] = true
			if prev != nil && bytes.Compare(prev, k) < 0 {
				ascending++
			}
			prev = k
		}
		if n > 1 && ascending > int(rows)*3/4 {
			t.Errorf("--key-bytes %d: %d of %d consecutive keys ascend", n, ascending, rows-1)
		}
	}
}

// TestStartTierRefusesUsedDir: a --data-dir that holds an earlier run's
// tier is refused; the run reopened it and measured on a tier with the
// earlier run's tables, replicas and compactions.
func TestStartTierRefusesUsedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tier"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := StartTier(t.Context(), "bench test", dir, 1)
	if err == nil || !strings.Contains(err.Error(), "is there already") {
		t.Fatalf("StartTier on a used data dir: %v", err)
	}
}
