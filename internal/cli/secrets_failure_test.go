package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// failureSecrets are the credentials of TestNoCredentialLeaksOnFailure:
// each one is used on a path that fails.
var failureSecrets = map[string]string{
	"rest.token":             "SECRET-resttok-5d2b8e01c7",
	"rest.headers":           "SECRET-resthdr-5d2b3f9a64",
	"rest.credential":        "SECRET-restcred-5d2b71c0e8",
	"glue.secret_access_key": "SECRET-gluesk-5d2b0a4d93",
	"glue.session_token":     "SECRET-gluest-5d2b6c2f17",
	daemon.EnvToken:          "SECRET-tiertok-5d2b9e7a30",
	daemon.EnvPromoterToken:  "SECRET-apitok-5d2b4b8d52",
	"a wrong API token":      "SECRET-wrongapi-5d2b2e6f",
}

// secretsServer is a server standing for a catalog that refuses or fails:
// it records every request (the control: the secrets were sent) and
// answers what answer gives.
type secretsServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen bytes.Buffer
}

func newSecretsServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *secretsServer {
	s := &secretsServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		fmt.Fprintf(&s.seen, "%s %s %v %s\n", r.Method, r.URL, r.Header, body)
		s.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *secretsServer) requests() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.seen.Bytes())
}

