//go:build unix

package benchutil

import (
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
func dirtyBytes() int64 { return procBytes("/proc/meminfo", "Dirty", "Writeback") }
