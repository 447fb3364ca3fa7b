package bulkloadclient

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/snapshotbuild"
)

// blockingService is a coordinator whose Commit pends (as the real one does
// while it validates a frozen manifest or restores) until the caller gives up.
type blockingService struct{ fakeService }

func (b *blockingService) Commit(ctx context.Context, _ *connect.Request[tierv1.CommitBulkLoadRequest]) (*connect.Response[tierv1.CommitBulkLoadResponse], error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCommitBudgetBoundsABlockedCall: the coordinator answers a Commit
// only once it is decided (validation reads every data file), so one call
// could outlast any awaitBudget: Commit waited for the caller's context and
// ended with its error, not retriable. Each call now ends with the budget,
// with a retriable error (the outcome unknown).
func TestCommitBudgetBoundsABlockedCall(t *testing.T) {
	f := &blockingService{fakeService{statusState: tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN}}
	c2, bc2, res2 := blockingClient(t, f)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c2.Commit(ctx, bc2, res2, 700*time.Millisecond)
	d := time.Since(start)
	if d > 3500*time.Millisecond || !IsRetriable(err) {
		t.Fatalf("commit with a 700ms budget returned after %v, retriable %v: %v", d, IsRetriable(err), err)
	}
}

func blockingClient(t *testing.T, f *blockingService) (*Client, *BuildContext, []snapshotbuild.BucketResult) {
	t.Helper()
	_, h := tierv1connect.NewBulkLoadServiceHandler(f)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, bc, res := fakeClient(t, &f.fakeService)
	c2, err := New(t.Context(), srv.URL, WithObjectStore(c.store))
	if err != nil {
		t.Fatal(err)
	}
	return c2, bc, res
}
