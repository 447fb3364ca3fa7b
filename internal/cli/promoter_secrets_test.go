package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testvgw"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// testSecrets are the credentials the test's catalog config carries.
// SQLite ignores the password and file:// ignores the object-store keys,
// so the promoter works while holding all of them.
var testSecrets = map[string]string{
	"password":               "SECRET-pw-7f3c2a91d0e4",
	"s3.access_key_id":       "SECRET-ak-7f3c5b8e6a21",
	"s3.secret_access_key":   "SECRET-sk-7f3c0c4d9b17",
	"s3.session_token":       "SECRET-st-7f3c8f2e1d55",
	"gcs.json_key":           "SECRET-gcs-7f3c3a6b0c88",
	"azure.account_key":      "SECRET-az-7f3c9d1e4f02",
	"azure.sas_token":        "SECRET-sas-7f3c6e0a2b49",
	"glue.secret_access_key": "SECRET-glue-7f3c1b7c3d60",
	"properties":             "SECRET-prop-7f3c4e9f8a13",
	kafkaSecret:              "SECRET-kafka-7f3c2d5e81b6",
	tierTokenSecret:          "SECRET-tiertoken-7f3c9a4b",
}

// kafkaSecret names the Kafka SASL password, which comes from the
// environment (THAW_KAFKA_PASSWORD), not from the config file.
const kafkaSecret = "kafka (THAW_KAFKA_PASSWORD)"

// tierTokenSecret names the bearer token the promoter sends the tier's
// BulkLoadService, from the environment (THAW_TOKEN).
const tierTokenSecret = "tier bearer token (THAW_TOKEN)"

// fromEnv reports whether a secret comes from the environment.
func fromEnv(name string) bool { return name == kafkaSecret || name == tierTokenSecret }

func secretsYAML() string {
	s := testSecrets
	return fmt.Sprintf(`    password: %s
    storage:
      s3: {access_key_id: %s, secret_access_key: %s, session_token: %s}
      gcs: {json_key: %s}
      azure: {account_name: thawtest, account_key: %s, sas_token: %s}
    glue: {access_key_id: AKIDGLUE, secret_access_key: %s}
    properties: {thaw.test.secret: %s}`, s["password"], s["s3.access_key_id"], s["s3.secret_access_key"], s["s3.session_token"],
		s["gcs.json_key"], s["azure.account_key"], s["azure.sas_token"], s["glue.secret_access_key"], s["properties"])
}

// leaks returns "where: secret (form)" for every one of testSecrets
// found in data, in plain text, base64 or URL-escaped (encodedForms).
func leaks(where string, data []byte) []string { return leaksOf(testSecrets, where, data) }

// leaksOf is leaks for the secrets given.
func leaksOf(secrets map[string]string, where string, data []byte) []string {
	var out []string
	for name, v := range secrets {
		for form, enc := range encodedForms(v) {
			if bytes.Contains(data, []byte(enc)) {
				out = append(out, fmt.Sprintf("%s: %s (%s)", where, name, form))
			}
		}
	}
	return out
}

// encodedForms returns v as it may appear in data: plain, URL-escaped,
// and base64 (either alphabet) at each of the three offsets v can have
// inside a longer encoded value (a Basic auth header, a JSON []byte):
// the encoding of v's own bytes, without the 4-character groups it shares
// with its neighbours (at least 8 characters must remain).
func encodedForms(v string) map[string]string {
	forms := map[string]string{"plain": v, "url-escaped": url.QueryEscape(v)}
	for off := range 3 {
		for name, enc := range map[string]*base64.Encoding{"base64": base64.StdEncoding, "base64url": base64.URLEncoding} {
			e := enc.EncodeToString(append(make([]byte, off), v...))
			from := 0
			if off > 0 {
				from = 4
			}
			if to := len(e) - 4; to-from >= 8 {
				forms[fmt.Sprintf("%s at offset %d", name, off)] = e[from:to]
			}
		}
	}
	return forms
}

