package objstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// writeLocal writes data to a new file under dir and returns its path and
// hex SHA-256.
func writeLocal(t *testing.T, dir, name string, data []byte) (string, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return p, hex.EncodeToString(s[:])
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestPutFile: the PutIfAbsent contract for files of known digest, on every
// driver: store, adopt identical, conflict on different, and a file that
// does not match the given size or digest stores nothing.
func TestPutFile(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		ctx := t.Context()
		dir := t.TempDir()
		data := bytes.Repeat([]byte("thaw putfile "), 10000)
		p, sum := writeLocal(t, dir, "a", data)

		obj, err := s.PutFile(ctx, "d/a.sst", p, int64(len(data)), sum)
		if err != nil {
			t.Fatal(err)
		}
		if obj.Adopted || obj.Size != int64(len(data)) || obj.SHA256 != sum || obj.Key != "d/a.sst" {
			t.Fatalf("object %+v", obj)
		}
		if got, err := s.Get(ctx, "d/a.sst"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get: %d bytes, %v", len(got), err)
		}
		// The local file may go away: the object stays.
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "d/a.sst"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get after removing the local file: %d bytes, %v", len(got), err)
		}

		// Same bytes again (from another file): adopted. Uppercase hex is accepted.
		p2, _ := writeLocal(t, dir, "a2", data)
		obj, err = s.PutFile(ctx, "d/a.sst", p2, int64(len(data)), string(bytes.ToUpper([]byte(sum))))
		if err != nil || !obj.Adopted || obj.SHA256 != sum {
			t.Fatalf("identical: %+v, %v", obj, err)
		}

		// Different bytes, same size and different size: conflict, object unchanged.
		other := bytes.Clone(data)
		other[5] ^= 1
		p3, sum3 := writeLocal(t, dir, "b", other)
		if _, err := s.PutFile(ctx, "d/a.sst", p3, int64(len(other)), sum3); !errors.Is(err, ErrConflict) {
			t.Fatalf("different bytes: %v, want ErrConflict", err)
		}
		p4, sum4 := writeLocal(t, dir, "c", data[:100])
		if _, err := s.PutFile(ctx, "d/a.sst", p4, 100, sum4); !errors.Is(err, ErrConflict) {
			t.Fatalf("different size: %v, want ErrConflict", err)
		}
		if got, err := s.Get(ctx, "d/a.sst"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("object changed: %v", err)
		}

		// The file does not match what the caller says: nothing is stored.
		if _, err := s.PutFile(ctx, "d/bad-digest", p3, int64(len(other)), sum); !errors.Is(err, ErrIntegrity) {
			t.Fatalf("wrong digest: %v, want ErrIntegrity", err)
		}
		if _, err := s.PutFile(ctx, "d/bad-size", p3, int64(len(other))+1, sum3); !errors.Is(err, ErrIntegrity) {
			t.Fatalf("wrong size: %v, want ErrIntegrity", err)
		}
		for _, k := range []string{"d/bad-digest", "d/bad-size"} {
			if _, err := s.Stat(ctx, k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: stat %v, want ErrNotFound", k, err)
			}
		}

		// Empty file; missing file; bad arguments.
		pe, sume := writeLocal(t, dir, "empty", nil)
		if obj, err := s.PutFile(ctx, "d/empty", pe, 0, sume); err != nil || obj.Size != 0 {
			t.Fatalf("empty: %+v, %v", obj, err)
		}
		if _, err := s.PutFile(ctx, "d/missing", filepath.Join(dir, "nope"), 0, sume); err == nil || errors.Is(err, ErrIntegrity) {
			t.Fatalf("missing file: %v", err)
		}
		if _, err := s.PutFile(ctx, "d/x", p2, int64(len(data)), "xyz"); err == nil {
			t.Fatal("bad digest accepted")
		}
		if _, err := s.PutFile(ctx, "/bad", p2, int64(len(data)), sum); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("bad key: %v", err)
		}
		if _, err := s.PutFile(ctx, "d/dir", dir, 0, sume); err == nil {
			t.Fatal("a directory was stored")
		}
	})
}

