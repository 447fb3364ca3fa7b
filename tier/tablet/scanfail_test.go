package tablet_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/tablet"
)

// goneAfterAdmission is a request context whose client goes away once
// the request was admitted: its first Err (connect's check before it
// calls the service) is nil, every later one context.Canceled.
type goneAfterAdmission struct {
	context.Context
	calls atomic.Int32
}

func (c *goneAfterAdmission) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// goneTransport serves each request with a handler, in a
// goneAfterAdmission context.
type goneTransport struct{ h http.Handler }

func (t goneTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r.WithContext(&goneAfterAdmission{Context: r.Context()}))
	return rec.Result(), nil
}

// A consistent scan whose first page fails (its client went away) does
// not keep its pinned view: the client never got a token for it, so the
// view would only hold a MaxScans slot until the idle timeout.
func TestConsistentScanFirstPageFailureReleasesView(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1", func(cfg *tablet.Config) { cfg.MaxScans = 1 })
	tb := c.createTable("orders", []string{"ts-1"}, []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	b := tb.bucketOf(t, "acme")
	waitReady(t, ts, tb, int(b), leader, 1)
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, row{"acme", 1, "one"})...)

	_, h := ts.s.Handler()
	client := tierv1connect.NewTabletServiceClient(&http.Client{Transport: goneTransport{h}}, "http://tablet")
	req := &tierv1.ScanRequest{Target: tb.id, Bucket: b, Limit: 3, Consistent: true}
	for range 3 {
		_, err := client.Scan(t.Context(), connect.NewRequest(req))
		if connect.CodeOf(err) != connect.CodeCanceled {
			t.Fatalf("a scan whose client went away: %v, want canceled", err)
		}
	}
	page, err := ts.client.Scan(t.Context(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("a consistent scan after failed first pages (MaxScans 1): %v", err)
	}
	if len(page.Msg.Rows) != 1 {
		t.Fatalf("scan: %d rows, want 1", len(page.Msg.Rows))
	}
}
