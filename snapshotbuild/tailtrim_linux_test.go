//go:build linux

package snapshotbuild

import (
	"fmt"
	"sync"
	"testing"
)

// TestTailWithinBudgetAtFinish: a chunk reused after a spill keeps the
// pages its earlier fill touched, while only its current fill is charged;
// when it ends up the tail, Finish gives the rest of the budget to the
// merge's buffers. The tail's old pages came on top (8 MiB budget: 3 MiB
// over). Finish trims the tail to what it holds.
func TestTailWithinBudgetAtFinish(t *testing.T) {
	const budget = 8 << 20
	s := newTestStore(t)
	b, err := New(s, Target{NumBuckets: 1, Snapshot: testTarget(s), SnapshotIDs: snapIDs(1)},
		Options{Workers: 1, MemoryBudget: budget, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	val := make([]byte, 150)
	i := 0
	add := func() {
		x := uint64(i)*0x9e3779b97f4a7c15 + 1
		for j := range val {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			val[j] = byte(x)
		}
		if err := b.AddPair(t.Context(), 0, fmt.Appendf(nil, "key-%012d", (i*7919)%1000003), val); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for b.sealed.Load() < 10 { // ten chunks filled and spilled
		add()
	}
	for range 100 { // a few rows into the reused tail
		add()
	}
	tail := b.mu.fill
	var once sync.Once
	var mu sync.Mutex // (progress comes from the merge and upload goroutines)
	var resident, reserved, maxUsed int64
	b.opts.Progress = func(p BucketProgress) {
		if p.Phase == PhaseMerge {
			once.Do(func() { // the merge reads the tail: still mapped
				resident = residentBytes(t, tail.arenaMem) + residentBytes(t, tail.entMem) + residentBytes(t, tail.scrMem)
				reserved = tail.reserved
			})
		}
		used, _, _ := b.bud.snapshot()
		mu.Lock()
		maxUsed = max(maxUsed, used)
		mu.Unlock()
	}
	if _, err := b.Finish(t.Context()); err != nil {
		t.Fatal(err)
	}
	if resident == 0 {
		t.Fatal("no merge progress seen")
	}
	if over := resident + (maxUsed - reserved) - budget; over > 0 {
		t.Fatalf("the tail's resident %d bytes (%d charged) and the merge's charged buffers (%d) exceed the budget by %d", resident, reserved, maxUsed-reserved, over)
	}
}
