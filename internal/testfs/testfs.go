// Package testfs has file-system helpers for tests.
package testfs

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// MakeReadOnly makes dir refuse new entries (and removals) until undo is
// called or the test ends. An ordinary user gets mode 0555. Modes do not
// stop root, so root gets the immutable attribute instead (chattr +i:
// FS_IMMUTABLE_FL), which needs Linux, CAP_LINUX_IMMUTABLE and a file
// system that has the attribute (ext4, xfs, btrfs, tmpfs since Linux 6.0).
func MakeReadOnly(t testing.TB, dir string) (undo func()) {
	t.Helper()
	var restore func()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		restore = func() {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Error(err)
			}
		}
	} else {
		if err := setImmutable(dir, true); err != nil {
			t.Fatalf("make %s read-only for root: %v (needs Linux, CAP_LINUX_IMMUTABLE and a file system with the immutable attribute)", dir, err)
		}
		restore = func() {
			if err := setImmutable(dir, false); err != nil {
				t.Error(err)
			}
		}
	}
	done := false
	once := func() {
		if !done {
			done = true
			restore()
		}
	}
	t.Cleanup(once) // before t.TempDir's removal, which an immutable dir would fail
	return once
}

// setImmutable sets or clears FS_IMMUTABLE_FL on path (Linux, 64-bit
// ioctl numbers).
func setImmutable(path string, on bool) error {
	const (
		getFlags  = 0x80086601 // FS_IOC_GETFLAGS
		setFlags  = 0x40086602 // FS_IOC_SETFLAGS
		immutable = 0x10       // FS_IMMUTABLE_FL
	)
	if runtime.GOOS != "linux" || unsafe.Sizeof(uintptr(0)) != 8 {
		return fmt.Errorf("the immutable attribute is set through 64-bit Linux ioctls, not on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var flags int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), getFlags, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		return fmt.Errorf("FS_IOC_GETFLAGS: %w", errno)
	}
	if on {
		flags |= immutable
	} else {
		flags &^= immutable
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), setFlags, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		return fmt.Errorf("FS_IOC_SETFLAGS: %w", errno)
	}
	return nil
}
