package kafka

import (
	"slices"
	"testing"
	"time"
)

// TestStartLatestKeepsEventsAcrossRestart: with Start=latest a group
// skips the events produced before it first had a partition, and no
// other: the group has joined (and handled an event on partition 0); the
// member stops (a restart, a leadership handover); an event is produced to
// partition 1, which has had no event handled, so no committed offset of
// its own; the next member of the group handles it (it started at the end
// of partition 1 again and never saw the event).
func TestStartLatestKeepsEventsAcrossRestart(t *testing.T) {
	brokers := cluster(t)
	cfg := func(r *recorder) Config {
		c := testConfig(brokers, r.handle, nil, nil)
		c.Start = StartLatest
		return c
	}
	produce(t, brokers, 1, promote("before")) // before the group first joined
	rec := newRecorder(nil)
	stop := start(t, cfg(rec))
	// The group has joined once partition 0's event produced now is seen.
	deadline := time.Now().Add(30 * time.Second)
	for len(rec.events()) == 0 {
		produce(t, brokers, 0, promote("first"))
		time.Sleep(300 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatal("first member never handled an event")
		}
	}
	stop()

	produce(t, brokers, 1, promote("gap")) // after the group first joined

	rec2 := newRecorder(nil)
	start(t, cfg(rec2))
	time.Sleep(2 * time.Second)
	produce(t, brokers, 0, promote("marker"))
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		got := rec2.events()
		if slices.ContainsFunc(got, func(e Event) bool { return e.Policy == "gap" }) {
			if all := append(rec.events(), got...); slices.ContainsFunc(all, func(e Event) bool { return e.Policy == "before" }) {
				t.Fatalf("the event produced before the group first joined was handled: %+v", all)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("event produced to partition 1 after the group first joined was never handled by the group (second member saw %+v)", rec2.events())
}
