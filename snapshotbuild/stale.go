package snapshotbuild

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/thawdb/thaw/internal/flock"
)

// A build's temporary directory is {TempDir}/thaw-build-{random}, holding
// a LOCK file the build keeps locked (flock) while it runs: the kernel
// drops the lock when the process dies, so a directory whose lock is free
// was left by a build that never reached Close (a killed process) and may
// be removed. The directory is made as .thaw-build-new-{random} and locked
// before it is renamed, so no thaw-build- directory is ever unlocked while
// its build runs.
const (
	buildDirPrefix    = "thaw-build-"
	newBuildDirPrefix = ".thaw-build-new-"
	buildLockName     = "LOCK"
	// newBuildDirGrace is how old a .thaw-build-new- directory must be
	// before RemoveStaleTemp takes it for a killed build's.
	newBuildDirGrace = time.Minute
)

// makeBuildDir creates and locks a build's temporary directory under
// parent. Closing lock (after removing dir) releases it. Where flock is not
// seen (outside unix) the directory is made directly and lock is nil:
// nothing removes it from outside there, and a directory holding an open
// file may not be renamable.
func makeBuildDir(parent string) (dir string, lock *os.File, err error) {
	if !flock.Detects {
		if dir, err = os.MkdirTemp(parent, buildDirPrefix); err != nil {
			return "", nil, fmt.Errorf("snapshotbuild: create temp dir: %w", err)
		}
		return dir, nil, nil
	}
	tmp, err := os.MkdirTemp(parent, newBuildDirPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("snapshotbuild: create temp dir: %w", err)
	}
	lock, err = flock.Lock(filepath.Join(tmp, buildLockName))
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("snapshotbuild: lock temp dir: %w", err), os.RemoveAll(tmp))
	}
	dir = filepath.Join(parent, buildDirPrefix+strings.TrimPrefix(filepath.Base(tmp), newBuildDirPrefix))
	if err := os.Rename(tmp, dir); err != nil {
		return "", nil, errors.Join(fmt.Errorf("snapshotbuild: create temp dir: %w", err), lock.Close(), os.RemoveAll(tmp))
	}
	return dir, lock, nil
}

// StaleTemp is what RemoveStaleTemp removed.
type StaleTemp struct {
	Dirs  int   // build directories removed
	Bytes int64 // the sizes of the files in them
}

// RemoveStaleTemp removes the temporary directories that builds which never
// ended (their process was killed) left under dir (os.TempDir() if empty):
// every thaw-build- directory whose LOCK no process holds, and every
// .thaw-build-new- one (a build killed while making its directory) older
// than a minute whose LOCK no process holds. Directories of
// running builds, in this process or another, are left alone, as are
// directories without a LOCK (an older thaw's) and ones this process may
// not open (another user's). Outside unix, where the lock is not seen,
// it removes nothing. The error joins what could not be removed.
func RemoveStaleTemp(dir string) (StaleTemp, error) {
	var st StaleTemp
	if !flock.Detects {
		return st, nil
	}
	if dir == "" {
		dir = os.TempDir()
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("snapshotbuild: list %s: %w", dir, err)
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), buildDirPrefix) && !strings.HasPrefix(e.Name(), newBuildDirPrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), newBuildDirPrefix) {
			// A build makes its LOCK and then locks it: between the two, a
			// new directory's LOCK is free although its build runs. A build
			// renames its directory at once; one this old was left.
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < newBuildDirGrace {
				continue
			}
		}
		// Never created here: the build that owns the directory may be
		// removing it (its Close), and a LOCK made anew would stop that.
		lock, err := flock.LockExisting(filepath.Join(path, buildLockName))
		if err != nil {
			continue // no LOCK (an older thaw's), a running build's, or not ours to open
		}
		size := dirSize(path)
		err = os.RemoveAll(path)
		_ = lock.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("snapshotbuild: remove stale temp dir: %w", err))
			continue
		}
		st.Dirs++
		st.Bytes += size
	}
	return st, errors.Join(errs...)
}

// dirSize sums the sizes of the regular files under dir (what it can read).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
