package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/access"
)

// TestPromoterAPICallers: with api_callers_file the promoter's API answers
// only callers' tokens — reads for role read, requests for promotions only
// for role promote — while the health probes stay open; a rewritten file
// takes effect without a restart, and a bad one is ignored.
func TestPromoterAPICallers(t *testing.T) {
	cfg := promoterTestConfig(t)
	const readTok, promoteTok = "api-read-token-0123456789", "api-promote-token-0123456789"
	cfg.APICallersFile = filepath.Join(t.TempDir(), "api-callers.yaml")
	writeFile := func(text string) {
		t.Helper()
		tmp := cfg.APICallersFile + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg.APICallersFile); err != nil {
			t.Fatal(err)
		}
	}
	callers := func(readHash string) string {
		return "callers:\n  - {name: dash, token_sha256: " + readHash + ", role: read}\n" +
			"  - {name: ops, token_sha256: " + access.TokenSHA256(promoteTok) + ", role: promote}\n"
	}
	writeFile(callers(access.TokenSHA256(readTok)))
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	call := func(method, path, tok, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+d.Address()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e promoterhttp.ErrorResponse
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e.Code
	}
	for _, tc := range []struct {
		what, method, path, tok string
		status                  int
		code                    string
	}{
		{"a read without a token", "GET", promoterhttp.PathPolicies, "", 401, promoterhttp.CodeUnauthenticated},
		{"a read with an unknown token", "GET", promoterhttp.PathPolicies, "not-a-caller-token-0", 401, promoterhttp.CodeUnauthenticated},
		{"a read by a reader", "GET", promoterhttp.PathPolicies, readTok, 200, ""},
		{"a read by an operator", "GET", promoterhttp.PathPromotions, promoteTok, 200, ""},
		{"a request by a reader", "POST", promoterhttp.PathPromotions, readTok, 403, promoterhttp.CodePermissionDenied},
		{"a request without a token", "POST", promoterhttp.PathPromotions, "", 401, promoterhttp.CodeUnauthenticated},
		// Past the guard, the API judges the (empty) request itself.
		{"a request by an operator", "POST", promoterhttp.PathPromotions, promoteTok, 400, promoterhttp.CodeInvalid},
		{"the readiness probe", "GET", PathReadyz, "", 200, ""},
	} {
		if status, code := call(tc.method, tc.path, tc.tok, "{}"); status != tc.status || code != tc.code {
			t.Errorf("%s: %d %q, want %d %q", tc.what, status, code, tc.status, tc.code)
		}
	}

	// The reader's token replaced: refused within a couple of seconds.
	const newReadTok = "api-read-token-new-0123456789"
	writeFile(callers(access.TokenSHA256(newReadTok)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, _ := call("GET", promoterhttp.PathPolicies, readTok, "")
		if status == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replaced token still answers %d", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, _ := call("GET", promoterhttp.PathPolicies, newReadTok, ""); status != 200 {
		t.Fatalf("the new token: %d", status)
	}
	writeFile("callers:\n  - {name: dash, token_sha256: nope, role: read}\n")
	time.Sleep(1500 * time.Millisecond)
	if status, _ := call("GET", promoterhttp.PathPolicies, newReadTok, ""); status != 200 {
		t.Fatalf("after a bad change: %d", status)
	}
}

func TestParseAPICallers(t *testing.T) {
	dir := t.TempDir()
	h := access.TokenSHA256("token-0123456789abcdef")
	for name, tc := range map[string]struct{ text, want string }{
		"bad role":    {"callers:\n  - {name: a, token_sha256: " + h + ", role: admin}\n", `role "admin" is not read or promote`},
		"no callers":  {"callers: []\n", "names no caller"},
		"unknown key": {"callers:\n  - {name: a, token_sha256: " + h + ", role: read, roles: [x]}\n", "line 2"},
		"bad hash":    {"callers:\n  - {name: a, token_sha256: " + strings.ToUpper(h) + ", role: read}\n", "64 lowercase hex"},
		"same token":  {"callers:\n  - {name: a, token_sha256: " + h + ", role: read}\n  - {name: b, token_sha256: " + h + ", role: promote}\n", "token sha256 also of caller a"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := parseAPICallers(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
