package benchload

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/testvgw"
)

// TestSmoke runs both paths with a tiny input against an embedded tier:
// each must load, verify and report, and the run must end with the ratio
// line. Nothing is asserted about speed.
func TestSmoke(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		scoped, s3  bool
	}{{"arrow", "arrow", false, false}, {"rows", "rows", false, false}, {"scoped", "arrow", true, false}, {"scoped-s3", "arrow", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			profDir := t.TempDir()
			profiles := []string{filepath.Join(profDir, "bulk.pprof"), filepath.Join(profDir, "ordinary.pprof")}
			args := []string{
				"--rows", "3000", "--buckets", "3", "--batch", "300", "--arrow-batch", "700",
				"--bulk-input", tc.input, "--memory", "8MiB", "--data-dir", t.TempDir(), "--verify-sample", "200",
				"--cpuprofile", profiles[0], "--cpuprofile-ordinary", profiles[1],
			}
			uploads := "uploads into the store directly"
			// A file:// store signs nothing: every object goes through the
			// gateway. An S3 store (versitygw) takes every object with a
			// PUT the gateway signed, and the gateway stores nothing.
			gateway := regexp.MustCompile(`(?m)^    uploads with scoped credentials: ([1-9][0-9]*) objects, ([0-9.]+ [KMG]?i?B) \(and the manifest\); the gateway signed 0 uploads straight to the store and stored ([0-9.]+ [KMG]?i?B) itself$`)
			if tc.s3 {
				srv := testvgw.Start(t)
				srv.Bucket(t, "lake")
				args = append(args, "--object-store", srv.StoreURL("lake", "bench"))
				gateway = regexp.MustCompile(`(?m)^    uploads with scoped credentials: ([1-9][0-9]*) objects, ([0-9.]+ [KMG]?i?B) \(and the manifest\); the gateway signed ([1-9][0-9]*) uploads straight to the store and stored 0 B itself$`)
			}
			if tc.scoped {
				args = append(args, "--scoped-uploads")
				uploads = "uploads with scoped credentials (signed PUTs straight to an s3:// store, else through the upload gateway)"
			}
			err := Run(t.Context(), &out, args)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if gateway.MatchString(out.String()) != tc.scoped {
				t.Errorf("report of the gateway's uploads: %v, want %v", gateway.MatchString(out.String()), tc.scoped)
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
				`(?m)^\(b\) bulk path: .*, ` + regexp.QuoteMeta(uploads) + `$`,
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
		{"--workers", "-1"},
		{"extra"},
		{"--runs", "0"},
		{"--runs", "2", "--cpuprofile", "x.pprof"},
	} {
		if err := Run(t.Context(), &bytes.Buffer{}, args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestWorkersDefault: --workers 0, the default, builds on GOMAXPROCS
// buckets at once; the help shows 0 rather than this machine's count.
func TestWorkersDefault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, runtime.GOMAXPROCS(0)}, {[]string{"--workers", "0"}, runtime.GOMAXPROCS(0)}, {[]string{"--workers", "3"}, 3}} {
		c, err := parseArgs(io.Discard, tc.args)
		if err != nil || c.workers != tc.want {
			t.Errorf("%q: workers %d, %v; want %d", tc.args, c.workers, err, tc.want)
		}
	}
}

// TestRuns: --runs measures both paths on a fresh tier each time (their
// data directories apart) and ends with the median of the runs' ratios.
func TestRuns(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	err := Run(t.Context(), &out, []string{
		"--rows", "2000", "--buckets", "2", "--memory", "8MiB", "--data-dir", dir, "--verify-sample", "50", "--runs", "3",
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	text := out.String()
	var ratios []float64
	for _, m := range regexp.MustCompile(`(?m)^ratio bulk/ordinary: ([0-9.]+)$`).FindAllStringSubmatch(text, -1) {
		r, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		ratios = append(ratios, r)
	}
	if len(ratios) != 4 {
		t.Fatalf("%d ratio lines, want one per run and the median", len(ratios))
	}
	runs := ratios[:3]
	want := fmt.Sprintf("ratios bulk/ordinary of the 3 runs: %.2f %.2f %.2f\n", runs[0], runs[1], runs[2])
	if !strings.Contains(text, want) {
		t.Fatalf("no line %q", want)
	}
	sorted := slices.Clone(runs)
	slices.Sort(sorted)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if last := lines[len(lines)-1]; last != fmt.Sprintf("ratio bulk/ordinary: %.2f", sorted[1]) {
		t.Fatalf("last line %q, want the median of %v", last, runs)
	}
	for i := 1; i <= 3; i++ {
		if !strings.Contains(text, fmt.Sprintf("=== run %d of 3\n", i)) {
			t.Errorf("no header of run %d", i)
		}
		if !strings.Contains(text, "data under "+filepath.Join(dir, fmt.Sprintf("run-%d", i))+", snapshots in file://") {
			t.Errorf("run %d did not get a tier of its own under %s", i, dir)
		}
	}
	if !regexp.MustCompile(`(?m)^CPU per row, ordinary/bulk, median: [0-9]+\.[0-9]{2}$`).MatchString(text) {
		t.Error("no median CPU line")
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
