package promoter_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/cli"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

type failFirstBegin struct {
	promoter.BulkLoader
	n atomic.Int32
}

func (c *failFirstBegin) Begin(ctx context.Context, tg bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	if c.n.Add(1) == 1 {
		return nil, errors.New("tierclient: coordinator unavailable (injected)")
	}
	return c.BulkLoader.Begin(ctx, tg, token, o)
}

// TestWaitThroughRetry: thaw promote --wait of a promotion whose first
// attempt fails retriably (the promoter retries it after a backoff and
// commits it) exits 0. During the backoff the record is aborted
// (retriable), and the waiter took that for the end: exit 1, "did not
// commit", and the promotion committed right after.
func TestWaitThroughRetry(t *testing.T) {
	e, _, cfg := requestEnv(t)
	ctx := t.Context()
	cfg.Retry = promoter.RetryPolicy{Initial: 2 * time.Second, Max: 2 * time.Second, Attempts: 5}
	fb := &failFirstBegin{BulkLoader: cfg.BulkLoad}
	cfg.BulkLoad = fb
	p := e.promoter(cfg)
	run(t, p)
	srv := httptest.NewServer(promoterhttp.NewHandler(p, nil))
	defer srv.Close()
	part := e.partitionOf("2024-01-03")
	var out, errOut testlog.Buffer
	code := cli.Main(ctx, []string{"promote", "shop.events", "--partition", part, "--wait", "--promoter", srv.URL, "--timeout", "1m"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "committed") || fb.n.Load() < 2 {
		t.Fatalf("thaw promote --wait of a retried promotion: exit %d, %d Begins\nstdout %s\nstderr %s", code, fb.n.Load(), out.String(), errOut.String())
	}
}
