package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTierCommandAtNonTierAddress: a client command pointed at something
// that is not a coordinator (the promoter's API, which answers unknown
// paths 404 without a message) says so; it printed "NOT_FOUND: " and
// nothing else.
func TestTierCommandAtNonTierAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "no route ` + r.URL.Path + `", "code": "not_found"}`))
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"table", "list", "--server", srv.URL, "--timeout", "3s"},
		{"get", "a.b", `{"id":1}`, "--server", srv.URL, "--timeout", "3s"},
	} {
		code, _, errOut := run(t, args...)
		if code != 1 || !strings.Contains(errOut, "answered without a thaw error") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestHTTPSAgainstPlainTier: an https:// address of a plain-HTTP tier is a
// configuration mistake no retry fixes: it fails at once, as an untrusted
// certificate does, not after --timeout of retries.
func TestHTTPSAgainstPlainTier(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "https://", 1)
	start := time.Now()
	code, _, errOut := run(t, "table", "list", "--server", u, "--timeout", "20s")
	if took := time.Since(start); code != 1 || took > 10*time.Second || !strings.Contains(errOut, "HTTP response to HTTPS client") {
		t.Errorf("exit %d after %v (--timeout 20s): %s", code, took, errOut)
	}
}
