package changelog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/thawdb/thaw/internal/flock"
)

const (
	lockFileName     = "LOCK"
	identityFileName = "IDENTITY"
	tombstonePrefix  = ".deleted-"
)

// LocalProvider serves the bucket logs of one host from a root directory,
// one subdirectory per bucket log (see BucketLogID). All tablet servers of
// the host share it: opening an id that is already open returns a new
// handle on the same SegmentLog, so the replicas of a bucket on this host
// append to and tail one log. The log closes when its last handle closes.
//
// A LocalProvider locks its root (flock on root/LOCK): one provider per
// root per host, which is why the tablet servers of a host must run in one
// process to share it.
type LocalProvider struct {
	root     string
	opts     options
	lock     *os.File
	identity string
	seq      atomic.Uint64 // tombstone names; leftovers go at start-up

	mu struct {
		sync.Mutex
		logs   map[BucketLogID]*sharedLog
		closed bool
	}
}

var _ Provider = (*LocalProvider)(nil)

// sharedLog is one open bucket log and its handles. ready is closed when
// the open finished; then exactly one of log and err is set, and neither
// changes. refs counts handles plus callers still waiting for ready. When
// refs drops to zero the entry stays in the map, closing, until the log is
// closed; then gone is closed and the entry removed, so that no second
// SegmentLog ever works on the directory while the first still might.
// refs and closing are guarded by the provider's mu.
type sharedLog struct {
	ready   chan struct{}
	log     *SegmentLog
	err     error
	refs    int
	closing bool
	gone    chan struct{}
}

// NewLocalProvider opens (creating if needed) a provider root. The options
// apply to every log it opens. It removes leftovers of interrupted Deletes.
func NewLocalProvider(root string, opts ...Option) (_ *LocalProvider, err error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := ensureDir(root); err != nil {
		return nil, err
	}
	lock, err := flock.Lock(filepath.Join(root, lockFileName))
	if err != nil {
		return nil, fmt.Errorf("changelog: lock provider root %s (is another provider using it?): %w", root, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, lock.Close())
		}
	}()
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("changelog: list provider root: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tombstonePrefix) {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				return nil, fmt.Errorf("changelog: remove deleted log: %w", err)
			}
		}
	}
	identity, err := rootIdentity(root)
	if err != nil {
		return nil, err
	}
	p := &LocalProvider{root: root, opts: o, lock: lock, identity: identity}
	p.mu.logs = make(map[BucketLogID]*sharedLog)
	return p, nil
}

// Identity names the logs of this root for the tier's placement, which
// keeps a bucket's replicas on tablet servers that share one changelog:
// "local:" and the random id the root got when it was first opened (kept in
// root/IDENTITY), so it survives restarts and differs between roots.
func (p *LocalProvider) Identity() string { return "local:" + p.identity }

// rootIdentity reads root/IDENTITY, creating it with a random id (32 hex
// digits) on the first open.
func rootIdentity(root string) (string, error) {
	path := filepath.Join(root, identityFileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSuffix(string(b), "\n")
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			return "", fmt.Errorf("changelog: %s does not hold 32 hex digits: %q", path, b)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("changelog: read identity: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("changelog: identity: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	tmp := path + ".tmp"
	if err := writeSynced(tmp, []byte(id+"\n")); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("changelog: identity: %w", err)
	}
	return id, syncDir(root)
}

// writeSynced writes a new file and syncs it.
func writeSynced(path string, b []byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("changelog: %w", cerr)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	return nil
}

// Open implements Provider. Concurrent Opens of one id share one recovery;
// ctx bounds the wait for it, and for a previous instance of the log to
// finish closing.
func (p *LocalProvider) Open(ctx context.Context, id BucketLogID) (Log, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, opener, err := p.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	if opener {
		l, err := openSegmentLog(filepath.Join(p.root, id.dirName()), p.opts)
		p.mu.Lock()
		s.log, s.err = l, err
		if err != nil {
			delete(p.mu.logs, id)
		}
		close(s.ready)
		p.mu.Unlock()
	} else {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), p.release(id, s))
		}
	}
	if s.err != nil {
		return nil, fmt.Errorf("changelog: open %v: %w", id, s.err)
	}
	return &handle{p: p, id: id, s: s, done: make(chan struct{})}, nil
}

// acquire takes a reference on the entry of id, creating it (opener) if
// there is none, after waiting for a closing one to go.
func (p *LocalProvider) acquire(ctx context.Context, id BucketLogID) (_ *sharedLog, opener bool, _ error) {
	for {
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			return nil, false, ErrClosed
		}
		s := p.mu.logs[id]
		if s != nil && s.closing {
			p.mu.Unlock()
			if err := waitGone(ctx, s); err != nil {
				return nil, false, err
			}
			continue
		}
		if s == nil {
			s = &sharedLog{ready: make(chan struct{}), gone: make(chan struct{})}
			p.mu.logs[id] = s
			opener = true
		}
		s.refs++
		p.mu.Unlock()
		return s, opener, nil
	}
}

