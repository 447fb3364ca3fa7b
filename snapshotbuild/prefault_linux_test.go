//go:build linux

package snapshotbuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/thawdb/thaw/objstore"
)

// residentBytes counts the pages of mem that are in memory (mincore).
func residentBytes(t *testing.T, mem []byte) int64 {
	t.Helper()
	if len(mem) == 0 {
		return 0
	}
	vec := make([]byte, (int64(len(mem))+pageSize-1)/pageSize)
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * pageSize
}

// TestPrefaultWithinReservation: with two workers, the chunk being filled
// has memory made resident ahead of the filler by the prefaulter (the sort
// scratch, which nothing else touches before Finish, is resident), and
// everything resident stays within what the budget granted the chunk; the
// build's output equals a one-worker build's.
func TestPrefaultWithinReservation(t *testing.T) {
	if !canPopulate() {
		t.Fatal("this kernel cannot populate memory ahead (MADV_POPULATE_WRITE, Linux 5.14); the prefaulter is off here")
	}
	const nb = 4
	var in []inputPair
	for i := range 60000 {
		in = append(in, inputPair{bucket: i % nb, k: fmt.Appendf(nil, "key-%012d", i*7919%60000), v: make([]byte, 100+i%50)})
	}
	s := newTestStore(t)
	tmp := t.TempDir()
	b, err := New(s, Target{NumBuckets: nb, Snapshot: testTarget(s), SnapshotIDs: snapIDs(nb)},
		Options{Workers: 2, MemoryBudget: 64 << 20, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, p := range in {
		if err := b.AddPair(t.Context(), p.bucket, p.k, p.v); err != nil {
			t.Fatal(err)
		}
	}

	b.mu.Lock()
	b.mu.pf.stop() // drains the requests made so far
	c := b.mu.fill
	arena, ents, scratch := residentBytes(t, c.arenaMem), residentBytes(t, c.entMem), residentBytes(t, c.scrMem)
	reserved, used, capBytes := c.reserved, c.used(), c.capBytes
	b.mu.Unlock()

	if scratch == 0 || b.Stats().Prefaulted == 0 {
		t.Fatalf("nothing prefaulted: scratch resident %d B, Stats.Prefaulted %d", scratch, b.Stats().Prefaulted)
	}
	// The filler's last arena and entry pages may be partly used.
	if total := arena + ents + scratch; total > reserved+2*pageSize {
		t.Fatalf("resident %d B (arena %d, entries %d, scratch %d) exceeds the chunk's reservation %d B (used %d)",
			total, arena, ents, scratch, reserved, used)
	}
	if reserved > capBytes || reserved < used {
		t.Fatalf("reservation %d B outside [used %d, cap %d]", reserved, used, capBytes)
	}
	if _, peak, total := b.bud.snapshot(); peak > total {
		t.Fatalf("budget peak %d over the budget %d", peak, total)
	}
	r2, err := b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// The same build with one worker (no prefaulter), into a store with the
	// same base so _METADATA is comparable: identical results.
	s1 := newTestStore(t)
	s1.Store = objstore.New(s1.faults, s.Base())
	r1, st1, err := buildPairs(t, s1, in, buildCfg{nb: nb, budget: 64 << 20, workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st1.Prefaulted != 0 {
		t.Fatalf("a one-worker build prefaulted %d B", st1.Prefaulted)
	}
	j1, _ := json.Marshal(r1)
	if j2, _ := json.Marshal(r2); !bytes.Equal(j1, j2) {
		t.Fatalf("results differ:\n%s\n%s", j1, j2)
	}
}

// TestPrefaultTightBudget: when the budget has nothing to spare, the chunk
// reserves no grant ahead and still fills to its cap; nothing resident
// exceeds the reservation.
func TestPrefaultTightBudget(t *testing.T) {
	if !canPopulate() {
		t.Fatal("this kernel cannot populate memory ahead (MADV_POPULATE_WRITE, Linux 5.14)")
	}
	const capBytes = 4 << 20
	bud := newBudget(capBytes)
	pf := newPrefaulter(new(atomic.Int64))
	c, err := newChunk(capBytes, bud, pf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.free()
	v := make([]byte, 200)
	n := 0
	for c.add(n%3, fmt.Appendf(nil, "k%08d", n), v) {
		n++
		if c.reserved > capBytes {
			t.Fatalf("reserved %d over the cap %d after %d pairs", c.reserved, capBytes, n)
		}
	}
	pf.stop()
	if c.used() > c.reserved || c.reserved != capBytes {
		t.Fatalf("full chunk: used %d reserved %d, want reserved = cap %d", c.used(), c.reserved, capBytes)
	}
	if n < capBytes/(209+2*int(entrySize))-1 {
		t.Fatalf("only %d pairs fit a %d B chunk", n, capBytes)
	}
	total := residentBytes(t, c.arenaMem) + residentBytes(t, c.entMem) + residentBytes(t, c.scrMem)
	if total > c.reserved+2*pageSize {
		t.Fatalf("resident %d B over the reservation %d B", total, c.reserved)
	}
	if residentBytes(t, c.scrMem) == 0 {
		t.Fatal("the prefaulter populated nothing of the sort scratch")
	}
}
