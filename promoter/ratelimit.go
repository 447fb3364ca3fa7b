package promoter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
)

// limiter is a token bucket of bytes per second shared by every upload of
// one build (a policy's limits.uploadMBps). Burst is one second's worth.
type limiter struct {
	rate float64 // bytes per second
	now  func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newLimiter(bytesPerSecond int64) *limiter {
	return &limiter{rate: float64(bytesPerSecond), now: time.Now, tokens: float64(bytesPerSecond)}
}

// wait takes n bytes, sleeping until the bucket holds them.
func (l *limiter) wait(ctx context.Context, n int) error {
	for n > 0 {
		chunk := min(float64(n), l.rate)
		l.mu.Lock()
		now := l.now()
		if !l.last.IsZero() {
			l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
		}
		l.last = now
		l.tokens -= chunk
		var d time.Duration
		if l.tokens < 0 {
			d = time.Duration(-l.tokens / l.rate * float64(time.Second))
		}
		l.mu.Unlock()
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return context.Cause(ctx)
			case <-t.C:
			}
		}
		n -= int(chunk)
	}
	return nil
}

// limitedStore is a snapshotbuild.Store whose uploads go through the
// limiter (limits.uploadMBps): PutIfAbsent reads its Source through it,
// and a file put takes the file's size from it before the store copies the
// file (the store reads the file itself, so the limiter cannot pace that
// copy; the rate holds on average, each file is sent when its bytes fit).
// A store that links files (LinksFiles) moves no bytes for a file put, and
// such puts are not charged.
type limitedStore struct {
	snapshotbuild.Store
	lim *limiter
}

// Get reads through to the wrapped store when it can read (downloads are
// not limited): the builder checks a bucket's _METADATA before uploading
// its data files, and the embedded interface hid the store's Get, so a
// doomed rebuild uploaded every file first and left them behind.
func (s limitedStore) Get(ctx context.Context, key string) ([]byte, error) {
	if r, ok := s.Store.(interface {
		Get(ctx context.Context, key string) ([]byte, error)
	}); ok {
		return r.Get(ctx, key)
	}
	return nil, errors.ErrUnsupported // the builder decides at the write
}

func (s limitedStore) PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error) {
	return s.Store.PutIfAbsent(ctx, key, limitedSource{ctx: ctx, src: src, lim: s.lim})
}

func (s limitedStore) PutFileStamped(ctx context.Context, key, path string, size int64, sha string, stamp objstore.FileStamp) (objstore.Object, error) {
	if l, ok := s.Store.(interface{ LinksFiles() bool }); !ok || !l.LinksFiles() {
		if err := s.lim.wait(ctx, int(size)); err != nil {
			return objstore.Object{}, fmt.Errorf("upload %s: %w", key, err)
		}
	}
	return s.Store.PutFileStamped(ctx, key, path, size, sha, stamp)
}

type limitedSource struct {
	ctx context.Context // the PutIfAbsent call's; the source lives only for it
	src objstore.Source
	lim *limiter
}

func (s limitedSource) Open() (io.ReadCloser, error) {
	rc, err := s.src.Open()
	if err != nil {
		return nil, err
	}
	return &limitedReader{ctx: s.ctx, rc: rc, lim: s.lim}, nil
}

type limitedReader struct {
	ctx context.Context
	rc  io.ReadCloser
	lim *limiter
}

func (r *limitedReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		if werr := r.lim.wait(r.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

func (r *limitedReader) Close() error { return r.rc.Close() }
