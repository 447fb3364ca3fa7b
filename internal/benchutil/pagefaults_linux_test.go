package benchutil

import (
	"syscall"
	"testing"
)

// TestPageFaults: touching every page of a fresh 4 MiB mapping (small
// pages, whatever the machine's transparent huge page mode) counts at
// least a fault per page.
func TestPageFaults(t *testing.T) {
	const n = 4 << 20
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if err := syscall.Madvise(m, syscall.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	before := PageFaults()
	for i := 0; i < n; i += 4096 {
		m[i] = 1
	}
	if got := PageFaults() - before; got < n/4096 {
		t.Fatalf("touching %d fresh pages counted %d faults", n/4096, got)
	}
}
