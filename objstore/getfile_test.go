package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noFile fails the test if path exists.
func noFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s exists (or stat failed: %v)", path, err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGetFile: the contract on every driver: a verified copy or link of
// the object at a new path; every failure leaves no file behind.
func TestGetFile(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			s := d.open(t)
			ctx := t.Context()
			dir := t.TempDir()
			data := bytes.Repeat([]byte("thaw getfile "), 30000) // > one 256 KiB buffer
			mustPut(t, s, "d/a.sst", data)
			sum := hexSum(data)
			size := int64(len(data))

			dst := filepath.Join(dir, "a.sst")
			linked, err := s.GetFile(ctx, "d/a.sst", dst, size, sum)
			if err != nil {
				t.Fatal(err)
			}
			if want := d.name == "file"; linked != want {
				t.Fatalf("linked %v, want %v", linked, want)
			}
			if got := readFile(t, dst); !bytes.Equal(got, data) {
				t.Fatalf("dst holds %d bytes, want the object's %d", len(got), len(data))
			}
			// dst exists: refused before and without touching it.
			if _, err := s.GetFile(ctx, "d/a.sst", dst, size, sum); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("existing dst: %v, want fs.ErrExist", err)
			}
			if got := readFile(t, dst); !bytes.Equal(got, data) {
				t.Fatal("existing dst changed")
			}
			// Removing dst leaves the object.
			if err := os.Remove(dst); err != nil {
				t.Fatal(err)
			}
			if got := mustGet(t, s, "d/a.sst"); !bytes.Equal(got, data) {
				t.Fatal("object changed after removing dst")
			}
			// Uppercase hex is accepted.
			if _, err := s.GetFile(ctx, "d/a.sst", filepath.Join(dir, "upper"), size, strings.ToUpper(sum)); err != nil {
				t.Fatalf("uppercase digest: %v", err)
			}

			// Integrity: another digest, a smaller and a larger size.
			other := bytes.Clone(data)
			other[len(other)-1] ^= 1
			for name, c := range map[string]struct {
				size int64
				sha  string
			}{
				"digest":  {size, hexSum(other)},
				"shorter": {size - 1, hexSum(data[:len(data)-1])},
				"longer":  {size + 1, hexSum(append(bytes.Clone(data), 0))},
			} {
				p := filepath.Join(dir, "bad-"+name)
				if _, err := s.GetFile(ctx, "d/a.sst", p, c.size, c.sha); !errors.Is(err, ErrIntegrity) {
					t.Fatalf("%s: %v, want ErrIntegrity", name, err)
				}
				noFile(t, p)
			}

			// Missing object; empty object; bad arguments; cancelled context.
			p := filepath.Join(dir, "missing")
			if _, err := s.GetFile(ctx, "d/missing", p, size, sum); !errors.Is(err, ErrNotFound) {
				t.Fatalf("missing object: %v, want ErrNotFound", err)
			}
			noFile(t, p)
			mustPut(t, s, "d/empty", nil)
			p = filepath.Join(dir, "empty")
			if _, err := s.GetFile(ctx, "d/empty", p, 0, hexSum(nil)); err != nil {
				t.Fatalf("empty: %v", err)
			}
			if got := readFile(t, p); len(got) != 0 {
				t.Fatalf("empty object: %d bytes", len(got))
			}
			if _, err := s.GetFile(ctx, "d/a.sst", filepath.Join(dir, "x"), size, "xyz"); err == nil {
				t.Fatal("bad digest accepted")
			}
			if _, err := s.GetFile(ctx, "/bad", filepath.Join(dir, "x"), size, sum); !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("bad key: %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			p = filepath.Join(dir, "cancelled")
			if _, err := s.GetFile(cctx, "d/a.sst", p, size, sum); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v, want context.Canceled", err)
			}
			noFile(t, p)
			if got := mustGet(t, s, "d/a.sst"); !bytes.Equal(got, data) {
				t.Fatal("object changed")
			}
		})
	}
}

