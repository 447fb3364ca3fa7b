package bulkloadclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

var (
	// ErrMixedInput reports session-level input (Session.Add, AddRow,
	// Finish) and per-bucket writers (Session.Bucket) in one session: a
	// session is used one way, decided by its first such call.
	ErrMixedInput = errors.New("bulkloadclient: session-level input and bucket writers in one session")
	// ErrBucketWriterOpen reports Session.Bucket(b) while an earlier writer
	// of bucket b is still open (not yet closed).
	ErrBucketWriterOpen = errors.New("bulkloadclient: a writer of this bucket is already open")
)

// SessionOptions tune a build session.
type SessionOptions struct {
	// Buckets lists the buckets this session builds; nil means all. A row
	// of another bucket is an error wrapping snapshotbuild.ErrBucketNotOwned,
	// unless SkipOtherBuckets is set.
	Buckets []int
	// SkipOtherBuckets drops rows of buckets the session does not build
	// instead of failing on them: for distributed builds in which every
	// worker reads the whole input and keeps its own buckets. It applies to
	// session-level input only; a BucketWriter always rejects rows of other
	// buckets.
	SkipOtherBuckets bool
	// TempDir, MemoryBudget and Workers are snapshotbuild.Options'. Every
	// BucketWriter's build gets the whole MemoryBudget (see Session.Bucket).
	TempDir      string
	MemoryBudget int64
	Workers      int
	// Duplicates is the policy for a primary key added more than once:
	// snapshotbuild.DuplicatesLastWins (the zero value) keeps the last row
	// added; snapshotbuild.DuplicatesError fails Finish with an error
	// wrapping snapshotbuild.ErrDuplicateKey (a *snapshotbuild.DuplicateKeyError
	// naming the bucket and the decoded key).
	Duplicates snapshotbuild.Duplicates
	// Progress, if set, receives the per-bucket progress of Finish
	// (snapshotbuild.Options.Progress): it is called from worker goroutines,
	// concurrently for different buckets (and different BucketWriters), so
	// it must be fast and safe for concurrent use.
	Progress func(snapshotbuild.BucketProgress)
	// Store is where the snapshots go; default: objstore.Open of the
	// context's remote data dir (closed by Close). A given store is not
	// closed. Any snapshotbuild.Store will do: an *objstore.Store opened
	// with parameters of its own, or a wrapper of one (to rate-limit
	// uploads, say). Its keys must be those of the context's remote data
	// dir. A nil *objstore.Store counts as no store.
	Store snapshotbuild.Store
	// Logger receives the builder's logs (default: discard).
	Logger *slog.Logger
}

// Session builds the snapshots of some buckets of a transaction: a thin
// layer over snapshotbuild.Builder. Every row is checked against the frozen
// schema, partition and bucketing; duplicate primary keys keep the last row
// added (see SessionOptions.Duplicates). Close it when done, also after
// Finish or a failure.
//
// A session takes its input one of two ways, decided by the first call:
// session-level (Add and AddRow route rows across all the session's
// buckets; Finish builds them all), or per bucket (Bucket returns a
// BucketWriter for one bucket; each writer builds and uploads its bucket
// on its own, and writers of different buckets run in parallel). Mixing
// the two in one session is an error wrapping ErrMixedInput.
//
// Errors of invalid input wrap snapshotbuild's sentinels: ErrInvalidRow
// (and kv.ErrInvalidRow for AddRow), ErrWrongPartition, ErrBucketNotOwned,
// ErrSchemaMismatch and ErrUnsupportedArrowType (Add). An Add that fails
// fails the session (rows of the batch before the bad one are already
// buffered): every later call returns the error and the transaction's
// buckets must be built again in a new session. An AddRow rejected for its
// row (invalid, another partition, another bucket) adds nothing and leaves
// the session usable. Other failures (a record larger than the memory
// budget allows, cancellation, a duplicate key under DuplicatesError, the
// object store in Finish) fail the session. None of these errors is
// retriable within the session; a new session of the same context rebuilds
// the same bytes and adopts whatever an earlier attempt uploaded.
type Session struct {
	bc        *BuildContext
	opts      SessionOptions // Buckets cloned
	store     snapshotbuild.Store
	ownStore  *objstore.Store
	owned     []bool
	partition string

	encMu sync.Mutex // guards enc
	enc   *kv.Encoder

	mu struct {
		sync.Mutex
		closed bool
		// b is the session-level builder, taken from prepared by the
		// first session-level Add, AddRow or Finish (or made then, if a
		// first Bucket call released prepared).
		b *snapshotbuild.Builder
		// prepared is the session-level builder OpenBuildSession made to
		// check the options; released by the first Bucket call.
		prepared *snapshotbuild.Builder
		// perBucket is set by the first Bucket call; writers holds the
		// open ones.
		perBucket bool
		writers   map[int]*BucketWriter
	}
}

