package replica

import (
	"context"
	"fmt"
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
		ev := h.events(e.id(3), newBGErrors())

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

// TestIteratorsClosedInBackground: a write, a lookup or a scan does not
// wait for its iterator to close (Pebble may evict a compaction's input files
// from the block cache there, yielding the processor every few blocks),
// reads and writes go on meanwhile, and Close waits for such closes
// before it closes the database (else Pebble reports leaked iterators).
func TestIteratorsClosedInBackground(t *testing.T) {
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
	// within runs fn, failing the test if it does not return in 30 s.
	within := func(what string, fn func() error) {
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s waits for its iterator to close", what)
		}
	}
	want := map[string]string{}
	for _, ms := range [][]Mutation{upserts(0, 10, "a"), upserts(5, 10, "b")} {
		within("a write", func() error { _, err := r.Write(t.Context(), ms); return err })
		model(want, ms)
	}
	<-held
	v, err := r.NewView() // closed by the replica's Close
	if err != nil {
		t.Fatal(err)
	}
	for what, scan := range map[string]func() ([]KV, error){
		"a scan":          func() ([]KV, error) { rows, _, err := r.Scan(t.Context(), nil, 100); return rows, err },
		"a prefix lookup": func() ([]KV, error) { return r.PrefixLookup(t.Context(), []byte("k"), 100) },
		"a view's scan":   func() ([]KV, error) { p, err := v.Scan(t.Context(), ScanOptions{Limit: 100}); return p.Rows, err },
	} {
		within(what, func() error {
			rows, err := scan()
			if err == nil && len(rows) != len(want) {
				err = fmt.Errorf("%d rows, want %d", len(rows), len(want))
			}
			return err
		})
	}
	for what, lookup := range map[string]func(context.Context, [][]byte) ([][]byte, error){"a lookup": r.Lookup, "a view's lookup": v.Lookup} {
		within(what, func() error {
			vals, err := lookup(t.Context(), [][]byte{key(14), key(3)})
			if err == nil && (string(vals[0]) != "v00014-b" || string(vals[1]) != "v00003-a") {
				err = fmt.Errorf("got %q", vals)
			}
			return err
		})
	}

	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	for r.lifecycle.TryRLock() { // until Close holds the lifecycle lock, or returned
		r.lifecycle.RUnlock()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while an iterator was still open", err)
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an iterator was still open", err)
	case <-time.After(50 * time.Millisecond):
	}
	unblock()
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestFailedOpenWaitsForIteratorCloses: an Open whose changelog replay
// fails after applying batches (its context ends: the entry was stopped
// mid-restore) closes the database only after the apply iterators it
// closes in the background, as Close does; it closed it with one still
// open (Pebble: "leaked iterators", the iterator closed later against a
// closed database).
func TestFailedOpenWaitsForIteratorCloses(t *testing.T) {
	// The cancel lands during the replay only if the replay is still
	// reading when the first apply's iterator closes: try a few times.
	for attempt := range 5 {
		e := newEnv(t)
		h := e.hostOnly(t, WithRequestLimits(100, 64)) // one record a read
		r := open(t, h, e.id(0), nil)
		for i := range 2000 {
			write(t, r, upserts(i, 1, "a"))
		}
		if err := r.Destroy(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		held := make(chan struct{})
		var once sync.Once
		prev := closeIter
		closeIter = func(it *pebble.Iterator) error {
			once.Do(func() {
				cancel() // the replay fails at its next read
				close(held)
				time.Sleep(200 * time.Millisecond) // still closing when Open fails
			})
			return it.Close()
		}
		rr, err := h.Open(ctx, e.id(0), nil)
		<-held
		closeIter = prev
		if err == nil {
			t.Logf("attempt %d: the replay ended before the cancel", attempt)
			if err := rr.Destroy(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.Contains(err.Error(), "leaked iterators") {
			t.Fatalf("a failed Open closed its database with an apply iterator open: %v", err)
		}
		return
	}
	t.Fatal("no Open failed mid-replay in 5 attempts")
}
