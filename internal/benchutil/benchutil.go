// Package benchutil holds what thaw's benchmark harnesses (thaw bench ...)
// share: process measurements (CPU time, peak RSS, load), the number
// formats of their reports and their flag sets' usage line. Linux figures
// come from /proc; elsewhere the measurements report "not available"
// rather than a made-up value.
package benchutil

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thawdb/thaw/snapshotbuild"
)

// CPUTime is the process's user+system CPU time so far.
func CPUTime() time.Duration {
	ru := rusage()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusage is the process's resource usage so far (zero if unavailable).
func rusage() syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return syscall.Rusage{}
	}
	return ru
}

// PageFaults is how many page faults the process has taken so far (minor
// and major). A fault is cheap on most machines and about 11 µs on the
// project's VM (docs/performance.md, session 26), where it explains much
// of the CPU a run takes beyond its work.
func PageFaults() int64 {
	ru := rusage()
	return int64(ru.Minflt + ru.Majflt)
}

// PeakRSS is VmHWM from /proc/self/status in bytes, or -1.
func PeakRSS() int64 { return procBytes("/proc/self/status", "VmHWM") }

// procBytes sums the "Name: N kB" lines of names in the /proc file at path,
// in bytes; -1 if the file cannot be read or a name is missing.
func procBytes(path string, names ...string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	var total int64
	found := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return -1
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		total += kb << 10
		found++
	}
	if found != len(names) {
		return -1
	}
	return total
}

// ResetPeakRSS collects garbage, returns freed memory to the OS and resets
// the kernel's peak-RSS mark; false when the reset is not possible.
func ResetPeakRSS() bool {
	runtime.GC()
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// LoadAvg is the content of /proc/loadavg, or "n/a".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	return strings.TrimSpace(string(b))
}

// SplitMix is the splitmix64 finalizer: a cheap, well-mixed function of x
// for synthetic data.
func SplitMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// FmtRSS formats a PeakRSS value in MiB ("n/a" when unknown).
func FmtRSS(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// FmtBytes formats a byte count with a binary unit.
func FmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// BuildBusy says where a build's time went, phase by phase, summed over
// the goroutines doing each (so a phase can exceed wall time).
func BuildBusy(st snapshotbuild.Stats) string {
	return fmt.Sprintf("busy time (summed over goroutines): sort+spill %.2fs, add waiting on spill %.2fs, merge+write %.2fs, ingest+checkpoint %.2fs, upload %.2fs, _METADATA %.2fs",
		st.SortSpill.Seconds(), st.AddWait.Seconds(), st.MergeWrite.Seconds(), st.Checkpoint.Seconds(), st.Upload.Seconds(), st.MetadataWrite.Seconds())
}

// Spills says how many runs a build spilled and what they took on disk
// against their records' uncompressed size.
func Spills(st snapshotbuild.Stats) string {
	s := fmt.Sprintf("%d spills (%s in files for %s of records)", st.Spills, FmtBytes(st.SpilledBytes), FmtBytes(st.SpilledRecordBytes))
	if st.CompactedRuns > 0 {
		s += fmt.Sprintf(", %d runs merged before the final merge", st.CompactedRuns)
	}
	return s
}

// Median returns the median of xs (the mean of the middle two for an even
// count); xs is not modified and must not be empty.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// FmtRatios prints ratios with two decimals, space-separated.
func FmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}