// TestGetFileLinks: on file:// on one file system dst is the object's file
// (same inode), and what happens to dst afterwards (remove, rename) leaves
// the object whole.
func TestGetFileLinks(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote/pfx")
	data := bytes.Repeat([]byte{5}, 300000)
	mustPut(t, s, "x/y.sst", data)
	dst := filepath.Join(root, "local", "y.sst")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	linked, err := s.GetFile(t.Context(), "x/y.sst", dst, int64(len(data)), hexSum(data))
	if err != nil || !linked {
		t.Fatalf("linked %v, %v", linked, err)
	}
	di, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	oi, err := os.Stat(objectPath(t, s, "x/y.sst"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(di, oi) {
		t.Fatal("dst is a copy, want a hard link to the object")
	}
	renamed := dst + ".old"
	if err := os.Rename(dst, renamed); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(renamed); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "x/y.sst"); !bytes.Equal(got, data) {
		t.Fatal("object changed")
	}
	// Nothing else appeared in the store.
	if keys := listKeys(t, s, ""); len(keys) != 1 || keys[0] != "x/y.sst" {
		t.Fatalf("list: %v", keys)
	}
}

// TestGetFileLinkIntegrity: on the link path too, an object that does not
// match is refused and nothing is linked.
func TestGetFileLinkIntegrity(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
	data := bytes.Repeat([]byte{1}, 100000)
	mustPut(t, s, "k", data)
	sum := hexSum(data)
	links := 0
	s.Bucket().(*gcBucket).link = func(o, n string) error { links++; return os.Link(o, n) }
	// Rot in the stored file itself.
	bad := bytes.Clone(data)
	bad[4242] ^= 0x10
	if err := os.WriteFile(objectPath(t, s, "k"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "dst")
	if _, err := s.GetFile(t.Context(), "k", dst, int64(len(data)), sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("%v, want ErrIntegrity", err)
	}
	noFile(t, dst)
	if links != 0 {
		t.Fatalf("%d links made for a corrupt object", links)
	}
}

// TestGetFileVerifiedOnce: a linked object's file is read once per state:
// a second GetFile of a file with the same stamp and expected digest does
// not read it (shown by bytes changed behind the stamp's back: the time
// restored by hand, which a stamp cannot see), another expected digest or a
// changed stamp reads it again.
func TestGetFileVerifiedOnce(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
	data := bytes.Repeat([]byte("verified once "), 8000)
	mustPut(t, s, "k", data)
	sum := hexSum(data)
	get := func(name, sha string) error {
		_, err := s.GetFile(t.Context(), "k", filepath.Join(root, name), int64(len(data)), sha)
		return err
	}
	if err := get("first", sum); err != nil {
		t.Fatal(err)
	}
	obj := objectPath(t, s, "k")
	mtime := rotBehindStamp(t, obj)
	if err := get("second", sum); err != nil {
		t.Fatalf("same stamp, same digest: %v (the file was read again)", err)
	}
	// Another expected digest or size is checked against the bytes.
	if err := get("other", hexSum([]byte("x"))); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("another digest: %v", err)
	}
	if _, err := s.GetFile(t.Context(), "k", filepath.Join(root, "short"), int64(len(data))-1, sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("another size: %v", err)
	}
	// A new stamp: read again, and the rot is found.
	if err := os.Chtimes(obj, mtime, mtime.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := get("third", sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("changed stamp: %v, want ErrIntegrity", err)
	}
	noFile(t, filepath.Join(root, "third"))
}

// TestOpenVerifiedRemembers: on a linking file:// store an object read
// through OpenVerified and found right counts as verified for GetFile; one
// found wrong does not.
func TestOpenVerifiedRemembers(t *testing.T) {
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
	data := bytes.Repeat([]byte("read through "), 6000)
	sum := hexSum(data)
	readThrough := func(key, sha string) error {
		rc, err := s.OpenVerified(t.Context(), key, int64(len(data)), sha)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		return err
	}
	for _, k := range []string{"good", "bad"} {
		mustPut(t, s, k, data)
	}
	if err := readThrough("good", sum); err != nil {
		t.Fatal(err)
	}
	rotBehindStamp(t, objectPath(t, s, "good"))
	// "bad" rots before it is read: the read finds it wrong, and what it
	// read must not count as verified (the stamp is the same as when the
	// read ended).
	rotBehindStamp(t, objectPath(t, s, "bad"))
	if err := readThrough("bad", sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("rotten object read through: %v", err)
	}
	if _, err := s.GetFile(t.Context(), "good", filepath.Join(root, "good"), int64(len(data)), sum); err != nil {
		t.Fatalf("an object read through and found right was read again: %v", err)
	}
	if _, err := s.GetFile(t.Context(), "bad", filepath.Join(root, "bad"), int64(len(data)), sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("an object found wrong counted as verified: %v", err)
	}
}

// TestGetFileLinkFallback: when linking fails because of the file system
// GetFile copies; other link errors are errors and leave no dst.
func TestGetFileLinkFallback(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EXDEV, syscall.EPERM, syscall.EMLINK, syscall.ENOTSUP} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := t.TempDir()
			s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
			links := 0
			s.Bucket().(*gcBucket).link = func(o, n string) error {
				links++
				return &os.LinkError{Op: "link", Old: o, New: n, Err: errno}
			}
			data := bytes.Repeat([]byte{9}, 50000)
			mustPut(t, s, "k", data)
			dst := filepath.Join(root, "dst")
			linked, err := s.GetFile(t.Context(), "k", dst, int64(len(data)), hexSum(data))
			if err != nil || linked {
				t.Fatalf("linked %v, %v", linked, err)
			}
			if links != 1 {
				t.Fatalf("%d link attempts", links)
			}
			di, _ := os.Stat(dst)
			oi, err := os.Stat(objectPath(t, s, "k"))
			if err != nil || os.SameFile(di, oi) {
				t.Fatalf("want a copy: %v", err)
			}
			if got := readFile(t, dst); !bytes.Equal(got, data) {
				t.Fatal("copy differs")
			}
			// The copy verifies too.
			p := filepath.Join(root, "bad")
			if _, err := s.GetFile(t.Context(), "k", p, int64(len(data)), hexSum(data[1:])); !errors.Is(err, ErrIntegrity) {
				t.Fatalf("wrong digest: %v", err)
			}
			noFile(t, p)
		})
	}
	t.Run("other-error", func(t *testing.T) {
		root := t.TempDir()
		s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
		s.Bucket().(*gcBucket).link = func(o, n string) error {
			return &os.LinkError{Op: "link", Old: o, New: n, Err: syscall.EIO}
		}
		mustPut(t, s, "k", []byte("x"))
		dst := filepath.Join(root, "dst")
		if _, err := s.GetFile(t.Context(), "k", dst, 1, hexSum([]byte("x"))); !errors.Is(err, syscall.EIO) {
			t.Fatalf("%v, want EIO", err)
		}
		noFile(t, dst)
	})
	t.Run("dst-appears", func(t *testing.T) {
		// dst is created by someone else between the check and the link:
		// link(2) refuses it and the other file is left alone.
		root := t.TempDir()
		s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
		dst := filepath.Join(root, "dst")
		s.Bucket().(*gcBucket).link = func(o, n string) error {
			if err := os.WriteFile(n, []byte("theirs"), 0o644); err != nil {
				return err
			}
			return os.Link(o, n)
		}
		mustPut(t, s, "k", []byte("ours"))
		if _, err := s.GetFile(t.Context(), "k", dst, 4, hexSum([]byte("ours"))); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("%v, want fs.ErrExist", err)
		}
		if got := readFile(t, dst); string(got) != "theirs" {
			t.Fatalf("dst %q", got)
		}
	})
	t.Run("sidecars", func(t *testing.T) {
		root := t.TempDir()
		s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote?metadata=")
		mustPut(t, s, "k", []byte("sidecar"))
		dst := filepath.Join(root, "dst")
		linked, err := s.GetFile(t.Context(), "k", dst, 7, hexSum([]byte("sidecar")))
		if err != nil || linked {
			t.Fatalf("linked %v, %v", linked, err)
		}
	})
}

