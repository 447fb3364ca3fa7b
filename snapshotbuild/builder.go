package snapshotbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// Store is what a build needs of the object store. *objstore.Store
// implements it.
type Store interface {
	// Key maps a snapshot URI to an object key of the store.
	Key(uri string) (string, error)
	// PutIfAbsent writes an object unless one exists; an existing
	// byte-identical object is adopted, a different one is objstore.ErrConflict.
	PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error)
	// PutFileStamped stores a local file of known size and SHA-256
	// write-if-absent (same adopt/conflict rules), verifying it before
	// anything is stored; a file:// store on the same file system links it
	// instead of copying, and trusts the digest of a file that still has
	// the given stamp (the zero stamp: none) instead of reading it again.
	// The builder uses it for data files and never modifies them after.
	PutFileStamped(ctx context.Context, key, path string, size int64, sha256 string, stamp objstore.FileStamp) (objstore.Object, error)
}

var _ Store = (*objstore.Store)(nil)

// Target describes what to build.
type Target struct {
	// Table gives the schema (and schema id), bucket count and bucketing.
	// Required for Add. A builder fed only through AddPair may leave it nil
	// and set NumBuckets instead.
	Table *kv.Table
	// NumBuckets is the bucket count when Table is nil; when both are set
	// they must agree.
	NumBuckets int
	// Snapshot is where the snapshots go.
	Snapshot snapshot.Target
	// SnapshotIDs holds one snapshot id per bucket, indexed by bucket id (as
	// frozen by the bulk-load Begin).
	SnapshotIDs []int64
	// LogOffsets optionally overrides a bucket's log_offset; the default is
	// the bucket's deduplicated row count.
	LogOffsets map[int]int64
	// Buckets lists the buckets this builder owns; nil means all. Rows of
	// other buckets follow Options.OtherBuckets. Finish builds exactly the
	// owned buckets, including empty ones.
	Buckets []int
}

func (t Target) buckets() int {
	if t.Table != nil {
		return t.Table.Buckets()
	}
	return t.NumBuckets
}

func (t Target) validate() error {
	n := t.buckets()
	if t.Table != nil && t.NumBuckets != 0 && t.NumBuckets != n {
		return fmt.Errorf("%w: NumBuckets %d but the table has %d buckets", ErrInvalidOptions, t.NumBuckets, n)
	}
	if n <= 0 {
		return fmt.Errorf("%w: no table and no bucket count", ErrInvalidOptions)
	}
	if t.Table != nil {
		switch partitioned := len(t.Table.PartitionKeys()) > 0; {
		case partitioned && !t.Snapshot.Partitioned():
			return fmt.Errorf("%w: the table is partitioned but the snapshot target names no partition", ErrInvalidOptions)
		case !partitioned && t.Snapshot.Partitioned():
			return fmt.Errorf("%w: the table is not partitioned but the snapshot target names partition %q",
				ErrInvalidOptions, t.Snapshot.Partition)
		}
	}
	if err := t.Snapshot.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if len(t.SnapshotIDs) != n {
		return fmt.Errorf("%w: %d snapshot ids for %d buckets", ErrInvalidOptions, len(t.SnapshotIDs), n)
	}
	for b, id := range t.SnapshotIDs {
		if id < 0 {
			return fmt.Errorf("%w: negative snapshot id %d for bucket %d", ErrInvalidOptions, id, b)
		}
	}
	for b, off := range t.LogOffsets {
		if b < 0 || b >= n {
			return fmt.Errorf("%w: log offset for bucket %d of %d", ErrInvalidOptions, b, n)
		}
		if off < 0 {
			return fmt.Errorf("%w: negative log offset %d for bucket %d", ErrInvalidOptions, off, b)
		}
	}
	if t.Buckets != nil && len(t.Buckets) == 0 {
		return fmt.Errorf("%w: Buckets lists no bucket (nil means all)", ErrInvalidOptions)
	}
	seen := make(map[int]bool, len(t.Buckets))
	for _, b := range t.Buckets {
		if b < 0 || b >= n {
			return fmt.Errorf("%w: owned bucket %d out of range [0,%d)", ErrInvalidOptions, b, n)
		}
		if seen[b] {
			return fmt.Errorf("%w: owned bucket %d listed twice", ErrInvalidOptions, b)
		}
		seen[b] = true
	}
	return nil
}

