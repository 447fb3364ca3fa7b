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

// hangingStatus answers Commit UNAVAILABLE (outcome unknown) and Status
// never (a coordinator recovering after a failover waits in Status).
type hangingStatus struct{ fakeService }

func (h *hangingStatus) Commit(context.Context, *connect.Request[tierv1.CommitBulkLoadRequest]) (*connect.Response[tierv1.CommitBulkLoadResponse], error) {
	return nil, unavailable()
}

func (h *hangingStatus) Status(ctx context.Context, _ *connect.Request[tierv1.BulkLoadStatusRequest]) (*connect.Response[tierv1.BulkLoadStatusResponse], error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// hangingCreds never answers GetUploadCredentials (the scoped manifest
// write waits for them).
type hangingCreds struct{ fakeService }

func (h *hangingCreds) GetUploadCredentials(ctx context.Context, _ *connect.Request[tierv1.GetUploadCredentialsRequest]) (*connect.Response[tierv1.GetUploadCredentialsResponse], error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCommitBudgetBoundsEveryStep: Commit returns when its await budget
// is spent, with a retriable error, also when the Status that resolves an
// unknown outcome or the scoped manifest write does not answer: both used
// the caller's context, so Commit ran until that ended (for ever with
// context.Background), not until the budget did.
func TestCommitBudgetBoundsEveryStep(t *testing.T) {
	for _, c := range []struct {
		name   string
		svc    tierv1connect.BulkLoadServiceHandler
		fake   *fakeService
		scoped bool
	}{
		{name: "status"},
		{name: "scoped manifest write", scoped: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.scoped {
				h := &hangingCreds{}
				c.svc, c.fake = h, &h.fakeService
			} else {
				h := &hangingStatus{}
				c.svc, c.fake = h, &h.fakeService
			}
			_, h := tierv1connect.NewBulkLoadServiceHandler(c.svc)
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			fc, bc, res := fakeClient(t, c.fake)
			opt := WithObjectStore(fc.store)
			if c.scoped {
				opt = WithScopedUploads()
			}
			cl, err := New(t.Context(), srv.URL, opt)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err = cl.Commit(ctx, bc, res, 500*time.Millisecond)
			if d := time.Since(start); ctx.Err() != nil || !IsRetriable(err) {
				t.Fatalf("commit with a 500ms budget returned after %v, retriable %v: %v", d, IsRetriable(err), err)
			}
		})
	}
}
