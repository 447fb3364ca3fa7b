package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPutFileSymlink: PutFile given a path that is a symbolic link.
// link(2) does not follow it, so the object was a hard link to the
// symlink, not to the data: once the symlink's target went (the caller's
// temp directory), the object was gone though PutFile reported it stored.
func TestPutFileSymlink(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := Open(ctx, "file://"+filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.LinksFiles() {
		t.Fatal("a file:// store on one file system links files")
	}
	data := []byte("payload of the object")
	sum := sha256.Sum256(data)
	real := filepath.Join(root, "work", "data.sst")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, data, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "work", "alias.sst")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	obj, err := s.PutFile(ctx, "a/obj", link, int64(len(data)), hex.EncodeToString(sum[:]))
	if err != nil {
		t.Fatal(err)
	}
	if obj.Size != int64(len(data)) {
		t.Fatalf("stored %+v", obj)
	}
	p, _ := s.Bucket().(*gcBucket).objectPath("a/obj")
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("the object file %s is a symlink, not the data", p)
	}
	// The caller's working directory goes (the build's temp dir).
	if err := os.RemoveAll(filepath.Join(root, "work")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "a/obj")
	if err != nil || string(got) != string(data) {
		t.Fatalf("object after the source's directory was removed: %q, %v (PutFile had reported it stored)", got, err)
	}
}

// TestOpenVerifiedMaxSize: OpenVerified takes any size >= 0; a declared
// size of MaxInt64 (a corrupt or hostile _METADATA handle) fails with
// ErrIntegrity. Its reader panicked (size+1 wrapped), taking down the
// tablet server restoring from it.
func TestOpenVerifiedMaxSize(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsent(ctx, "k", BytesSource([]byte("hello"))); err != nil {
		t.Fatal(err)
	}
	rc, err := s.OpenVerified(ctx, "k", math.MaxInt64, strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("OpenVerified reader panicked on size MaxInt64: %v", r)
		}
	}()
	_, err = io.Copy(io.Discard, rc)
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("err %v, want ErrIntegrity", err)
	}
}

// TestGetFileMaxSize: GetFile's copy path (s3://, mem://, another file
// system) goes through the same reader.
func TestGetFileMaxSize(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsent(ctx, "k", BytesSource([]byte("hello"))); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("GetFile panicked on size MaxInt64: %v", r)
		}
	}()
	_, err = s.GetFile(ctx, "k", t.TempDir()+"/dst", math.MaxInt64, strings.Repeat("0", 64))
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("err %v, want ErrIntegrity", err)
	}
}
