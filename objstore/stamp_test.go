package objstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPutFileStamped: on a linking store a file that still has its stamp
// is linked without being read (the caller's digest is trusted, shown
// here with a digest that does not match); a file written to after its
// stamp, the zero stamp, and a store that copies all verify the bytes.
func TestPutFileStamped(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	s := openStore(t, "file://"+filepath.ToSlash(root)+"/remote")
	data := bytes.Repeat([]byte("stamped "), 5000)
	p, sum := writeLocal(t, root, "a", data)
	stamp, err := StampFile(p)
	if err != nil || stamp.IsZero() {
		t.Fatalf("stamp: %+v, %v", stamp, err)
	}
	if again, err := StampFile(p); err != nil || again != stamp {
		t.Fatalf("stamping twice: %+v, %v; want %+v", again, err, stamp)
	}
	wrong := hexSum([]byte("other bytes"))

	// Trusted: not read, so the wrong digest goes unnoticed and the
	// object is the file.
	obj, err := s.PutFileStamped(ctx, "trusted", p, int64(len(data)), wrong, stamp)
	if err != nil || obj.SHA256 != wrong {
		t.Fatalf("stamped put: %+v, %v", obj, err)
	}
	li, _ := os.Stat(p)
	if oi, err := os.Stat(objectPath(t, s, "trusted")); err != nil || !os.SameFile(li, oi) {
		t.Fatalf("want a hard link: %v", err)
	}

	// Zero stamp: read and checked.
	if _, err := s.PutFileStamped(ctx, "zero", p, int64(len(data)), wrong, FileStamp{}); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("zero stamp with a wrong digest: %v", err)
	}

	// A file written to after it was stamped (same size) is read, and its
	// new bytes do not match the digest the writer computed.
	q, qsum := writeLocal(t, root, "b", data)
	qstamp, err := StampFile(q)
	if err != nil {
		t.Fatal(err)
	}
	waitClockPast(t, q)
	overwrite(t, q, 10, 'X')
	if now, err := StampFile(q); err != nil || now == qstamp {
		t.Fatalf("the stamp did not change with a write: %v", err)
	}
	if _, err := s.PutFileStamped(ctx, "changed", q, int64(len(data)), qsum, qstamp); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("changed file: %v, want ErrIntegrity", err)
	}
	// A file of the same content under another inode (a copy) does not
	// have the stamp either: it is read, matches, and is stored.
	c, csum := writeLocal(t, root, "copy", data)
	if _, err := s.PutFileStamped(ctx, "copy", c, int64(len(data)), csum, stamp); err != nil {
		t.Fatalf("copy with another file's stamp: %v", err)
	}
	for _, k := range []string{"zero", "changed"} {
		if _, err := s.Stat(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s stored: %v", k, err)
		}
	}

	// A store that copies verifies while copying, stamp or not.
	m := openStore(t, "mem://"+memName(t))
	if _, err := m.PutFileStamped(ctx, "k", p, int64(len(data)), wrong, stamp); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("copying store with a wrong digest: %v", err)
	}
	if obj, err := m.PutFileStamped(ctx, "k", p, int64(len(data)), sum, stamp); err != nil || obj.SHA256 != sum {
		t.Fatalf("copying store: %+v, %v", obj, err)
	}
}

// waitClockPast waits until the wall clock is well past the file's
// modification time, so that a write now gets a later time even where
// timestamps are as coarse as a clock tick.
func waitClockPast(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(fi.ModTime().Add(20 * time.Millisecond)); d > 0 {
		time.Sleep(d)
	}
}

// overwrite writes one byte at off into the existing file at path, in
// place (same inode).
func overwrite(t *testing.T, path string, off int64, b byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b}, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