// BucketResult is the outcome of one bucket: small and JSON-serializable,
// what a bulk-load manifest needs plus statistics.
type BucketResult struct {
	Bucket         int    `json:"bucket"`
	SnapshotID     int64  `json:"snapshot_id"`
	MetadataPath   string `json:"metadata_path"`
	MetadataLength int64  `json:"metadata_length"`
	MetadataSHA256 string `json:"metadata_sha256"`
	RowCount       int64  `json:"row_count"`         // rows in the snapshot (after deduplication)
	Duplicates     int64  `json:"duplicates"`        // input rows dropped as duplicates
	Bytes          int64  `json:"bytes"`             // Σ private file sizes (incremental size)
	Files          int    `json:"files"`             // private files
	MinKey         string `json:"min_key,omitempty"` // hex; absent for an empty bucket
	MaxKey         string `json:"max_key,omitempty"` // hex
	LogOffset      int64  `json:"log_offset"`
	// MetadataAdopted reports that an identical _METADATA already existed (an
	// earlier attempt of the same build wrote it).
	MetadataAdopted bool `json:"metadata_adopted,omitempty"`
}

// MetadataRef returns the reference a bulk-load manifest carries.
func (r BucketResult) MetadataRef() snapshot.MetadataRef {
	return snapshot.MetadataRef{Path: r.MetadataPath, Length: r.MetadataLength, SHA256: r.MetadataSHA256}
}

// Stats describe a build so far.
type Stats struct {
	InputRows    int64 // pairs accepted by Add/AddPair (before deduplication)
	SkippedRows  int64 // rows of unowned buckets dropped under OtherBucketsSkip
	Chunks       int   // input chunks sealed and sorted before Finish (the last chunk is not counted)
	Spills       int   // sorted runs written to disk
	SpilledBytes int64 // bytes of the spill files (compressed where the records compress)
	// SpilledRecordBytes is what the spilled records take uncompressed.
	SpilledRecordBytes int64
	// CompactedRuns counts spilled runs merged into larger ones before the
	// final merge (an input too large for the budget to read every run at
	// once; see compactRuns); a merged run merged again counts again.
	CompactedRuns int
	PeakBudget    int64 // high-water mark of the memory budget in use
	MemoryBudget  int64
	// Prefaulted is chunk memory another core made resident ahead of the
	// Add goroutine (builds with more than one worker, Linux).
	Prefaulted int64
	// Time spent per phase, summed over the goroutines doing it (so it can
	// exceed wall time): where a build's time goes.
	AddWait       time.Duration // Add/AddPair waiting for the spill goroutine (back-pressure)
	SortSpill     time.Duration // sorting chunks and writing spill runs
	MergeWrite    time.Duration // k-way merge and SST writing
	Checkpoint    time.Duration // ingest, checkpoint, MANIFEST normalization, verification
	Upload        time.Duration // data file uploads
	MetadataWrite time.Duration // _METADATA writes
	// UnreproducibleManifests counts buckets whose MANIFEST could not be
	// normalized (see doc.go, Determinism); 0 in every build seen so far.
	UnreproducibleManifests int
}

// Builder builds one snapshot per owned bucket. Add, AddPair and Finish are
// serialized (calls from several goroutines are safe but take turns; input
// order is the order in which calls take their turn). Always call Close.
type Builder struct {
	store   Store
	target  Target
	opts    Options
	log     *slog.Logger
	nb      int
	owned   []bool
	bud     *budget
	tmp     string
	tmpLock *os.File // the flock on tmp/LOCK (see stale.go); nil outside unix
	wopts   sstable.WriterOptions

	// Counters for Stats, which must not take mu: Progress callbacks run
	// while Finish holds it.
	inputRows          atomic.Int64
	skippedRows        atomic.Int64
	sealed             atomic.Int64
	spills             atomic.Int64
	spilledBytes       atomic.Int64
	spilledRecordBytes atomic.Int64
	compacted          atomic.Int64 // spilled runs merged by compactRuns
	prefaulted         atomic.Int64
	manifestsUnfixed   atomic.Int64
	phase              [numPhaseTimers]atomic.Int64 // nanoseconds

	mu struct {
		sync.Mutex
		err      error // sticky: the first error fails the whole build
		done     bool  // Finish or Close was called
		fill     *chunk
		enc      *RowEncoder
		batches  int64
		spilling bool        // the spill goroutine runs
		chunks   int         // chunks allocated (at most 2)
		seq      int         // chunks sealed so far
		held     *chunk      // sealed, sorted (or being sorted) and kept in memory
		eager    bool        // input exceeded the budget: spill every sealed chunk
		pf       *prefaulter // with Workers > 1, from the first chunk until Finish
	}

	// Chunk hand-off between the Add side and the spill goroutine.
	spillq    chan spillJob
	free      chan *chunk
	spillDone chan struct{}

	// Written by the spill goroutine; read after spillDone is closed.
	sp struct {
		runs []*run
		dups []int64 // per bucket, dropped while sorting spilled chunks
	}
	spErr struct {
		sync.Mutex
		err error
	}
}

