package objstore

import (
	"fmt"
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
