package coordinator

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
)

// TestHandlerBoundsRequests: a request whose message (after
// decompression: a small gzip body may inflate to anything) exceeds
// MaxRequestBytes is refused as resource_exhausted before it is decoded or
// authenticated, on both services; before, the coordinator inflated and
// buffered all of it, for anyone who reached the listener.
func TestHandlerBoundsRequests(t *testing.T) {
	a, err := newAuthn([]Caller{{Name: "one", TokenSHA256: hashOf("token-one"), Tables: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{m: newMetrics(prometheus.NewRegistry())}
	c.auth.Store(a)
	_, h := c.Handler()
	srv := httptest.NewServer(h)
	defer srv.Close()

	msg, err := proto.Marshal(&tierv1.BeginBulkLoadRequest{CallerToken: strings.Repeat("a", MaxRequestBytes+1024)})
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, proc := range []string{tierv1connect.BulkLoadServiceBeginProcedure, tierv1connect.CoordinatorServiceCreateDatabaseProcedure} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+proc, bytes.NewReader(gz.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "resource_exhausted") {
			t.Errorf("%s with a %d-byte body inflating past the limit: %d %s, want resource_exhausted", proc, gz.Len(), resp.StatusCode, body)
		}
	}
}
