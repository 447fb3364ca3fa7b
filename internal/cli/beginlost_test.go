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
	srv := httptest.NewUnstartedServer(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protos
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestBeginOutcomeUnknownAborts: thaw load and thaw bulkload begin
// without --token whose Begin reached the coordinator but whose answer did
// not come back within --timeout abort the transaction it began (found by
// its caller token, which only this process knew) and say so. They exited
// 1 naming neither the transaction nor the token, and the target stayed
// fenced until the build deadline.
func TestBeginOutcomeUnknownAborts(t *testing.T) {
	e, tc := startTestTier(t)
	ctx := t.Context()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "items", itemsTable(t, false), 2); err != nil {
		t.Fatal(err)
	}
	f1 := filepath.Join(t.TempDir(), "1.parquet")
	writeParquet(t, f1, makeItems("", 1, 100), parquetLayout{})
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
