package tablet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestAwaitRestore: RestoreSnapshot's wait ends at the status change to
// READY or FAILED (not at its bound), at its bound while the replica is
// still restoring, and early when the request's deadline is near.
func TestAwaitRestore(t *testing.T) {
	newEntry := func(t *testing.T) *replicaEntry {
		ctx, cancel := context.WithCancel(t.Context())
		e := &replicaEntry{ctx: ctx, cancel: cancel, done: make(chan struct{})}
		e.setStatus(entryStatus{state: restoringState})
		return e
	}
	for _, final := range []entryStatus{{state: readyState}, {state: failedState}} {
		synctest.Test(t, func(t *testing.T) {
			e := newEntry(t)
			go func() {
				time.Sleep(300 * time.Millisecond)
				e.setStatus(entryStatus{state: restoringState}) // progress: keep waiting
				time.Sleep(200 * time.Millisecond)
				e.setStatus(final)
			}()
			start := time.Now()
			awaitRestore(t.Context(), e, 2*time.Second)
			if got := time.Since(start); got != 500*time.Millisecond {
				t.Fatalf("%v: waited %v, want 500ms", final.state, got)
			}
		})
	}
	synctest.Test(t, func(t *testing.T) {
		e := newEntry(t)
		start := time.Now()
		awaitRestore(t.Context(), e, 2*time.Second)
		if got := time.Since(start); got != 2*time.Second {
			t.Fatalf("still restoring: waited %v, want the 2s bound", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		awaitRestore(ctx, e, 2*time.Second)
		if got := time.Since(start); got != 500*time.Millisecond {
			t.Fatalf("1s deadline: waited %v, want half of it", got)
		}
		e.cancel() // the entry is stopped
		start = time.Now()
		awaitRestore(t.Context(), e, 2*time.Second)
		if got := time.Since(start); got != 0 {
			t.Fatalf("stopped entry: waited %v", got)
		}
	})
}
