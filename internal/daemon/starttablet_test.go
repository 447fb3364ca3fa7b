package daemon

import (
	"context"
	"path/filepath"
	"testing"
)

// TestStartTabletRetryAfterFailure: a first StartTablet of a new id that
// fails (here: its context is done) left its mount registered with no
// component, and the retry registered the same pattern again, which
// http.ServeMux refuses with a panic.
func TestStartTabletRetryAfterFailure(t *testing.T) {
	e := startTier(t, t.Context(), EmbeddedConfig{DataDir: filepath.Join(t.TempDir(), "d"), TabletServers: 1})
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := e.StartTablet(done, "ts-9"); err == nil {
		t.Fatal("StartTablet with a done context succeeded")
	}
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("retry of StartTablet panicked: %v", r)
		}
	}()
	if err := e.StartTablet(t.Context(), "ts-9"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, ok := e.Tablet("ts-9"); !ok {
		t.Fatal("ts-9 does not run after the retry")
	}
}