// TestGetFileReplaced: an object replaced by a plain Put between being
// verified and being linked is not handed out unverified: dst is removed
// and the object copied, verified against the caller's digest.
func TestGetFileReplaced(t *testing.T) {
	for _, same := range []bool{true, false} {
		name := map[bool]string{true: "same-bytes", false: "other-bytes"}[same]
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
			data := bytes.Repeat([]byte{2}, 70000)
			mustPut(t, s, "k", data)
			repl := bytes.Clone(data)
			if !same {
				repl[0] ^= 1
			}
			s.Bucket().(*gcBucket).link = func(o, n string) error {
				if err := s.Bucket().Put(t.Context(), "k", bytes.NewReader(repl), false); err != nil {
					return err
				}
				return os.Link(o, n)
			}
			dst := filepath.Join(root, "dst")
			linked, err := s.GetFile(t.Context(), "k", dst, int64(len(data)), hexSum(data))
			if same {
				if err != nil || linked {
					t.Fatalf("linked %v, %v; want a verified copy", linked, err)
				}
				if got := readFile(t, dst); !bytes.Equal(got, data) {
					t.Fatal("dst differs")
				}
				return
			}
			if !errors.Is(err, ErrIntegrity) {
				t.Fatalf("%v, want ErrIntegrity", err)
			}
			noFile(t, dst)
		})
	}
}

// TestGetFileFaults: through Faults the link path counts as an open and
// FailNth applies; a key that CorruptRead matches is copied and caught.
func TestGetFileFaults(t *testing.T) {
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
	mustPut(t, s, "a", data)
	mustPut(t, s, "b", data)
	sum := hexSum(data)

	f.FailNth(OpOpen, 1, ErrInjected)
	dst := filepath.Join(root, "dst-a")
	if _, err := s.GetFile(t.Context(), "a", dst, int64(len(data)), sum); !errors.Is(err, ErrInjected) {
		t.Fatalf("%v, want ErrInjected", err)
	}
	noFile(t, dst)
	f.CorruptRead(func(k string) bool { return k == "b" })
	dst = filepath.Join(root, "dst-b")
	if _, err := s.GetFile(t.Context(), "b", dst, int64(len(data)), sum); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("corrupt: %v, want ErrIntegrity", err)
	}
	noFile(t, dst)
	dst = filepath.Join(root, "dst-a")
	if linked, err := s.GetFile(t.Context(), "a", dst, int64(len(data)), sum); err != nil || !linked {
		t.Fatalf("through Faults: linked %v, %v", linked, err)
	}
	if n := f.Calls(OpOpen); n != 3 {
		t.Fatalf("%d opens counted, want 3", n)
	}
}

// rotBehindStamp changes a byte of the file at path in place and puts its
// modification time back, as rot no stamp can see would; it returns that
// time.
func rotBehindStamp(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	overwrite(t, path, 7, '#')
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}
