package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// ScanOptions select one page of a scan.
type ScanOptions struct {
	// Prefix restricts the scan to keys starting with it; nil means every
	// key.
	Prefix []byte
	// StartAfter is the exclusive lower bound: the page starts after this
	// key; nil starts at the first key (of Prefix).
	StartAfter []byte
	// Limit is the most rows of the page, in [1, the host's row limit].
	// A page also stops, beyond its first row, once it holds the host's
	// byte limit of keys and values.
	Limit int
}

// Page is one page of a scan.
type Page struct {
	// Rows in key order.
	Rows []KV
	// Next is the key to pass as StartAfter for the following page; nil
	// when the scan is complete.
	Next []byte
	// LogOffset is the changelog offset the page reflects: it holds every
	// record below it and none at or above it.
	LogOffset int64
}

// ScanPage returns one page of rows from a consistent view of the replica,
// with the changelog offset that view reflects. Paging by key never
// repeats or skips a row that exists for the whole scan.
func (r *Replica) ScanPage(ctx context.Context, o ScanOptions) (Page, error) {
	if err := r.checkLimit(o.Limit); err != nil {
		return Page{}, fmt.Errorf("replica: scan %v: %w", r.id, err)
	}
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return Page{}, fmt.Errorf("replica: scan %v: %w", r.id, ErrClosed)
	}
	snap, next := r.pin()
	defer snap.Close()
	p, err := r.scanPage(ctx, snap, o)
	if err != nil {
		return Page{}, fmt.Errorf("replica: scan %v: %w", r.id, err)
	}
	p.LogOffset = next
	return p, nil
}

// pin takes a Pebble snapshot under the apply lock, so that it holds
// exactly the records below the returned offset. The caller holds
// lifecycle (read) and closes the snapshot.
func (r *Replica) pin() (*pebble.Snapshot, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.db.NewSnapshot(), r.mu.meta.next
}

// scanPage reads one page of o from snap.
func (r *Replica) scanPage(ctx context.Context, snap *pebble.Snapshot, o ScanOptions) (Page, error) {
	opts := &pebble.IterOptions{}
	if len(o.Prefix) > 0 {
		opts.LowerBound, opts.UpperBound = o.Prefix, prefixEnd(o.Prefix)
	}
	if len(o.StartAfter) > 0 {
		if succ := append(bytes.Clone(o.StartAfter), 0); bytes.Compare(succ, opts.LowerBound) > 0 {
			opts.LowerBound = succ
		}
	}
	if opts.UpperBound != nil && opts.LowerBound != nil && bytes.Compare(opts.LowerBound, opts.UpperBound) >= 0 {
		return Page{}, nil
	}
	rows, next, err := r.collect(ctx, func() (*pebble.Iterator, error) { return snap.NewIterWithContext(ctx, opts) }, o.Limit, true)
	return Page{Rows: rows, Next: next}, err
}

// View is a point-in-time view of a replica, for scans that read every
// page from one state. It pins the replica's state in Pebble until
// closed, which holds back the removal of overwritten data: close it
// promptly. Closing the replica closes its views. A View is safe for
// concurrent use; Close waits for the view's running reads.
type View struct {
	r         *Replica
	snap      *pebble.Snapshot
	logOffset int64

	// mu is read-held by every read of the view and write-held by Close.
	// Lock order: the replica's lifecycle, then mu, then the replica's
	// views.
	mu     sync.RWMutex
	closed bool // guarded by mu
}

// NewView pins the replica's current state.
func (r *Replica) NewView() (*View, error) {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return nil, fmt.Errorf("replica: new view of %v: %w", r.id, ErrClosed)
	}
	snap, next := r.pin()
	v := &View{r: r, snap: snap, logOffset: next}
	r.views.Lock()
	if r.views.open == nil {
		r.views.open = make(map[*View]struct{})
	}
	r.views.open[v] = struct{}{}
	r.views.Unlock()
	return v, nil
}

// LogOffset returns the changelog offset the view reflects: it holds every
// record below it and none at or above it.
func (v *View) LogOffset() int64 { return v.logOffset }

// use runs fn while the view and its replica are open.
func (v *View) use(fn func() error) error {
	r := v.r
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	v.mu.RLock()
	defer v.mu.RUnlock()
	if r.closed || v.closed {
		return ErrClosed
	}
	return fn()
}

// Scan returns one page of rows of the view; the page's LogOffset is the
// view's. ErrClosed once the view or the replica is closed.
func (v *View) Scan(ctx context.Context, o ScanOptions) (p Page, err error) {
	if err := v.r.checkLimit(o.Limit); err != nil {
		return Page{}, fmt.Errorf("replica: scan view of %v: %w", v.r.id, err)
	}
	err = v.use(func() error {
		p, err = v.r.scanPage(ctx, v.snap, o)
		return err
	})
	if err != nil {
		return Page{}, fmt.Errorf("replica: scan view of %v: %w", v.r.id, err)
	}
	p.LogOffset = v.logOffset
	return p, nil
}

// Lookup reads keys from the view, as Replica.Lookup does.
func (v *View) Lookup(ctx context.Context, keys [][]byte) (out [][]byte, err error) {
	err = v.use(func() error {
		out, err = v.r.lookup(ctx, v.snap, keys)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replica: lookup view of %v: %w", v.r.id, err)
	}
	return out, nil
}

// Close releases the view, after its running reads. Closing it again is
// not an error.
func (v *View) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	err := v.snap.Close()
	v.mu.Unlock()
	v.r.views.Lock()
	delete(v.r.views.open, v)
	v.r.views.Unlock()
	return err
}

// closeViews closes every open view; Close calls it, holding lifecycle,
// before closing the database, which refuses to close with snapshots open.
func (r *Replica) closeViews() error {
	r.views.Lock()
	open := make([]*View, 0, len(r.views.open))
	for v := range r.views.open {
		open = append(open, v)
	}
	r.views.Unlock()
	var errs []error
	for _, v := range open {
		errs = append(errs, v.Close())
	}
	return errors.Join(errs...)
}
