package bulkloadclient_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
)

// killBucket stands for a builder process that dies: after the n-th
// successful Put whose key match accepts it cancels the build's context,
// so nothing of the build runs after that point. It records every key
// stored through it. Close does not close the shared inner bucket.
type killBucket struct {
	objstore.Bucket
	match  func(key string) bool
	n      int32
	cancel context.CancelFunc

	puts   atomic.Int32
	mu     sync.Mutex
	stored []string
}

func (k *killBucket) Put(ctx context.Context, key string, r io.Reader, ifNotExist bool) error {
	err := k.Bucket.Put(ctx, key, r, ifNotExist)
	if err == nil || errors.Is(err, objstore.ErrExists) {
		k.mu.Lock()
		k.stored = append(k.stored, key)
		k.mu.Unlock()
	}
	if err == nil && k.match(key) && k.puts.Add(1) == k.n {
		k.cancel()
	}
	return err
}

func (k *killBucket) Close() error { return nil }

func isMetadata(key string) bool { return strings.HasSuffix(key, "/_METADATA") }

// killedBuild runs a build session of buckets (nil: all) of the context in
// blob (unmarshalled, as a worker process would) over rows and kills it at
// the n-th Put matching match. It returns the keys the dead build stored.
func killedBuild(ctx context.Context, t *testing.T, tr *testTier, blob []byte, rows []kv.Row, buckets []int, match func(string) bool, n int32) []string {
	t.Helper()
	bc, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kb := &killBucket{Bucket: tr.e.Objects().Bucket(), match: match, n: n, cancel: cancel}
	s, err := bulkloadclient.OpenBuildSession(bctx, bc, bulkloadclient.SessionOptions{
		Buckets: buckets, SkipOtherBuckets: true, TempDir: t.TempDir(), MemoryBudget: 1 << 20, Workers: 2,
		Store: objstore.New(kb, tr.e.Objects().Base()),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := s.AddRow(bctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(bctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("finish of a killed build: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if kb.puts.Load() < n {
		t.Fatalf("the build stored %d matching objects, fewer than the %d to kill it at", kb.puts.Load(), n)
	}
	kb.mu.Lock()
	defer kb.mu.Unlock()
	return slices.Clone(kb.stored)
}

// TestAbortAfterKilledBuild: Begin, one session finishes some buckets,
// another is killed mid-Finish; Abort leaves the target ACTIVE and empty,
// the old token is spent, and a new token begins a new transaction.
func TestAbortAfterKilledBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	info := tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a")
	c, err := bulkloadclient.New(ctx, tr.e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
	if _, _, err := c.GetInProgress(ctx, target); !errors.Is(err, bulkload.ErrNotFound) {
		t.Fatalf("in progress before begin: %v", err)
	}
	// A target that does not exist is not a missing transaction.
	for _, missing := range []bulkload.Target{{Database: "shop", Table: "events", Partition: "zz"}, {Database: "shop", Table: "nope"}} {
		_, err := c.Begin(ctx, missing, "abort-missing", bulkloadclient.BeginOptions{})
		if !errors.Is(err, bulkload.ErrTargetNotFound) || errors.Is(err, bulkload.ErrNotFound) || bulkloadclient.IsRetriable(err) {
			t.Fatalf("begin %s: %v, want ErrTargetNotFound only", missing, err)
		}
		if _, _, err := c.GetInProgress(ctx, missing); !errors.Is(err, bulkload.ErrTargetNotFound) || errors.Is(err, bulkload.ErrNotFound) {
			t.Fatalf("in progress of %s: %v, want ErrTargetNotFound only", missing, err)
		}
	}
	bc, err := begin(ctx, c, target, "abort-1")
	if err != nil {
		t.Fatal(err)
	}
	if st, inProgress, err := c.GetInProgress(ctx, target); err != nil || st.State != bulkload.Begun || inProgress == nil || inProgress.Handle() != bc.Handle() {
		t.Fatalf("in progress: %+v %v %v", st, inProgress, err)
	}
	blob, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rows := regionRows("a", 3000)

	// Buckets 0 and 1 are built completely.
	var some []kv.Row
	for _, r := range rows {
		if b, _ := info.KV.Bucket(r); b < 2 {
			some = append(some, r)
		}
	}
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{Buckets: []int{0, 1}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range some {
		if err := s.AddRow(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A builder of every bucket dies after its third data file.
	stored := killedBuild(ctx, t, tr, blob, rows, nil, func(k string) bool { return !isMetadata(k) }, 3)
	for _, k := range stored {
		if isMetadata(k) {
			t.Fatalf("the killed build wrote %s", k)
		}
	}

	st, err := c.Abort(ctx, bc.Handle())
	if err != nil || st.State != bulkload.Aborted || st.AbortReason == nil || *st.AbortReason != bulkload.AbortedByCaller {
		t.Fatalf("abort: %+v, %v", st, err)
	}
	// Abort is idempotent.
	if st, err := c.Abort(ctx, bc.Handle()); err != nil || st.State != bulkload.Aborted {
		t.Fatalf("second abort: %+v, %v", st, err)
	}
	tr.expectActiveEmpty(ctx, t, target)
	if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Aborted {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if st, inProgress, err := c.GetInProgress(ctx, target); !errors.Is(err, bulkload.ErrNotFound) || inProgress != nil {
		t.Fatalf("in progress after abort: %+v %v %v", st, inProgress, err)
	}
	// A Commit of the aborted transaction fails for good.
	if _, err := c.Commit(ctx, bc, build(ctx, t, bc, rows), 10*time.Second); !errors.Is(err, bulkload.ErrInvalidState) || bulkloadclient.IsRetriable(err) {
		t.Fatalf("commit after abort: %v", err)
	}
	// The token is spent; a new one begins a new transaction.
	if _, err := c.Begin(ctx, target, "abort-1", bulkloadclient.BeginOptions{}); !errors.Is(err, bulkload.ErrTokenAborted) || bulkloadclient.IsRetriable(err) {
		t.Fatalf("begin with the aborted token: %v", err)
	}
	bc2, err := begin(ctx, c, target, "abort-2")
	if err != nil {
		t.Fatal(err)
	}
	if bc2.Handle().TxnID == bc.Handle().TxnID || bc2.ManifestPath() == bc.ManifestPath() {
		t.Fatalf("new transaction %+v reuses the aborted one's %+v", bc2.Handle(), bc.Handle())
	}
	if st, err := c.Commit(ctx, bc2, build(ctx, t, bc2, rows), time.Minute); err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v, %v", st, err)
	}
	tr.expectRows(ctx, t, target, rows)
}

// TestRebuildAfterKilledBuild: of two builders of one transaction, one
// finishes buckets 2 and 3; the other, owning buckets 0 and 1, dies
// mid-Finish, twice (once after some data files, once after a _METADATA).
// A new session of the same serialized context rebuilds buckets 0 and 1,
// adopting what the dead ones stored, and Commit succeeds. The store then
// holds exactly the files the snapshots reference: one copy of each,
// nothing else.
func TestRebuildAfterKilledBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a")
	c, err := bulkloadclient.New(ctx, tr.e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
	bc, err := begin(ctx, c, target, "rebuild-1")
	if err != nil {
		t.Fatal(err)
	}
	blob, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rows := regionRows("a", 20000)
	for i := int64(0); i < 20000; i += 7 { // duplicates: last wins
		rows = append(rows, loadRow("a", i, 3))
	}

	other, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		t.Fatal(err)
	}
	res := buildBuckets(ctx, t, other, rows, []int{2, 3})
	dead := []int{0, 1}
	stored := killedBuild(ctx, t, tr, blob, rows, dead, func(k string) bool { return !isMetadata(k) }, 5)
	stored = append(stored, killedBuild(ctx, t, tr, blob, rows, dead, isMetadata, 1)...)
	// A killed build leaves data files, and a _METADATA only for a bucket
	// it completed (commit marker last: written once every data file is
	// up); the second one was killed once its first _METADATA was stored
	// (the other bucket's, written alongside, may be stored too).
	store := tr.e.Objects()
	if len(objectsUnder(ctx, t, store, bc)) <= len(referencedObjects(ctx, t, store, res)) {
		t.Fatal("the killed builds left nothing to adopt")
	}
	markers := 0
	for _, b := range dead {
		key, err := store.Key(bc.SnapshotTarget().MetadataPath(b, bc.SnapshotIDs()[b]))
		if err != nil {
			t.Fatal(err)
		}
		switch _, err := store.Stat(ctx, key); {
		case err == nil:
			markers++
		case !errors.Is(err, objstore.ErrNotFound):
			t.Fatal(err)
		}
	}
	if markers == 0 {
		t.Fatalf("the killed builds left no _METADATA of buckets %v, want the one stored before the kill", dead)
	}

	// The rebuild, in a new session of a freshly unmarshalled context.
	bc2, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		t.Fatal(err)
	}
	res = append(res, buildBuckets(ctx, t, bc2, rows, dead)...)
	got, want := objectsUnder(ctx, t, store, bc), referencedObjects(ctx, t, store, res)
	if !slices.Equal(got, want) {
		t.Fatalf("objects in the snapshot directories:\n%s\nwant exactly the referenced ones:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, k := range stored {
		if _, ok := slices.BinarySearch(want, k); !ok {
			t.Fatalf("%s, stored by a killed build, is not part of the rebuilt snapshots", k)
		}
	}

	st, err := c.Commit(ctx, bc2, res, time.Minute)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v, %v", st, err)
	}
	final := map[int64]kv.Row{}
	for _, r := range rows {
		final[r[1].(int64)] = r
	}
	var want2 []kv.Row
	for _, r := range final {
		want2 = append(want2, r)
	}
	tr.expectRows(ctx, t, target, want2)
	expectOneCommitted(ctx, t, tr, bc)
}
