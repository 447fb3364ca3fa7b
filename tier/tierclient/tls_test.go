package tierclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestUntrustedCoordinator: a coordinator whose certificate the client
// does not trust fails New (which finds the active coordinator) at once,
// not retriable, and says so; the retry policy (minutes by default) is not
// spent on it.
func TestUntrustedCoordinator(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The standard client trusts the system's CAs, not the test server's.
	c, err := New(ctx, srv.URL, WithHTTPClient(&http.Client{}))
	if err == nil {
		c.Close()
	}
	t.Logf("%v", err)
	switch {
	case err == nil:
		t.Fatal("New through an untrusted certificate succeeded")
	case IsRetriable(err):
		t.Fatalf("IsRetriable(%v) = true", err)
	case ctx.Err() != nil:
		t.Fatalf("New retried until the deadline: %v", err)
	case !strings.Contains(err.Error(), "certificate"):
		t.Fatalf("%v does not say what failed", err)
	}
}
