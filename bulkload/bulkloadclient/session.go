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
	// of another bucket is an error.
	Buckets []int
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
// layer over snapshotbuild.Builder. Duplicate primary keys keep the last
// row added. Close it when done.
type Session struct {
	bc        *BuildContext
	b         *snapshotbuild.Builder
	ownStore  *objstore.Store
	owned     []bool
	partition string

	mu     sync.Mutex
	closed bool
}

// OpenBuildSession opens a build session of bc.
func OpenBuildSession(ctx context.Context, bc *BuildContext, opts SessionOptions) (*Session, error) {
	if bc == nil {
		return nil, errNoContext
	}
	s := &Session{bc: bc, owned: make([]bool, bc.buckets), partition: bc.handle.Target.Partition}
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
	b, err := snapshotbuild.New(store, snapshotbuild.Target{
		Table: bc.table, Snapshot: bc.SnapshotTarget(), SnapshotIDs: bc.SnapshotIDs(), Buckets: opts.Buckets,
	}, snapshotbuild.Options{
		Workers: opts.Workers, MemoryBudget: opts.MemoryBudget, TempDir: opts.TempDir,
		Duplicates: snapshotbuild.DuplicatesLastWins, OtherBuckets: snapshotbuild.OtherBucketsError,
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
// takes them).
func (s *Session) Add(ctx context.Context, rec arrow.RecordBatch) error {
	return s.b.Add(ctx, rec)
}

// AddRow adds one row (values in column order, see kv.Row). A row of a
// bucket the session does not build, or of another partition, is an error.
func (s *Session) AddRow(ctx context.Context, row kv.Row) error {
	t := s.bc.table
	if s.partition != "" {
		name, err := t.PartitionName(row)
		if err != nil {
			return fmt.Errorf("bulkloadclient: add row: %w", err)
		}
		if name != s.partition {
			return fmt.Errorf("bulkloadclient: add row: row of partition %q, the session builds %q", name, s.partition)
		}
	}
	bucket, err := t.Bucket(row)
	if err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	if !s.owned[bucket] {
		return fmt.Errorf("bulkloadclient: add row: row of bucket %d, which this session does not build", bucket)
	}
	key, err := t.EncodeKey(row)
	if err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	val, err := t.EncodeValue(row)
	if err != nil {
		return fmt.Errorf("bulkloadclient: add row: %w", err)
	}
	return s.b.AddPair(ctx, bucket, key, val)
}

// Finish builds and uploads the snapshots of the session's buckets and
// returns one result per bucket, empty buckets included.
func (s *Session) Finish(ctx context.Context) ([]snapshotbuild.BucketResult, error) {
	return s.b.Finish(ctx)
}

// Stats returns the builder's statistics.
func (s *Session) Stats() snapshotbuild.Stats { return s.b.Stats() }

// Close removes the session's temporary files and closes a store the
// session opened. It may be called more than once.
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
