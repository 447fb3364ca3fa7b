//go:build !unix

package flock

import (
	"fmt"
	"os"
)

// Detects reports whether Lock detects another holder here: not outside
// unix.
const Detects = false

// Lock opens (creating it) the file at path without locking it: outside
// unix a second holder is not detected.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flock: open %s: %w", path, err)
	}
	return f, nil
}

// LockExisting is Lock of a file that must exist: it never creates one.
func LockExisting(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flock: open %s: %w", path, err)
	}
	return f, nil
}
