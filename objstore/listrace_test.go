package objstore

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestListWhileDeleting: a file:// listing while other keys under its
// prefix are deleted and written again lists every key that stays, once
// and in order. fileblob stats each file it lists, and one deleted
// meanwhile failed the whole listing (39 of 300 listings here; a
// retention or orphan-cleaning pass then failed for nothing).
func TestListWhileDeleting(t *testing.T) {
	s, err := Open(t.Context(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for i := range 100 {
		for _, k := range []string{fmt.Sprintf("d/%04d-churn", i), fmt.Sprintf("d/%04d-keep", i)} {
			if _, err := s.PutIfAbsent(ctx, k, BytesSource([]byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i = (i + 1) % 100 {
			k := fmt.Sprintf("d/%04d-churn", i)
			_ = s.Delete(ctx, k)
			_, _ = s.PutIfAbsent(ctx, k, BytesSource([]byte("x")))
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for n := range 200 {
		var kept []string
		prev := ""
		for a, err := range s.List(ctx, "d/") {
			if err != nil {
				t.Fatalf("listing %d: %v", n, err)
			}
			if a.Key <= prev {
				t.Fatalf("listing %d: %s after %s", n, a.Key, prev)
			}
			prev = a.Key
			if strings.HasSuffix(a.Key, "-keep") {
				kept = append(kept, a.Key)
			}
		}
		if len(kept) != 100 {
			t.Fatalf("listing %d: %d of the 100 keys that stay", n, len(kept))
		}
	}
}

// TestListOrderAcrossDirectories: a directory "a" with two objects under
// it and an object "a-c" beside it: fileblob walks "a/b1", "a/b2", then
// "a-c" (not key order; "-" sorts before "/"). List returns every key, in
// key order, on file:// as on mem:// (a skip of keys not after the last
// one seen dropped "a-c").
func TestListOrderAcrossDirectories(t *testing.T) {
	for _, url := range []string{"file://" + t.TempDir(), "mem://"} {
		s, err := Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"p/a/b1", "p/a/b2", "p/a-c", "p/a.json"}
		for _, k := range keys {
			if _, err := s.PutIfAbsent(t.Context(), k, BytesSource([]byte("x"))); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for a, err := range s.List(t.Context(), "p/") {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a.Key)
		}
		want := slices.Clone(keys)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: List = %v, want %v", url, got, want)
		}
		s.Close()
	}
}

// TestListPrefixWithEscapeLikeText: a prefix whose directory part holds
// text fileblob escapes on disk ("__0x1__", which a table name may hold)
// lists its keys; fileblob walked the unescaped directory, which does not
// exist, and listed nothing (a dropped table's files were never deleted).
func TestListPrefixWithEscapeLikeText(t *testing.T) {
	for _, url := range []string{"file://" + t.TempDir(), "mem://"} {
		s, err := Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		k := "kv/db/t__0x1__y-7/0/snap-1/_METADATA"
		if _, err := s.PutIfAbsent(t.Context(), k, BytesSource([]byte("x"))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(t.Context(), k); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"kv/db/t__0x1__y-7/", "kv/db/t__0x1__y-7/0/", "kv/"} {
			var got []string
			for a, err := range s.List(t.Context(), p) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, a.Key)
			}
			if len(got) != 1 {
				t.Errorf("%s: List(%q) = %v, want [%s]", url, p, got, k)
			}
		}
		s.Close()
	}
}
