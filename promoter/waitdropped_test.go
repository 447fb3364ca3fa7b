package promoter_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/cli"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// TestWaitOfDroppedStoredRequest: a waiter (thaw promote --wait) of a
// request that the next promoter drops at start (its policy no longer
// takes requests) ends with the reason, as for a cancel or a skip; it
// waited until its --timeout.
func TestWaitOfDroppedStoredRequest(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	first := e.promoter(cfg)
	sw := &switchHandler{}
	sw.set(promoterhttp.NewHandler(first, nil))
	srv := httptest.NewServer(sw)
	defer srv.Close()
	part := e.partitionOf("2024-01-03")
	var out, errOut testlog.Buffer
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(ctx, []string{"promote", "shop.events", "--partition", part, "--wait", "--promoter", srv.URL, "--timeout", "15s"}, &out, &errOut)
	}()
	waitFor(t, "the request", func() bool { return len(first.QueuedRequests()) == 1 })
	id := first.QueuedRequests()[0].ID
	// The first promoter stops before the request's turn; the next one
	// runs with the policy no longer taking requests.
	sw.set(nil)
	closed := cfg
	closed.Policies = []*policies.Policy{windowPolicy(t, pol.Name(), "events", "3d", "  triggers:\n    onRequest: false\n    schedule: {cron: \"0 2 * * *\"}\n")}
	last := e.promoter(closed)
	run(t, last)
	sw.set(promoterhttp.NewHandler(last, nil))
	waitFor(t, "the stored request deleted", func() bool { return len(storedRequests(ctx, t, cfg.Ledger)) == 0 })
	if _, ok := last.Skipped(id); !ok {
		t.Errorf("promotion %s dropped at start: no skip note for its waiter", id)
	}
	c := <-code
	if c != 1 || strings.Contains(errOut.String(), "deadline exceeded") || !strings.Contains(out.String()+errOut.String(), "dropped at start") {
		t.Fatalf("the waiter of a dropped request: exit %d\nstdout %s\nstderr %s", c, out.String(), errOut.String())
	}
}
