package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
)

// Defaults and bounds of a Host; doc.go explains the memory math.
const (
	DefaultCacheSize           = 256 << 20
	DefaultMemTableBudget      = 256 << 20
	DefaultMaxOpenFiles        = 1000
	DefaultMaxRequestRows      = 10_000
	DefaultMaxRequestBytes     = 4 << 20
	DefaultTransferConcurrency = 4

	// MinMemTableSize is the floor of a replica's memtable. Pebble accepts
	// anything above its empty skiplist (about 1 KiB), but it starts every
	// database with a 256 KiB memtable anyway, and smaller memtables only
	// multiply flushes and L0 files.
	MinMemTableSize = 256 << 10
	// MaxMemTableSize caps a replica's memtable (Pebble's hard limit is
	// 4 GiB): a few replicas under a large budget should not get memtables
	// that take seconds to flush, since Snapshot flushes with writes paused.
	MaxMemTableSize = 64 << 20

	// memTableStopWrites is Pebble's MemTableStopWritesThreshold: a
	// replica queues at most this many memtables (one filling, the rest
	// flushing) before writes stall.
	memTableStopWrites = 2
	// memTablesPerReplica is how many memtables a replica's database can
	// hold allocated at once: the queue, plus one flushed memtable that
	// Pebble keeps (and keeps reserved in the block cache) for reuse by
	// the next rotation (DB.memTableRecycle).
	memTablesPerReplica = memTableStopWrites + 1
	bloomBitsPerKey     = 10

	// MinMemTableBudget is the smallest memtable budget of a host: one
	// replica's memtables at MinMemTableSize.
	MinMemTableBudget = MinMemTableSize * memTablesPerReplica

	// l0CompactionThreshold is Pebble's L0CompactionThreshold (default
	// 4): the L0 sublevels that trigger a compaction out of L0. Keys
	// arrive in random order, so every such compaction rewrites nearly
	// all of the replica's lower level; letting L0 collect twice as many
	// flushes halves those rewrites at the price of a few more (cached)
	// bloom filters per lookup. One host of 8 replicas applying 10 M rows:
	// 7.3 → 5.1 µs of CPU per row, write amplification 6.1 → 3.9.
	l0CompactionThreshold = 8
	// l0StopWritesThreshold is Pebble's L0StopWritesThreshold (default
	// 12, three times its default compaction threshold): the L0 sublevels
	// at which writes stall.
	l0StopWritesThreshold = 3 * l0CompactionThreshold
)

// MemTableSize is the memtable size a replica gets when replicas replicas
// (itself included) share budget bytes: budget / (replicas × 3), because a
// Pebble database holds up to three memtables (two queued, one kept for
// reuse), clamped to [MinMemTableSize, MaxMemTableSize]. Above the floor,
// replicas × 3 × MemTableSize ≤ budget.
func MemTableSize(budget int64, replicas int) uint64 {
	n := int64(max(replicas, 1))
	return uint64(min(max(budget/(n*memTablesPerReplica), MinMemTableSize), MaxMemTableSize))
}

// pebbleCacheSize is the capacity of the Pebble cache a host creates for a
// block cache of cacheSize bytes and a memtable budget of budget bytes.
// Pebble reserves every memtable it allocates in the block cache
// (Cache.Reserve), shrinking the room for blocks by its size; a cache of
// only cacheSize would hold no blocks at all once the replicas' memtables
// reach it (the default budget equals the default cache). So the cache's
// capacity is both: blocks get at least cacheSize while the memtables stay
// within budget, and blocks plus memtables never exceed cacheSize + budget.
func pebbleCacheSize(cacheSize, budget int64) int64 { return cacheSize + budget }

// Option configures a Host. Options are validated by NewHost.
type Option func(*options)

type options struct {
	cacheSize        int64
	memTableBudget   int64
	expectedReplicas int
	maxOpenFiles     int
	maxRows          int
	maxBytes         int
	transfers        int
	logger           *slog.Logger
	tune             func(*pebble.Options) // tests only
}

