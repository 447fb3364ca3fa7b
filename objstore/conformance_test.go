package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/thawdb/thaw/internal/testvgw"
)

// driver opens a fresh, empty store of one kind.
type driver struct {
	name string
	open func(t *testing.T) *Store
}

var drivers = []driver{
	{"file", func(t *testing.T) *Store {
		return openStore(t, "file://"+filepath.ToSlash(t.TempDir())+"/remote")
	}},
	{"mem", func(t *testing.T) *Store {
		return openStore(t, "mem://"+memName(t)+"/remote")
	}},
	{"s3", func(t *testing.T) *Store {
		return openStore(t, s3URL(t, newS3(t), "bkt", "remote"))
	}},
}

// forEachDriver runs test once per driver against a fresh store.
func forEachDriver(t *testing.T, test func(t *testing.T, s *Store)) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) { test(t, d.open(t)) })
	}
}

func openStore(t *testing.T, u string) *Store {
	t.Helper()
	s, err := Open(t.Context(), u)
	if err != nil {
		t.Fatalf("Open(%q): %v", u, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

var memSeq atomic.Int64

// memName is a mem:// bucket name no other test (or -count run) uses.
func memName(t *testing.T) string {
	name := strings.NewReplacer("/", "-", "#", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("%s-%d", name, memSeq.Add(1))
}

// newS3 starts an in-process S3 (gofakes3 on s3mem) with bucket "bkt" and
// points the AWS SDK's default credential chain at static test keys.
func newS3(t *testing.T) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	testvgw.StaticCredentials(t, "test", "test")
	return srv.URL
}

func s3URL(t *testing.T, endpoint, bucket, prefix string) string {
	q := url.Values{"endpoint": {endpoint}, "region": {"us-east-1"}, "use_path_style": {"true"}}
	return "s3://" + bucket + "/" + prefix + "?" + q.Encode()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustPut(t *testing.T, s *Store, key string, data []byte) {
	t.Helper()
	if err := s.Bucket().Put(t.Context(), key, bytes.NewReader(data), false); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func mustGet(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	b, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return b
}

func listKeys(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	var keys []string
	for a, err := range s.List(t.Context(), prefix) {
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		keys = append(keys, a.Key)
	}
	return keys
}

func TestBasicOps(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		objs := map[string][]byte{
			"kv/db/t-1/0/snap-1/000001.sst": []byte("sst one"),
			"kv/db/t-1/0/snap-1/_METADATA":  []byte(`{"version":1}`),
			"kv/db/t-1/1/snap-1/_METADATA":  []byte("m"),
			"kv/db/t-10/0/x":                {},
			"other":                         []byte("o"),
		}
		for k, v := range objs {
			mustPut(t, s, k, v)
		}
		for k, v := range objs {
			if got := mustGet(t, s, k); !bytes.Equal(got, v) {
				t.Errorf("get %q = %q, want %q", k, got, v)
			}
			a, err := s.Stat(ctx, k)
			if err != nil || a.Key != k || a.Size != int64(len(v)) || a.ModTime.IsZero() {
				t.Errorf("stat %q = %+v, %v; want size %d", k, a, err, len(v))
			}
		}
		if got, want := listKeys(t, s, "kv/db/t-1/"), []string{
			"kv/db/t-1/0/snap-1/000001.sst", "kv/db/t-1/0/snap-1/_METADATA", "kv/db/t-1/1/snap-1/_METADATA",
		}; !slices.Equal(got, want) {
			t.Errorf("list kv/db/t-1/ = %q, want %q", got, want)
		}
		if got := listKeys(t, s, ""); len(got) != len(objs) {
			t.Errorf("list all = %q, want %d keys", got, len(objs))
		}
		if got := listKeys(t, s, "nope/"); len(got) != 0 {
			t.Errorf("list nope/ = %q, want none", got)
		}
		for a, err := range s.List(ctx, "kv/db/t-1/1/") {
			if err != nil || a.Size != 1 {
				t.Errorf("list attrs = %+v, %v; want size 1", a, err)
			}
		}

		rc, err := s.Bucket().Open(ctx, "kv/db/t-1/0/snap-1/000001.sst", 4, 3)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(rc); err != nil || string(b) != "one" {
			t.Errorf("range read = %q, %v; want \"one\"", b, err)
		}
		if err := rc.Close(); err != nil {
			t.Error(err)
		}

		mustPut(t, s, "other", []byte("replaced")) // plain Put overwrites
		if got := mustGet(t, s, "other"); string(got) != "replaced" {
			t.Errorf("after overwrite get = %q", got)
		}

		if err := s.Delete(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "other"); !errors.Is(err, ErrNotFound) {
			t.Errorf("get deleted: %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "other"); !errors.Is(err, ErrNotFound) {
			t.Errorf("stat deleted: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "other"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete deleted: %v, want ErrNotFound", err)
		}
		// A key that names a directory on file:// (left by a deleted
		// object, or holding objects) is no object: file:// removed an
		// empty one and answered nil.
		if _, err := s.PutIfAbsent(ctx, "dir/a", BytesSource([]byte("a"))); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "dir"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete of a key under which an object lies: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "dir/a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "dir"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete of a key under which an object lay: %v, want ErrNotFound", err)
		}
		if _, err := s.OpenVerified(ctx, "other", 1, sha([]byte("o"))); !errors.Is(err, ErrNotFound) {
			t.Errorf("open verified deleted: %v, want ErrNotFound", err)
		}
		if got := listKeys(t, s, "oth"); len(got) != 0 {
			t.Errorf("list after delete = %q", got)
		}
	})
}

func TestInvalidKeys(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		for _, k := range []string{"", "/a", "a/", "a//b", "a/../b", "./a", "a../b", "a/b..", "a.attrs", "a?b", "a#b", "a\x00b", `a\b`} {
			if err := s.Bucket().Put(ctx, k, strings.NewReader("x"), false); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.PutIfAbsent(ctx, k, BytesSource([]byte("x"))); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("PutIfAbsent %q: %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.Stat(ctx, k); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("stat %q: %v, want ErrInvalidKey", k, err)
			}
		}
	})
}

