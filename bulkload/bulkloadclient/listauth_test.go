package bulkloadclient_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
)

// A List call that succeeds, and only hides other callers' transactions,
// is not a refused call: thaw_coordinator_refused_calls_total stays put
// (it rose by one per hidden transaction).
func TestListHidesWithoutRefusing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const loaderTok, adminTok = "loader-token-5b7e1c9d", "admin-token-0f3a8e62"
	var logs testlog.Buffer
	e, _ := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{Coordinator: daemon.CoordinatorOptions{Callers: []daemon.CallerOptions{
		{Name: "loader", TokenSHA256: tokenHash(loaderTok), Tables: []string{"shop.items"}},
		{Name: "admin", TokenSHA256: tokenHash(adminTok), Tables: []string{"*"}},
	}}}, "items", "other")
	admin, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithBearerToken(adminTok))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := begin(ctx, admin, bulkload.Target{Database: "shop", Table: "other"}, "list-1"); err != nil {
		t.Fatal(err)
	}
	refused := func() float64 {
		v, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_refused_calls_total", map[string]string{"reason": "permission_denied"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := refused()
	lc := tierv1connect.NewBulkLoadServiceClient(e.HTTPClient(), e.Address(), connect.WithInterceptors(bulkloadclient.Bearer(loaderTok)))
	for range 3 {
		resp, err := lc.List(ctx, connect.NewRequest(&tierv1.ListBulkLoadsRequest{IncludeTerminal: true}))
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if n := len(resp.Msg.GetTransactions()); n != 0 {
			t.Fatalf("the loader's list shows %d transactions, want the admin's hidden", n)
		}
	}
	if after := refused(); after != before {
		t.Fatalf("3 successful List calls moved thaw_coordinator_refused_calls_total{reason=permission_denied} from %v to %v", before, after)
	}
}
