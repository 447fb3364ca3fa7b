package objstore

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFilePutIgnoresTMPDIR: a file:// store stages a Put under its own
// root, so it works whatever TMPDIR is (fileblob's writer stages in
// os.TempDir and its rename fails with EXDEV when that is another file
// system); the staging directory is empty afterwards, List never shows it,
// and no object may be stored under it.
func TestFilePutIgnoresTMPDIR(t *testing.T) {
	root := filepath.Join(t.TempDir(), "remote")
	s := openStore(t, "file://"+filepath.ToSlash(root))
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing")) // fileblob's writer could not even create its file
	if _, err := s.PutIfAbsent(t.Context(), "kv/a/_METADATA", BytesSource([]byte("meta"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Bucket().Put(t.Context(), "kv/a/_METADATA", strings.NewReader("other"), true); !errors.Is(err, ErrExists) {
		t.Fatalf("second put: %v, want ErrExists", err)
	}
	data := []byte("file data")
	local, sum := writeLocal(t, t.TempDir(), "f", data)
	s.Bucket().(*gcBucket).link = func(o, n string) error { // the local file is "on another device"
		if filepath.Dir(o) != filepath.Join(root, StagingDir) {
			return &os.LinkError{Op: "link", Old: o, New: n, Err: syscall.EXDEV}
		}
		return os.Link(o, n)
	}
	if _, err := s.PutFile(t.Context(), "kv/a/1.sst", local, int64(len(data)), sum); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "kv/a/1.sst"); string(got) != string(data) {
		t.Fatalf("copied file: %q", got)
	}
	if ents, err := os.ReadDir(filepath.Join(root, StagingDir)); err != nil || len(ents) != 0 {
		t.Fatalf("staging directory after the puts: %v, %v", ents, err)
	}
	// A file left by a Put that died stays out of List.
	if err := os.WriteFile(filepath.Join(root, StagingDir, "put-left"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, s, ""); len(got) != 2 || got[0] != "kv/a/1.sst" || got[1] != "kv/a/_METADATA" {
		t.Fatalf("list: %q", got)
	}
	// A put whose context ends while it copies stops copying, stores
	// nothing and leaves nothing staged.
	ctx, cancel := context.WithCancel(t.Context())
	src := &cancellingReader{cancel: cancel}
	if err := s.Bucket().Put(ctx, "kv/a/cancelled", src, true); !errors.Is(err, context.Canceled) || src.reads > 1 {
		t.Fatalf("cancelled put: %v after %d reads", err, src.reads)
	}
	if _, err := s.Stat(t.Context(), "kv/a/cancelled"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat after the cancelled put: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(root, StagingDir)); err != nil || len(ents) != 1 {
		t.Fatalf("staging directory after the cancelled put: %v, %v (want only put-left)", ents, err)
	}
	if _, err := s.PutIfAbsent(t.Context(), StagingDir+"/x", BytesSource([]byte("x"))); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("put under the staging directory: %v, want ErrInvalidKey", err)
	}
	// Opening the store removes staged files a day old, not newer ones.
	old := filepath.Join(root, StagingDir, "put-old")
	if err := os.WriteFile(old, []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, time.Now(), time.Now().Add(-25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	openStore(t, "file://"+filepath.ToSlash(root))
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a day-old staged file after open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, StagingDir, "put-left")); err != nil {
		t.Fatalf("a fresh staged file after open: %v", err)
	}
}

// cancellingReader cancels its context at the first read; it would give
// 1000 reads of zeros.
type cancellingReader struct {
	cancel func()
	reads  int
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads == 1 {
		r.cancel()
	}
	if r.reads > 1000 {
		return 0, io.EOF
	}
	clear(p)
	return len(p), nil
}
