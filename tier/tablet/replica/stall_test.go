package replica

import (
	"log/slog"
	"strings"
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
// time into changelog append, lock wait and apply.
func TestSlowWriteLogged(t *testing.T) {
	e := newEnv(t)
	var logs testlog.Buffer
	h := e.hostOnly(t, WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	r := open(t, h, e.id(0), nil)
	write(t, r, upserts(0, 10, "a"))
	if logs.String() != "" {
		t.Fatalf("a quick write was logged: %s", logs.String())
	}
	defer func(d time.Duration) { slowWrite = d }(slowWrite)
	slowWrite = 0
	write(t, r, upserts(0, 10, "b"))
	got := logs.String()
	for _, want := range []string{`msg="replica: slow write"`, `replica="table 7 bucket 0"`, "mutations=10", "append=", "lock_wait=", "apply_read=", "apply_commit=", "apply_stalled=0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %s", got, want)
		}
	}
}