// WithCacheSize sets the size of the block cache all replicas share: the
// room blocks always have, beside the memtables Pebble reserves in the
// same cache (doc.go, "Host and memory").
func WithCacheSize(n int64) Option { return func(o *options) { o.cacheSize = n } }

// WithMemTableBudget sets the memory all replicas' memtables share. The
// host adds it to the Pebble cache's capacity, in which Pebble reserves
// the memtables.
func WithMemTableBudget(n int64) Option { return func(o *options) { o.memTableBudget = n } }

// WithExpectedReplicas sizes memtables as if at least n replicas were
// open. Pebble fixes a database's memtable size when it opens, so without
// it the first replicas of a host get larger memtables than later ones and
// the budget holds only once n replicas are open; a tablet server that
// knows its assignment should pass its size.
func WithExpectedReplicas(n int) Option { return func(o *options) { o.expectedReplicas = n } }

// WithMaxOpenFiles bounds the SST files held open by all replicas together
// (one Pebble file cache for the host).
func WithMaxOpenFiles(n int) Option { return func(o *options) { o.maxOpenFiles = n } }

// WithRequestLimits bounds one request: a write batch carries at most rows
// mutations of at most bytes encoded record bytes in total, a lookup at
// most rows keys, and a prefix lookup or scan page returns at most rows
// rows (a scan page also stops once it holds bytes of keys and values).
// Keep bytes well under the changelog's batch limit.
func WithRequestLimits(rows, bytes int) Option {
	return func(o *options) { o.maxRows, o.maxBytes = rows, bytes }
}

// WithTransferConcurrency sets how many files one restore or snapshot
// downloads or uploads at a time.
func WithTransferConcurrency(n int) Option { return func(o *options) { o.transfers = n } }

// WithLogger sets the logger of the host, its replicas and their Pebble
// databases. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func buildOptions(opts []Option) (options, error) {
	o := options{
		cacheSize:      DefaultCacheSize,
		memTableBudget: DefaultMemTableBudget,
		maxOpenFiles:   DefaultMaxOpenFiles,
		maxRows:        DefaultMaxRequestRows,
		maxBytes:       DefaultMaxRequestBytes,
		transfers:      DefaultTransferConcurrency,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if o.cacheSize < 1<<20 {
		errs = append(errs, fmt.Errorf("cache size %d below 1 MiB", o.cacheSize))
	}
	if o.memTableBudget < MinMemTableBudget {
		errs = append(errs, fmt.Errorf("memtable budget %d below %d", o.memTableBudget, MinMemTableBudget))
	}
	if o.expectedReplicas < 0 {
		errs = append(errs, fmt.Errorf("negative expected replicas %d", o.expectedReplicas))
	}
	if o.maxOpenFiles < 64 {
		errs = append(errs, fmt.Errorf("max open files %d below 64", o.maxOpenFiles))
	}
	if o.maxRows < 1 || o.maxBytes < 1 {
		errs = append(errs, fmt.Errorf("request limits %d rows, %d bytes: both must be positive", o.maxRows, o.maxBytes))
	}
	if o.transfers < 1 {
		errs = append(errs, fmt.Errorf("transfer concurrency %d below 1", o.transfers))
	}
	if err := errors.Join(errs...); err != nil {
		return options{}, fmt.Errorf("replica: invalid options: %w", err)
	}
	return o, nil
}

// ReplicaID names one bucket replica: the target (for snapshot paths) and
// the bucket. A host holds at most one replica per bucket.
type ReplicaID struct {
	Target snapshot.Target
	Bucket int32
}

// Validate checks the target and that the bucket is non-negative.
func (id ReplicaID) Validate() error {
	if err := id.Target.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if id.Bucket < 0 {
		return fmt.Errorf("%w: negative bucket %d", ErrInvalidRequest, id.Bucket)
	}
	return nil
}

// LogID is the id of the bucket's changelog.
func (id ReplicaID) LogID() changelog.BucketLogID {
	return changelog.BucketLogID{
		TableID:     id.Target.TableID,
		Partitioned: id.Target.Partitioned(),
		PartitionID: id.partitionID(),
		Bucket:      id.Bucket,
	}
}

func (id ReplicaID) partitionID() int64 {
	if id.Target.Partitioned() {
		return id.Target.PartitionID
	}
	return 0
}

