package bulkloadclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
)

// TestUntrustedCoordinator: a coordinator whose certificate the client
// does not trust fails Begin and Abort at once with a terminal error that
// says so, not ErrUnavailable: no request was sent, so the outcome is
// known, and a repeat would fail alike.
func TestUntrustedCoordinator(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	// The standard client trusts the system's CAs, not the test server's.
	c, err := New(t.Context(), srv.URL, WithHTTPClient(&http.Client{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	target := bulkload.Target{Database: "db", Table: "t"}
	_, begin := c.Begin(ctx, target, "token", BeginOptions{})
	_, abort := c.Abort(ctx, bulkload.Handle{Target: target, TableID: 1, TxnID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"})
	for op, err := range map[string]error{"begin": begin, "abort": abort} {
		t.Logf("%s: %v", op, err)
		switch {
		case err == nil:
			t.Fatalf("%s through an untrusted certificate succeeded", op)
		case IsRetriable(err), errors.Is(err, bulkload.ErrUnavailable):
			t.Fatalf("%s: %v is retriable", op, err)
		case ctx.Err() != nil:
			t.Fatalf("%s retried until the deadline: %v", op, err)
		case !strings.Contains(err.Error(), "certificate"):
			t.Fatalf("%s: %v does not say what failed", op, err)
		}
	}
}
