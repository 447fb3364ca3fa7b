package snapshotbuild

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestPairBeyondTheArenaCap: with a budget over 8 GiB, half the budget is
// more than a chunk's arena holds (maxArena, 4 GiB). A pair between the
// two was let through the size check and could never be added: AddPair
// spun for ever, past its context, holding the builder's lock. It is
// ErrRecordTooLarge. The value is 4.5 GiB of untouched, unreserved address
// space (no memory is used).
func TestPairBeyondTheArenaCap(t *testing.T) {
	s := newTestStore(t)
	b, err := New(s, Target{NumBuckets: 1, Snapshot: testTarget(s), SnapshotIDs: snapIDs(1)},
		Options{MemoryBudget: 16 << 30, Workers: 1, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	n := 4<<30 + 512<<20
	val, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		t.Fatalf("map %d bytes of address space: %v", n, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.AddPair(ctx, 0, []byte("k"), val) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRecordTooLarge) {
			t.Fatalf("AddPair of %d bytes: %v, want ErrRecordTooLarge", n, err)
		}
	case <-time.After(20 * time.Second): // a hang guard, not a speed goal
		t.Fatal("AddPair of a pair larger than a chunk's arena did not return") // leaves it spinning: the process ends
	}
	_ = b.Close()
	if err := syscall.Munmap(val); err != nil {
		t.Fatal(err)
	}
}
