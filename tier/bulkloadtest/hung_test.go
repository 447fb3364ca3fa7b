package bulkloadtest

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// TestHungTabletDoesNotStarveOtherBulkLoads: a tablet server that does
// not answer the round commands of one transaction (a stalled disk, a
// half-open connection) holds one call of it, not one more at every
// resend, and no slot of the manager's fanout that others wait for: a
// Begin on an unrelated table goes through, and goroutines do not pile
// up. Before, the resends queued behind the hung calls for every slot.
func TestHungTabletDoesNotStarveOtherBulkLoads(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	a := h.createTable(n, "a", 4, "")
	b := h.createTable(n, "b", 1, "")
	locA, err := h.locations(a)
	if err != nil {
		t.Fatal(err)
	}
	hungTable := locA.GetTargetId().GetTableId()
	release := make(chan struct{})
	defer close(release)
	hung := make(chan struct{})
	var hangs sync.Once
	f := func(server string, req *tierv1.SetDataStateRequest) {
		if server == "ts-3" && req.GetTarget().GetTableId() == hungTable {
			hangs.Do(func() { close(hung) })
			select {
			case <-release:
			case <-t.Context().Done():
			}
		}
	}
	h.dataStates.Store(&f)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_, _ = begin(ctx, n, a, "job-a")
	}()
	select { // the fence round of a hangs
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the fence round of table a never reached ts-3")
	}
	time.Sleep(500 * time.Millisecond) // the round's own goroutines start
	base := runtime.NumGoroutine()
	time.Sleep(2 * time.Second) // eight resend intervals
	if grown := runtime.NumGoroutine() - base; grown > 20 {
		t.Errorf("%d more goroutines after 2 s of resends to a hung server", grown)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second) // a hang guard
	defer cancel()
	if _, err := begin(ctx, n, b, "job-b"); err != nil {
		t.Fatalf("Begin on table b while a replica of table a hangs: %v", err)
	}
}
