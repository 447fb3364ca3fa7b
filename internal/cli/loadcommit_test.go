package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// validatingStatus answers Status as the coordinator does while it
// validates a frozen manifest: BEGUN, phase "validating", manifest set.
type validatingStatus struct {
	tierv1connect.UnimplementedBulkLoadServiceHandler
}

func (validatingStatus) Status(_ context.Context, req *connect.Request[tierv1.BulkLoadStatusRequest]) (*connect.Response[tierv1.BulkLoadStatusResponse], error) {
	return connect.NewResponse(&tierv1.BulkLoadStatusResponse{Status: &tierv1.BulkLoadStatus{
		Handle: req.Msg.GetHandle(), State: tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN, Phase: "validating",
		ManifestPath: "file:///x/manifest", ManifestLength: 100, ManifestSha256: strings.Repeat("0", 64), FenceReady: true,
	}}), nil
}

// TestLoadLeavesACommitInProgress: a Commit still pending at the
// coordinator when thaw load's budget ends (a large manifest being
// validated: the transaction BEGUN with its manifest frozen) is not a
// refused Commit: thaw load aborted it (after budget+30 s), throwing away a
// load that would have committed. It now says so and leaves it.
func TestLoadLeavesACommitInProgress(t *testing.T) {
	e, tc := startTestTier(t)
	ctx := t.Context()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "items", itemsTable(t, false), 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f1 := filepath.Join(dir, "1.parquet")
	writeParquet(t, f1, makeItems("", 1, 500), parquetLayout{})

	target, _ := url.Parse("http://" + e.HostPort())
	rp := httputil.NewSingleHostReverseProxy(target)
	_, fakeStatus := tierv1connect.NewBulkLoadServiceHandler(validatingStatus{})
	var commitPending, aborted atomic.Bool
	var mu sync.Mutex
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, ".BulkLoadService/Commit"):
			// Pending at the coordinator (validating) until the caller gives up.
			commitPending.Store(true)
			_, _ = io.Copy(io.Discard, r.Body) // the server sees the caller leave only after the body
			<-r.Context().Done()
			return
		case strings.HasSuffix(r.URL.Path, ".BulkLoadService/Status") && commitPending.Load():
			fakeStatus.ServeHTTP(w, r)
			return
		case strings.HasSuffix(r.URL.Path, ".BulkLoadService/Abort"):
			aborted.Store(true)
		}
		rp.ServeHTTP(w, r)
	})
	proxy := serveH2C(t, h)

	var out bytes.Buffer
	err := runLoad(ctx, &out, []string{"--table", "shop.items", "--server=" + proxy,
		"--budget", "1s", "--temp-dir", t.TempDir(), f1})
	if aborted.Load() {
		t.Fatalf("thaw load aborted a transaction whose Commit was pending at the coordinator (BEGUN, phase validating, manifest frozen): %v\n%s\nseen %v", err, out.String(), seen)
	}
	if err == nil || !strings.Contains(err.Error(), "the coordinator is still deciding it") {
		t.Fatalf("thaw load: %v, want a commit left to the coordinator", err)
	}
}
