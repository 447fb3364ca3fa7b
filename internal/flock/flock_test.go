//go:build unix

package flock

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	f, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := Lock(path); !errors.Is(err, ErrLocked) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Lock(path)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	g.Close()
	if _, err := Lock(filepath.Join(t.TempDir(), "missing", "LOCK")); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("lock in a missing directory: %v", err)
	}
}
