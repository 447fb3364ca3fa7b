//go:build unix

package flock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Detects reports whether Lock detects another holder here (it does on
// unix).
const Detects = true

// Lock opens (creating it) the file at path and takes an exclusive flock
// on it without waiting; ErrLocked if another open file holds it. The
// kernel drops the lock when the process dies; Close on the returned file
// releases it. flock locks belong to the open file, so a second Lock of the
// same path fails even inside one process.
func Lock(path string) (*os.File, error) { return lock(path, os.O_CREATE) }

// LockExisting is Lock of a file that must exist: it never creates one
// (say, in a directory its owner is removing).
func LockExisting(path string) (*os.File, error) { return lock(path, 0) }

func lock(path string, create int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|create, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flock: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = fmt.Errorf("%w: %s", ErrLocked, path)
		} else {
			err = fmt.Errorf("flock: lock %s: %w", path, err)
		}
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}