// String is the changelog id's form, e.g. "table 7 partition 12 bucket 3".
func (id ReplicaID) String() string { return id.LogID().String() }

// dirName is the replica's directory under the host root: t7-b3 or
// t7-p12-b3.
func (id ReplicaID) dirName() string {
	if id.Target.Partitioned() {
		return fmt.Sprintf("t%d-p%d-b%d", id.Target.TableID, id.Target.PartitionID, id.Bucket)
	}
	return fmt.Sprintf("t%d-b%d", id.Target.TableID, id.Bucket)
}

// Host holds what all bucket replicas of a tablet server share: the block
// cache, the file cache, the memtable budget, the local root directory,
// the object store and the changelog provider. It is safe for concurrent
// use.
type Host struct {
	root      string
	store     *objstore.Store
	logs      changelog.Provider
	opts      options
	log       *slog.Logger
	cache     *pebble.Cache
	fileCache *pebble.FileCache
	opening   sync.WaitGroup // Opens between reserve and their end
	stalls    atomic.Int64   // write stalls begun, all replicas
	stalled   atomic.Int64   // nanoseconds of ended write stalls, all replicas

	mu struct {
		sync.Mutex
		replicas map[changelog.BucketLogID]*Replica // nil value: being opened
		closed   bool
	}
}

// NewHost creates a host rooted at root (created if missing). Replicas
// keep their databases under root; Open discards what an earlier process
// left there.
func NewHost(root string, store *objstore.Store, logs changelog.Provider, opts ...Option) (*Host, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if store == nil || logs == nil {
		return nil, fmt.Errorf("replica: new host: %w: nil store or changelog provider", ErrInvalidRequest)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("replica: new host: %w", err)
	}
	h := &Host{
		root:      root,
		store:     store,
		logs:      logs,
		opts:      o,
		log:       o.logger,
		cache:     pebble.NewCache(pebbleCacheSize(o.cacheSize, o.memTableBudget)),
		fileCache: pebble.NewFileCache(runtime.GOMAXPROCS(0), pebble.FileCacheSize(o.maxOpenFiles)),
	}
	h.mu.replicas = make(map[changelog.BucketLogID]*Replica)
	return h, nil
}

// Close waits for running Opens, closes every open replica and releases
// the caches. Replicas dropped without Close keep their own references to
// the caches.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.mu.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.mu.closed = true
	h.mu.Unlock()
	h.opening.Wait()
	h.mu.Lock()
	var open []*Replica
	for _, r := range h.mu.replicas {
		if r != nil {
			open = append(open, r)
		}
	}
	h.mu.Unlock()
	var errs []error
	for _, r := range open {
		if err := r.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	h.cache.Unref()
	h.fileCache.Unref()
	return errors.Join(errs...)
}

// Replicas returns how many replicas are open or opening.
func (h *Host) Replicas() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.mu.replicas)
}

// reserve claims id for an Open and returns the memtable size the new
// replica gets. The Open must call h.opening.Done when it ends.
func (h *Host) reserve(id changelog.BucketLogID) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.closed {
		return 0, ErrClosed
	}
	if _, ok := h.mu.replicas[id]; ok {
		return 0, fmt.Errorf("%w: %v", ErrAlreadyOpen, id)
	}
	h.mu.replicas[id] = nil
	h.opening.Add(1)
	return MemTableSize(h.opts.memTableBudget, max(len(h.mu.replicas), h.opts.expectedReplicas)), nil
}

// register publishes an opened replica, or drops the reservation (r nil).
func (h *Host) register(id changelog.BucketLogID, r *Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r == nil {
		delete(h.mu.replicas, id)
		return
	}
	h.mu.replicas[id] = r
}

// release forgets a closed replica.
func (h *Host) release(id changelog.BucketLogID, r *Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.replicas[id] == r {
		delete(h.mu.replicas, id)
	}
}

