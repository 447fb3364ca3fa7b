package lake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// restStub is a minimal Iceberg REST catalog server over another catalog: the
// read-only endpoints Lake uses. It insists on a bearer token and a header.
func restStub(t *testing.T, cat catalog.Catalog, token, header, value string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Errorf("stub: encode: %v", err)
		}
	}
	fail := func(w http.ResponseWriter, code int, typ string, err error) {
		writeJSON(w, code, map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "code": code}})
	}
	ns := func(s string) table.Identifier { return strings.Split(s, "\x1f") }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"defaults": map[string]string{}, "overrides": map[string]string{}})
	})
	mux.HandleFunc("GET /v1/namespaces", func(w http.ResponseWriter, r *http.Request) {
		var parent table.Identifier
		if p := r.URL.Query().Get("parent"); p != "" {
			parent = ns(p)
		}
		list, err := cat.ListNamespaces(r.Context(), parent)
		if err != nil {
			fail(w, 404, "NoSuchNamespaceException", err)
			return
		}
		if list == nil {
			list = []table.Identifier{}
		}
		writeJSON(w, 200, map[string]any{"namespaces": list})
	})
	mux.HandleFunc("GET /v1/namespaces/{ns}/tables", func(w http.ResponseWriter, r *http.Request) {
		type ident struct {
			Namespace []string `json:"namespace"`
			Name      string   `json:"name"`
		}
		out := []ident{}
		for id, err := range cat.ListTables(r.Context(), ns(r.PathValue("ns"))) {
			if err != nil {
				fail(w, 404, "NoSuchNamespaceException", err)
				return
			}
			out = append(out, ident{Namespace: id[:len(id)-1], Name: id[len(id)-1]})
		}
		writeJSON(w, 200, map[string]any{"identifiers": out})
	})
	mux.HandleFunc("GET /v1/namespaces/{ns}/tables/{table}", func(w http.ResponseWriter, r *http.Request) {
		tbl, err := cat.LoadTable(r.Context(), append(ns(r.PathValue("ns")), r.PathValue("table")))
		if err != nil {
			fail(w, 404, "NoSuchTableException", err)
			return
		}
		writeJSON(w, 200, map[string]any{"metadata-location": tbl.MetadataLocation(), "metadata": tbl.Metadata(), "config": map[string]string{}})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer "+token || r.Header.Get(header) != value {
			fail(w, 401, "NotAuthorizedException", fmt.Errorf("bad credentials on %s", r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestRESTCatalog(t *testing.T) {
	sqlLake, info := sample(t)
	ctx := t.Context()
	srv, calls := restStub(t, sqlLake.cat, "tok-123", "X-Thaw-Tenant", "blue")

	cfg := Config{Type: CatalogREST, URI: srv.URL, Token: "tok-123", Headers: map[string]Secret{"X-Thaw-Tenant": "blue"}}
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tables, err := l.Tables(ctx, "")
	if err != nil || !slices.Equal(tables, []string{"lake.events"}) {
		t.Fatalf("rest tables %v %v", tables, err)
	}
	d, err := l.Describe(ctx, "lake.events")
	if err != nil {
		t.Fatal(err)
	}
	want, err := sqlLake.Describe(ctx, "lake.events")
	if err != nil {
		t.Fatal(err)
	}
	if d.UUID != want.UUID || len(d.Snapshots) != len(want.Snapshots) || d.MetadataLocation != want.MetadataLocation {
		t.Errorf("rest describe differs: %+v", d)
	}
	parts, err := l.Partitions(ctx, "lake.events", nil)
	if err != nil || len(parts) != sampleDays {
		t.Fatalf("rest partitions %d %v", len(parts), err)
	}
	if r := scan(t, l, "lake.events", ScanOptions{Columns: []string{"id"}}); r.n != info.Rows {
		t.Errorf("rest scan %d rows, want %d", r.n, info.Rows)
	}
	if _, err := l.Describe(ctx, "lake.missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("rest missing table: %v", err)
	}
	if calls.Load() == 0 {
		t.Fatal("the stub saw no request")
	}

	// Wrong token: the stub refuses, and the error does not carry the token.
	bad := cfg
	bad.Token = "wrong-token"
	if l2, err := Open(ctx, bad); err == nil {
		_, err = l2.Tables(ctx, "")
		if err == nil || strings.Contains(err.Error(), "wrong-token") {
			t.Errorf("wrong token: %v", err)
		}
		_ = l2.Close()
	} else if strings.Contains(err.Error(), "wrong-token") {
		t.Errorf("error leaks the token: %v", err)
	}
}

func TestS3DataFiles(t *testing.T) {
	ctx := t.Context()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	if err := backend.CreateBucket("lake"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{
		URI: filepath.Join(dir, "catalog.db"), Warehouse: "s3://lake/wh",
		Storage: StorageConfig{S3: S3Config{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: "test", SecretAccessKey: "s3-secret-key"}},
	}
	w, err := open(ctx, cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	info, err := writeSample(ctx, w.cat, SampleOptions{Rows: 400, Days: 2, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	objs, err := backend.ListBucket("lake", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var parquet int
	for _, o := range objs.Contents {
		if strings.HasSuffix(o.Key, ".parquet") {
			parquet++
		}
	}
	if parquet < 4 {
		t.Fatalf("%d parquet objects in the fake S3", parquet)
	}

	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	parts, err := l.Partitions(ctx, "lake.events", nil)
	if err != nil || len(parts) != 2 {
		t.Fatalf("s3 partitions %v %v", parts, err)
	}
	r := scan(t, l, "lake.events", ScanOptions{Columns: []string{"id", "version"}})
	if r.n != info.Rows {
		t.Errorf("s3 scan %d rows, want %d", r.n, info.Rows)
	}
	d, err := l.Describe(ctx, "lake.events")
	if err != nil || !strings.HasPrefix(d.Location, "s3://lake/wh/") {
		t.Errorf("location %q %v", d.Location, err)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	cfg := Config{
		Type: CatalogREST, URI: "https://cat.example", Credential: "client:cred-secret", Token: "tok-secret",
		Password: "pw-secret", Headers: map[string]Secret{"Authorization": "hdr-secret"},
		Glue:       GlueConfig{AccessKeyID: "AKIA", SecretAccessKey: "glue-secret", SessionToken: "glue-token"},
		Storage:    StorageConfig{S3: S3Config{AccessKeyID: "AKIA", SecretAccessKey: "s3-secret", SessionToken: "s3-token"}, GCS: GCSConfig{JSONKey: "gcs-secret"}, Azure: AzureConfig{AccountKey: "az-secret", SASToken: "sas-secret"}},
		Properties: map[string]Secret{"s3.secret-access-key": "prop-secret"},
	}
	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("config", "cfg", cfg, "token", cfg.Token)
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"String": cfg.String(), "%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg),
		"%#v": fmt.Sprintf("%#v", cfg), "json": string(js), "slog": logBuf.String(),
	}
	// Every verb, not only those String serves: fmt prints the fields of a
	// value under %d, %t, ... (it printed them, the secrets included).
	for _, verb := range []string{"%s", "%q", "%x", "%d", "%t", "%c", "%08.3f"} {
		outputs[verb] = fmt.Sprintf(verb, cfg)
		outputs[verb+" pointer"] = fmt.Sprintf(verb, &cfg)
		outputs[verb+" storage"] = fmt.Sprintf(verb, cfg.Storage)
		outputs[verb+" secret"] = fmt.Sprintf(verb, cfg.Password)
	}
	text, err := cfg.Password.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	outputs["MarshalText"] = string(text)
	for how, out := range outputs {
		for _, secret := range []string{"cred-secret", "tok-secret", "pw-secret", "hdr-secret", "glue-secret", "glue-token",
			"s3-secret", "s3-token", "gcs-secret", "az-secret", "sas-secret", "prop-secret"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s output leaks %q: %s", how, secret, out)
			}
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("%s output shows no redaction marker: %s", how, out)
		}
	}
	// Decoding still takes plain strings.
	var back Config
	if err := json.Unmarshal([]byte(`{"type":"rest","uri":"https://x","token":"abc","headers":{"H":"v"}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Token.Reveal() != "abc" || back.Headers["H"].Reveal() != "v" {
		t.Errorf("decoded %#v", back)
	}
	if p := cfg.Storage.storageProps(); p["s3.secret-access-key"] != "s3-secret" || p["adls.sas-token.blob.core.windows.net"] != "" {
		t.Errorf("storage props %v", p)
	}

	// A password in a catalog URI (a Postgres DSN, an OAuth server) is
	// redacted too: it printed in every form.
	sql := Config{Type: CatalogSQL, URI: "postgres://thaw:uri-secret@db.example:5432/catalog?sslmode=disable",
		OAuthServerURI: "https://u:oauth-secret@auth.example/token"}
	logBuf.Reset()
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("config", "cfg", sql)
	var textBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&textBuf, nil)).Info("config", "cfg", sql)
	js, err = json.Marshal(sql)
	if err != nil {
		t.Fatal(err)
	}
	for how, out := range map[string]string{
		"String": sql.String(), "%v": fmt.Sprintf("%v", sql), "%+v": fmt.Sprintf("%+v", sql), "%#v": fmt.Sprintf("%#v", sql),
		"json": string(js), "slog json": logBuf.String(), "slog text": textBuf.String(),
	} {
		if strings.Contains(out, "uri-secret") || strings.Contains(out, "oauth-secret") || !strings.Contains(out, "thaw:xxxxx@db.example") {
			t.Errorf("%s output of a config with passwords in its URIs: %s", how, out)
		}
	}
}

// TestAzureSASOnly: a SAS token without an account key authenticates by
// the token: the shared-key account name was set whenever account_name
// was, and iceberg-go then took shared-key authentication and failed
// ("shared-key requires both ... account.name and ... account.key").
func TestAzureSASOnly(t *testing.T) {
	s := StorageConfig{Azure: AzureConfig{AccountName: "acct", SASToken: "sv=x"}}
	p := s.storageProps()
	if _, ok := p["adls.auth.shared-key.account.name"]; ok || p["adls.sas-token.acct.dfs.core.windows.net"] != "sv=x" {
		t.Errorf("SAS-only props %v", p)
	}
	s.Azure.AccountKey = "k"
	if p := s.storageProps(); p["adls.auth.shared-key.account.name"] != "acct" || p["adls.auth.shared-key.account.key"] != "k" {
		t.Errorf("shared-key props %v", p)
	}
}
