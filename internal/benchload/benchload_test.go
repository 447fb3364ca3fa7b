package benchload

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSmoke runs both paths with a tiny input against an embedded tier:
// each must load, verify and report, and the run must end with the ratio
// line. Nothing is asserted about speed.
func TestSmoke(t *testing.T) {
	for _, input := range []string{"arrow", "rows"} {
		t.Run(input, func(t *testing.T) {
			var out bytes.Buffer
			profDir := t.TempDir()
			profiles := []string{filepath.Join(profDir, "bulk.pprof"), filepath.Join(profDir, "ordinary.pprof")}
			err := Run(t.Context(), &out, []string{
				"--rows", "3000", "--buckets", "3", "--batch", "300", "--arrow-batch", "700",
				"--bulk-input", input, "--memory", "8MiB", "--data-dir", t.TempDir(), "--verify-sample", "200",
				"--cpuprofile", profiles[0], "--cpuprofile-ordinary", profiles[1],
			})
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if last := lines[len(lines)-1]; !regexp.MustCompile(`^ratio bulk/ordinary: [0-9]+\.[0-9]{2}$`).MatchString(last) {
				t.Fatalf("last line %q is not the ratio line", last)
			}
			if cpu := lines[len(lines)-2]; !regexp.MustCompile(`^CPU per row, ordinary/bulk: [0-9]+\.[0-9]{2}$`).MatchString(cpu) {
				t.Fatalf("line before the ratio %q is not the CPU ratio line", cpu)
			}
			for _, re := range []string{
				`(?m)^    ordinary: 3000 rows readable in [0-9.]+s: [0-9]+ rows/s, [0-9.]+ MB/s`,
				`(?m)^    bulk: 3000 rows readable in [0-9.]+s: [0-9]+ rows/s, [0-9.]+ MB/s`,
				`build: 3 buckets, 3000 rows in the snapshots`,
				`(?m)^    build busy time \(summed over goroutines\): sort\+spill [0-9.]+s, .* merge\+write [0-9.]+s, .* upload [0-9.]+s`,
				`(?m)^    (waited [0-9.]+s for the process to go idle|the process did not go idle within 1m0s)`,
			} {
				if !regexp.MustCompile(re).MatchString(out.String()) {
					t.Errorf("report lacks %q", re)
				}
			}
			// Both tables verified: a sample read back and every row counted.
			if n := strings.Count(out.String(), "200 sampled rows read back equal"); n != 2 {
				t.Errorf("%d sample verifications reported, want 2", n)
			}
			if n := strings.Count(out.String(), "counted 3000 rows"); n != 2 {
				t.Errorf("%d full counts reported, want 2", n)
			}
			// Both CPU profiles were written (pprof files are gzipped).
			for _, p := range profiles {
				b, err := os.ReadFile(p)
				if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
					t.Errorf("profile %s: %d bytes, %v", p, len(b), err)
				}
			}
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--rows", "0"},
		{"--buckets", "0"},
		{"--key-bytes", "1", "--rows", "1000"},
		{"--value-bytes", "-1"},
		{"--memory", "lots"},
		{"--bulk-input", "parquet"},
		{"--arrow-batch", "0"},
		{"--workers", "0"},
		{"extra"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestSettle: settle returns once the process is idle, and gives up after
// its limit while a goroutine keeps a core busy.
func TestSettle(t *testing.T) {
	waited, idle, err := settle(t.Context(), 10*time.Second)
	if err != nil || !idle || waited < 500*time.Millisecond {
		t.Fatalf("idle process: waited %v, idle %t, %v", waited, idle, err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
		}
	}()
	waited, idle, err = settle(t.Context(), time.Second)
	stop.Store(true)
	<-done
	if err != nil || idle || waited < time.Second {
		t.Fatalf("busy process: waited %v, idle %t, %v", waited, idle, err)
	}
}
