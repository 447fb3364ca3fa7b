package snapshotbuild

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/objstore"
)

// stallingStore holds every data upload until its context ends (or 20 s).
type stallingStore struct {
	*testStore
	completed atomic.Int64
}

func (s *stallingStore) PutFileStamped(ctx context.Context, key, path string, size int64, sha string, stamp objstore.FileStamp) (objstore.Object, error) {
	select {
	case <-ctx.Done():
		return objstore.Object{}, context.Cause(ctx)
	case <-time.After(20 * time.Second):
	}
	s.completed.Add(1)
	return s.testStore.PutFileStamped(ctx, key, path, size, sha, stamp)
}

// TestMergeErrorCancelsUploads: a merge that fails (a duplicate key under
// DuplicatesError in bucket 1) stops the uploads of buckets already
// merged: Finish waited for every one of them to finish (and left their
// files behind), as DESIGN.md said it would not.
func TestMergeErrorCancelsUploads(t *testing.T) {
	ts := newTestStore(t)
	s := &stallingStore{testStore: ts}
	b, err := New(s, Target{NumBuckets: 2, Snapshot: testTarget(ts), SnapshotIDs: snapIDs(2)},
		Options{Workers: 1, MemoryBudget: 64 << 20, TempDir: t.TempDir(), Duplicates: DuplicatesError}) // bucket 0 merged and uploading before bucket 1 merges
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, p := range []inputPair{{0, []byte("a"), []byte("1")}, {1, []byte("b"), []byte("1")}, {1, []byte("b"), []byte("2")}} {
		if err := b.AddPair(t.Context(), p.bucket, p.k, p.v); err != nil {
			t.Fatal(err)
		}
	}
	_, err = b.Finish(t.Context())
	var de *DuplicateKeyError
	if !errors.As(err, &de) {
		t.Fatalf("Finish: %v, want the duplicate key error", err)
	}
	if n := s.completed.Load(); n > 0 {
		t.Fatalf("%d uploads went on after the merge failed", n)
	}
}
