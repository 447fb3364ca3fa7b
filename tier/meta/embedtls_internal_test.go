package meta

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/testtls"
)

// TestOwnClientTLSPins: an embedded etcd's own client accepts only the
// server that presents the certificate of its CertFile, whatever CA signed
// the server's and whatever address it names.
func TestOwnClientTLSPins(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler()) // httptest's certificate
	defer srv.Close()
	get := func(cert, key string) error {
		cli := &http.Client{Transport: &http.Transport{TLSClientConfig: ownClientTLS(cert, key, false)}}
		resp, err := cli.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	same, sameKey := testtls.Files(t)
	if err := get(same, sameKey); err != nil {
		t.Fatalf("the server presenting the pinned certificate: %v", err)
	}
	dir := t.TempDir()
	other, otherKey := filepath.Join(dir, "other.pem"), filepath.Join(dir, "other-key.pem")
	testtls.Write(t, other, otherKey)
	if err := get(other, otherKey); err == nil || !strings.Contains(err.Error(), "not the embedded etcd") {
		t.Fatalf("a server presenting another certificate: %v, want refused", err)
	}
	if err := get(filepath.Join(dir, "missing.pem"), otherKey); err == nil || !strings.Contains(err.Error(), "own certificate") {
		t.Fatalf("an unreadable certificate file: %v, want refused", err)
	}
}
