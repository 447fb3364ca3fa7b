//go:build linux

package snapshotbuild

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// mapAnon reserves n bytes of anonymous memory outside the Go heap. Pages
// become resident only when touched, and the garbage collector neither
// scans them nor counts them toward its heap goal: a buffer that is the
// budget's size therefore costs the budget, not twice the budget.
func mapAnon(n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("snapshotbuild: map %d bytes: %w", n, err)
	}
	return b, nil
}

func unmapAnon(b []byte) {
	if cap(b) == 0 {
		return
	}
	if err := syscall.Munmap(b[:cap(b)]); err != nil {
		panic(fmt.Sprintf("snapshotbuild: unmap: %v", err))
	}
}

// dropPages gives the pages of b (page-aligned: a mapAnon mapping's tail
// from a page boundary) back to the kernel; they read as zero when touched
// again. Best effort.
func dropPages(b []byte) {
	if len(b) == 0 {
		return
	}
	_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
}

// discardRange gives the page cache of f's bytes [off, off+n) back to the
// kernel (a hole punched into the file, its size unchanged): spill bytes
// already read by the merge are dead, and on a VM whose fresh pages are
// expensive to fault in, the SST files written next reuse the freed pages
// cheaply. Partial pages at either end are only zeroed, so neighbouring
// sections stay intact. Best effort: it reports false when the file system
// cannot punch holes, and the caller stops trying.
func discardRange(f *os.File, off, n int64) bool {
	if n <= 0 {
		return true
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = syscall.Fallocate(int(fd), fallocPunchHole|fallocKeepSize, off, n)
	}); err != nil {
		return false
	}
	return ferr == nil
}

const (
	fallocKeepSize  = 0x1 // FALLOC_FL_KEEP_SIZE
	fallocPunchHole = 0x2 // FALLOC_FL_PUNCH_HOLE
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault pages in
// writable, keeping their contents.
const madvPopulateWrite = 23

// populate makes mem resident (see prefaulter).
func populate(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), madvPopulateWrite)
	if errno != 0 {
		return errno
	}
	return nil
}

// canPopulate reports whether this kernel supports populate: it tries one
// page of a fresh mapping.
var canPopulate = sync.OnceValue(func() bool {
	mem, err := mapAnon(os.Getpagesize())
	if err != nil {
		return false
	}
	defer unmapAnon(mem)
	return populate(mem) == nil
})