func TestEncodedFormsFindEmbeddedSecrets(t *testing.T) {
	secrets := map[string]string{"s": "SECRET-sk-7f3c0c4d9b17"}
	for _, prefix := range []string{"", "u:", "user:"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
			blob := []byte(`{"auth":"` + enc.EncodeToString([]byte(prefix+secrets["s"]+"&more")) + `"}`)
			if got := leaksOf(secrets, "blob", blob); len(got) == 0 {
				t.Errorf("base64 of %q + the secret (%s) is not found", prefix, blob)
			}
		}
	}
	if got := leaksOf(secrets, "blob", []byte(base64.StdEncoding.EncodeToString([]byte("SECRET-sk-7f3X0c4d9b17")))); len(got) > 0 {
		t.Errorf("another value taken for the secret: %v", got)
	}
}

// awaitPhase polls the promoter until at least n promotions are in phase
// (for up to 3 minutes).
func awaitPhase(t *testing.T, c *promoterhttp.Client, phase promoter.Phase, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		prs, err := c.Promotions(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		in := 0
		for _, pr := range prs {
			if pr.Record.Phase == phase {
				in++
			}
		}
		if in >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d promotions %s, want %d: %+v", in, phase, n, prs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// captures collects what a secrets test scans, each piece with where it
// was seen. Safe for concurrent use.
type captures struct {
	mu   sync.Mutex
	list []capture
}

type capture struct {
	where string
	data  []byte
}

func (c *captures) add(where string, data []byte) {
	c.mu.Lock()
	c.list = append(c.list, capture{where, bytes.Clone(data)})
	c.mu.Unlock()
}

// addFiles adds every file under roots.
func (c *captures) addFiles(t *testing.T, roots ...string) {
	t.Helper()
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			c.add("file "+path, b)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// byWhere joins the pieces seen at each place.
func (c *captures) byWhere() map[string][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := map[string][]byte{}
	for _, p := range c.list {
		all[p.where] = append(all[p.where], p.data...)
	}
	return all
}

// leaks returns where any of secrets was seen (leaksOf).
func (c *captures) leaks(secrets map[string]string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found []string
	for _, p := range c.list {
		found = append(found, leaksOf(secrets, p.where, p.data)...)
	}
	return found
}

// TestNoCredentialLeaks runs a promoter whose catalog config carries
// credentials, promotes while looking at everything it exposes mid-build,
// and then scans the whole etcd (ledger included), the debug JSON logs,
// /metrics, every API answer, the outputs of thaw plan, promote and status,
// and every file under the data directory: no credential appears in any
// of them. The control check finds them in the config file.
func TestNoCredentialLeaks(t *testing.T) {
	s := newPromoterSetup(t, 600, secretsYAML())
	// Builds write through the upload gateway with scoped credentials,
	// which must not leak either.
	cfgText, err := os.ReadFile(s.configPath)
	if err != nil {
		t.Fatal(err)
	}
	scopedText := strings.Replace(string(cfgText), "tier:\n  tablets: 1\n", "tier:\n  tablets: 1\n  scoped_uploads: true\n", 1)
	if scopedText == string(cfgText) {
		t.Fatal("the config has no tier section to set scoped_uploads in")
	}
	if err := os.WriteFile(s.configPath, []byte(scopedText), 0o600); err != nil {
		t.Fatal(err)
	}
	// The promoter consumes control events from a Kafka (kfake) with SCRAM,
	// its password in the environment.
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "thaw-control", "thaw-status"), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin-pw"), kfake.User("SCRAM-SHA-256", "thaw", testSecrets[kafkaSecret]))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	f, err := os.OpenFile(s.configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "kafka:\n  brokers: [%q]\n  topic: thaw-control\n  status_topic: thaw-status\n  sasl: {mechanism: SCRAM-SHA-256, user: thaw}\n", kc.ListenAddrs()[0])
	if err = errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(daemon.EnvKafkaPassword, testSecrets[kafkaSecret])
	t.Setenv(daemon.EnvToken, testSecrets[tierTokenSecret])
	// The embedded tier keeps its snapshots in S3 (versitygw, which checks
	// signatures), so the scoped builds upload with signed PUTs straight
	// to it; its keys come from the environment (testvgw.Start).
	vgw := testvgw.Start(t)
	vgw.Bucket(t, "snapshots")

	raw, err := os.ReadFile(s.configPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaks("config", raw); len(got) < len(testSecrets)-2 {
		t.Fatalf("control: the scanner finds %d of %d secrets in the config text: %v", len(got), len(testSecrets)-2, got)
	}
	for name, v := range testSecrets {
		if in := bytes.Contains(raw, []byte(v)); in != !fromEnv(name) {
			t.Fatalf("control: secret %s in the config: %v", name, in)
		}
	}

	logs := &testlog.Buffer{}
	var caps captures
	capture := caps.add
	running, release := make(chan promoter.Record, 1), make(chan struct{})
	var once sync.Once
	tokenSum := sha256.Sum256([]byte(testSecrets[tierTokenSecret]))
	d := s.start(t, daemon.PromoterOptions{
		RunOptions: daemon.RunOptions{Logger: daemon.NewLogger(logs, daemon.LogConfig{Level: "debug", Format: "json"})},
		// The embedded tier authenticates its bulk-load callers and
		// authorizes DDL: the target tables are created (createIfMissing)
		// and the promotions commit only with the token of THAW_TOKEN. It
		// authorizes data access too: its policy in etcd, which the scan
		// below covers, holds the token's SHA-256, never the token.
		Embedded: func(ec *daemon.EmbeddedConfig) {
			ec.Coordinator.Callers = []daemon.CallerOptions{{Name: "promoter", TokenSHA256: hex.EncodeToString(tokenSum[:]),
				Tables: []string{"quickstart.*"}, DDL: []string{"quickstart.*"}, Read: []string{"quickstart.*"}}}
			ec.Coordinator.AuthorizeDDL, ec.Coordinator.AuthorizeData = true, true
			ec.ObjectStore = vgw.StoreURL("snapshots", "tier")
		},
		Hooks: promoter.Hooks{AfterPhase: func(ctx context.Context, r promoter.Record) error {
			if r.Phase != promoter.PhaseBuilding {
				return nil
			}
			first := false
			once.Do(func() { first = true })
			if !first {
				return nil
			}
			running <- r
			select {
			case <-release:
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return nil
		}},
	})
	closed := false
	defer func() {
		if !closed {
			_ = d.Close()
		}
	}()
	base := d.URL()
	get := func(path string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		capture("GET "+path+" "+resp.Status, b)
	}
	dumpEtcd := func(where string) int {
		t.Helper()
		resp, err := d.Etcd().Get(t.Context(), "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		ledger := 0
		for _, kv := range resp.Kvs {
			fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value)
			if strings.HasPrefix(string(kv.Key), daemon.DefaultPromoterPrefix+"/promotions/") {
				ledger++
			}
		}
		capture(where, b.Bytes())
		return ledger
	}

	c, err := promoterhttp.NewClient(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("thaw-control"),
		kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	// Events that promote nothing (the test counts its promotions): a lake
	// commit no policy follows, a request the policy refuses, no event.
	for _, v := range []string{
		`{"version":1,"type":"lake_commit","catalog":"default","table":"lake.other"}`,
		`{"version":1,"type":"promote","policy":"scheduled-only"}`,
		`not an event`,
	} {
		if err := producer.ProduceSync(t.Context(), &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	producer.Close()
	items, err := c.Promote(t.Context(), promoter.Request{Table: "quickstart.events"})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("items %+v", items)
	}
	// Mid-build: the ledger, the API with live progress, the metrics.
	var r promoter.Record
	select {
	case r = <-running:
	case <-time.After(2 * time.Minute):
		t.Fatal("no promotion reached the building phase")
	}
	if dumpEtcd("etcd mid-build") == 0 {
		t.Fatal("no ledger record mid-build")
	}
	get("/v1/promotions")
	get("/v1/promotions/" + r.ID)
	get("/metrics")
	close(release)

	awaitPhase(t, c, promoter.PhaseCommitted, 3)
	for _, p := range []string{"/v1/policies", "/v1/plan", "/v1/plan?policy=quickstart", "/v1/promotions", "/v1/promotions/" + r.ID,
		"/v1/promotions/p-nope", "/v1/plan?policy=nope", "/v1/nothing", "/v1/promotions?bad=1", "/metrics", "/healthz", "/readyz"} {
		get(p)
	}
	if code, out, errOut := run(t, "promote", "quickstart.events", "--promoter", base, "--output", "json"); code != 0 {
		t.Fatalf("promote: %s", errOut)
	} else {
		capture("thaw promote", []byte(out+errOut))
	}
	for _, args := range [][]string{
		{"status", "--promoter", base}, {"status", "--promoter", base, "--output", "json"}, {"status", r.ID, "--promoter", base},
		{"plan", "--promoter", base}, {"plan", "--promoter", base, "--output", "json"},
		{"promote", "nightly.events", "--promoter", base},
	} {
		_, out, errOut := run(t, args...)
		capture("thaw "+strings.Join(args, " "), []byte(out+errOut))
	}
	ledger := dumpEtcd("etcd after")
	if ledger < 3 {
		t.Fatalf("ledger holds %d records", ledger)
	}
	closed = true
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	capture("status events", statusTopicValues(t, kc.ListenAddrs(), 3))

	// thaw plan in-process, with its logs at debug level.
	planLogs := &testlog.Buffer{}
	promoterLogOutput = planLogs
	defer func() { promoterLogOutput = os.Stderr }()
	code, out, errOut := run(t, "plan", "--config", s.configPath)
	if code != 0 {
		t.Fatalf("plan: %s", errOut)
	}
	capture("thaw plan --config", []byte(out+errOut))
	capture("thaw plan logs", planLogs.Bytes())
	capture("daemon logs", logs.Bytes())

	// Everything the promoter and its embedded tier wrote to disk, and
	// every snapshot object in S3.
	caps.addFiles(t, s.dataDir, vgw.ObjectPath("snapshots", ""))

	// Not vacuous: the logs and metrics say what happened.
	all := caps.byWhere()
	for where, want := range map[string]string{
		"daemon logs": r.ID, "GET /metrics 200 OK": "thaw_promoter_", "thaw plan --config": "policy quickstart",
		"GET /v1/promotions/" + r.ID + " 200 OK": `"progress"`, "status events": `"promotion":"` + r.ID + `"`,
	} {
		if !bytes.Contains(all[where], []byte(want)) {
			t.Errorf("%s lacks %q", where, want)
		}
	}
	// ... and the control events went through the SASL-authenticated client.
	for _, c := range []struct{ where, want string }{
		{"GET /metrics 200 OK", `thaw_promoter_control_events_total{outcome="handled",type="lake_commit"} 1`},
		{"daemon logs", `"msg":"control event rejected"`},
		{"daemon logs", `"msg":"control event skipped"`},
		// The builds uploaded with PUTs the gateway signed.
		{"GET /metrics 200 OK", `op="sign",result="ok"}`},
	} {
		if !bytes.Contains(all[c.where], []byte(c.want)) {
			t.Errorf("%s lacks %q", c.where, c.want)
		}
	}
	if n := len(logs.Bytes()); n < 10_000 {
		t.Errorf("only %d bytes of logs", n)
	}
	found := caps.leaks(testSecrets)
	for where, data := range all {
		// Upload capabilities (every token starts so, and goes only into
		// an Authorization header), signed upload URLs and the S3 secret.
		for _, tok := range []string{"thawcap1.", "Bearer ", "X-Amz-Signature", "X-Amz-Credential"} {
			if bytes.Contains(data, []byte(tok)) || bytes.Contains(data, []byte(url.QueryEscape(tok))) {
				found = append(found, fmt.Sprintf("%s: an upload credential (%q)", where, tok))
			}
		}
		found = append(found, leaksOf(map[string]string{"the S3 store's secret key": testvgw.Secret}, where, data)...)
	}
	if len(found) > 0 {
		t.Fatalf("credentials leaked:\n%s", strings.Join(found, "\n"))
	}
	t.Logf("scanned %d places, %d bytes of logs", len(all), len(logs.Bytes()))
}

// statusTopicValues reads the status topic (as the superuser) until it
// has seen committed events of n promotions, and returns every value.
func statusTopicValues(t *testing.T, brokers []string, n int) []byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("thaw-status"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out []byte
	committed := map[string]bool{}
	for len(committed) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("status topic: %d committed promotions of %d", len(committed), n)
		}
		for _, r := range fs.Records() {
			out = append(append(out, r.Value...), '\n')
			e, err := promoter.ParseStatusEvent(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if e.Phase == promoter.PhaseCommitted {
				committed[e.Promotion] = true
			}
		}
	}
	return out
}
