package periodic

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestEvery: the first call after the first delay, the next ones an
// interval after each call returned, none after the context ended.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, time.Minute, func() {
				at = append(at, time.Since(start))
				time.Sleep(10 * time.Second) // a slow pass
				if len(at) == 3 {
					cancel()
				}
			})
		}()
		<-done
		want := []time.Duration{time.Second, time.Second + 70*time.Second, time.Second + 140*time.Second}
		if len(at) != len(want) {
			t.Fatalf("calls at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("calls at %v, want %v", at, want)
			}
		}
	})
}