// New prepares a build. It creates the build's private temporary directory
// under Options.TempDir; Close removes it. It first removes the ones builds
// of killed processes left there (RemoveStaleTemp), logging what it removed.
func New(store Store, target Target, opts Options) (*Builder, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := target.validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOptions)
	}
	nb := target.buckets()
	owned := make([]bool, nb)
	if target.Buckets == nil {
		for i := range owned {
			owned[i] = true
		}
	} else {
		for _, b := range target.Buckets {
			owned[b] = true
		}
	}
	// The disk that builds of killed processes left goes first.
	if st, err := RemoveStaleTemp(opts.TempDir); err != nil {
		opts.Logger.Warn("snapshotbuild: cannot remove what builds of killed processes left", "dir", opts.TempDir, "err", err)
	} else if st.Dirs > 0 {
		opts.Logger.Info("snapshotbuild: removed the temporary directories of builds whose process was killed",
			"dir", opts.TempDir, "dirs", st.Dirs, "bytes", st.Bytes)
	}
	tmp, lock, err := makeBuildDir(opts.TempDir)
	if err != nil {
		return nil, err
	}
	b := &Builder{
		tmpLock:   lock,
		store:     store,
		target:    target,
		opts:      opts,
		log:       opts.Logger,
		nb:        nb,
		owned:     owned,
		bud:       newBudget(opts.MemoryBudget),
		tmp:       tmp,
		spillq:    make(chan spillJob, 2),
		free:      make(chan *chunk, 2),
		wopts:     WriterOptions(opts.Compression, opts.BlockSize),
		spillDone: make(chan struct{}),
	}
	b.sp.dups = make([]int64, nb)
	return b, nil
}

// chunkCap is half the budget: one chunk fills while the other is sorted
// (and, for inputs larger than the budget, spilled), so encoding and sorting
// overlap on two cores; at most maxArena (4 GiB), what one chunk can hold:
// a pair larger than that is ErrRecordTooLarge whatever the budget.
func (b *Builder) chunkCap() int64 { return min(b.opts.MemoryBudget/2, maxArena) }

// AddPair adds one pre-encoded pair for bucket: key bytes and value bytes
// exactly as the tier stores them (no validation beyond the bucket range).
func (b *Builder) AddPair(ctx context.Context, bucket int, key, value []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil {
		return err
	}
	if bucket < 0 || bucket >= b.nb {
		return b.failLocked(fmt.Errorf("snapshotbuild: bucket %d out of range [0,%d)", bucket, b.nb))
	}
	if len(key) == 0 {
		return b.failLocked(fmt.Errorf("%w: empty key for bucket %d", ErrInvalidRow, bucket))
	}
	if !b.owned[bucket] {
		if b.opts.OtherBuckets == OtherBucketsSkip {
			b.skippedRows.Add(1)
			return nil
		}
		return b.failLocked(fmt.Errorf("%w: bucket %d", ErrBucketNotOwned, bucket))
	}
	return b.addLocked(ctx, bucket, key, value)
}

func (b *Builder) usableLocked() error {
	if b.mu.err != nil {
		return b.mu.err
	}
	if b.mu.done {
		return ErrClosed
	}
	return nil
}

func (b *Builder) failLocked(err error) error {
	if b.mu.err == nil {
		b.mu.err = err
	}
	return err
}

// addLocked buffers one pair, sealing and handing over the current chunk
// when it is full.
func (b *Builder) addLocked(ctx context.Context, bucket int, key, value []byte) error {
	if string(key) == snapshot.StateKey {
		// The tier keeps its replica state there: a snapshot holding such
		// a row would not restore, after its commit was decided.
		return b.failLocked(fmt.Errorf("%w: bucket %d: the key %q is reserved for the tier's replica state", ErrInvalidRow, bucket, snapshot.StateKey))
	}
	if int64(len(key)+len(value))+2*entrySize > b.chunkCap() {
		return b.failLocked(fmt.Errorf("%w: %d bytes, chunk holds %d (memory budget %d)",
			ErrRecordTooLarge, len(key)+len(value), b.chunkCap(), b.opts.MemoryBudget))
	}
	if b.mu.fill == nil {
		if b.mu.chunks > 0 {
			// A failed seal left no chunk to fill.
			return b.failLocked(errors.New("snapshotbuild: no input buffer after a failed hand-off"))
		}
		if b.opts.Workers > 1 && b.mu.pf == nil {
			b.mu.pf = newPrefaulter(&b.prefaulted)
		}
		c, err := newChunk(b.chunkCap(), b.bud, b.mu.pf)
		if err != nil {
			return b.failLocked(err)
		}
		b.mu.chunks++
		b.mu.fill = c
	}
	for !b.mu.fill.add(bucket, key, value) {
		if b.mu.fill.len() == 0 {
			// An empty chunk that cannot get budget (not expected: the two
			// chunks are capped at half the budget each): wait for budget
			// instead of spinning.
			g := min(grantSize, b.chunkCap())
			if err := context.Cause(ctx); err != nil {
				return b.failLocked(err)
			}
			if err := b.bud.acquire(ctx, g); err != nil {
				return b.failLocked(err)
			}
			b.bud.release(g)
			continue
		}
		if err := b.sealLocked(ctx); err != nil {
			return b.failLocked(err)
		}
	}
	b.inputRows.Add(1)
	return nil
}

