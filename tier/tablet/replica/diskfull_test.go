package replica

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/thawdb/thaw/internal/testlog"
)

// fullFS fails the creation of SST files while full is set (a full disk
// for flushes and compactions), and once when once is set.
type fullFS struct {
	vfs.FS
	full, once *atomic.Bool
}

func (f fullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") && (f.full.Load() || f.once.CompareAndSwap(true, false)) {
		return nil, syscall.ENOSPC
	}
	return f.FS.Create(name, c)
}

// TestSnapshotOnAFullDisk: a flush that fails (Pebble retries it for as
// long as it fails) fails the Snapshot with the disk's error, and the
// replica still closes: Snapshot waited in DB.Flush whatever its context,
// holding the locks that writes and Close take. Once the disk has room a
// snapshot succeeds.
func TestSnapshotOnAFullDisk(t *testing.T) {
	e := newEnv(t)
	var full, once atomic.Bool
	h, _ := e.host(t, func(o *options) {
		o.tune = func(po *pebble.Options) { po.FS = fullFS{FS: vfs.Default, full: &full, once: &once} }
	})
	r := open(t, h, e.id(1), nil)
	write(t, r, upserts(0, 100, "a"))
	// A flush that fails once, which Pebble's retry then completes, fails
	// no snapshot.
	once.Store(true)
	if _, _, err := r.Snapshot(t.Context(), 10, nil); err != nil || once.Load() {
		t.Fatalf("snapshot through one failed flush (failed: %t): %v", !once.Load(), err)
	}
	write(t, r, upserts(300, 10, "d"))
	full.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, _, err := r.Snapshot(ctx, 1, nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("snapshot on a full disk: %v", err)
	}
	full.Store(false)
	// (A retry of the flush that began while the disk was full may still
	// report its failure to the next snapshot: as the tablet's periodic
	// snapshots do, try again.)
	for i := 0; ; i++ {
		_, _, err := r.Snapshot(ctx, 2, nil)
		if err == nil {
			break
		}
		if i == 100 || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("snapshot once the disk has room (try %d): %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	write(t, r, upserts(100, 10, "b"))
	full.Store(true)
	write(t, r, upserts(200, 10, "c"))
	// A context that ends also ends the wait (a failure that Pebble does
	// not report as a background error would otherwise hold it).
	r.bg = newBGErrors() // (not told of the failures)
	short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancelShort()
	if _, _, err := r.Snapshot(short, 3, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("snapshot whose context ends during the flush: %v", err)
	}
	full.Store(false)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBackgroundErrorsLoggedSparingly: Pebble reports a flush that fails
// at each of its immediate retries; the replica logs the first, then at
// most one every bgErrorLogEvery with the count it left out.
func TestBackgroundErrorsLoggedSparingly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var logs testlog.Buffer
		h := e.hostOnly(t, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
		bg := newBGErrors()
		ev := h.events(e.id(3), bg)
		wake := bg.next()
		for range 1000 {
			ev.BackgroundError(syscall.ENOSPC)
		}
		select {
		case <-wake:
		default:
			t.Fatal("a background error did not wake a waiting flush")
		}
		if n := strings.Count(logs.String(), "pebble background error"); n != 1 {
			t.Fatalf("%d lines for 1000 errors within %v:\n%s", n, bgErrorLogEvery, logs.String())
		}
		time.Sleep(bgErrorLogEvery)
		ev.BackgroundError(syscall.ENOSPC)
		if got := logs.String(); strings.Count(got, "pebble background error") != 2 || !strings.Contains(got, "repeats_since_last_logged=999") {
			t.Fatalf("log after %v:\n%s", bgErrorLogEvery, got)
		}
		if !errors.Is(bg.lastErr(), syscall.ENOSPC) {
			t.Fatalf("last error %v", bg.lastErr())
		}
	})
}
