package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/tier/access"
)

// TestCheckFlag: thaw server, coordinator, tablet and promoter --check read every
// file their config names and say which does not load, without starting
// anything (no listener, no etcd: the endpoints below do not exist).
func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	cert, key := testtls.Files(t)
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		writeFile(t, p, text)
		return p
	}
	goodCallers := write("callers.yaml", "callers:\n  - {name: app, token_sha256: "+access.TokenSHA256("token-0123456789abcdef")+", read: ['*']}\n")
	badCallers := write("bad-callers.yaml", "callers:\n  - {name: app, token_sha256: abc, read: ['*']}\n")
	token := write("token", strings.Repeat("t", 40)+"\n")
	missing := filepath.Join(dir, "missing.pem")
	tlsSection := "tls: {cert_file: " + cert + ", key_file: " + key + ", ca_file: " + cert + "}\n"
	etcd := "etcd: {endpoints: ['https://127.0.0.1:1'], tls: {ca_file: " + cert + "}}\n"
	// The promoter's policy files and its catalogs' local files are read;
	// the lake is thaw plan's to check: --check does not open the catalog
	// (the catalog file here is no SQLite database).
	policy := func(name, table string) string {
		return "apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {name: " + name + "}\nspec: {source: {table: lake." + table + "}}\n"
	}
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("policies/a.yaml", policy("a", "events"))
	write("catalog.db", "")
	catalogs := "catalogs: {default: {type: sql, uri: " + dir + "/catalog.db, warehouse: file://" + dir + "/wh}}\n"
	promoterBase := "data_dir: " + dir + "/p\npolicies: [" + dir + "/policies]\n" + catalogs
	promoterWith := func(policies string) string {
		return "data_dir: " + dir + "/p\npolicies: [" + policies + "]\n" + catalogs
	}

	for _, tc := range []struct {
		name, cmd, config, want string
	}{
		{"server ok", "server", "data_dir: " + dir + "/data\n" + tlsSection + "coordinator: {callers_file: " + goodCallers + ", authorize_data: true}\n", "is valid"},
		{"server bad callers file", "server", "data_dir: " + dir + "/data\ncoordinator: {callers_file: " + badCallers + "}\n", "bad-callers.yaml: caller app: token sha256"},
		{"server missing key pair", "server", "data_dir: " + dir + "/data\ntls: {cert_file: " + missing + ", key_file: " + key + "}\n", "missing.pem"},
		{"coordinator ok", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + tlsSection + "internal_token_file: " + token + "\ncoordinator: {callers_file: " + goodCallers + "}\n", "is valid"},
		{"coordinator missing token file", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + "internal_token_file: " + missing + "\n", "missing.pem"},
		{"coordinator callers file without data callers", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + "coordinator: {callers_file: " + write("ddl-only.yaml", "callers:\n  - {name: a, token_sha256: "+access.TokenSHA256("token-0123456789abcdef")+", ddl: ['*']}\n") + ", authorize_data: true}\n", "authorize_data needs a caller with read or write"},
		{"tablet ok", "tablet", "id: ts-1\ndata_dir: " + dir + "/t\nobject_store: file://" + dir + "/r\n" + etcd + "internal_token_file: " + token + "\n", "is valid"},
		{"promoter ok", "promoter", promoterBase + "tls: {cert_file: " + cert + ", key_file: " + key + "}\napi_callers_file: " + write("api.yaml", "callers:\n  - {name: ops, token_sha256: "+access.TokenSHA256("token-0123456789abcdef")+", role: promote}\n") + "\n", "is valid"},
		{"promoter bad api callers", "promoter", promoterBase + "api_callers_file: " + write("bad-api.yaml", "callers:\n  - {name: ops, token_sha256: abc, role: root}\n") + "\n", `role "root"`},
		{"promoter missing policies", "promoter", promoterWith(dir + "/nope"), "nope: no such file or directory"},
		{"promoter bad policy", "promoter", promoterWith(write("bad-policy.yaml", strings.Replace(policy("b", "events"), "kind: PromotionPolicy", "kind: Policy", 1))), `bad-policy.yaml:2:7: kind`},
		{"promoter policies of one lake table", "promoter", promoterWith(dir + "/policies, " + write("same-table.yaml", policy("b", "events"))), "policies a and b both promote lake table default.lake.events"},
		{"promoter policy of an unknown catalog", "promoter", promoterWith(write("other-catalog.yaml", strings.Replace(policy("b", "x"), "source: {", "source: {catalog: other, ", 1))), `source catalog "other" is not in catalogs`},
		{"promoter missing catalog file", "promoter", "data_dir: " + dir + "/p\npolicies: [" + dir + "/policies]\ncatalogs: {default: {uri: " + dir + "/missing.db}}\n", "catalogs.default: lake: not found: sql catalog file " + dir + "/missing.db does not exist"},
		{"tablet missing etcd CA", "tablet", "id: ts-1\ndata_dir: " + dir + "/t\nobject_store: file://" + dir + "/r\netcd: {endpoints: ['https://127.0.0.1:1'], tls: {ca_file: " + missing + "}}\n", "etcd.tls"},
	} {
		config := write(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.config)
		code, out, errOut := run(t, tc.cmd, "--check", "--config", config)
		if ok := strings.HasSuffix(tc.name, " ok"); ok != (code == 0) || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%s: code %d, stdout %q, stderr %q; want %q", tc.name, code, out, errOut, tc.want)
		} else if !ok && !strings.HasPrefix(errOut, "thaw: check of "+config+": ") {
			t.Errorf("%s: stderr %q does not begin with the config checked", tc.name, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("--check created the data directory: %v", err)
	}
	// Flags are checked as the config is: --tablets 0 is no "use the default".
	if code, out, errOut := run(t, "server", "--check", "--data-dir", dir+"/data", "--tablets", "0"); code != 1 || !strings.Contains(errOut, "tablets 0 not in 1..64") {
		t.Errorf("--tablets 0: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run(t, "server", "--check", "--data-dir", dir+"/data"); code != 0 || out != "thaw server: the default config is valid and every file it names loads\n" {
		t.Errorf("no config: code %d, stdout %q", code, out)
	}
}

// TestPromoterClientToken: the promoter commands send THAW_PROMOTER_TOKEN
// (not THAW_TOKEN, the tier's) as a bearer token.
func TestPromoterClientToken(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"policies":[]}`))
	}))
	defer srv.Close()
	t.Setenv(daemon.EnvToken, "tier-token-0123456789")
	for _, tok := range []string{"", "promoter-token-0123456789"} {
		t.Setenv(daemon.EnvPromoterToken, tok)
		c, err := promoterClient(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Policies(t.Context())
	}
	if want := []string{"", "Bearer promoter-token-0123456789"}; !slices.Equal(seen, want) {
		t.Fatalf("Authorization headers %q, want %q", seen, want)
	}
}

// TestPromoterClientRefusesRedirects: a redirect is not followed, so the
// bearer token never reaches the host it names.
func TestPromoterClientRefusesRedirects(t *testing.T) {
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = append(leaked, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"policies":[]}`))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	t.Setenv(daemon.EnvPromoterToken, "promoter-token-0123456789")
	c, err := promoterClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policies(t.Context()); err == nil || !strings.Contains(err.Error(), "redirect to "+other.URL) {
		t.Errorf("Policies through a redirect: %v", err)
	}
	if leaked != nil {
		t.Errorf("the redirect was followed, sending %q", leaked)
	}
}