// pebbleOptions are the options of every replica database: FormatNewest,
// the host's caches, bloom filters on every level, a larger L0 before
// compacting it, no WAL (the changelog is the WAL).
// mustExist makes Open fail rather than create an empty database when a
// restored snapshot lacks its MANIFEST.
func (h *Host) pebbleOptions(id ReplicaID, memTableSize uint64, mustExist bool, bg *bgErrors) *pebble.Options {
	o := &pebble.Options{
		FormatMajorVersion:          pebble.FormatNewest,
		Cache:                       h.cache,
		FileCache:                   h.fileCache,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		DisableWAL:                  true,
		ErrorIfNotExists:            mustExist,
		Logger:                      pebbleLogger{h.log},
		EventListener:               h.events(id, bg),
	}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(bloomBitsPerKey)
		o.Levels[i].FilterType = pebble.TableFilter
	}
	if h.opts.tune != nil {
		h.opts.tune(o)
	}
	return o
}

// stallWarn is the write stall length from which its end is logged at
// warning level rather than debug: short stalls are ordinary backpressure
// during a heavy load, long ones keep write requests waiting.
const stallWarn = time.Second

// events is the event listener of replica id's database: write stalls are
// counted (WriteStalls) and logged, background errors noted in bg (which
// wakes a Snapshot waiting for a flush) and logged, a repeated one (Pebble
// retries a failed flush at once: a full disk repeats it without pause)
// at most every bgErrorLogEvery.
func (h *Host) events(id ReplicaID, bg *bgErrors) *pebble.EventListener {
	var stall struct {
		sync.Mutex
		start  time.Time // zero: no stall in progress
		reason string
	}
	log := h.log.With("replica", id.String())
	return &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			stall.Lock()
			stall.start, stall.reason = time.Now(), info.Reason
			stall.Unlock()
			h.stalls.Add(1)
		},
		WriteStallEnd: func() {
			stall.Lock()
			start, reason := stall.start, stall.reason
			stall.start = time.Time{}
			stall.Unlock()
			if start.IsZero() {
				return
			}
			d := time.Since(start)
			h.stalled.Add(int64(d))
			level := slog.LevelDebug
			if d >= stallWarn {
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "replica: Pebble stalled writes", "reason", reason, "stalled", d.Round(time.Millisecond))
		},
		BackgroundError: func(err error) {
			if repeats, ok := bg.note(err, time.Now()); ok {
				log.Error("replica: pebble background error", "err", err, "repeats_since_last_logged", repeats)
			}
		},
	}
}

// WriteStalls returns how many times the host's replicas stalled writes
// (memtables or L0 full, waiting for flushes and compactions) and how long
// the ended stalls lasted together.
func (h *Host) WriteStalls() (count int64, total time.Duration) {
	return h.stalls.Load(), time.Duration(h.stalled.Load())
}

// pebbleLogger sends Pebble's log lines to slog: Infof at debug level.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble", "msg", fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble", "msg", fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal", "msg", msg)
	panic("replica: pebble: " + msg)
}

// forEach runs fn(ctx, i) for i in [0, n) on up to workers goroutines and
// returns the first error; the ctx passed to fn is cancelled after it.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// bgErrorLogEvery bounds how often a replica logs Pebble's background
// errors.
const bgErrorLogEvery = 10 * time.Second

// bgErrors are the background errors of one replica's database (a flush
// or compaction that failed): the last one, and a channel closed (and
// replaced) at each, which a waiting flush selects on.
type bgErrors struct {
	mu      sync.Mutex
	last    error
	ch      chan struct{}
	logged  time.Time // when one was last logged
	repeats int64     // since then
}

func newBGErrors() *bgErrors { return &bgErrors{ch: make(chan struct{})} }

// note records err at now and reports whether to log it, with how many
// went unlogged before it.
func (b *bgErrors) note(err error, now time.Time) (repeats int64, log bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = err
	close(b.ch)
	b.ch = make(chan struct{})
	if !b.logged.IsZero() && now.Sub(b.logged) < bgErrorLogEvery {
		b.repeats++
		return 0, false
	}
	repeats, b.repeats, b.logged = b.repeats, 0, now
	return repeats, true
}

// next returns the channel closed at the next background error.
func (b *bgErrors) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// lastErr returns the last background error.
func (b *bgErrors) lastErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}
