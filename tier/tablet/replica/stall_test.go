package replica

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/internal/testlog"
)

// TestWriteStallEvents drives a replica database's event listener as
// Pebble does: stalls are counted with their length, a long one is a
// warning naming the replica and Pebble's reason, a short one is not.
func TestWriteStallEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t)
		var logs testlog.Buffer
		h := e.hostOnly(t, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		ev := h.events(e.id(3))

		ev.WriteStallEnd() // no stall began: nothing to count
		if n, d := h.WriteStalls(); n != 0 || d != 0 {
			t.Fatalf("stalls %d, %v before any began", n, d)
		}
		ev.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
		time.Sleep(200 * time.Millisecond)
		ev.WriteStallEnd()
		if logs.String() != "" {
			t.Fatalf("a 200ms stall was logged as a warning: %s", logs.String())
		}
		ev.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
		time.Sleep(3 * time.Second)
		ev.WriteStallEnd()
		if n, d := h.WriteStalls(); n != 2 || d != 3200*time.Millisecond {
			t.Fatalf("stalls %d, %v; want 2, 3.2s", n, d)
		}
		got := logs.String()
		for _, want := range []string{"level=WARN", `msg="replica: Pebble stalled writes"`, `replica="table 7 bucket 3"`, `reason="L0 file count limit exceeded"`, "stalled=3s"} {
			if !strings.Contains(got, want) {
				t.Errorf("log %q lacks %s", got, want)
			}
		}
	})
}

// TestSlowWriteLogged: a write over slowWrite is a warning that splits its
// time into changelog append, lock wait and apply, and says what the
// apply read from SST blocks and the database's read amplification.
func TestSlowWriteLogged(t *testing.T) {
	e := newEnv(t)
	var logs testlog.Buffer
	h := e.hostOnly(t, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	r := open(t, h, e.id(0), nil)
	write(t, r, upserts(0, 10, "a"))
	if logs.String() != "" {
		t.Fatalf("a quick write was logged: %s", logs.String())
	}
	if err := r.db.Flush(); err != nil { // the next apply reads an SST
		t.Fatal(err)
	}
	defer func(d time.Duration) { slowWrite = d }(slowWrite)
	slowWrite = 0
	write(t, r, upserts(0, 10, "b"))
	got := logs.String()
	if strings.Contains(got, "block_bytes=0 ") {
		t.Errorf("log %q: the apply read no SST block", got)
	}
	for _, want := range []string{`msg="replica: slow write"`, `replica="table 7 bucket 0"`, "mutations=10", "append=", "lock_wait=", "apply_read=", "apply_commit=", "apply_stalled=0s",
		"block_bytes=", "block_bytes_uncached=", "block_read=", `read_amp="1 (L0: 1 files in 1 sublevels)"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %s", got, want)
		}
	}
}

// TestApplyIteratorClosedInBackground: a write does not wait for its
// apply's iterator to close (Pebble may evict a compaction's input files
// from the block cache there, yielding the processor every few blocks),
// reads and writes go on meanwhile, and Close waits for such closes
// before it closes the database (else Pebble reports leaked iterators).
func TestApplyIteratorClosedInBackground(t *testing.T) {
	e := newEnv(t)
	h := e.hostOnly(t)
	r := open(t, h, e.id(0), nil)
	release, held := make(chan struct{}), make(chan struct{}, 1)
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // a failing test leaves nothing blocked for the cleanup's Close
	defer func(f func(*pebble.Iterator) error) { closeIter = f }(closeIter)
	closeIter = func(it *pebble.Iterator) error {
		select {
		case held <- struct{}{}:
		default:
		}
		<-release
		return it.Close()
	}
	want := map[string]string{}
	for _, ms := range [][]Mutation{upserts(0, 10, "a"), upserts(5, 10, "b")} {
		done := make(chan error, 1)
		go func() { _, err := r.Write(t.Context(), ms); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the write waits for its apply's iterator to close")
		}
		model(want, ms)
	}
	<-held
	sameContents(t, r, want)

	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	for r.lifecycle.TryRLock() { // until Close holds the lifecycle lock, or returned
		r.lifecycle.RUnlock()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while an apply's iterator was still open", err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an apply's iterator was still open", err)
	case <-time.After(50 * time.Millisecond):
	}
	unblock()
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
}
