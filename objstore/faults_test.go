package objstore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var errBoom = errors.New("boom")

// withFaults wraps s's bucket in Faults and returns a store over it.
func withFaults(s *Store) (*Faults, *Store) {
	f := NewFaults(s.Bucket())
	return f, New(f, s.Base())
}

func TestFaultsFailNth(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		f, fs := withFaults(s)
		mustPut(t, fs, "a", []byte("a")) // put #1, before arming
		f.FailNth(OpPut, 2, errBoom)     // fails put #3 overall
		f.FailNth(OpStat, 1, errBoom)
		for i, key := range []string{"b", "c", "d"} {
			err := f.Put(ctx, key, strings.NewReader(key), false)
			if fail := i == 1; errors.Is(err, errBoom) != fail || (!fail && err != nil) {
				t.Errorf("put %d (%q): %v, want failure %v", i+2, key, err, fail)
			}
		}
		if _, err := s.Stat(ctx, "c"); !errors.Is(err, ErrNotFound) {
			t.Errorf("the failed put reached the inner bucket: stat = %v", err)
		}
		if _, err := fs.Stat(ctx, "a"); !errors.Is(err, errBoom) {
			t.Errorf("stat #1: %v, want errBoom", err)
		}
		if _, err := fs.Stat(ctx, "a"); err != nil {
			t.Errorf("stat #2: %v, want success", err)
		}
		if got, want := f.Calls(OpPut), 4; got != want {
			t.Errorf("Calls(put) = %d, want %d", got, want)
		}
		if got, want := f.Calls(OpStat), 2; got != want {
			t.Errorf("Calls(stat) = %d, want %d", got, want)
		}

		// Counting restarts at registration, for every op.
		f.FailNth(OpOpen, 2, errBoom)
		f.FailNth(OpList, 1, errBoom)
		f.FailNth(OpDelete, 1, errBoom)
		if _, err := fs.Get(ctx, "a"); err != nil {
			t.Errorf("open #1: %v", err)
		}
		if _, err := fs.Get(ctx, "a"); !errors.Is(err, errBoom) {
			t.Errorf("open #2: %v, want errBoom", err)
		}
		for _, err := range fs.List(ctx, "") {
			if !errors.Is(err, errBoom) {
				t.Errorf("list #1: %v, want errBoom", err)
			}
		}
		if got := listKeys(t, fs, ""); len(got) != 3 {
			t.Errorf("list #2 = %q, want a b d", got)
		}
		if err := fs.Delete(ctx, "a"); !errors.Is(err, errBoom) {
			t.Errorf("delete #1: %v, want errBoom", err)
		}
		if err := fs.Delete(ctx, "a"); err != nil {
			t.Errorf("delete #2: %v", err)
		}

		f.Reset()
		if f.Calls(OpPut) != 0 || f.Calls(OpOpen) != 0 {
			t.Errorf("Reset kept counts: put %d open %d", f.Calls(OpPut), f.Calls(OpOpen))
		}
		f.FailNth(OpPut, 1, errBoom)
		f.Reset()
		if err := f.Put(ctx, "e", strings.NewReader("e"), false); err != nil {
			t.Errorf("put after Reset: %v", err)
		}
	})
}

func TestFaultsFailKey(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		f, fs := withFaults(s)
		mustPut(t, fs, "kv/_METADATA", []byte("m"))
		isMeta := func(k string) bool { return strings.HasSuffix(k, "_METADATA") }
		f.FailKey(OpPut, isMeta, errBoom)
		f.FailKey(OpOpen, isMeta, errBoom)
		for range 2 {
			if _, err := fs.PutIfAbsent(ctx, "kv/x/_METADATA", BytesSource([]byte("m"))); !errors.Is(err, errBoom) {
				t.Errorf("put matching key: %v, want errBoom", err)
			}
			if _, err := fs.Get(ctx, "kv/_METADATA"); !errors.Is(err, errBoom) {
				t.Errorf("open matching key: %v, want errBoom", err)
			}
		}
		if _, err := fs.PutIfAbsent(ctx, "kv/data", BytesSource([]byte("d"))); err != nil {
			t.Errorf("put other key: %v", err)
		}
		if _, err := fs.Stat(ctx, "kv/_METADATA"); err != nil {
			t.Errorf("stat is not armed: %v", err)
		}
		f.FailKey(OpList, func(p string) bool { return p == "kv/" }, errBoom)
		for _, err := range fs.List(ctx, "kv/") {
			if !errors.Is(err, errBoom) {
				t.Errorf("list kv/: %v, want errBoom", err)
			}
		}
		if got := listKeys(t, fs, "kv/d"); len(got) != 1 {
			t.Errorf("list kv/d = %q", got)
		}
	})
}

