package bulkloadclient

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierpb"
)

// fakeService answers Commit with the errors of commitErrs in turn, then
// with COMMITTED; Status answers statusState. It is a scripted stand-in,
// on purpose: these tests pin what the client does for each kind of answer
// in an exact order (unknown outcome, retriable, terminal, budget), which a
// real coordinator cannot be made to produce on cue. TestEndToEnd runs the
// client against the real tier, and tier/bulkloadtest drops Commit
// responses of the real coordinator.
type fakeService struct {
	tierv1connect.UnimplementedBulkLoadServiceHandler
	commitErrs  []error
	commits     atomic.Int32
	statusState tierv1.BulkLoadState
}

func (f *fakeService) Commit(_ context.Context, req *connect.Request[tierv1.CommitBulkLoadRequest]) (*connect.Response[tierv1.CommitBulkLoadResponse], error) {
	i := int(f.commits.Add(1)) - 1
	if i < len(f.commitErrs) {
		return nil, f.commitErrs[i]
	}
	return connect.NewResponse(&tierv1.CommitBulkLoadResponse{Status: &tierv1.BulkLoadStatus{
		Handle: req.Msg.GetHandle(), State: tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED,
	}}), nil
}

func (f *fakeService) Status(_ context.Context, req *connect.Request[tierv1.BulkLoadStatusRequest]) (*connect.Response[tierv1.BulkLoadStatusResponse], error) {
	return connect.NewResponse(&tierv1.BulkLoadStatusResponse{Status: &tierv1.BulkLoadStatus{
		Handle: req.Msg.GetHandle(), State: f.statusState, AbortReason: tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_UNSPECIFIED,
	}}), nil
}

func fakeClient(t *testing.T, f *fakeService) (*Client, *BuildContext, []snapshotbuild.BucketResult) {
	t.Helper()
	_, h := tierv1connect.NewBulkLoadServiceHandler(f)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	store, err := objstore.Open(t.Context(), "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, err := New(t.Context(), srv.URL, WithObjectStore(store))
	if err != nil {
		t.Fatal(err)
	}
	txn := "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	bc, err := fromTargetInfo(&tierv1.BulkLoadTargetInfo{
		Handle:   &tierv1.BulkLoadHandle{Target: &tierv1.TargetPath{Database: "shop", Table: "items"}, TableId: 7, TxnId: txn},
		SchemaId: 0, TableSchemaJson: []byte(testSchema), BucketCount: 4, Bucketing: "fluss",
		RemoteDataDir: store.Base(), SnapshotIds: []int64{1, 1, 1, 1},
		ManifestPath: store.Base() + "/kv/shop/items-7/_bulkload/" + txn + "/manifest", BuildDeadlineMs: time.Now().Add(time.Hour).UnixMilli(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var res []snapshotbuild.BucketResult
	for b := range 4 {
		res = append(res, snapshotbuild.BucketResult{Bucket: b, SnapshotID: 1, MetadataPath: bc.SnapshotTarget().MetadataPath(b, 1), MetadataLength: 1,
			MetadataSHA256: "0000000000000000000000000000000000000000000000000000000000000000"})
	}
	return c, bc, res
}

func unavailable() error {
	return tierpb.NewError(tierpb.ReasonUnavailable, "coordinator: recovering", nil)
}

func TestCommitRetriesUnavailable(t *testing.T) {
	f := &fakeService{commitErrs: []error{unavailable(), connect.NewError(connect.CodeUnknown, errors.New("response lost"))},
		statusState: tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN}
	c, bc, res := fakeClient(t, f)
	st, err := c.Commit(t.Context(), bc, res, 10*time.Second)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	if n := f.commits.Load(); n != 3 {
		t.Fatalf("%d commits, want 3", n)
	}
	// The manifest is written once; committing again adopts it.
	if _, err := c.Commit(t.Context(), bc, res, time.Second); err != nil {
		t.Fatal(err)
	}
	// Other results would be another manifest: a conflict, never sent.
	res[0].RowCount = 5
	res[0].MetadataLength = 2
	n := f.commits.Load()
	if _, err := c.Commit(t.Context(), bc, res, time.Second); !errors.Is(err, bulkload.ErrManifestConflict) || f.commits.Load() != n {
		t.Fatalf("commit of other results: %v", err)
	}
}

func TestCommitResolvesUnknownOutcomeThroughStatus(t *testing.T) {
	f := &fakeService{commitErrs: []error{unavailable(), unavailable(), unavailable()},
		statusState: tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED}
	c, bc, res := fakeClient(t, f)
	st, err := c.Commit(t.Context(), bc, res, 10*time.Second)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	if n := f.commits.Load(); n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}
}

func TestCommitStopsOnNonRetriable(t *testing.T) {
	f := &fakeService{commitErrs: []error{tierpb.NewError(tierpb.ReasonInvalidManifest, "coordinator: bad", nil)},
		statusState: tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN}
	c, bc, res := fakeClient(t, f)
	_, err := c.Commit(t.Context(), bc, res, 10*time.Second)
	if !errors.Is(err, bulkload.ErrInvalidRequest) || IsRetriable(err) || f.commits.Load() != 1 {
		t.Fatalf("commit: %v after %d commits", err, f.commits.Load())
	}
}

func TestCommitBudget(t *testing.T) {
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = unavailable()
	}
	f := &fakeService{commitErrs: errs, statusState: tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTING}
	c, bc, res := fakeClient(t, f)
	start := time.Now()
	_, err := c.Commit(t.Context(), bc, res, 700*time.Millisecond)
	if !errors.Is(err, bulkload.ErrUnavailable) || !IsRetriable(err) {
		t.Fatalf("commit: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("commit took %v with a 700ms budget", d)
	}
	if n := f.commits.Load(); n < 2 || n > 5 {
		t.Fatalf("%d commits in 700ms at 200ms intervals", n)
	}
}