func TestPutIfAbsent(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		data := bytes.Repeat([]byte("thaw snapshot bytes "), 1000)
		obj, err := s.PutIfAbsent(ctx, "kv/a", BytesSource(data))
		if err != nil {
			t.Fatal(err)
		}
		if want := (Object{Key: "kv/a", Size: int64(len(data)), SHA256: sha(data)}); obj != want {
			t.Errorf("new: %+v, want %+v", obj, want)
		}
		if got := mustGet(t, s, "kv/a"); !bytes.Equal(got, data) {
			t.Error("new: stored bytes differ")
		}

		path := filepath.Join(t.TempDir(), "src")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		obj, err = s.PutIfAbsent(ctx, "kv/a", FileSource(path))
		if err != nil {
			t.Fatalf("adopt: %v", err)
		}
		if want := (Object{Key: "kv/a", Size: int64(len(data)), SHA256: sha(data), Adopted: true}); obj != want {
			t.Errorf("adopt: %+v, want %+v", obj, want)
		}

		same := bytes.Clone(data)
		same[len(same)-1] ^= 1
		_, err = s.PutIfAbsent(ctx, "kv/a", BytesSource(same))
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("same size, other bytes: %v, want ErrConflict", err)
		}
		for _, want := range []string{`"kv/a"`, sha(data), sha(same), fmt.Sprint(len(data))} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("conflict message %q lacks %q", err, want)
			}
		}
		_, err = s.PutIfAbsent(ctx, "kv/a", BytesSource([]byte("short")))
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("other size: %v, want ErrConflict", err)
		}
		for _, want := range []string{`"kv/a"`, sha([]byte("short")), fmt.Sprint(len(data)), " 5 "} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("conflict message %q lacks %q", err, want)
			}
		}
		if got := mustGet(t, s, "kv/a"); !bytes.Equal(got, data) {
			t.Error("a conflicting PutIfAbsent changed the object")
		}

		empty, err := s.PutIfAbsent(ctx, "kv/empty", BytesSource(nil))
		if err != nil || empty.Size != 0 || empty.SHA256 != sha(nil) {
			t.Errorf("empty object: %+v, %v", empty, err)
		}
		if _, err := s.PutIfAbsent(ctx, "kv/b", FileSource(filepath.Join(t.TempDir(), "missing"))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing source file: %v, want os.ErrNotExist", err)
		}
	})
}

// raceReader creates the object itself just before it reports EOF, so the
// key is absent when Put checks and taken when the upload commits: this
// exercises the driver's own if-not-exist, not Put's early check.
type raceReader struct {
	r      io.Reader
	create func()
	once   sync.Once
}

func (r *raceReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		r.once.Do(r.create)
	}
	return n, err
}

func TestIfNotExistAtCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		winner, loser := []byte("first writer"), []byte("second writer, different bytes")
		r := &raceReader{r: bytes.NewReader(loser), create: func() { mustPut(t, s, "k", winner) }}
		if err := s.Bucket().Put(ctx, "k", r, true); !errors.Is(err, ErrExists) {
			t.Errorf("put: %v, want ErrExists", err)
		}
		if got := mustGet(t, s, "k"); !bytes.Equal(got, winner) {
			t.Errorf("object = %q, want the first writer's %q", got, winner)
		}

		// The same race through PutIfAbsent: identical bytes are adopted
		// from the digest computed while streaming.
		r = &raceReader{r: bytes.NewReader(winner), create: func() { mustPut(t, s, "k2", winner) }}
		src := sourceFunc(func() (io.ReadCloser, error) { return io.NopCloser(r), nil })
		obj, err := s.PutIfAbsent(ctx, "k2", src)
		if err != nil || !obj.Adopted || obj.SHA256 != sha(winner) {
			t.Errorf("PutIfAbsent after commit race: %+v, %v; want adopted", obj, err)
		}
	})
}

func TestConcurrentPutIfAbsent(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		const n = 8
		data := bytes.Repeat([]byte("x"), 64<<10)
		var wg sync.WaitGroup
		objs, errs := make([]Object, n), make([]error, n)
		for i := range n {
			wg.Go(func() { objs[i], errs[i] = s.PutIfAbsent(t.Context(), "same", BytesSource(data)) })
		}
		wg.Wait()
		written := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("writer %d: %v", i, errs[i])
			}
			if objs[i].SHA256 != sha(data) || objs[i].Size != int64(len(data)) {
				t.Errorf("writer %d: %+v", i, objs[i])
			}
			if !objs[i].Adopted {
				written++
			}
		}
		if written != 1 {
			t.Errorf("%d writers wrote, want exactly 1 (the others adopt)", written)
		}

		// Different contents: one wins, every other gets ErrConflict, and
		// the object holds the winner's bytes.
		for i := range n {
			wg.Go(func() {
				objs[i], errs[i] = s.PutIfAbsent(t.Context(), "contested", BytesSource(fmt.Appendf(nil, "writer %d", i)))
			})
		}
		wg.Wait()
		winner := -1
		for i := range n {
			switch {
			case errs[i] == nil && winner == -1 && !objs[i].Adopted:
				winner = i
			case errors.Is(errs[i], ErrConflict):
			default:
				t.Errorf("writer %d: %+v, %v", i, objs[i], errs[i])
			}
		}
		if winner < 0 {
			t.Fatal("no writer won")
		}
		if got, want := mustGet(t, s, "contested"), fmt.Sprintf("writer %d", winner); string(got) != want {
			t.Errorf("object = %q, want the winner's %q", got, want)
		}
	})
}

func TestOpenVerified(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		data := bytes.Repeat([]byte("0123456789"), 10000)
		mustPut(t, s, "obj", data)
		read := func(size int64, sum string) ([]byte, error) {
			rc, err := s.OpenVerified(ctx, "obj", size, sum)
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(rc)
			if cerr := rc.Close(); cerr != nil {
				t.Errorf("close: %v", cerr)
			}
			return b, err
		}
		if got, err := read(int64(len(data)), sha(data)); err != nil || !bytes.Equal(got, data) {
			t.Errorf("matching: %d bytes, %v", len(got), err)
		}
		if _, err := read(int64(len(data)), strings.ToUpper(sha(data))); err != nil {
			t.Errorf("upper-case digest: %v", err)
		}
		if _, err := read(int64(len(data))+1, sha(data)); !errors.Is(err, ErrIntegrity) {
			t.Errorf("object shorter than expected: %v, want ErrIntegrity", err)
		}
		got, err := read(int64(len(data))-1, sha(data))
		if !errors.Is(err, ErrIntegrity) {
			t.Errorf("object longer than expected: %v, want ErrIntegrity", err)
		}
		if len(got) > len(data)-1 {
			t.Errorf("overflowing read returned %d bytes, more than the %d expected", len(got), len(data)-1)
		}
		if _, err := read(int64(len(data)), sha([]byte("other"))); !errors.Is(err, ErrIntegrity) {
			t.Errorf("digest mismatch: %v, want ErrIntegrity", err)
		}
		for _, bad := range []string{"", "xyz", sha(data)[:10]} {
			if _, err := s.OpenVerified(ctx, "obj", 1, bad); err == nil {
				t.Errorf("sha256 %q accepted", bad)
			}
		}
	})
}

