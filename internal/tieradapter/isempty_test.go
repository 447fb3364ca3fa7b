package tieradapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// noReplicaTablet answers every Scan as a tablet server that hosts no
// replica of the bucket (moved away, or not opened yet after a restart).
type noReplicaTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
}

func (noReplicaTablet) Scan(context.Context, *connect.Request[v1.ScanRequest]) (*connect.Response[v1.ScanResponse], error) {
	return nil, tierpb.NewError(tierpb.ReasonNotFound, "tablet: no replica of db.u bucket 0 here", nil)
}

type redirectScans struct {
	to   *url.URL
	base *http.Client
}

func (r redirectScans) Do(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, tierv1connect.TabletServiceScanProcedure) {
		u := *req.URL
		u.Scheme, u.Host, u.Path, u.RawPath = r.to.Scheme, r.to.Host, tierv1connect.TabletServiceScanProcedure, ""
		req.URL = &u
		req.Host = r.to.Host
	}
	return r.base.Do(req)
}

// TestIsEmptyTabletNotFound: an unpartitioned target holding a row, whose
// Scan fails with a tablet server's NOT_FOUND ("no replica here": the
// bucket moved, or is not open yet after a restart) until the client's
// retries run out, was reported empty (taken for a missing table): a
// committed promotion the tier had forgotten was then recorded aborted.
func TestIsEmptyTabletNotFound(t *testing.T) {
	ctx := t.Context()
	e, c := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	schema := kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: mustType(t, "BIGINT")}, {Name: "v", Type: mustType(t, "STRING"), Nullable: true}},
		PrimaryKey: []string{"id"}, Buckets: 1,
	}
	if err := tieradapter.New(c).CreateTable(ctx, "db", "u", schema, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Upsert(ctx, tierclient.Target{Database: "db", Table: "u"}, []kv.Row{{int64(1), "x"}}); err != nil {
		t.Fatal(err)
	}
	if empty, err := tieradapter.New(c).IsEmpty(ctx, "db", "u", ""); err != nil || empty {
		t.Fatalf("healthy: empty %t, %v", empty, err)
	}
	fake := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(tierv1connect.NewTabletServiceHandler(noReplicaTablet{}))
		return mux
	}())
	defer fake.Close()
	to, _ := url.Parse(fake.URL)
	c2, err := tierclient.New(ctx, e.Address(),
		tierclient.WithHTTPClient(redirectScans{to: to, base: &http.Client{}}),
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if empty, err := tieradapter.New(c2).IsEmpty(ctx, "db", "u", ""); err == nil || empty {
		t.Fatalf("IsEmpty with the tablet answering NOT_FOUND: empty %t, err %v", empty, err)
	}
	// A missing table is empty, as before.
	if empty, err := tieradapter.New(c2).IsEmpty(ctx, "db", "gone", ""); err != nil || !empty {
		t.Fatalf("IsEmpty of a missing table: empty %t, err %v", empty, err)
	}
}
