package benchutil

import (
	"math/bits"
	"sync"
)

// ArrowPool is an Arrow memory.Allocator that keeps the buffers freed by
// released record batches and hands them out again, so that a generator
// making batch after batch of the same shape reuses its memory, as the
// ordinary path's generator reuses its rows, instead of allocating (and
// the garbage collector reclaiming) a batch's worth of fresh memory each
// time. Buffers come in power-of-two capacities of at least 64 bytes and
// are zeroed when handed out. At most limit bytes are kept; it is safe for
// concurrent use.
type ArrowPool struct {
	mu    sync.Mutex
	free  [64][][]byte // by log2 of the capacity
	kept  int
	limit int
}

// NewArrowPool returns a pool keeping at most limit bytes of freed buffers.
func NewArrowPool(limit int) *ArrowPool { return &ArrowPool{limit: limit} }

func poolClass(size int) int {
	if size <= 64 {
		return 6
	}
	return bits.Len(uint(size - 1))
}

// Allocate returns a zeroed buffer of size bytes.
func (p *ArrowPool) Allocate(size int) []byte {
	c := poolClass(size)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.kept -= cap(b)
		p.mu.Unlock()
		b = b[:cap(b)]
		clear(b)
		return b[:size]
	}
	p.mu.Unlock()
	return make([]byte, size, 1<<c)
}

// Reallocate returns b resized to size bytes, its contents kept and any
// new bytes zero.
func (p *ArrowPool) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size] // the bytes beyond len(b) are zero (Allocate)
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free keeps b for reuse if it is one of the pool's buffers and the pool
// has room.
func (p *ArrowPool) Free(b []byte) {
	c := cap(b)
	if c < 64 || c&(c-1) != 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kept+c > p.limit {
		return
	}
	p.free[bits.Len(uint(c))-1] = append(p.free[bits.Len(uint(c))-1], b[:0])
	p.kept += c
}
