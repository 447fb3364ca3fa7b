//go:build linux

package snapshotbuild

import "syscall"

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writing back the
// range's dirty pages, without waiting for it.
const syncFileRangeWrite = 2

// startWritebackOS asks the kernel to start writing back bytes [off, off+n)
// of fd, and returns at once; false when it cannot (the caller stops
// asking).
func startWritebackOS(fd uintptr, off, n int64) bool {
	return syscall.SyncFileRange(int(fd), off, n, syncFileRangeWrite) == nil
}
