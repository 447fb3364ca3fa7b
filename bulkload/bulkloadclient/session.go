package bulkloadclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
)

// SessionOptions tune a build session.
type SessionOptions struct {
	// Buckets lists the buckets this session builds; nil means all. A row
	// of another bucket is an error wrapping snapshotbuild.ErrBucketNotOwned,
	// unless SkipOtherBuckets is set.
	Buckets []int
	// SkipOtherBuckets drops rows of buckets the session does not build
	// instead of failing on them: for distributed builds in which every
	// worker reads the whole input and keeps its own buckets.
	SkipOtherBuckets bool
	// TempDir, MemoryBudget and Workers are snapshotbuild.Options'.
	TempDir      string
	MemoryBudget int64
	Workers      int
	// Store is where the snapshots go; default: objstore.Open of the
	// context's remote data dir (closed by Close). A given store is not
	// closed.
	Store *objstore.Store
	// Logger receives the builder's logs (default: discard).
	Logger *slog.Logger
}

// Session builds the snapshots of some buckets of a transaction: a thin
// layer over snapshotbuild.Builder. Every row is checked against the frozen
// schema, partition and bucketing; duplicate primary keys keep the last row
// added. Close it when done, also after Finish or a failure.
//
// Errors of invalid input wrap snapshotbuild's sentinels: ErrInvalidRow
// (and kv.ErrInvalidRow for AddRow), ErrWrongPartition, ErrBucketNotOwned,
// ErrSchemaMismatch and ErrUnsupportedArrowType (Add). An Add that fails
// fails the session (rows of the batch before the bad one are already
// buffered): every later call returns the error and the transaction's
// buckets must be built again in a new session. An AddRow rejected for its
// row (invalid, another partition, another bucket) adds nothing and leaves
// the session usable. Other failures (a record larger than the memory
// budget allows, cancellation, the object store in Finish) fail the
// session. None of these errors is retriable within the session; a new
// session of the same context rebuilds the same bytes and adopts whatever
// an earlier attempt uploaded.
type Session struct {
	bc        *BuildContext
	b         *snapshotbuild.Builder
	ownStore  *objstore.Store
	owned     []bool
	skip      bool
	partition string

	encMu sync.Mutex // guards enc
	enc   *kv.Encoder

	mu     sync.Mutex
	closed bool
}

// OpenBuildSession opens a build session of bc.
func OpenBuildSession(ctx context.Context, bc *BuildContext, opts SessionOptions) (*Session, error) {
	if bc == nil {
		return nil, errNoContext
	}
	s := &Session{bc: bc, owned: make([]bool, bc.buckets), skip: opts.SkipOtherBuckets, partition: bc.handle.Target.Partition,
		enc: bc.table.NewEncoder()}
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
	store := opts.Store
	if store == nil {
		st, err := objstore.Open(ctx, bc.remoteDataDir)
		if err != nil {
			return nil, fmt.Errorf("bulkloadclient: open remote data dir %s: %w", bc.remoteDataDir, err)
		}
		store, s.ownStore = st, st
	}
	other := snapshotbuild.OtherBucketsError
	if opts.SkipOtherBuckets {
		other = snapshotbuild.OtherBucketsSkip
	}
	b, err := snapshotbuild.New(store, snapshotbuild.Target{
		Table: bc.table, Snapshot: bc.SnapshotTarget(), SnapshotIDs: bc.SnapshotIDs(), Buckets: opts.Buckets,
	}, snapshotbuild.Options{
		Workers: opts.Workers, MemoryBudget: opts.MemoryBudget, TempDir: opts.TempDir,
		Duplicates: snapshotbuild.DuplicatesLastWins, OtherBuckets: other,
		Logger: opts.Logger,
	})
	if err != nil {
		if s.ownStore != nil {
			_ = s.ownStore.Close()
		}
		return nil, fmt.Errorf("bulkloadclient: open build session of %s: %w", bc.handle.Target, err)
	}
	s.b = b
	return s, nil
}

// Add adds the rows of rec (columns by name, as snapshotbuild.Builder.Add
// takes them: every table column, partition columns included, and no
// other). An invalid row fails the session (see Session).
func (s *Session) Add(ctx context.Context, rec arrow.RecordBatch) error {
	if err := s.b.Add(ctx, rec); err != nil {
		return fmt.Errorf("bulkloadclient: add: %w", err)
	}
	return nil
}

// AddRow adds one row (values in column order, see kv.Row). A row that
// does not fit the schema, a row of another partition, or of a bucket the
// session does not build (unless SkipOtherBuckets), is rejected with an
// error and not added; the session stays usable.
func (s *Session) AddRow(ctx context.Context, row kv.Row) error {
	s.encMu.Lock()
	defer s.encMu.Unlock()
	f := kv.RowFields(row)
	key, val, bucket, err := s.enc.Encode(f)
	if err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w: %w", snapshotbuild.ErrInvalidRow, err)
	}
	if s.partition != "" {
		name, err := s.enc.PartitionName(f)
		if err != nil {
			return fmt.Errorf("bulkloadclient: add row: %w: %w", snapshotbuild.ErrInvalidRow, err)
		}
		if name != s.partition {
			return fmt.Errorf("bulkloadclient: add row: %w: row of partition %q, the session builds %q", snapshotbuild.ErrWrongPartition, name, s.partition)
		}
	}
	if !s.owned[bucket] && !s.skip {
		return fmt.Errorf("bulkloadclient: add row: %w: row of bucket %d", snapshotbuild.ErrBucketNotOwned, bucket)
	}
	// AddPair copies key and val before the encoder reuses them; it drops
	// (and counts in Stats.SkippedRows) a row of another bucket.
	if err := s.b.AddPair(ctx, bucket, key, val); err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	return nil
}

// Finish builds and uploads the snapshots of the session's buckets and
// returns one result per bucket, empty buckets included.
func (s *Session) Finish(ctx context.Context) ([]snapshotbuild.BucketResult, error) {
	res, err := s.b.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: finish %s: %w", s.bc.handle.Target, err)
	}
	return res, nil
}

// Stats returns the builder's statistics.
func (s *Session) Stats() snapshotbuild.Stats { return s.b.Stats() }

// Close removes the session's temporary files and closes a store the
// session opened. It may be called more than once. Calls are serialized:
// Close waits for a running Add or Finish; to stop a build, cancel its
// context.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.b.Close()
	if s.ownStore != nil {
		err = errors.Join(err, s.ownStore.Close())
	}
	return err
}
