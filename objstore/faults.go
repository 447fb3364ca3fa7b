package objstore

import (
	"context"
	"fmt"
	"io"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
)

// Op names a Bucket operation for fault injection.
type Op string

// The operations Faults counts and can fail.
const (
	OpPut    Op = "put"
	OpOpen   Op = "open"
	OpStat   Op = "stat"
	OpList   Op = "list"
	OpDelete Op = "delete"
)

// Faults wraps a Bucket and injects failures at exact steps, for tests of
// the code above a Bucket. It implements Bucket and is safe for concurrent
// use. A failed call returns before it reaches the inner bucket. Calls are
// counted when made: a List call counts when List is called, not when its
// sequence is iterated. The key that List faults match is its prefix.
type Faults struct {
	inner Bucket
	mu    struct {
		sync.Mutex
		calls   map[Op]int
		nth     []nthFault
		keys    []keyFault
		torn    []tornFault
		corrupt []func(key string) bool
	}
}

type nthFault struct {
	op   Op
	call int // the absolute call number that fails
	err  error
}

type keyFault struct {
	op    Op
	match func(key string) bool
	err   error
}

type tornFault struct {
	match func(key string) bool
	n     int64
}

var _ Bucket = (*Faults)(nil)

// NewFaults wraps b with no faults armed.
func NewFaults(b Bucket) *Faults {
	f := &Faults{inner: b}
	f.mu.calls = map[Op]int{}
	return f
}

// FailNth makes the n-th call of op (1-based, counted from now) return err.
func (f *Faults) FailNth(op Op, n int, err error) {
	if n < 1 {
		panic(fmt.Sprintf("objstore: FailNth(%s, %d): n must be at least 1", op, n))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.nth = append(f.mu.nth, nthFault{op: op, call: f.mu.calls[op] + n, err: err})
}

// FailKey makes every call of op whose key matches return err.
func (f *Faults) FailKey(op Op, match func(key string) bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.keys = append(f.mu.keys, keyFault{op: op, match: match, err: err})
}

// TruncateWrite makes every Put of a matching key pass only the first n
// bytes of its content to the inner bucket and then fail the read with
// ErrInjected, like an upload whose connection dies; it fails even when
// the content is shorter than n. Because every Bucket's Put is atomic, no
// object appears, as on a real store; Put returns an error wrapping
// ErrInjected.
func (f *Faults) TruncateWrite(match func(key string) bool, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.torn = append(f.mu.torn, tornFault{match: match, n: n})
}

// CorruptRead makes Open of a matching key flip every bit of the first
// byte it returns. An empty read has nothing to corrupt.
func (f *Faults) CorruptRead(match func(key string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.corrupt = append(f.mu.corrupt, match)
}

// Calls is the number of calls of op since NewFaults or Reset, failed ones
// included.
func (f *Faults) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.calls[op]
}

// Reset disarms every fault and zeroes the call counts.
func (f *Faults) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.calls = map[Op]int{}
	f.mu.nth, f.mu.keys, f.mu.torn, f.mu.corrupt = nil, nil, nil, nil
}

// call counts a call of op on key and returns its injected error, if any.
// Match functions run outside the lock.
func (f *Faults) call(op Op, key string) error {
	f.mu.Lock()
	f.mu.calls[op]++
	n := f.mu.calls[op]
	var err error
	for _, r := range f.mu.nth {
		if r.op == op && r.call == n {
			err = r.err
			break
		}
	}
	keys := slices.Clone(f.mu.keys)
	f.mu.Unlock()
	for _, r := range keys {
		if err == nil && r.op == op && r.match(key) {
			err = r.err
		}
	}
	if err != nil {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	return nil
}

// Put injects FailNth, FailKey and TruncateWrite faults, then calls the inner Put.
func (f *Faults) Put(ctx context.Context, key string, r io.Reader, ifNotExist bool) error {
	if err := f.call(OpPut, key); err != nil {
		return err
	}
	f.mu.Lock()
	torn := slices.Clone(f.mu.torn)
	f.mu.Unlock()
	for _, t := range torn {
		if t.match(key) {
			return f.putTorn(ctx, key, r, ifNotExist, t.n)
		}
	}
	return f.inner.Put(ctx, key, r, ifNotExist)
}

// tornKey reports whether a TruncateWrite fault matches key.
func (f *Faults) tornKey(key string) bool {
	f.mu.Lock()
	torn := slices.Clone(f.mu.torn)
	f.mu.Unlock()
	for _, t := range torn {
		if t.match(key) {
			return true
		}
	}
	return false
}

func (f *Faults) putTorn(ctx context.Context, key string, r io.Reader, ifNotExist bool, n int64) error {
	tr := &tornReader{r: r, left: n}
	err := f.inner.Put(ctx, key, tr, ifNotExist)
	switch {
	case !tr.torn.Load():
		return err // the inner bucket stopped before the cut, e.g. ErrExists
	case err == nil:
		return fmt.Errorf("objstore: put %q: %w: torn after %d bytes, yet the inner bucket committed the object", key, ErrInjected, n)
	}
	return err
}

// tornReader yields the first left bytes of r and then, instead of EOF, an
// error wrapping ErrInjected.
type tornReader struct {
	r    io.Reader
	left int64
	torn atomic.Bool
}

func (t *tornReader) Read(p []byte) (int, error) {
	if t.left <= 0 {
		t.torn.Store(true)
		return 0, fmt.Errorf("%w: connection lost mid-upload", ErrInjected)
	}
	if int64(len(p)) > t.left {
		p = p[:t.left]
	}
	n, err := t.r.Read(p)
	t.left -= int64(n)
	if err == io.EOF {
		t.left, err = 0, nil
	}
	return n, err
}

// Open injects FailNth, FailKey and CorruptRead faults, then calls the inner Open.
func (f *Faults) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := f.call(OpOpen, key); err != nil {
		return nil, err
	}
	rc, err := f.inner.Open(ctx, key, offset, length)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	corrupt := slices.Clone(f.mu.corrupt)
	f.mu.Unlock()
	for _, match := range corrupt {
		if match(key) {
			return &corruptReader{ReadCloser: rc}, nil
		}
	}
	return rc, nil
}

// corruptReader flips the bits of the first byte read through it.
type corruptReader struct {
	io.ReadCloser
	done bool
}

func (c *corruptReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 && !c.done {
		p[0] ^= 0xff
		c.done = true
	}
	return n, err
}

// Stat injects FailNth and FailKey faults, then calls the inner Stat.
func (f *Faults) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := f.call(OpStat, key); err != nil {
		return Attrs{}, err
	}
	return f.inner.Stat(ctx, key)
}

// List injects FailNth and FailKey faults (matched on prefix), then calls the inner List.
func (f *Faults) List(ctx context.Context, prefix string) iter.Seq2[Attrs, error] {
	if err := f.call(OpList, prefix); err != nil {
		return func(yield func(Attrs, error) bool) { yield(Attrs{}, err) }
	}
	return f.inner.List(ctx, prefix)
}

// Delete injects FailNth and FailKey faults, then calls the inner Delete.
func (f *Faults) Delete(ctx context.Context, key string) error {
	if err := f.call(OpDelete, key); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// Close closes the inner bucket.
func (f *Faults) Close() error { return f.inner.Close() }
