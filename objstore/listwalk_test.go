package objstore

import (
	"context"
	"syscall"
	"testing"
)

// TestListReportsWalkErrors: a file:// List whose directory walk fails
// (here EMFILE, which IsTransient calls transient) fails. fileblob skips
// a directory it cannot read without a word, and the listing looked
// complete and empty: a dropped table's cleanup deleted nothing and
// forgot the table's files.
func TestListReportsWalkErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"t/a/x", "t/b/y"} {
		if _, err := s.PutIfAbsent(ctx, k, BytesSource([]byte(k))); err != nil {
			t.Fatal(err)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 3 // every new descriptor fails with EMFILE
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var lerr error
	for a, err := range s.List(ctx, "t/") {
		if err != nil {
			lerr = err
			break
		}
		keys = append(keys, a.Key)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if lerr == nil {
		t.Fatalf("List under EMFILE returned %d keys %v and no error", len(keys), keys)
	}
	if !IsTransient(lerr) {
		t.Errorf("List under EMFILE: %v, not transient", lerr)
	}
	// And with descriptors again, the listing is whole.
	keys = keys[:0]
	for a, err := range s.List(ctx, "t/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, a.Key)
	}
	if len(keys) != 2 {
		t.Fatalf("listed %v", keys)
	}
}