// OpenBuildSession opens a build session of bc. It checks the options and
// TempDir at once by preparing the session-level build, which the first
// session-level input uses (a first Bucket call releases it).
func OpenBuildSession(ctx context.Context, bc *BuildContext, opts SessionOptions) (*Session, error) {
	if bc == nil {
		return nil, errNoContext
	}
	opts.Buckets = slices.Clone(opts.Buckets)
	s := &Session{bc: bc, opts: opts, owned: make([]bool, bc.buckets), partition: bc.handle.Target.Partition,
		enc: bc.table.NewEncoder()}
	s.mu.writers = map[int]*BucketWriter{}
	if opts.Buckets == nil {
		for i := range s.owned {
			s.owned[i] = true
		}
	} else {
		for _, b := range opts.Buckets {
			if b >= 0 && b < bc.buckets {
				s.owned[b] = true
			}
		}
	}
	s.store = opts.Store
	if st, ok := s.store.(*objstore.Store); ok && st == nil {
		s.store = nil
	}
	if s.store == nil {
		st, err := objstore.Open(ctx, bc.remoteDataDir)
		if err != nil {
			return nil, fmt.Errorf("bulkloadclient: open remote data dir %s: %w", bc.remoteDataDir, err)
		}
		s.store, s.ownStore = st, st
	}
	// Check the options (and that TempDir is usable) now rather than at the
	// first row: prepare the session-level build.
	prepared, err := s.newBuilder(opts.Buckets, s.otherBuckets())
	if err != nil {
		if s.ownStore != nil {
			_ = s.ownStore.Close()
		}
		return nil, fmt.Errorf("bulkloadclient: open build session of %s: %w", bc.handle.Target, err)
	}
	s.mu.prepared = prepared
	return s, nil
}

func (s *Session) otherBuckets() snapshotbuild.OtherBuckets {
	if s.opts.SkipOtherBuckets {
		return snapshotbuild.OtherBucketsSkip
	}
	return snapshotbuild.OtherBucketsError
}

// newBuilder prepares a build of buckets (nil: all) with the session's
// options.
func (s *Session) newBuilder(buckets []int, other snapshotbuild.OtherBuckets) (*snapshotbuild.Builder, error) {
	bc := s.bc
	return snapshotbuild.New(s.store, snapshotbuild.Target{
		Table: bc.table, Snapshot: bc.SnapshotTarget(), SnapshotIDs: bc.SnapshotIDs(), Buckets: buckets,
	}, snapshotbuild.Options{
		Workers: s.opts.Workers, MemoryBudget: s.opts.MemoryBudget, TempDir: s.opts.TempDir,
		Duplicates: s.opts.Duplicates, OtherBuckets: other,
		Logger: s.opts.Logger, Progress: s.opts.Progress,
	})
}

// builder returns the session-level builder, creating it on first use.
func (s *Session) builder(op string) (*snapshotbuild.Builder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, fmt.Errorf("bulkloadclient: %s: %w", op, snapshotbuild.ErrClosed)
	}
	if s.mu.perBucket {
		return nil, fmt.Errorf("bulkloadclient: %s: %w: the session has bucket writers", op, ErrMixedInput)
	}
	if s.mu.b == nil && s.mu.prepared != nil {
		s.mu.b, s.mu.prepared = s.mu.prepared, nil
	}
	if s.mu.b == nil {
		b, err := s.newBuilder(s.opts.Buckets, s.otherBuckets())
		if err != nil {
			return nil, fmt.Errorf("bulkloadclient: %s: %w", op, err)
		}
		s.mu.b = b
	}
	return s.mu.b, nil
}

// Add adds the rows of rec (columns by name, as snapshotbuild.Builder.Add
// takes them: every table column and no other, but a batch for a partition
// may leave out partition-key columns, which take the partition's values).
// An invalid row fails the session (see Session).
func (s *Session) Add(ctx context.Context, rec arrow.RecordBatch) error {
	b, err := s.builder("add")
	if err != nil {
		return err
	}
	if err := b.Add(ctx, rec); err != nil {
		return fmt.Errorf("bulkloadclient: add: %w", err)
	}
	return nil
}

// encodeRow encodes row with enc and checks its partition; key and val
// are valid until enc's next use.
func encodeRow(enc *kv.Encoder, partition string, row kv.Row) (key, val []byte, bucket int, err error) {
	f := kv.RowFields(row)
	key, val, bucket, err = enc.Encode(f)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %w", snapshotbuild.ErrInvalidRow, err)
	}
	if string(key) == snapshot.StateKey {
		// (Refused here, the row alone: the builder fails the whole build
		// on it.)
		return nil, nil, 0, fmt.Errorf("%w: the row's key %q is reserved for the tier's replica state", snapshotbuild.ErrInvalidRow, snapshot.StateKey)
	}
	if partition != "" {
		name, err := enc.PartitionName(f)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%w: %w", snapshotbuild.ErrInvalidRow, err)
		}
		if name != partition {
			return nil, nil, 0, fmt.Errorf("%w: row of partition %q, the session builds %q", snapshotbuild.ErrWrongPartition, name, partition)
		}
	}
	return key, val, bucket, nil
}

