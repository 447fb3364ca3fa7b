//go:build linux

package snapshotbuild

import (
	"fmt"
	"syscall"
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