// lockIdle returns with p.mu held and no entry for id in the map, after
// waiting for a closing one to go. An open one is ErrInUse.
func (p *LocalProvider) lockIdle(ctx context.Context, id BucketLogID) error {
	for {
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			return ErrClosed
		}
		s := p.mu.logs[id]
		if s == nil {
			return nil
		}
		closing := s.closing
		p.mu.Unlock()
		if !closing {
			return fmt.Errorf("%w: delete %v", ErrInUse, id)
		}
		if err := waitGone(ctx, s); err != nil {
			return err
		}
	}
}

func waitGone(ctx context.Context, s *sharedLog) error {
	select {
	case <-s.gone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Delete implements Provider. A log with open handles is ErrInUse. The
// directory is renamed to a tombstone first, so a crash never leaves half a
// log under the id.
func (p *LocalProvider) Delete(ctx context.Context, id BucketLogID) (bool, error) {
	if err := id.Validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	dir := filepath.Join(p.root, id.dirName())
	tomb := filepath.Join(p.root, fmt.Sprintf("%s%s-%d", tombstonePrefix, id.dirName(), p.seq.Add(1)))
	if err := p.lockIdle(ctx, id); err != nil {
		return false, err
	}
	err := os.Rename(dir, tomb)
	if err == nil {
		err = syncDir(p.root)
	}
	p.mu.Unlock()
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("changelog: delete %v: %w", id, err)
	}
	if err := os.RemoveAll(tomb); err != nil {
		return false, fmt.Errorf("changelog: delete %v: %w", id, err)
	}
	return true, nil
}

// List implements Provider: the root's log directories, whether open or
// not (tombstones of interrupted Deletes and other entries are left out).
func (p *LocalProvider) List(ctx context.Context) ([]BucketLogID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	closed := p.mu.closed
	p.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("changelog: list provider root: %w", err)
	}
	var ids []BucketLogID
	for _, e := range entries {
		if id, ok := ParseName(e.Name(), "-"); ok && e.IsDir() {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, CompareIDs)
	return ids, nil
}

// Close closes every open log (their handles then return ErrClosed) and
// releases the root.
func (p *LocalProvider) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.mu.closed = true
	logs := p.mu.logs
	p.mu.logs = nil
	p.mu.Unlock()
	var errs []error
	for _, s := range logs {
		<-s.ready
		if s.log != nil {
			if err := s.log.Close(); err != nil && !errors.Is(err, ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	if err := p.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("changelog: release provider root: %w", err))
	}
	return errors.Join(errs...)
}

// release drops one reference on s. The last one closes the log and then
// removes the entry.
func (p *LocalProvider) release(id BucketLogID, s *sharedLog) error {
	p.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		s.closing = true
	}
	p.mu.Unlock()
	if !last {
		return nil
	}
	<-s.ready
	var err error
	if s.log != nil {
		if err = s.log.Close(); errors.Is(err, ErrClosed) {
			err = nil // the provider closed it
		}
	}
	p.mu.Lock()
	if p.mu.logs[id] == s {
		delete(p.mu.logs, id)
	}
	close(s.gone)
	p.mu.Unlock()
	return err
}

// handle is one Open's view of a shared log.
type handle struct {
	p      *LocalProvider
	id     BucketLogID
	s      *sharedLog
	closed atomic.Bool
	done   chan struct{} // closed by Close, to end this handle's Waits
}

var _ Log = (*handle)(nil)

func (h *handle) Append(ctx context.Context, records [][]byte) (int64, error) {
	if h.closed.Load() {
		return 0, ErrClosed
	}
	return h.s.log.Append(ctx, records)
}

func (h *handle) Read(ctx context.Context, from int64, maxBytes int) ([]Record, error) {
	if h.closed.Load() {
		return nil, ErrClosed
	}
	return h.s.log.Read(ctx, from, maxBytes)
}

func (h *handle) Wait(ctx context.Context, offset int64) (int64, error) {
	return h.WaitSeen(ctx, offset, -1)
}

func (h *handle) WaitSeen(ctx context.Context, offset, seen int64) (int64, error) {
	if h.closed.Load() {
		return 0, ErrClosed
	}
	return h.s.log.wait(ctx, offset, seen, h.done)
}

func (h *handle) Offsets(ctx context.Context) (int64, int64, error) {
	if h.closed.Load() {
		return 0, 0, ErrClosed
	}
	return h.s.log.Offsets(ctx)
}

func (h *handle) TruncateBefore(ctx context.Context, offset int64) error {
	if h.closed.Load() {
		return ErrClosed
	}
	return h.s.log.TruncateBefore(ctx, offset)
}

func (h *handle) ResetTo(ctx context.Context, offset int64) error {
	if h.closed.Load() {
		return ErrClosed
	}
	return h.s.log.ResetTo(ctx, offset)
}

// Close releases the handle; the shared log closes with its last handle.
func (h *handle) Close() error {
	if !h.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(h.done)
	return h.p.release(h.id, h.s)
}