// AddRow adds one row (values in column order, see kv.Row). A row that
// does not fit the schema, a row of another partition, or of a bucket the
// session does not build (unless SkipOtherBuckets), is rejected with an
// error and not added; the session stays usable.
func (s *Session) AddRow(ctx context.Context, row kv.Row) error {
	b, err := s.builder("add row")
	if err != nil {
		return err
	}
	s.encMu.Lock()
	defer s.encMu.Unlock()
	key, val, bucket, err := encodeRow(s.enc, s.partition, row)
	if err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	if !s.owned[bucket] && !s.opts.SkipOtherBuckets {
		return fmt.Errorf("bulkloadclient: add row: %w: row of bucket %d", snapshotbuild.ErrBucketNotOwned, bucket)
	}
	// AddPair copies key and val before the encoder reuses them; it drops
	// (and counts in Stats.SkippedRows) a row of another bucket.
	if err := b.AddPair(ctx, bucket, key, val); err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	return nil
}

// Finish builds and uploads the snapshots of the session's buckets and
// returns one result per bucket, empty buckets included. A session with
// bucket writers has no session-level Finish (ErrMixedInput): each
// writer's Finish returns its bucket's result.
func (s *Session) Finish(ctx context.Context) ([]snapshotbuild.BucketResult, error) {
	b, err := s.builder("finish")
	if err != nil {
		return nil, err
	}
	res, err := b.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: finish %s: %w", s.bc.handle.Target, err)
	}
	return res, nil
}

// Stats returns the statistics of the session-level build (zero before
// its first input and in a session of bucket writers; see
// BucketWriter.Stats).
func (s *Session) Stats() snapshotbuild.Stats {
	s.mu.Lock()
	b := s.mu.b
	s.mu.Unlock()
	if b == nil {
		return snapshotbuild.Stats{}
	}
	return b.Stats()
}

// Bucket returns a writer of bucket b, which the session must build
// (SessionOptions.Buckets; otherwise the error wraps
// snapshotbuild.ErrBucketNotOwned). The writer builds and uploads b alone,
// in a build of its own: writers of different buckets may be used from
// different goroutines at once, and the same rows give the same bytes as a
// session-level build.
//
// Memory: every writer's build gets the whole SessionOptions.MemoryBudget
// (and Workers), so n writers open at once may use n times the budget; open
// the session with budget/n to bound the total.
//
// Bucket fails with ErrMixedInput after session-level input, with
// ErrBucketWriterOpen while another writer of b is open (a closed writer's
// bucket may be asked for again, to rebuild it), and with
// snapshotbuild.ErrClosed after Close.
func (s *Session) Bucket(b int) (*BucketWriter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, fmt.Errorf("bulkloadclient: bucket %d: %w", b, snapshotbuild.ErrClosed)
	}
	if b < 0 || b >= s.bc.buckets || !s.owned[b] {
		return nil, fmt.Errorf("bulkloadclient: bucket %d: %w: the session builds %s", b, snapshotbuild.ErrBucketNotOwned, s.ownedString())
	}
	if s.mu.b != nil {
		return nil, fmt.Errorf("bulkloadclient: bucket %d: %w: the session has session-level input", b, ErrMixedInput)
	}
	if _, ok := s.mu.writers[b]; ok {
		return nil, fmt.Errorf("bulkloadclient: bucket %d: %w", b, ErrBucketWriterOpen)
	}
	if p := s.mu.prepared; p != nil {
		s.mu.prepared = nil
		if err := p.Close(); err != nil {
			return nil, fmt.Errorf("bulkloadclient: bucket %d: release the session-level build: %w", b, err)
		}
	}
	bb, err := s.newBuilder([]int{b}, snapshotbuild.OtherBucketsError)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: bucket %d: %w", b, err)
	}
	w := &BucketWriter{s: s, bucket: b, b: bb, enc: s.bc.table.NewEncoder()}
	s.mu.perBucket = true
	s.mu.writers[b] = w
	return w, nil
}

// ownedString describes the session's buckets for errors.
func (s *Session) ownedString() string {
	if s.opts.Buckets == nil {
		return fmt.Sprintf("buckets 0..%d", s.bc.buckets-1)
	}
	var owned []int
	for b, ok := range s.owned {
		if ok {
			owned = append(owned, b)
		}
	}
	return fmt.Sprintf("buckets %v", owned)
}

