package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStopComponentsBounded: two tablet servers that never stop are both
// reported after one shutdown timeout, instead of the wait for the second
// lasting for ever (the group's timer had already fired for the first); a
// component that stops is waited for and its error kept.
func TestStopComponentsBounded(t *testing.T) {
	failed := &component{id: "ts-0", cancel: func() {}, done: make(chan struct{}), err: errors.New("boom")}
	close(failed.done)
	cs := []*component{failed}
	for _, id := range []string{"ts-1", "ts-2"} {
		cs = append(cs, &component{id: id, cancel: func() {}, done: make(chan struct{})}) // never stops
	}
	res := make(chan []error, 1)
	start := time.Now()
	go func() { res <- stopComponents(cs, 100*time.Millisecond) }()
	select {
	case errs := <-res:
		got := errors.Join(errs...)
		for _, want := range []string{"ts-0: boom", "ts-1 did not stop within 100ms", "ts-2 did not stop within 100ms"} {
			if got == nil || !strings.Contains(got.Error(), want) {
				t.Errorf("errors %v, want %q", got, want)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v for a 100ms timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5 s after a 100 ms shutdown timeout")
	}
}
