package snapshotbuild

import (
	"context"
	"sync"
)

// budget is the build's one memory accountant: a counting semaphore of bytes
// shared by the input chunks and the merge buffers of every bucket.
// Waiters are served in FIFO order so a large request is not starved.
type budget struct {
	mu struct {
		sync.Mutex
		total   int64
		used    int64
		peak    int64
		waiters []*budgetWaiter
	}
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

func newBudget(total int64) *budget {
	b := &budget{}
	b.mu.total = total
	return b
}

// tryAcquire takes n bytes if they are available now and nobody waits.
func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.waiters) == 0 && b.mu.used+n <= b.mu.total {
		b.takeLocked(n)
		return true
	}
	return false
}

// acquire takes n bytes, waiting until they are available or ctx is done.
// A request larger than the whole budget is granted once nothing else is
// held, so it cannot deadlock.
func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.mu.waiters) == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.mu.waiters = append(b.mu.waiters, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready:
			// Granted concurrently with the cancellation: give it back.
			b.releaseLocked(n)
		default:
			for i, x := range b.mu.waiters {
				if x == w {
					b.mu.waiters = append(b.mu.waiters[:i], b.mu.waiters[i+1:]...)
					break
				}
			}
			b.wakeLocked()
		}
		return ctx.Err()
	}
}

func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked(n)
}

func (b *budget) fitsLocked(n int64) bool {
	return b.mu.used+n <= b.mu.total || b.mu.used == 0
}

func (b *budget) takeLocked(n int64) {
	b.mu.used += n
	b.mu.peak = max(b.mu.peak, b.mu.used)
}

func (b *budget) releaseLocked(n int64) {
	b.mu.used -= n
	if b.mu.used < 0 {
		panic("snapshotbuild: budget released more than acquired")
	}
	b.wakeLocked()
}

func (b *budget) wakeLocked() {
	for len(b.mu.waiters) > 0 {
		w := b.mu.waiters[0]
		if !b.fitsLocked(w.n) {
			return
		}
		b.takeLocked(w.n)
		b.mu.waiters = b.mu.waiters[1:]
		close(w.ready)
	}
}

func (b *budget) snapshot() (used, peak, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.used, b.mu.peak, b.mu.total
}
