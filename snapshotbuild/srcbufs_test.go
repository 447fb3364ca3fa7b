package snapshotbuild

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSrcBufsReuse: a merge's buffers serve the next merge (no new
// mapping, no new budget), the budget counts every mapped buffer until
// close, and close refuses while a buffer is still out.
func TestSrcBufsReuse(t *testing.T) {
	const size = 64 << 10
	bud := newBudget(1 << 20)
	p := newSrcBufs(size, bud)
	used := func() int64 { u, _, _ := bud.snapshot(); return u }

	a, err := p.get(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	a[2][size-1] = 7 // the whole buffer is writable
	if used() != 3*size || p.mapped != 3 {
		t.Fatalf("after get(3): used %d, mapped %d", used(), p.mapped)
	}
	p.put(a)
	if used() != 3*size {
		t.Fatalf("idle buffers gave their budget back: used %d", used())
	}
	b, err := p.get(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if used() != 3*size || p.mapped != 3 {
		t.Fatalf("get(2) with 3 idle mapped more: used %d, mapped %d", used(), p.mapped)
	}
	c, err := p.get(t.Context(), 2) // one idle, one new
	if err != nil {
		t.Fatal(err)
	}
	if used() != 4*size || p.mapped != 4 {
		t.Fatalf("get(2) with 1 idle: used %d, mapped %d, want 4 buffers", used(), p.mapped)
	}
	p.put(b)
	if err := p.close(); err == nil {
		t.Fatal("close with two buffers out succeeded")
	}
	p.put(c)
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if used() != 0 {
		t.Fatalf("after close: used %d", used())
	}
}

// TestSrcBufsBudget: get waits for budget it cannot have and, when its
// context ends, returns the idle buffers it took and holds nothing more.
func TestSrcBufsBudget(t *testing.T) {
	const size = 64 << 10
	bud := newBudget(3 * size)
	p := newSrcBufs(size, bud)
	a, err := p.get(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	p.put(a[:1])
	held := a[1:]
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	// One idle buffer and one budget slot left: three more cannot be had.
	if _, err := p.get(ctx, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get beyond the budget: %v", err)
	}
	if u, _, _ := bud.snapshot(); u != 2*size || len(p.idle) != 1 || p.mapped != 2 {
		t.Fatalf("after a failed get: used %d, idle %d, mapped %d", u, len(p.idle), p.mapped)
	}
	// Once the held buffer is back, the same request fits (2 idle + 1 new
	// is the whole budget).
	p.put(held)
	d, err := p.get(t.Context(), 3)
	if err != nil {
		t.Fatal(err)
	}
	p.put(d)
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
}