func TestKeyURIMapping(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		base := s.Base()
		if strings.ContainsAny(base, "?#") || strings.HasSuffix(base, "/") || !strings.HasSuffix(base, "/remote") {
			t.Fatalf("base %q: want no query, no trailing slash, ending in /remote", base)
		}
		key := "kv/db/t-7/2024$eu-p3/0/snap-9/000001.sst"
		uri := s.URI(key)
		if uri != base+"/"+key {
			t.Errorf("URI = %q", uri)
		}
		if got, err := s.Key(uri); err != nil || got != key {
			t.Errorf("Key(URI(k)) = %q, %v", got, err)
		}
		u, _ := url.Parse(base)
		outside := []string{
			base,
			base + "/",
			base + "-other/kv/x",
			strings.TrimSuffix(base, "/remote") + "/kv/x",
			"gs" + strings.TrimPrefix(base, u.Scheme) + "/kv/x",
			strings.Replace(base, "://"+u.Host, "://elsewhere", 1) + "/kv/x",
			base + "/kv/../x",
			base + "/kv//x",
			base + "/kv/x/",
			base + "/./x",
			base + "/kv/x?versionId=1",
			"",
		}
		for _, o := range outside {
			if _, err := s.Key(o); !errors.Is(err, ErrOutsideStore) {
				t.Errorf("Key(%q): %v, want ErrOutsideStore", o, err)
			}
		}
		// The mapping addresses the real object.
		mustPut(t, s, key, []byte("v"))
		k, err := s.Key(s.URI(key))
		if err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, s, k); string(got) != "v" {
			t.Errorf("get via uri = %q", got)
		}
	})
}

func TestFailedPutLeavesNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx, cancel := context.WithCancel(t.Context())
		r := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), readerFunc(func([]byte) (int, error) {
			cancel()
			return 0, context.Canceled
		}))
		if err := s.Bucket().Put(ctx, "kv/cancelled", r, false); !errors.Is(err, context.Canceled) {
			t.Errorf("put: %v, want context.Canceled", err)
		}
		if _, err := s.Stat(t.Context(), "kv/cancelled"); !errors.Is(err, ErrNotFound) {
			t.Errorf("stat after failed put: %v, want ErrNotFound", err)
		}
		if got := listKeys(t, s, ""); len(got) != 0 {
			t.Errorf("objects after failed put: %q", got)
		}
	})
}

func TestPutInvisibleUntilDone(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		checked := false
		r := io.MultiReader(strings.NewReader("first half, "), readerFunc(func([]byte) (int, error) {
			if _, err := s.Stat(t.Context(), "kv/in-flight"); !errors.Is(err, ErrNotFound) {
				t.Errorf("stat during put: %v, want ErrNotFound", err)
			}
			if got := listKeys(t, s, ""); len(got) != 0 {
				t.Errorf("list during put = %q, want nothing", got)
			}
			checked = true
			return 0, io.EOF
		}), strings.NewReader("second half"))
		if err := s.Bucket().Put(t.Context(), "kv/in-flight", r, true); err != nil {
			t.Fatal(err)
		}
		if !checked {
			t.Fatal("the check never ran")
		}
		if got := mustGet(t, s, "kv/in-flight"); string(got) != "first half, second half" {
			t.Errorf("object = %q", got)
		}
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestIfNotExistManyWriters races writers of different bytes on many keys
// through Bucket.Put: exactly one may succeed per key, and the object must
// hold that writer's bytes. (Without objstore's commit lock, fileblob lets
// several writers succeed: its IfNotExist check and rename are not atomic.)
func TestIfNotExistManyWriters(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		const keys, writers = 60, 8
		var wg sync.WaitGroup
		won := make([][]int, keys)
		var mu sync.Mutex
		for k := range keys {
			for w := range writers {
				wg.Go(func() {
					key, data := fmt.Sprintf("k/%d", k), fmt.Sprintf("writer %d", w)
					err := s.Bucket().Put(t.Context(), key, strings.NewReader(data), true)
					switch {
					case err == nil:
						mu.Lock()
						won[k] = append(won[k], w)
						mu.Unlock()
					case !errors.Is(err, ErrExists):
						t.Errorf("put %s: %v", key, err)
					}
				})
			}
		}
		wg.Wait()
		for k, ws := range won {
			if len(ws) != 1 {
				t.Errorf("key %d: writers %v succeeded, want exactly one", k, ws)
				continue
			}
			if got, want := string(mustGet(t, s, fmt.Sprintf("k/%d", k))), fmt.Sprintf("writer %d", ws[0]); got != want {
				t.Errorf("key %d holds %q, want the winner's %q", k, got, want)
			}
		}
	})
}