// A spillJob asks the spill goroutine to sort c (unless sorted) and, with
// spill, write it as a run and hand the emptied chunk back through free.
type spillJob struct {
	c     *chunk
	spill bool
}

// sealLocked hands the full chunk to the spill goroutine and takes another
// one to fill. Spilling is lazy: the first sealed chunk is only sorted and
// kept in memory, so an input that fits the budget is never written to
// disk. When a second chunk fills up, the input exceeds the budget: the
// kept chunk is spilled (the only time Add waits for a write it could not
// overlap), and from then on every sealed chunk is sorted and spilled in
// the background while the next one fills.
func (b *Builder) sealLocked(ctx context.Context) error {
	if !b.mu.spilling && b.opts.Workers > 1 {
		b.mu.spilling = true
		go b.spillLoop()
	}
	full := b.mu.fill
	b.mu.fill = nil
	full.seq = b.mu.seq
	b.mu.seq++
	b.sealed.Store(int64(b.mu.seq))
	switch {
	case !b.mu.eager && b.mu.held == nil:
		b.submitLocked(spillJob{c: full})
		b.mu.held = full
		if b.mu.chunks < 2 {
			c, err := newChunk(b.chunkCap(), b.bud, b.mu.pf)
			if err != nil {
				return err
			}
			b.mu.chunks++
			b.mu.fill = c
			return nil
		}
	case !b.mu.eager:
		b.mu.eager = true
		b.submitLocked(spillJob{c: b.mu.held, spill: true})
		b.mu.held = nil
		b.submitLocked(spillJob{c: full, spill: true})
	default:
		b.submitLocked(spillJob{c: full, spill: true})
	}
	start := time.Now()
	defer b.timed(timerAddWait, start)
	select {
	case c := <-b.free:
		b.mu.fill = c
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.spillErr()
}

// spillErr returns the spill goroutine's first error.
func (b *Builder) spillErr() error {
	b.spErr.Lock()
	defer b.spErr.Unlock()
	return b.spErr.err
}

// submitLocked hands a job to the spill goroutine or, with one worker, runs
// it on the calling goroutine: Workers bounds the goroutines doing CPU work
// in the input phase too, so a one-worker build uses one core.
func (b *Builder) submitLocked(j spillJob) {
	if b.mu.spilling {
		b.spillq <- j
		return
	}
	b.doJob(j)
}

// spillLoop runs the spill jobs in order. It owns b.sp until it exits; a
// chunk it spills goes back, emptied, through b.free.
func (b *Builder) spillLoop() {
	defer close(b.spillDone)
	for j := range b.spillq {
		b.doJob(j)
	}
}

// doJob runs j unless an earlier job failed, and returns a spilled chunk,
// emptied, through b.free.
func (b *Builder) doJob(j spillJob) {
	if b.spillErr() == nil {
		if err := b.runJob(j); err != nil {
			b.spErr.Lock()
			b.spErr.err = err
			b.spErr.Unlock()
		}
	}
	if j.spill {
		j.c.reset()
		b.free <- j.c
	}
}

func (b *Builder) runJob(j spillJob) error {
	c := j.c
	if !c.sorted {
		start := time.Now()
		bucket, key, ok := c.sortDedup(b.nb, b.opts.Duplicates)
		b.timed(timerSortSpill, start)
		if !ok {
			return b.duplicateError(bucket, key)
		}
	}
	if !j.spill {
		return nil
	}
	defer b.timed(timerSortSpill, time.Now())
	for i, d := range c.dups {
		b.sp.dups[i] += d
	}
	path := filepath.Join(b.tmp, fmt.Sprintf("run-%06d", c.seq))
	r, err := writeRun(path, c.seq, c, b.nb, min(spillParts, b.opts.Workers), frameSizeFor(b.opts.MemoryBudget))
	if err != nil {
		return fmt.Errorf("snapshotbuild: spill: %w", err)
	}
	b.sp.runs = append(b.sp.runs, r)
	b.spills.Add(1)
	b.spilledBytes.Add(r.size)
	b.spilledRecordBytes.Add(r.rawSize)
	b.log.Debug("spilled run", "run", c.seq, "bytes", r.size, "record_bytes", r.rawSize)
	return nil
}

func (b *Builder) duplicateError(bucket int, key []byte) error {
	e := &DuplicateKeyError{Bucket: bucket, Key: key}
	if b.target.Table != nil {
		if row, err := b.target.Table.DecodeKey(key); err == nil {
			e.Values = keyString(b.target.Table, row)
		}
	}
	return e
}

func keyString(t *kv.Table, row kv.Row) string {
	s := "("
	for i, c := range t.PhysicalKey() {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s=%v", t.Column(c).Name, row[i])
	}
	return s + ")"
}

// stopSpillingLocked ends the spill goroutine and waits for it; afterwards
// a held chunk is sorted, and every chunk returned for reuse is freed.
func (b *Builder) stopSpillingLocked() {
	// The input phase is over, and no chunk may be unmapped while the
	// prefaulter may still touch it.
	b.mu.pf.stop()
	if b.mu.spilling {
		close(b.spillq)
		<-b.spillDone
		b.mu.spilling = false
	}
	for range 2 {
		select {
		case c := <-b.free:
			c.free()
		default:
		}
	}
}

// Stats returns the build's statistics so far. It may be called at any
// time, also from a Progress callback.
func (b *Builder) Stats() Stats {
	_, peak, total := b.bud.snapshot()
	s := Stats{
		InputRows:    b.inputRows.Load(),
		SkippedRows:  b.skippedRows.Load(),
		PeakBudget:   peak,
		MemoryBudget: total,
		Chunks:       int(b.sealed.Load()),
	}
	s.Spills = int(b.spills.Load())
	s.SpilledBytes = b.spilledBytes.Load()
	s.SpilledRecordBytes = b.spilledRecordBytes.Load()
	s.CompactedRuns = int(b.compacted.Load())
	s.Prefaulted = b.prefaulted.Load()
	s.UnreproducibleManifests = int(b.manifestsUnfixed.Load())
	s.AddWait = time.Duration(b.phase[timerAddWait].Load())
	s.SortSpill = time.Duration(b.phase[timerSortSpill].Load())
	s.MergeWrite = time.Duration(b.phase[timerMerge].Load())
	s.Checkpoint = time.Duration(b.phase[timerCheckpoint].Load())
	s.Upload = time.Duration(b.phase[timerUpload].Load())
	s.MetadataWrite = time.Duration(b.phase[timerMetadata].Load())
	return s
}

// Close releases everything the build holds and removes its temporary
// directory. It is safe to call more than once and after Finish; it does not
// touch the object store.
func (b *Builder) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.done = true
	return b.releaseLocked()
}