func restError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"message":%q,"type":%q,"code":%d}}`, msg, typ, code)
}

// TestNoCredentialLeaksOnFailure is TestNoCredentialLeaks on the paths
// that fail, where errors carry what went wrong: a REST catalog whose
// OAuth server refuses the client credential (the promoter does not
// start), a REST catalog with a token and a header that answers every
// table request with an error, a Glue catalog whose endpoint refuses the
// keys, a tier that refuses the promoter's bearer token, and API callers
// with a wrong token. No credential appears in the promoter's logs, its
// API answers and metrics, the CLI's outputs, etcd (the ledger) or its
// data directory; the control checks find that each one was sent.
func TestNoCredentialLeaksOnFailure(t *testing.T) {
	dir := t.TempDir()
	info, err := lake.Sample(t.Context(), lake.SampleOptions{Dir: filepath.Join(dir, "lake"), Rows: 200, Days: 4, Seed: 3, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	sec := failureSecrets
	rest := newSecretsServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/config" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"defaults":{},"overrides":{}}`)
			return
		}
		restError(w, http.StatusInternalServerError, "ServiceFailureException", "the catalog is unwell")
	})
	oauth := newSecretsServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/config" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"defaults":{},"overrides":{}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client","error_description":"the client is unknown"}`)
	})
	glue := newSecretsServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}`)
	})

	pols := filepath.Join(dir, "policies")
	if err := os.MkdirAll(pols, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"default", "rest", "glue"} {
		text := strings.Replace(quickstartPolicy, "name: quickstart", "name: "+c, 1)
		text = strings.Replace(text, "catalog: default", "catalog: "+c, 1)
		text = strings.Replace(text, "database: quickstart", "database: db"+c, 1)
		if err := os.WriteFile(filepath.Join(pols, c+".yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	apiSum := sha256.Sum256([]byte(sec[daemon.EnvPromoterToken]))
	callers := filepath.Join(dir, "callers.yaml")
	if err := os.WriteFile(callers, fmt.Appendf(nil, "callers:\n  - {name: ops, token_sha256: %s, role: promote}\n", hex.EncodeToString(apiSum[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	catalogs := fmt.Sprintf(`  default: {type: sql, uri: %q, warehouse: %q}
  rest:
    type: rest
    uri: %q
    token: %s
    headers: {X-Thaw-Tenant: %s}
  glue:
    type: glue
    glue: {region: us-east-1, endpoint: %q, access_key_id: AKIDTHAWTEST, secret_access_key: %s, session_token: %s}
`, info.Config.URI, info.Config.Warehouse, rest.URL, sec["rest.token"], sec["rest.headers"], glue.URL, sec["glue.secret_access_key"], sec["glue.session_token"])
	writeConfig := func(name, catalogs string) string {
		path := filepath.Join(dir, name)
		cfg := fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
policies: [policies]
reconcile_interval: -1s
shutdown_timeout: 20s
api_callers_file: %q
catalogs:
%stier:
  tablets: 1
log: {level: debug, format: json}
`, dataDir, callers, catalogs)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	configPath := writeConfig("promoter.yaml", catalogs)
	oauthConfig := writeConfig("oauth.yaml", catalogs+fmt.Sprintf("  oauth: {type: rest, uri: %q, credential: %q}\n", oauth.URL, "thaw:"+sec["rest.credential"]))
	t.Setenv(daemon.EnvToken, sec[daemon.EnvToken])
	t.Setenv(daemon.EnvPromoterToken, sec[daemon.EnvPromoterToken])

	var caps captures
	capture := caps.add

	// The OAuth server refuses the credential: neither thaw plan nor the
	// promoter starts.
	for _, args := range [][]string{{"plan", "--config", oauthConfig}, {"promoter", "--config", oauthConfig}} {
		code, out, errOut := run(t, args...)
		if code == 0 {
			t.Fatalf("thaw %v with a refused OAuth credential: exit 0\n%s", args, out)
		}
		capture("thaw "+strings.Join(args, " "), []byte(out+errOut))
	}

	// The tier authenticates its callers: THAW_TOKEN may create tables
	// and read them but not bulk-load them (Begin is refused).
	tierSum := sha256.Sum256([]byte(sec[daemon.EnvToken]))
	cfg, err := daemon.LoadPromoterConfig(configPath)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	d, err := daemon.StartPromoter(t.Context(), cfg, daemon.PromoterOptions{
		RunOptions: daemon.RunOptions{Logger: daemon.NewLogger(logs, daemon.LogConfig{Level: "debug", Format: "json"})},
		Embedded: func(ec *daemon.EmbeddedConfig) {
			smallTier(ec)
			ec.Coordinator.Callers = []daemon.CallerOptions{{Name: "promoter", TokenSHA256: hex.EncodeToString(tierSum[:]),
				Tables: []string{"other.*"}, DDL: []string{"*"}, Read: []string{"*"}}}
			ec.Coordinator.AuthorizeDDL, ec.Coordinator.AuthorizeData = true, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = d.Close()
		}
	}()
	if err := d.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	base := d.URL()
	get := func(path, token string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		capture("GET "+path+" "+resp.Status, b)
	}

	// Each table's promotion fails: the tier refuses the promoter's token
	// (default), the REST catalog fails, the Glue endpoint refuses.
	for _, table := range []string{"dbdefault.events", "dbrest.events", "dbglue.events"} {
		_, out, errOut := run(t, "promote", table, "--promoter", base, "--wait", "--timeout", "2m")
		capture("thaw promote "+table, []byte(out+errOut))
	}
	c, err := promoterClient(base) // with THAW_PROMOTER_TOKEN
	if err != nil {
		t.Fatal(err)
	}
	awaitPhase(t, c, promoter.PhaseFailed, 1)
	for _, p := range []string{"/v1/policies", "/v1/plan", "/v1/plan?policy=rest", "/v1/plan?policy=glue", "/v1/promotions", "/metrics", "/readyz"} {
		get(p, sec[daemon.EnvPromoterToken])
	}
	var pr promoterhttp.PlansResponse
	if err := json.Unmarshal(caps.byWhere()["GET /v1/plan 200 OK"], &pr); err != nil || len(pr.Plans) != 1 || pr.Plans[0].Policy != "default" || len(pr.Errors) != 2 {
		t.Errorf("GET /v1/plan with two failing catalogs: %+v, %v; want default's plan and two errors", pr, err)
	}
	get("/v1/promotions", sec["a wrong API token"])
	for _, args := range [][]string{
		{"status", "--promoter", base}, {"status", "--promoter", base, "--output", "json"},
		{"plan", "--promoter", base}, {"plan", "--promoter", base, "--output", "json"},
	} {
		_, out, errOut := run(t, args...)
		capture("thaw "+strings.Join(args, " "), []byte(out+errOut))
	}
	tier := d.Tier().Address()
	for _, args := range [][]string{{"bulkload", "list", "--all", "--server", tier}, {"table", "list", "--server", tier}} {
		_, out, errOut := run(t, args...)
		capture("thaw "+strings.Join(args, " "), []byte(out+errOut))
	}
	t.Setenv(daemon.EnvToken, sec["a wrong API token"])
	for _, args := range [][]string{{"bulkload", "list", "--server", tier}, {"get", "dbdefault.events", "1", "--server", tier}} {
		code, out, errOut := run(t, args...)
		if code == 0 {
			t.Fatalf("thaw %v with a wrong tier token: exit 0", args)
		}
		capture("thaw "+strings.Join(args, " ")+" (wrong token)", []byte(out+errOut))
	}
	t.Setenv(daemon.EnvPromoterToken, sec["a wrong API token"])
	for _, args := range [][]string{{"status", "--promoter", base}, {"promote", "dbdefault.events", "--promoter", base}} {
		code, out, errOut := run(t, args...)
		if code == 0 {
			t.Fatalf("thaw %v with a wrong API token: exit 0", args)
		}
		capture("thaw "+strings.Join(args, " ")+" (wrong token)", []byte(out+errOut))
	}
	resp, err := d.Etcd().Get(t.Context(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	var etcd bytes.Buffer
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&etcd, "%s=%s\n", kv.Key, kv.Value)
	}
	capture("etcd", etcd.Bytes())
	closed = true
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	capture("daemon logs", logs.Bytes())
	planLogs := &testlog.Buffer{}
	promoterLogOutput = planLogs
	defer func() { promoterLogOutput = os.Stderr }()
	code, out, errOut := run(t, "plan", "--config", configPath)
	capture("thaw plan --config", []byte(out+errOut))
	// Two policies' catalogs fail: the third's plan is shown all the same,
	// and the command fails naming them.
	if code != 1 || !strings.Contains(out, "policy default: lake") || !strings.Contains(out, "policy glue: cannot plan:") ||
		!strings.Contains(out, "policy rest: cannot plan:") {
		t.Errorf("thaw plan --config with two failing catalogs: exit %d\n%s%s", code, out, errOut)
	}
	capture("thaw plan logs", planLogs.Bytes())
	caps.addFiles(t, dataDir)

	// The controls: every secret was sent where it belongs, and the
	// failures were reported.
	all := caps.byWhere()
	var everything []byte
	for _, data := range all {
		everything = append(everything, data...)
	}
	for where, c := range map[string]struct {
		got    []byte
		secret string
	}{
		"rest catalog requests (token)":  {rest.requests(), sec["rest.token"]},
		"rest catalog requests (header)": {rest.requests(), sec["rest.headers"]},
		"oauth server requests":          {oauth.requests(), sec["rest.credential"]},
		"glue requests (session token)":  {glue.requests(), sec["glue.session_token"]},
		"glue requests (signed, key id)": {glue.requests(), "AKIDTHAWTEST"},
		"api callers (sha of the token)": {all["GET /v1/promotions 401 Unauthorized"], "not an API caller"},
		"ledger (a failed promotion)":    {all["etcd"], `"phase":"failed"`},
		"tier refusal in the ledger":     {all["etcd"], "permission"},
		"rest failure reported":          {everything, "the catalog is unwell"},
		"glue failure reported":          {everything, "UnrecognizedClientException"},
		"oauth failure reported":         {all["thaw promoter --config "+oauthConfig], "invalid_client"},
	} {
		if !bytes.Contains(c.got, []byte(c.secret)) {
			t.Errorf("control %s: %q not found", where, c.secret)
		}
	}
	if found := caps.leaks(failureSecrets); len(found) > 0 {
		t.Fatalf("credentials leaked:\n%s", strings.Join(found, "\n"))
	}
	t.Logf("scanned %d places, %d bytes of logs", len(all), len(logs.Bytes()))
}
