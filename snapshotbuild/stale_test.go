//go:build unix

package snapshotbuild

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRemoveStaleTemp: the temporary directory of a build whose process
// died (its LOCK free) is removed with its files, also one it was still
// making (.thaw-build-new-, left by a kill before the rename); a running
// build's (its
// LOCK held, here by a builder of this process), a directory without a
// LOCK and other entries are left alone; a build then closed removes its
// own.
func TestRemoveStaleTemp(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t)
	live, err := New(s, Target{NumBuckets: 1, Snapshot: testTarget(s), SnapshotIDs: snapIDs(1)}, Options{TempDir: dir, MemoryBudget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// A killed build's directory: a LOCK nobody holds, and a spill file;
	// one killed while making its directory (before the rename).
	for path, files := range map[string]map[string]int{
		filepath.Join(dir, buildDirPrefix+"123"):    {buildLockName: 0, "run-000001": 5000},
		filepath.Join(dir, newBuildDirPrefix+"456"): {buildLockName: 0},
	} {
		for name, size := range files {
			if err := os.MkdirAll(path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, name), make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range []string{buildDirPrefix + "nolock", "other"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A new directory is left alone for a minute: its build may be
	// between making its LOCK and locking it.
	young := filepath.Join(dir, newBuildDirPrefix+"789")
	if err := os.MkdirAll(young, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(young, buildLockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * newBuildDirGrace)
	if err := os.Chtimes(filepath.Join(dir, newBuildDirPrefix+"456"), old, old); err != nil {
		t.Fatal(err)
	}
	st, err := RemoveStaleTemp(dir)
	if err != nil || st != (StaleTemp{Dirs: 2, Bytes: 5000}) {
		t.Fatalf("RemoveStaleTemp: %+v, %v; want two directories of 5000 bytes", st, err)
	}
	left := topEntries(t, dir)
	want := []string{filepath.Base(live.tmp), buildDirPrefix + "nolock", newBuildDirPrefix + "789", "other"}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	// A directory without a LOCK did not get one.
	if _, err := os.Stat(filepath.Join(dir, buildDirPrefix+"nolock", buildLockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a LOCK was created in a directory that had none: %v", err)
	}
	// Again: nothing more to remove.
	if st, err := RemoveStaleTemp(dir); err != nil || st.Dirs != 0 {
		t.Fatalf("second RemoveStaleTemp: %+v, %v", st, err)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if left := topEntries(t, dir); slices.Contains(left, filepath.Base(live.tmp)) {
		t.Fatalf("the closed build's directory is left: %v", left)
	}
	// A missing directory has nothing stale.
	if st, err := RemoveStaleTemp(filepath.Join(dir, "missing")); err != nil || st.Dirs != 0 {
		t.Fatalf("RemoveStaleTemp of a missing directory: %+v, %v", st, err)
	}
}

// topEntries returns the names in dir, sorted.
func topEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
