//go:build unix

package benchutil

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SyncDirty writes back every dirty page of the system (sync(2)) and
// returns how long that took and how many bytes were dirty or under
// writeback before (from /proc/meminfo; -1 where it cannot be read). A
// harness calls it between its paths, so that one path's data is not
// written back inside the next path's clock, slowing its fsyncs.
func SyncDirty() (took time.Duration, dirty int64) {
	dirty = dirtyBytes()
	start := time.Now()
	syscall.Sync()
	return time.Since(start), dirty
}

// dirtyBytes is Dirty + Writeback of /proc/meminfo, or -1.
func dirtyBytes() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	var total int64 = -1
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "Dirty" && name != "Writeback") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return -1
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		total = max(total, 0) + n<<10
	}
	return total
}