func objectPath(t *testing.T, s *Store, key string) string {
	t.Helper()
	b, ok := s.Bucket().(*gcBucket)
	if !ok || b.dir == "" {
		t.Fatal("not a file:// store")
	}
	return filepath.Join(b.dir, filepath.FromSlash(b.prefix+key))
}

// TestPutFileLinks: on file:// with the file on the same file system the
// object is the file (a hard link), not a copy.
func TestPutFileLinks(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote/pfx")
	data := bytes.Repeat([]byte{7}, 100000)
	p, sum := writeLocal(t, root, "local", data)
	if _, err := s.PutFile(t.Context(), "x/y/z", p, int64(len(data)), sum); err != nil {
		t.Fatal(err)
	}
	li, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	oi, err := os.Stat(objectPath(t, s, "x/y/z"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(li, oi) {
		t.Fatal("object is a copy, want a hard link to the local file")
	}
	// List sees exactly the object, and nothing else (no temp files).
	var keys []string
	for a, err := range s.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, a.Key)
	}
	if len(keys) != 1 || keys[0] != "x/y/z" {
		t.Fatalf("list: %v", keys)
	}
}

// TestPutFileLinkFallback: when linking fails because of the file system
// (another device, no hard links), PutFile copies (staging the copy in the
// store and renaming it into place); other link errors are errors.
func TestPutFileLinkFallback(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EXDEV, syscall.EPERM, syscall.EMLINK} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := t.TempDir()
			s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
			links := 0
			s.Bucket().(*gcBucket).link = func(o, n string) error {
				links++
				return &os.LinkError{Op: "link", Old: o, New: n, Err: errno}
			}
			data := bytes.Repeat([]byte{9}, 50000)
			p, sum := writeLocal(t, root, "local", data)
			obj, err := s.PutFile(t.Context(), "k", p, int64(len(data)), sum)
			if err != nil || obj.Adopted || obj.SHA256 != sum {
				t.Fatalf("%+v, %v", obj, err)
			}
			if links != 2 { // the local file, then the copy staged in the store
				t.Fatalf("%d link attempts", links)
			}
			li, _ := os.Stat(p)
			oi, err := os.Stat(objectPath(t, s, "k"))
			if err != nil || os.SameFile(li, oi) {
				t.Fatalf("want a copy: %v", err)
			}
			if got, err := s.Get(t.Context(), "k"); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("get: %v", err)
			}
			// Adopt and conflict on the copy path too.
			if obj, err := s.PutFile(t.Context(), "k", p, int64(len(data)), sum); err != nil || !obj.Adopted {
				t.Fatalf("identical: %+v, %v", obj, err)
			}
			p2, sum2 := writeLocal(t, root, "other", data[1:])
			if _, err := s.PutFile(t.Context(), "k", p2, int64(len(data)-1), sum2); !errors.Is(err, ErrConflict) {
				t.Fatalf("different: %v", err)
			}
			// A file that does not match its digest is not copied either.
			if _, err := s.PutFile(t.Context(), "k2", p2, int64(len(data)-1), sum); !errors.Is(err, ErrIntegrity) {
				t.Fatalf("wrong digest: %v", err)
			}
			if _, err := s.Stat(t.Context(), "k2"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("k2: %v", err)
			}
		})
	}
	t.Run("other-error", func(t *testing.T) {
		root := t.TempDir()
		s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
		s.Bucket().(*gcBucket).link = func(o, n string) error {
			return &os.LinkError{Op: "link", Old: o, New: n, Err: syscall.EIO}
		}
		p, sum := writeLocal(t, root, "local", []byte("x"))
		if _, err := s.PutFile(t.Context(), "k", p, 1, sum); !errors.Is(err, syscall.EIO) {
			t.Fatalf("%v, want EIO", err)
		}
		if _, err := s.Stat(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("stat: %v", err)
		}
	})
	t.Run("sidecars", func(t *testing.T) {
		// With metadata sidecars an object is more than its file: copy.
		root := t.TempDir()
		s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote?metadata=")
		if s.Bucket().(*gcBucket).canLink() {
			t.Fatal("a bucket with sidecars links")
		}
		p, sum := writeLocal(t, root, "local", []byte("sidecar"))
		if _, err := s.PutFile(t.Context(), "k", p, 7, sum); err != nil {
			t.Fatal(err)
		}
		li, _ := os.Stat(p)
		if oi, err := os.Stat(objectPath(t, s, "k")); err != nil || os.SameFile(li, oi) {
			t.Fatalf("want a copy: %v", err)
		}
	})
}

