package bulkloadclient_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
)

// offlineContext is the context of partition "us" of a four-bucket events
// table (eventsSchema) whose remote data dir is a fresh file:// directory:
// for builds that need no tier.
func offlineContext(t *testing.T) *bulkloadclient.BuildContext {
	t.Helper()
	schema, err := json.Marshal(eventsSchema(t, 4))
	if err != nil {
		t.Fatal(err)
	}
	remote := "file://" + filepath.ToSlash(t.TempDir())
	const txn = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	blob, err := json.Marshal(map[string]any{
		"version": bulkloadclient.BuildContextVersion, "database": "shop", "table": "events", "partition": "us",
		"table_id": 7, "partition_id": 3, "txn_id": txn, "schema_id": 0, "schema": json.RawMessage(schema),
		"buckets": 4, "bucketing": "fluss", "remote_data_dir": remote, "snapshot_ids": []int64{1, 2, 1, 3},
		"manifest_path":     remote + "/kv/shop/events-7/us-p3/_bulkload/" + txn + "/manifest",
		"build_deadline_ms": time.Now().Add(time.Hour).UnixMilli(),
	})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		t.Fatal(err)
	}
	return bc
}

func bucketOf(t *testing.T, bc *bulkloadclient.BuildContext, r kv.Row) int {
	t.Helper()
	b, err := bc.Table().Bucket(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// idsByBucket splits ids (of region "us") by bucket, keeping their order.
func idsByBucket(t *testing.T, bc *bulkloadclient.BuildContext, ids []int64) map[int][]int64 {
	t.Helper()
	m := map[int][]int64{}
	for _, i := range ids {
		b := bucketOf(t, bc, loadRow("us", i, 1))
		m[b] = append(m[b], i)
	}
	return m
}

// idRange returns the ids in [0, n) divisible by every.
func idRange(n, every int64) []int64 {
	var ids []int64
	for i := int64(0); i < n; i += every {
		ids = append(ids, i)
	}
	return ids
}

// idOfBucket returns the first id whose row of region "us" is in bucket b.
func idOfBucket(t *testing.T, bc *bulkloadclient.BuildContext, b int) int64 {
	t.Helper()
	for i := range int64(1000) {
		if bucketOf(t, bc, loadRow("us", i, 1)) == b {
			return i
		}
	}
	t.Fatalf("no id of bucket %d", b)
	return 0
}

// TestBucketWritersCommit builds every bucket of a partition through its
// own BucketWriter (two of them concurrently from goroutines, one from
// Arrow batches, one from rows), commits on the real embedded tier and
// reads every row back, duplicates resolved last-wins.
func TestBucketWritersCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "eu", "us")
	c, err := bulkloadclient.New(ctx, tr.e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "us"}
	bc, err := begin(ctx, c, target, "bucket-writers-1")
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	v1 := idsByBucket(t, bc, idRange(n, 1))
	v2 := idsByBucket(t, bc, idRange(n, 7)) // again, with version 2: last wins
	var final []kv.Row
	for i := range int64(n) {
		v := 1
		if i%7 == 0 {
			v = 2
		}
		final = append(final, loadRow("us", i, v))
	}

	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		TempDir: t.TempDir(), MemoryBudget: 1 << 20, Workers: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// build feeds bucket b's rows to a new writer, version 1 then 2, as
	// Arrow batches or as rows, and finishes it.
	build := func(b int, arrowInput bool) (snapshotbuild.BucketResult, error) {
		w, err := s.Bucket(b)
		if err != nil {
			return snapshotbuild.BucketResult{}, err
		}
		defer w.Close()
		for _, step := range []struct {
			ids []int64
			v   int
		}{{v1[b], 1}, {v2[b], 2}} {
			if arrowInput {
				rec := arrowBatch("us", step.ids, step.v)
				err := w.Add(ctx, rec)
				rec.Release()
				if err != nil {
					return snapshotbuild.BucketResult{}, err
				}
				continue
			}
			for _, i := range step.ids {
				if err := w.AddRow(ctx, loadRow("us", i, step.v)); err != nil {
					return snapshotbuild.BucketResult{}, err
				}
			}
		}
		res, err := w.Finish(ctx)
		if err != nil {
			return res, err
		}
		return res, w.Close()
	}

	results := make([]snapshotbuild.BucketResult, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for _, b := range []int{0, 1} { // concurrently
		wg.Go(func() { results[b], errs[b] = build(b, b == 0) })
	}
	results[2], errs[2] = build(2, true)
	results[3], errs[3] = build(3, false)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var rows, dups int64
	for b, r := range results {
		if r.Bucket != b {
			t.Fatalf("result %d is of bucket %d", b, r.Bucket)
		}
		rows += r.RowCount
		dups += r.Duplicates
	}
	if rows != n || dups != int64(len(idRange(n, 7))) {
		t.Fatalf("results: %d rows, %d duplicates; want %d, %d", rows, dups, n, len(idRange(n, 7)))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := c.Commit(ctx, bc, results, 30*time.Second)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if st.State != bulkload.Committed {
		t.Fatalf("commit: %+v", st)
	}
	tr.expectRows(ctx, t, target, final)
}

// recordingStore records the SHA-256 of everything a build asks the store
// to write, by key: what the build produced, whether or not the store
// already held it.
type recordingStore struct {
	snapshotbuild.Store

	mu   sync.Mutex
	puts map[string]string
}

func newRecordingStore(st snapshotbuild.Store) *recordingStore {
	return &recordingStore{Store: st, puts: map[string]string{}}
}

func (r *recordingStore) record(key, sum string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts[key] = sum
}

func (r *recordingStore) PutFileStamped(ctx context.Context, key, path string, size int64, sum string, stamp objstore.FileStamp) (objstore.Object, error) {
	r.record(key, sum)
	return r.Store.PutFileStamped(ctx, key, path, size, sum, stamp)
}

func (r *recordingStore) PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error) {
	rc, err := src.Open()
	if err != nil {
		return objstore.Object{}, err
	}
	h := sha256.New()
	_, err = io.Copy(h, rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return objstore.Object{}, err
	}
	r.record(key, hex.EncodeToString(h.Sum(nil)))
	return r.Store.PutIfAbsent(ctx, key, src)
}

func openStore(t *testing.T, bc *bulkloadclient.BuildContext) *objstore.Store {
	t.Helper()
	st, err := objstore.Open(t.Context(), bc.RemoteDataDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return st
}

// TestBucketWritersMatchSessionBuild builds the same input once in one
// session-level build and once through per-bucket writers (from
// goroutines), each through a store wrapper (SessionOptions.Store is an
// interface) that records what it is asked to write: the same objects
// with the same SHA-256, and the same results.
func TestBucketWritersMatchSessionBuild(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	st := openStore(t, bc)
	const n = 2000
	all, dup := idRange(n, 1), idRange(n, 3)
	opts := func(store snapshotbuild.Store) bulkloadclient.SessionOptions {
		return bulkloadclient.SessionOptions{TempDir: t.TempDir(), MemoryBudget: 256 << 10, Workers: 2, Store: store}
	}

	// Session-level: one Arrow batch of every row, rows of version 2, an
	// Arrow batch of version 3.
	whole := newRecordingStore(st)
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, opts(whole))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := arrowBatch("us", all, 1)
	err = s.Add(ctx, rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range dup {
		if err := s.AddRow(ctx, loadRow("us", i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	rec = arrowBatch("us", idRange(n, 5), 3)
	err = s.Add(ctx, rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Per bucket: the same steps, each with the bucket's rows in order.
	per := newRecordingStore(st)
	s2, err := bulkloadclient.OpenBuildSession(ctx, bc, opts(per))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	v1, v2, v3 := idsByBucket(t, bc, all), idsByBucket(t, bc, dup), idsByBucket(t, bc, idRange(n, 5))
	got := make([]snapshotbuild.BucketResult, bc.Buckets())
	errs := make([]error, bc.Buckets())
	var wg sync.WaitGroup
	for b := range bc.Buckets() {
		wg.Go(func() {
			got[b], errs[b] = func() (snapshotbuild.BucketResult, error) {
				w, err := s2.Bucket(b)
				if err != nil {
					return snapshotbuild.BucketResult{}, err
				}
				defer w.Close()
				rec := arrowBatch("us", v1[b], 1)
				err = w.Add(ctx, rec)
				rec.Release()
				if err != nil {
					return snapshotbuild.BucketResult{}, err
				}
				for _, i := range v2[b] {
					if err := w.AddRow(ctx, loadRow("us", i, 2)); err != nil {
						return snapshotbuild.BucketResult{}, err
					}
				}
				rec = arrowBatch("us", v3[b], 3)
				err = w.Add(ctx, rec)
				rec.Release()
				if err != nil {
					return snapshotbuild.BucketResult{}, err
				}
				return w.Finish(ctx)
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	if len(whole.puts) == 0 || len(whole.puts) != len(per.puts) {
		t.Fatalf("session-level build wrote %d objects, writers %d", len(whole.puts), len(per.puts))
	}
	for _, k := range slices.Sorted(maps.Keys(whole.puts)) {
		if per.puts[k] != whole.puts[k] {
			t.Errorf("%s: sha256 %s from the session-level build, %q from the writers", k, whole.puts[k], per.puts[k])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for b := range want {
		g := got[b]
		if !g.MetadataAdopted { // the store held the identical _METADATA
			t.Errorf("bucket %d: _METADATA not adopted", b)
		}
		g.MetadataAdopted = want[b].MetadataAdopted
		if g != want[b] {
			t.Errorf("bucket %d: writer result %+v, session-level %+v", b, g, want[b])
		}
	}
	if err := bulkloadclient.CheckCoverage(bc, got); err != nil {
		t.Fatal(err)
	}
}

// TestBucketWriterRejectsOtherBucket: a row of another bucket is an error
// wrapping ErrBucketNotOwned, as a row (the writer stays usable) and in an
// Arrow batch (the writer fails).
func TestBucketWriterRejectsOtherBucket(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mine, other := idOfBucket(t, bc, 1), idOfBucket(t, bc, 2)

	w, err := s.Bucket(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddRow(ctx, loadRow("us", other, 1)); !errors.Is(err, snapshotbuild.ErrBucketNotOwned) {
		t.Fatalf("row of bucket 2 in writer of bucket 1: %v", err)
	}
	if err := w.AddRow(ctx, kv.Row{"eu", mine, "x", nil}); !errors.Is(err, snapshotbuild.ErrWrongPartition) {
		t.Fatalf("row of partition eu: %v", err)
	}
	if err := w.AddRow(ctx, kv.Row{"us", nil, "x", nil}); !errors.Is(err, snapshotbuild.ErrInvalidRow) {
		t.Fatalf("row with a null key: %v", err)
	}
	// Rejected rows added nothing; the writer goes on.
	if err := w.AddRow(ctx, loadRow("us", mine, 1)); err != nil {
		t.Fatal(err)
	}
	res, err := w.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bucket != 1 || res.RowCount != 1 {
		t.Fatalf("result %+v, want bucket 1 with 1 row", res)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w, err = s.Bucket(3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := arrowBatch("us", []int64{idOfBucket(t, bc, 3), other}, 1)
	defer rec.Release()
	err = w.Add(ctx, rec)
	var ne *snapshotbuild.NotOwnedError
	if !errors.Is(err, snapshotbuild.ErrBucketNotOwned) || !errors.As(err, &ne) || *ne != (snapshotbuild.NotOwnedError{Batch: 0, Row: 1, Bucket: 2}) {
		t.Fatalf("batch with a row of bucket 2 in writer of bucket 3: %v (%+v), want batch 0 row 1 of bucket 2", err, ne)
	}
	if _, err := w.Finish(ctx); err == nil {
		t.Fatal("finish of a failed writer succeeded")
	}
}

// TestSessionCloseClosesWriters: Session.Close closes the writers still
// open (their builds spilled to TempDir) and leaves no temporary file.
func TestSessionCloseClosesWriters(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	tmp := t.TempDir()
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		TempDir: tmp, MemoryBudget: snapshotbuild.MinMemoryBudget, Workers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := idsByBucket(t, bc, idRange(8000, 1))
	var writers []*bulkloadclient.BucketWriter
	for _, b := range []int{0, 2} {
		w, err := s.Bucket(b)
		if err != nil {
			t.Fatal(err)
		}
		writers = append(writers, w)
		for _, i := range ids[b] {
			if err := w.AddRow(ctx, loadRow("us", i, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if w.Stats().Spills == 0 {
			t.Fatalf("bucket %d: no spill with a %d-byte budget", b, snapshotbuild.MinMemoryBudget)
		}
	}
	if n := countFiles(t, tmp); n == 0 {
		t.Fatal("no temporary files before Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countFiles(t, tmp); n != 0 {
		t.Fatalf("%d entries left in TempDir after Close", n)
	}
	for _, w := range writers {
		if err := w.AddRow(ctx, loadRow("us", ids[w.Bucket()][0], 1)); !errors.Is(err, snapshotbuild.ErrClosed) {
			t.Fatalf("add row after the session closed: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("close of a writer after the session closed: %v", err)
		}
	}
	if _, err := s.Bucket(1); !errors.Is(err, snapshotbuild.ErrClosed) {
		t.Fatalf("bucket after close: %v", err)
	}
}

// countFiles counts the entries under dir.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if path != dir {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSessionMixedInput: a session takes session-level input or bucket
// writers, not both.
func TestSessionMixedInput(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	open := func() *bulkloadclient.Session {
		s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		return s
	}
	row := loadRow("us", 1, 1)

	s := open()
	if err := s.AddRow(ctx, row); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bucket(bucketOf(t, bc, row)); !errors.Is(err, bulkloadclient.ErrMixedInput) {
		t.Fatalf("bucket after session-level input: %v", err)
	}

	s = open()
	w, err := s.Bucket(0)
	if err != nil {
		t.Fatal(err)
	}
	// Also once the writer is closed: its bucket may have been built.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rec := arrowBatch("us", []int64{1}, 1)
	defer rec.Release()
	for name, call := range map[string]func() error{
		"add":     func() error { return s.Add(ctx, rec) },
		"add row": func() error { return s.AddRow(ctx, row) },
		"finish":  func() error { _, err := s.Finish(ctx); return err },
	} {
		if err := call(); !errors.Is(err, bulkloadclient.ErrMixedInput) {
			t.Errorf("%s after a bucket writer: %v", name, err)
		}
	}
}

// TestBucketWriterOnePerBucket: one open writer per bucket, of the
// session's buckets only; a closed writer's bucket can be asked for again.
func TestBucketWriterOnePerBucket(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{TempDir: t.TempDir(), Buckets: []int{1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.Bucket(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bucket(1); !errors.Is(err, bulkloadclient.ErrBucketWriterOpen) {
		t.Fatalf("second writer of bucket 1: %v", err)
	}
	w3, err := s.Bucket(3)
	if err != nil {
		t.Fatalf("writer of bucket 3 beside one of bucket 1: %v", err)
	}
	defer w3.Close()
	for _, b := range []int{0, 2, 4, -1} {
		if _, err := s.Bucket(b); !errors.Is(err, snapshotbuild.ErrBucketNotOwned) {
			t.Errorf("writer of bucket %d in a session of [1 3]: %v", b, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // idempotent, and frees nothing twice
		t.Fatal(err)
	}
	w2, err := s.Bucket(1)
	if err != nil {
		t.Fatalf("writer of bucket 1 after the first was closed: %v", err)
	}
	defer w2.Close()
	if _, err := s.Bucket(1); !errors.Is(err, bulkloadclient.ErrBucketWriterOpen) {
		t.Fatalf("second writer of bucket 1 after the old one's second Close: %v", err)
	}
}

// TestSessionDuplicatesError: with DuplicatesError a repeated key fails
// Finish (session-level and per bucket) with a *DuplicateKeyError naming
// the key; the default keeps the last row.
func TestSessionDuplicatesError(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	const id = 42
	b := bucketOf(t, bc, loadRow("us", id, 1))
	opts := bulkloadclient.SessionOptions{TempDir: t.TempDir(), Duplicates: snapshotbuild.DuplicatesError}
	check := func(what string, err error) {
		t.Helper()
		var de *snapshotbuild.DuplicateKeyError
		if !errors.Is(err, snapshotbuild.ErrDuplicateKey) || !errors.As(err, &de) {
			t.Fatalf("%s: %v, want a *DuplicateKeyError", what, err)
		}
		if de.Bucket != b || !strings.Contains(de.Values, "42") {
			t.Fatalf("%s: duplicate of bucket %d, key %q; want bucket %d, key 42", what, de.Bucket, de.Values, b)
		}
	}

	s, err := bulkloadclient.OpenBuildSession(ctx, bc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for v := 1; v <= 2; v++ {
		if err := s.AddRow(ctx, loadRow("us", id, v)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Finish(ctx)
	check("session-level", err)

	s2, err := bulkloadclient.OpenBuildSession(ctx, bc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	w, err := s2.Bucket(b)
	if err != nil {
		t.Fatal(err)
	}
	rec := arrowBatch("us", []int64{id, id}, 1)
	defer rec.Release()
	if err := w.Add(ctx, rec); err != nil {
		t.Fatal(err)
	}
	_, err = w.Finish(ctx)
	check("bucket writer", err)

	// The default policy: last wins.
	opts.Duplicates = snapshotbuild.DuplicatesLastWins
	s3, err := bulkloadclient.OpenBuildSession(ctx, bc, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	w, err = s3.Bucket(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, rec); err != nil {
		t.Fatal(err)
	}
	res, err := w.Finish(ctx)
	if err != nil || res.RowCount != 1 || res.Duplicates != 1 {
		t.Fatalf("last wins: %+v, %v", res, err)
	}
}

// TestSessionProgress: Progress hears every bucket reach PhaseDone, from a
// session-level build and from bucket writers. The store is a nil
// *objstore.Store, which counts as none: the session opens the context's.
func TestSessionProgress(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	var mu sync.Mutex
	done := map[string][]int{}
	progress := func(label string) func(snapshotbuild.BucketProgress) {
		return func(p snapshotbuild.BucketProgress) {
			if p.Phase == snapshotbuild.PhaseDone {
				mu.Lock()
				done[label] = append(done[label], p.Bucket)
				mu.Unlock()
			}
		}
	}
	var noStore *objstore.Store
	rows := idRange(200, 1)

	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		TempDir: t.TempDir(), Progress: progress("session"), Store: noStore,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := arrowBatch("us", rows, 1)
	defer rec.Release()
	if err := s.Add(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx); err != nil {
		t.Fatal(err)
	}

	s2, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		TempDir: t.TempDir(), Progress: progress("writers"), Buckets: []int{0, 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	byBucket := idsByBucket(t, bc, rows)
	for _, b := range []int{3, 0} {
		w, err := s2.Bucket(b)
		if err != nil {
			t.Fatal(err)
		}
		rec := arrowBatch("us", byBucket[b], 1)
		err = w.Add(ctx, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(done["session"])
	if fmt.Sprint(done["session"]) != "[0 1 2 3]" || fmt.Sprint(done["writers"]) != "[3 0]" {
		t.Fatalf("buckets done: %v", done)
	}
}

// TestCloseDuringFinishWithProgressStats: Close from another goroutine
// while Finish runs (Close waits for it), with a Progress callback that
// reads the session's Stats: Close held the session's lock while it
// waited for the build, whose worker waited in Progress for that lock.
func TestCloseDuringFinishWithProgressStats(t *testing.T) {
	ctx := t.Context()
	bc := offlineContext(t)
	var s *bulkloadclient.Session
	entered := make(chan struct{})
	var once sync.Once
	progress := func(snapshotbuild.BucketProgress) {
		first := false
		once.Do(func() { first = true; close(entered) })
		if first {
			time.Sleep(300 * time.Millisecond) // Close takes the session's lock meanwhile
		}
		_ = s.Stats()
	}
	var err error
	s, err = bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{TempDir: t.TempDir(), Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	rec := arrowBatch("us", idRange(200, 1), 1)
	defer rec.Release()
	if err := s.Add(ctx, rec); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Finish(ctx); done <- err }()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Finish never returned: deadlocked with Session.Close")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
