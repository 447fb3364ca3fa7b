package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/tier/tierclient"
)

// beginLostProxy forwards everything to the tier, but the answer of
// Begin is never delivered: the coordinator begins the transaction (and
// fences the target), the caller waits until its --timeout.
func beginLostProxy(t *testing.T, hostPort string) string {
	t.Helper()
	target, _ := url.Parse("http://" + hostPort)
	rp := httputil.NewSingleHostReverseProxy(target)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".BulkLoadService/Begin") {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
			<-r.Context().Done() // the answer is lost
			return
		}
		rp.ServeHTTP(w, r)
	})
	return serveH2C(t, h)
}

// serveH2C serves h over HTTP/1 and unencrypted HTTP/2 (the tier's
// protocols) until the test ends, and returns its host:port.
func serveH2C(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protos
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// itemsLoad starts a test tier with an empty table shop.items and writes n
// rows of it to a Parquet file, whose path it returns.
func itemsLoad(t *testing.T, n int) (*daemon.Embedded, *tierclient.Client, string) {
	t.Helper()
	e, tc := startTestTier(t)
	if err := tc.CreateDatabase(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(t.Context(), "shop", "items", itemsTable(t, false), 2); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "1.parquet")
	writeParquet(t, f, makeItems("", 1, n), parquetLayout{})
	return e, tc, f
}

// TestBeginOutcomeUnknownAborts: thaw load and thaw bulkload begin
// without --token whose Begin reached the coordinator but whose answer did
// not come back within --timeout abort the transaction it began (found by
// its caller token, which only this process knew) and say so. They exited
// 1 naming neither the transaction nor the token, and the target stayed
// fenced until the build deadline.
func TestBeginOutcomeUnknownAborts(t *testing.T) {
	e, _, f1 := itemsLoad(t, 100)
	ctx := t.Context()
	proxy := beginLostProxy(t, e.HostPort())
	for name, run := range map[string]func() error{
		"thaw load": func() error {
			return runLoad(ctx, &bytes.Buffer{}, []string{"--table", "shop.items", "--server=" + proxy, "--timeout", "3s", "--temp-dir", t.TempDir(), f1})
		},
		"thaw bulkload begin": func() error {
			return runBulkloadBegin(ctx, &bytes.Buffer{}, []string{"--server=" + proxy, "--timeout", "3s", "shop.items"})
		},
	} {
		err := run()
		if err == nil {
			t.Fatalf("%s succeeded with its Begin answer lost", name)
		}
		if st := inProgress(t, e.HostPort()); st != nil {
			t.Fatalf("%s failed (%v) but left bulk load %s (state %s, caller token %s) holding shop.items until %s",
				name, err, st.GetHandle().GetTxnId(), st.GetState(), st.GetCallerToken(), msTime(st.GetBuildDeadlineMs()))
		}
		if !strings.Contains(err.Error(), "is aborted: shop.items is as it was") {
			t.Fatalf("%s: %v; want it to say the transaction it began is aborted", name, err)
		}
	}
}

// inProgress returns the one transaction in progress on the tier, nil for none.
func inProgress(t *testing.T, server string) *tierv1.BulkLoadStatus {
	t.Helper()
	resp, err := bulkDo(t.Context(), dialBulkLoad(server), &tierv1.ListBulkLoadsRequest{}, tierv1connect.BulkLoadServiceClient.List)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTransactions()) == 0 {
		return nil
	}
	return resp.GetTransactions()[0]
}