func (b *Builder) releaseLocked() error {
	b.stopSpillingLocked()
	errs := []error{b.releaseInputLocked()}
	if b.tmp != "" {
		errs = append(errs, os.RemoveAll(b.tmp))
		b.tmp = ""
	}
	if b.tmpLock != nil {
		errs = append(errs, b.tmpLock.Close())
		b.tmpLock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshotbuild: release temp files: %w", err)
	}
	return nil
}

// releaseInputLocked unmaps the chunks and closes the spilled runs (their
// files go with the temporary directory). The spill goroutine and the
// prefaulter must be stopped, and no merge may be reading them.
func (b *Builder) releaseInputLocked() error {
	for _, c := range []**chunk{&b.mu.fill, &b.mu.held} {
		if *c != nil {
			(*c).free()
			*c = nil
		}
	}
	var errs []error
	for _, r := range b.sp.runs {
		errs = append(errs, r.close())
	}
	b.sp.runs = nil
	return errors.Join(errs...)
}

const (
	timerAddWait = iota
	timerSortSpill
	timerMerge
	timerCheckpoint
	timerUpload
	timerMetadata
	numPhaseTimers
)

// timed adds the time since start to phase timer i.
func (b *Builder) timed(i int, start time.Time) { b.phase[i].Add(int64(time.Since(start))) }

func hexKey(k []byte) string { return hex.EncodeToString(k) }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
