package bulkloadclient_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
)

// TestHTTPSAgainstPlainHTTPNotRetriable: an https:// coordinator address
// that reaches a plain HTTP server: no repeat helps until the configuration
// changes (tierpb.ReasonOf and tierclient treat it so); bulkloadclient
// called it ErrUnavailable, and the promoter and thaw bulkload begin
// retried it.
func TestHTTPSAgainstPlainHTTPNotRetriable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "https://", 1)
	c, err := bulkloadclient.New(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Begin(t.Context(), bulkload.Target{Database: "db", Table: "t"}, "tok-1234567890abcdef", bulkloadclient.BeginOptions{})
	if err == nil || bulkloadclient.IsRetriable(err) {
		t.Errorf("IsRetriable = true for an https URL at a plain HTTP server (configuration error, not a blip): %v", err)
	}
}