// TestPutFileFaults: fault injection covers the link path: a failed put
// stores nothing, a torn write is a copy that fails, and the calls count as
// puts.
func TestPutFileFaults(t *testing.T) {
	root := t.TempDir()
	u := "file://" + filepath.ToSlash(root) + "/remote"
	b, err := OpenBucket(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFaults(b)
	s := New(f, u)
	defer s.Close()
	data := bytes.Repeat([]byte{3}, 40000)
	p, sum := writeLocal(t, root, "local", data)

	f.FailNth(OpPut, 1, ErrInjected)
	if _, err := s.PutFile(t.Context(), "a", p, int64(len(data)), sum); !errors.Is(err, ErrInjected) {
		t.Fatalf("%v, want ErrInjected", err)
	}
	if _, err := s.Stat(t.Context(), "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed put left an object: %v", err)
	}
	f.TruncateWrite(func(k string) bool { return k == "b" }, 1000)
	if _, err := s.PutFile(t.Context(), "b", p, int64(len(data)), sum); !errors.Is(err, ErrInjected) {
		t.Fatalf("torn: %v, want ErrInjected", err)
	}
	if _, err := s.Stat(t.Context(), "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("torn put left an object: %v", err)
	}
	if _, err := s.PutFile(t.Context(), "c", p, int64(len(data)), sum); err != nil {
		t.Fatal(err)
	}
	li, _ := os.Stat(p)
	if oi, err := os.Stat(filepath.Join(root, "remote", "c")); err != nil || !os.SameFile(li, oi) {
		t.Fatalf("through Faults the object is not linked: %v", err)
	}
	if n := f.Calls(OpPut); n != 3 {
		t.Fatalf("%d puts counted, want 3", n)
	}
}

// TestConcurrentPutFile: writers racing on one key with different files
// (linking on file://, copying elsewhere): exactly one wins, the others
// adopt (same bytes) or conflict (different bytes), and the object is
// whole.
func TestConcurrentPutFile(t *testing.T) {
	forEachDriver(t, func(t *testing.T, s *Store) {
		dir := t.TempDir()
		const n = 8
		paths, sums := make([]string, n), make([]string, n)
		datas := make([][]byte, n)
		for i := range n {
			datas[i] = bytes.Repeat([]byte{byte(i % 2)}, 64<<10)
			paths[i], sums[i] = writeLocal(t, dir, string(rune('a'+i)), datas[i])
		}
		var wg sync.WaitGroup
		objs, errs := make([]Object, n), make([]error, n)
		for i := range n {
			wg.Go(func() {
				objs[i], errs[i] = s.PutFile(t.Context(), "race", paths[i], int64(len(datas[i])), sums[i])
			})
		}
		wg.Wait()
		got, err := s.Get(t.Context(), "race")
		if err != nil {
			t.Fatal(err)
		}
		written := 0
		for i := range n {
			same := hexSum(got) == sums[i]
			switch {
			case errs[i] == nil && !objs[i].Adopted:
				written++
				if !same {
					t.Fatalf("writer %d won but the object holds other bytes", i)
				}
			case errs[i] == nil:
				if !same {
					t.Fatalf("writer %d adopted other bytes", i)
				}
			case errors.Is(errs[i], ErrConflict):
				if same {
					t.Fatalf("writer %d: conflict with identical bytes", i)
				}
			default:
				t.Fatalf("writer %d: %v", i, errs[i])
			}
		}
		if written != 1 {
			t.Fatalf("%d writers wrote, want 1", written)
		}
	})
}