// TestLargeObject crosses the S3 transfer manager's 16 MiB multipart
// threshold: streaming digest, adoption and conflict detection must hold
// for multipart uploads too.
func TestLargeObject(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		data := make([]byte, 17<<20)
		for i := range data {
			data[i] = byte(i * 7 / 251)
		}
		obj, err := s.PutIfAbsent(ctx, "big", BytesSource(data))
		if err != nil || obj.Adopted || obj.Size != int64(len(data)) || obj.SHA256 != sha(data) {
			t.Fatalf("new: %+v, %v", obj, err)
		}
		if obj, err := s.PutIfAbsent(ctx, "big", BytesSource(data)); err != nil || !obj.Adopted {
			t.Errorf("adopt: %+v, %v", obj, err)
		}
		other := bytes.Clone(data)
		other[len(other)/2] ^= 1
		if _, err := s.PutIfAbsent(ctx, "big", BytesSource(other)); !errors.Is(err, ErrConflict) {
			t.Errorf("same size, one bit different: %v, want ErrConflict", err)
		}
		rc, err := s.OpenVerified(ctx, "big", obj.Size, obj.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		if err != nil || n != int64(len(data)) {
			t.Errorf("verified read: %d bytes, %v", n, err)
		}
		if err := rc.Close(); err != nil {
			t.Error(err)
		}
	})
}

// TestFileKeyEscaping: keys holding text that reads as an escape sequence
// of gocloud's fileblob ("__0x41__": a table named t__0x41__ makes one) are
// keys like any other, on every driver. On file:// the files the store
// writes, links, locks and reads itself are the ones fileblob reads, lists
// and deletes: each key keeps its own bytes, none aliases another
// ("kv/__0x41__/x" is not "kv/A/x", nor "kv/__0x5f___0x41__/x").
func TestFileKeyEscaping(t *testing.T) {
	keys := []string{
		"kv/A/x",
		"kv/__0x41__/x",
		"kv/__0x5f___0x41__/x",
		"kv/db/t__0x41__-1/0/snap-1/data.sst",
		"kv/__0x-1__/x",
		"kv/__0x__/x",
		"kv/__0xzz__/x",
	}
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		for i, k := range keys {
			data := fmt.Appendf(nil, "object %d", i)
			if i%2 == 0 {
				if _, err := s.PutIfAbsent(ctx, k, BytesSource(data)); err != nil {
					t.Fatalf("put %q: %v", k, err)
				}
			} else {
				p := filepath.Join(t.TempDir(), "f")
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := s.PutFile(ctx, k, p, int64(len(data)), sha(data)); err != nil {
					t.Fatalf("put file %q: %v", k, err)
				}
			}
		}
		for i, k := range keys {
			want := fmt.Appendf(nil, "object %d", i)
			if got := mustGet(t, s, k); !bytes.Equal(got, want) {
				t.Errorf("get %q: %q, want %q", k, got, want)
			}
			if a, err := s.Stat(ctx, k); err != nil || a.Size != int64(len(want)) {
				t.Errorf("stat %q: %+v, %v", k, a, err)
			}
			if obj, err := s.PutIfAbsent(ctx, k, BytesSource(want)); err != nil || !obj.Adopted {
				t.Errorf("put %q again: %+v, %v; want it adopted", k, obj, err)
			}
			dst := filepath.Join(t.TempDir(), "got")
			if _, err := s.GetFile(ctx, k, dst, int64(len(want)), sha(want)); err != nil {
				t.Errorf("get file %q: %v", k, err)
			} else if got, _ := os.ReadFile(dst); !bytes.Equal(got, want) {
				t.Errorf("get file %q: %q, want %q", k, got, want)
			}
		}
		got := listKeys(t, s, "kv/")
		want := slices.Clone(keys)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("list: %q, want %q", got, want)
		}
		for _, k := range keys {
			if err := s.Delete(ctx, k); err != nil {
				t.Errorf("delete %q: %v", k, err)
			}
		}
		if got := listKeys(t, s, "kv/"); len(got) != 0 {
			t.Errorf("after deleting every key: %q", got)
		}
	})
}
