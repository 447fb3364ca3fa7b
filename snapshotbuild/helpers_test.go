package snapshotbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// testStore is a file:// object store in a temp dir, behind a fault
// injector.
type testStore struct {
	*objstore.Store
	faults *objstore.Faults
	dir    string

	// File uploads: SSTs that came with a stamp the file still had (the
	// store links those without reading them), SSTs that did not, and
	// other files.
	sstFresh, sstStale, nonSST atomic.Int64
}

func (s *testStore) PutFileStamped(ctx context.Context, key, path string, size int64, sha string, stamp objstore.FileStamp) (objstore.Object, error) {
	now, err := objstore.StampFile(path)
	switch fresh := err == nil && !stamp.IsZero() && now == stamp; {
	case !strings.HasSuffix(path, ".sst"):
		s.nonSST.Add(1)
	case fresh:
		s.sstFresh.Add(1)
	default:
		s.sstStale.Add(1)
	}
	return s.Store.PutFileStamped(ctx, key, path, size, sha, stamp)
}

func newTestStore(t *testing.T) *testStore {
	t.Helper()
	dir := t.TempDir()
	url := "file://" + filepath.ToSlash(dir)
	b, err := objstore.OpenBucket(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	f := objstore.NewFaults(b)
	s := objstore.New(f, url)
	t.Cleanup(func() { _ = s.Close() })
	return &testStore{Store: s, faults: f, dir: dir}
}

// objects returns every object of the store, key → content.
func (s *testStore) objects(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for a, err := range s.List(context.WithoutCancel(t.Context()), "") {
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Get(context.WithoutCancel(t.Context()), a.Key)
		if err != nil {
			t.Fatal(err)
		}
		out[a.Key] = b
	}
	return out
}

func (s *testStore) metadataKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	for k := range s.objects(t) {
		if strings.HasSuffix(k, "/"+snapshot.MetadataFileName) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func testTarget(s *testStore) snapshot.Target {
	return snapshot.Target{RemoteDir: s.Base(), Database: "db", Table: "t", TableID: 7}
}

func snapIDs(n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(100 + i)
	}
	return ids
}

type pair struct{ k, v []byte }

// restoreBucket restores a bucket's snapshot the way a tablet would:
// read _METADATA (checking length and digest), download each private file
// with digest verification into a fresh directory under its local path,
// open it with Pebble and read every pair.
func restoreBucket(t *testing.T, s *testStore, r BucketResult) (*snapshot.Metadata, []pair) {
	t.Helper()
	return restoreBucketWith(t, s, r, nil)
}

// restoreBucketWith is restoreBucket, calling inspect (if not nil) with the
// restored database before reading it.
func restoreBucketWith(t *testing.T, s *testStore, r BucketResult, inspect func(*pebble.DB)) (*snapshot.Metadata, []pair) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	key, err := s.Key(r.MetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("bucket %d: read _METADATA: %v", r.Bucket, err)
	}
	if int64(len(raw)) != r.MetadataLength || sha256Hex(raw) != r.MetadataSHA256 {
		t.Fatalf("bucket %d: _METADATA length/digest differ from the result", r.Bucket)
	}
	m, err := snapshot.DecodeMetadata(raw)
	if err != nil {
		t.Fatalf("bucket %d: decode _METADATA: %v", r.Bucket, err)
	}
	dir := t.TempDir()
	for _, f := range m.PrivateFiles {
		k, err := s.Key(f.Handle.Path)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := s.OpenVerified(ctx, k, f.Handle.Size, f.Handle.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(rc); err != nil {
			t.Fatalf("bucket %d: download %s: %v", r.Bucket, f.LocalPath, err)
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
		if want := snapshot.PrivateFileName(f.Handle.SHA256, f.LocalPath); !strings.HasSuffix(f.Handle.Path, "/"+want) {
			t.Fatalf("bucket %d: file %s named %s, want %s", r.Bucket, f.LocalPath, f.Handle.Path, want)
		}
		if err := os.WriteFile(filepath.Join(dir, f.LocalPath), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := PebbleOptions(CompressionSnappy, nil)
	opts.ReadOnly = true
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatalf("bucket %d: open restored snapshot: %v", r.Bucket, err)
	}
	defer db.Close()
	if inspect != nil {
		inspect(db)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []pair
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, pair{bytes.Clone(it.Key()), bytes.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return m, out
}

// genPairs makes n pairs over nb buckets with roughly dupFrac duplicate
// keys, in random order, deterministic for a seed. It returns the input (in
// order) and, per bucket, the expected last-wins content sorted by key.
type inputPair struct {
	bucket int
	k, v   []byte
}

func genPairs(seed uint64, n, nb int, dupFrac float64) ([]inputPair, [][]pair, []int64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var in []inputPair
	var keys [][]byte
	for i := range n {
		var k []byte
		if len(keys) > 0 && rng.Float64() < dupFrac {
			k = keys[rng.IntN(len(keys))]
		} else {
			// Variable lengths, shared prefixes: exercise the prefix compare.
			k = fmt.Appendf(nil, "k%0*d", 1+rng.IntN(12), rng.Uint64N(1<<40))
			keys = append(keys, k)
		}
		v := fmt.Appendf(nil, "v-%d-%x", i, rng.Uint64())
		in = append(in, inputPair{bucket: int(sha256.Sum256(k)[0]) % nb, k: k, v: v})
	}
	last := make([]map[string][]byte, nb)
	total := make([]int64, nb)
	for i := range last {
		last[i] = map[string][]byte{}
	}
	for _, p := range in {
		last[p.bucket][string(p.k)] = p.v
		total[p.bucket]++
	}
	want := make([][]pair, nb)
	dups := make([]int64, nb)
	for b := range last {
		for k, v := range last[b] {
			want[b] = append(want[b], pair{[]byte(k), v})
		}
		slices.SortFunc(want[b], func(x, y pair) int { return bytes.Compare(x.k, y.k) })
		dups[b] = total[b] - int64(len(want[b]))
	}
	return in, want, dups
}

func feedPairs(t *testing.T, b *Builder, in []inputPair) {
	t.Helper()
	for _, p := range in {
		if err := b.AddPair(t.Context(), p.bucket, p.k, p.v); err != nil {
			t.Fatal(err)
		}
	}
}

func equalPairs(t *testing.T, bucket int, got, want []pair) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("bucket %d: %d pairs, want %d", bucket, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].k, want[i].k) || !bytes.Equal(got[i].v, want[i].v) {
			t.Fatalf("bucket %d pair %d: got %q=%q, want %q=%q", bucket, i, got[i].k, got[i].v, want[i].k, want[i].v)
		}
	}
}

// dirEntries lists what is left under dir (for temp-file leak checks).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