func TestFaultsTruncateWrite(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		tmp := t.TempDir() // where fileblob stages its temporary files
		t.Setenv("TMPDIR", tmp)
		f, fs := withFaults(s)
		data := bytes.Repeat([]byte("abcdefgh"), 1<<15) // 256 KiB
		f.TruncateWrite(func(k string) bool { return strings.HasPrefix(k, "torn/") }, 1000)
		for _, tc := range []struct {
			key  string
			data []byte
		}{{"torn/big", data}, {"torn/small", []byte("shorter than the cut")}} {
			_, err := fs.PutIfAbsent(ctx, tc.key, BytesSource(tc.data))
			if !errors.Is(err, ErrInjected) {
				t.Errorf("put %q: %v, want ErrInjected", tc.key, err)
			}
			if _, err := s.Stat(ctx, tc.key); !errors.Is(err, ErrNotFound) {
				t.Errorf("torn write of %q left an object: stat = %v", tc.key, err)
			}
		}
		if got := listKeys(t, s, ""); len(got) != 0 {
			t.Errorf("objects after torn writes: %q", got)
		}
		if dir := s.Bucket().(*gcBucket).dir; dir != "" {
			assertNoFiles(t, dir)
		}
		assertNoFiles(t, tmp)
		if _, err := fs.PutIfAbsent(ctx, "whole", BytesSource(data)); err != nil {
			t.Errorf("unmatched key: %v", err)
		}
		// A torn write to a taken key never starts: the result is ErrExists,
		// which PutIfAbsent resolves by comparing.
		mustPut(t, s, "torn/taken", data)
		if obj, err := fs.PutIfAbsent(ctx, "torn/taken", BytesSource(data)); err != nil || !obj.Adopted {
			t.Errorf("torn write to an identical existing object: %+v, %v; want adopted", obj, err)
		}
	})
}

// assertNoFiles fails if dir holds any regular file (temporary files
// included); empty directories are allowed.
func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("file left behind: %s", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFaultsCorruptRead(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		f, fs := withFaults(s)
		data := []byte("snapshot file contents")
		obj, err := fs.PutIfAbsent(ctx, "kv/f", BytesSource(data))
		if err != nil {
			t.Fatal(err)
		}
		f.CorruptRead(func(k string) bool { return k == "kv/f" })
		got, err := fs.Get(ctx, "kv/f")
		if err != nil || len(got) != len(data) || bytes.Equal(got, data) || !bytes.Equal(got[1:], data[1:]) {
			t.Errorf("corrupt read = %q, %v; want one flipped byte", got, err)
		}
		rc, err := fs.OpenVerified(ctx, "kv/f", obj.Size, obj.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(rc); !errors.Is(err, ErrIntegrity) {
			t.Errorf("verified read of corrupt data: %v, want ErrIntegrity", err)
		}
		if err := rc.Close(); err != nil {
			t.Error(err)
		}
		// The stored object is intact, and a corrupted comparison read makes
		// PutIfAbsent refuse to adopt.
		if got := mustGet(t, s, "kv/f"); !bytes.Equal(got, data) {
			t.Errorf("stored object changed: %q", got)
		}
		if _, err := fs.PutIfAbsent(ctx, "kv/f", BytesSource(data)); !errors.Is(err, ErrConflict) {
			t.Errorf("adopt through corrupt read: %v, want ErrConflict", err)
		}
	})
}

func TestFaultsConcurrent(t *testing.T) {
	s := drivers[1].open(t) // mem
	f, fs := withFaults(s)
	f.FailNth(OpPut, 50, errBoom)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range 100 {
		wg.Go(func() {
			_, err := fs.PutIfAbsent(t.Context(), "k", BytesSource([]byte("v")))
			if errors.Is(err, errBoom) {
				mu.Lock()
				failed++
				mu.Unlock()
			} else if err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if failed != 1 || f.Calls(OpPut) != 100 {
		t.Errorf("failed %d of %d puts, want exactly 1 of 100", failed, f.Calls(OpPut))
	}
}
