//go:build linux

package snapshotbuild

import (
	"os"
	"syscall"
	"testing"
)

// allocatedBytes is the disk space f holds (st_blocks), -1 if unknown.
func allocatedBytes(t *testing.T, f *os.File) int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1
	}
	return st.Blocks * 512
}