// Close closes every bucket writer still open, removes the session's
// temporary files and closes a store the session opened. It may be called
// more than once. Close waits for a running Add or Finish (of the session
// or of a writer); to stop a build, cancel its context.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	var builders []*snapshotbuild.Builder
	for _, b := range slices.Sorted(maps.Keys(s.mu.writers)) {
		builders = append(builders, s.mu.writers[b].b)
	}
	clear(s.mu.writers)
	if s.mu.prepared != nil {
		builders = append(builders, s.mu.prepared)
	}
	if s.mu.b != nil {
		builders = append(builders, s.mu.b)
	}
	s.mu.Unlock()
	// Closed without the session's lock: a builder's Close waits for its
	// running Finish, whose Progress callback may call Stats (which takes
	// the lock: a deadlock).
	var errs []error
	for _, b := range builders {
		errs = append(errs, b.Close())
	}
	if s.ownStore != nil {
		errs = append(errs, s.ownStore.Close())
	}
	return errors.Join(errs...)
}

// BucketWriter builds the snapshot of one bucket of a session (see
// Session.Bucket). It validates every row like the session does, and a
// row of any other bucket is an error wrapping
// snapshotbuild.ErrBucketNotOwned: an AddRow rejected for its row adds
// nothing and the writer stays usable; an Add that fails (for any row)
// fails the writer, whose bucket must then be built again by a new writer
// (after Close) or a new session. Close it when done, also after Finish or
// a failure; Session.Close closes the writers still open.
//
// A writer's methods may be called from several goroutines but are
// serialized; different writers are independent.
type BucketWriter struct {
	s      *Session
	bucket int
	b      *snapshotbuild.Builder

	encMu sync.Mutex // guards enc
	enc   *kv.Encoder
}

// Bucket is the writer's bucket.
func (w *BucketWriter) Bucket() int { return w.bucket }

// Add adds the rows of rec (columns as Session.Add takes them); every row
// must belong to the writer's bucket. An invalid row fails the writer.
func (w *BucketWriter) Add(ctx context.Context, rec arrow.RecordBatch) error {
	if err := w.b.Add(ctx, rec); err != nil {
		return fmt.Errorf("bulkloadclient: bucket %d: add: %w", w.bucket, err)
	}
	return nil
}

// AddRow adds one row (values in column order, see kv.Row). A row that
// does not fit the schema, of another partition or of another bucket is
// rejected with an error and not added; the writer stays usable.
func (w *BucketWriter) AddRow(ctx context.Context, row kv.Row) error {
	w.encMu.Lock()
	defer w.encMu.Unlock()
	key, val, bucket, err := encodeRow(w.enc, w.s.partition, row)
	if err != nil {
		return fmt.Errorf("bulkloadclient: bucket %d: add row: %w", w.bucket, err)
	}
	if bucket != w.bucket {
		return fmt.Errorf("bulkloadclient: bucket %d: add row: %w: row of bucket %d", w.bucket, snapshotbuild.ErrBucketNotOwned, bucket)
	}
	if err := w.b.AddPair(ctx, bucket, key, val); err != nil {
		return fmt.Errorf("bulkloadclient: bucket %d: add row: %w", w.bucket, err)
	}
	return nil
}

// Finish builds and uploads the bucket's snapshot (data files first,
// _METADATA last) and returns its result. It can be called once.
func (w *BucketWriter) Finish(ctx context.Context) (snapshotbuild.BucketResult, error) {
	res, err := w.b.Finish(ctx)
	if err != nil {
		return snapshotbuild.BucketResult{}, fmt.Errorf("bulkloadclient: finish bucket %d of %s: %w", w.bucket, w.s.bc.handle.Target, err)
	}
	if len(res) != 1 || res[0].Bucket != w.bucket {
		return snapshotbuild.BucketResult{}, fmt.Errorf("bulkloadclient: finish bucket %d of %s: builder returned %d results", w.bucket, w.s.bc.handle.Target, len(res))
	}
	return res[0], nil
}

// Stats returns the statistics of the writer's build.
func (w *BucketWriter) Stats() snapshotbuild.Stats { return w.b.Stats() }

// Close removes the writer's temporary files and frees its bucket: the
// session may hand out a new writer of it. It may be called more than
// once, also after Session.Close; it waits for a running Add or Finish.
func (w *BucketWriter) Close() error {
	// The build is closed (its running Finish waited for) before the
	// bucket may be asked for again: two writers of one bucket never
	// upload at once.
	err := w.b.Close()
	s := w.s
	s.mu.Lock()
	if s.mu.writers[w.bucket] == w {
		delete(s.mu.writers, w.bucket)
	}
	s.mu.Unlock()
	return err
}
