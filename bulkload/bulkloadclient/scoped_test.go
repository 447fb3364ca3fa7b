package bulkloadclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// itemsSchema is a non-partitioned table of 4 buckets.
func itemsSchema(t *testing.T) kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: mustType(t, "BIGINT")},
			{Name: "name", Type: mustType(t, "STRING")},
		},
		PrimaryKey: []string{"id"}, Buckets: 4,
	}
}

// scopedTier starts an embedded tier whose every log goes to logs (debug
// level) and creates the tables shop.<name> of itemsSchema.
func scopedTier(ctx context.Context, t *testing.T, logs *testlog.Buffer, cfg daemon.EmbeddedConfig, tables ...string) (*daemon.Embedded, *tierclient.Client) {
	t.Helper()
	cfg.DataDir, cfg.EtcdUnsafeNoFsync = t.TempDir(), true
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, tc := daemontest.StartWithClient(ctx, t, cfg)
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	for _, name := range tables {
		if _, err := tc.CreateTable(ctx, "shop", name, itemsSchema(t), 1); err != nil {
			t.Fatal(err)
		}
	}
	return e, tc
}

func itemRows(n int, suffix string) []kv.Row {
	rows := make([]kv.Row, n)
	for i := range rows {
		rows[i] = kv.Row{int64(i), fmt.Sprintf("item-%d%s", i, suffix)}
	}
	return rows
}

// expectRows reads ids 0..n-1 of shop.<table> and compares them to want.
func expectRows(ctx context.Context, t *testing.T, tc *tierclient.Client, table string, want []kv.Row) {
	t.Helper()
	info, err := tc.Table(ctx, "shop", table)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]kv.Row, len(want))
	for i := range want {
		if keys[i], err = info.KeyRow(want[i][0]); err != nil {
			t.Fatal(err)
		}
	}
	var got []kv.Row
	eventually(ctx, t, "rows readable", func() error {
		got, err = tc.Get(ctx, tierclient.Target{Database: "shop", Table: table}, keys)
		return err
	})
	for i, r := range got {
		if fmt.Sprint(r) != fmt.Sprint(want[i]) {
			t.Fatalf("row %d: %v, want %v", i, r, want[i])
		}
	}
}

// TestScopedUploads builds and commits a target through the upload
// gateway only: the builder's store is a ScopedStore and the committer
// writes the manifest through one. Every object arrives through the
// gateway (its metrics count them), and no capability token appears in
// the shipped context, the results, any log line or the metrics.
func TestScopedUploads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var logs testlog.Buffer
	e, tc := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{}, "items")
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	admin, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithScopedUploads(), bulkloadclient.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "items"}
	bc, err := begin(ctx, admin, target, "scoped-1")
	if err != nil {
		t.Fatal(err)
	}
	blob, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	results := buildInTwoAndCommit(ctx, t, e, tc, admin, bc, blob, log)

	// Every data file, every _METADATA and the manifest came through the
	// gateway: nothing else wrote them.
	files := 0
	for _, r := range results {
		files += r.Files + 1
	}
	puts, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if int(puts) != files+1 {
		t.Fatalf("the gateway stored %v objects, the build wrote %d files and _METADATA and a manifest", puts, files+1)
	}

	// Committing again (the transaction is COMMITTED: the gateway takes no
	// manifest and the coordinator mints no credentials) reports the outcome.
	if st, err := admin.Commit(ctx, bc, results, 5*time.Second); err != nil || st.State != bulkload.Committed {
		t.Fatalf("second commit: %+v %v", st, err)
	}
	if _, err := admin.UploadCredentials(ctx, bc.Handle()); !errors.Is(err, bulkload.ErrInvalidState) {
		t.Fatalf("credentials of a committed transaction: %v", err)
	}

	noCredentials(t, e, blob, results, &logs)
}

// buildInTwoAndCommit ships bc as bytes to two builders, as separate
// processes would get it, each with a client of its own and a ScopedStore
// of its buckets ({0, 1} and {2, 3}: each credential covers its own
// buckets only); then admin commits their results and the rows are
// checked (ids 0..99 twice: last wins). It returns the results.
func buildInTwoAndCommit(ctx context.Context, t *testing.T, e *daemon.Embedded, tc *tierclient.Client, admin *bulkloadclient.Client, bc *bulkloadclient.BuildContext, blob []byte, log *slog.Logger) []snapshotbuild.BucketResult {
	t.Helper()
	rows := append(itemRows(600, ""), itemRows(100, "-v2")...)
	var results []snapshotbuild.BucketResult
	for _, owned := range [][]int{{0, 1}, {2, 3}} {
		shipped, err := bulkloadclient.UnmarshalBuildContext(blob)
		if err != nil {
			t.Fatal(err)
		}
		builder, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, buildThrough(ctx, t, shipped, rows, owned, builder.ScopedStore(shipped, owned...))...)
	}
	st, err := admin.Commit(ctx, bc, results, 30*time.Second)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	want := itemRows(600, "")
	copy(want, itemRows(100, "-v2"))
	expectRows(ctx, t, tc, "items", want)
	return results
}

// noCredentials checks that no upload credential — a capability token, a
// bearer header, a signed URL's signature — appears in the shipped build
// context, the results, the captured logs or the tier's metrics.
func noCredentials(t *testing.T, e *daemon.Embedded, blob []byte, results []snapshotbuild.BucketResult, logs *testlog.Buffer) {
	t.Helper()
	resJSON, err := json.Marshal(results)
	if err != nil {
		t.Fatal(err)
	}
	var metrics bytes.Buffer
	mfs, err := e.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&metrics, mf); err != nil {
			t.Fatal(err)
		}
	}
	for what, b := range map[string][]byte{"context": blob, "results": resJSON, "logs": logs.Bytes(), "metrics": metrics.Bytes()} {
		for _, needle := range []string{"thawcap1.", "Bearer ", "X-Amz-Signature", "X-Amz-Credential"} {
			if bytes.Contains(b, []byte(needle)) {
				t.Errorf("the %s hold a credential (%q)", what, needle)
			}
		}
	}
	if !strings.Contains(logs.String(), "coordinator") {
		t.Fatal("no log captured: the scan above saw nothing")
	}
}

// gatewayPut sends a raw PUT of body to the gateway at addr.
func gatewayPut(ctx context.Context, t *testing.T, addr string, tok uploadcap.Token, uri string, body []byte, sha string) (int, uploadcap.Refusal) {
	t.Helper()
	if sha == "" {
		s := sha256.Sum256(body)
		sha = hex.EncodeToString(s[:])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, addr+uploadcap.Path+"?uri="+url.QueryEscape(uri), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok.Reveal())
	}
	req.Header.Set(uploadcap.HeaderSHA256, sha)
	return gatewayDo(t, req)
}

func gatewayDo(t *testing.T, req *http.Request) (int, uploadcap.Refusal) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r uploadcap.Refusal
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("answer %s: %q: %v", resp.Status, b, err)
		}
	}
	return resp.StatusCode, r
}

// TestUploadGatewayRefuses sends the gateway every kind of request it
// must refuse and checks that nothing reached the store, then that it
// stores, adopts and refuses a conflict as a store would, and that an
// aborted transaction takes nothing more.
func TestUploadGatewayRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var logs testlog.Buffer
	e, _ := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{}, "items", "other")
	c, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	a, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "gw-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "other"}, "gw-b")
	if err != nil {
		t.Fatal(err)
	}
	credA, err := c.UploadCredentials(ctx, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	credB, err := c.UploadCredentials(ctx, b.Handle())
	if err != nil {
		t.Fatal(err)
	}
	// The 5-minute build deadline comes before the default 15-minute
	// lifetime: the capability ends with it.
	if !credA.Expires.Equal(a.BuildDeadline()) || credA.UploadURL != e.Address()+uploadcap.Path {
		t.Fatalf("credentials: expires %s, url %s", credA.Expires, credA.UploadURL)
	}
	// A credential of bucket 0 only.
	credA0, err := c.UploadCredentials(ctx, a.Handle(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]int{{4}, {0, 0}, {-1}} {
		if _, err := c.UploadCredentials(ctx, a.Handle(), bad...); !errors.Is(err, bulkload.ErrInvalidRequest) {
			t.Errorf("credentials of buckets %v: %v", bad, err)
		}
	}
	addr := e.Address()
	dirA := a.SnapshotTarget().SnapshotDir(0, a.SnapshotIDs()[0])
	dirA1 := a.SnapshotTarget().SnapshotDir(1, a.SnapshotIDs()[1])
	dirB := b.SnapshotTarget().SnapshotDir(0, b.SnapshotIDs()[0])
	tokA := credA.Token
	forged := uploadcap.Token(tokA.Reveal()[:len(tokA.Reveal())-2] + "AA")
	if forged == tokA {
		forged = uploadcap.Token(tokA.Reveal()[:len(tokA.Reveal())-2] + "BB")
	}
	body := []byte("sst bytes")
	for _, tc := range []struct {
		name   string
		tok    uploadcap.Token
		uri    string
		sha    string
		status int
		class  string
	}{
		{"no capability", "", dirA + "/f", "", 401, uploadcap.Unauthorized},
		{"forged capability", forged, dirA + "/f", "", 401, uploadcap.Unauthorized},
		{"not a capability", "hunter2", dirA + "/f", "", 401, uploadcap.Unauthorized},
		{"another transaction's directory", tokA, dirB + "/f", "", 403, uploadcap.OutOfScope},
		{"another transaction's manifest", tokA, b.ManifestPath(), "", 403, uploadcap.OutOfScope},
		{"B's capability in A's directory", credB.Token, dirA + "/f", "", 403, uploadcap.OutOfScope},
		{"a subdirectory", tokA, dirA + "/sub/f", "", 403, uploadcap.OutOfScope},
		{"the snapshot directory's parent", tokA, a.SnapshotTarget().TabletDir(0) + "/f", "", 403, uploadcap.OutOfScope},
		{"a dot-dot escape", tokA, dirA + "/../snap-999/f", "", 403, uploadcap.OutOfScope},
		{"outside the store", tokA, "file:///etc/f", "", 403, uploadcap.OutOfScope},
		{"another bucket than the credential's", credA0.Token, dirA1 + "/f", "", 403, uploadcap.OutOfScope},
		{"the manifest with a credential of a bucket", credA0.Token, a.ManifestPath(), "", 403, uploadcap.OutOfScope},
		{"wrong sha256", tokA, dirA + "/f", strings.Repeat("0", 64), 400, uploadcap.Integrity},
		{"malformed sha256", tokA, dirA + "/f", "ABC", 400, uploadcap.BadRequest},
	} {
		status, r := gatewayPut(ctx, t, addr, tc.tok, tc.uri, body, tc.sha)
		if status != tc.status || r.Class != tc.class {
			t.Errorf("%s: %d %+v, want %d %s", tc.name, status, r, tc.status, tc.class)
		}
		if strings.Contains(r.Error, tokA.Reveal()) {
			t.Errorf("%s: the refusal quotes the token", tc.name)
		}
	}
	// Other methods and malformed queries.
	for _, tc := range []struct {
		name, method, query string
		status              int
	}{
		{"GET", http.MethodGet, "?uri=" + url.QueryEscape(dirA+"/f"), 405},
		{"two uris", http.MethodPut, "?uri=" + url.QueryEscape(dirA+"/f") + "&uri=" + url.QueryEscape(dirA+"/g"), 400},
		{"no uri", http.MethodPut, "", 400},
		{"DELETE of a data file", http.MethodDelete, "?uri=" + url.QueryEscape(dirA+"/f"), 405},
	} {
		req, err := http.NewRequestWithContext(ctx, tc.method, addr+uploadcap.Path+tc.query, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokA.Reveal())
		req.Header.Set(uploadcap.HeaderSHA256, strings.Repeat("0", 64))
		if status, r := gatewayDo(t, req); status != tc.status {
			t.Errorf("%s: %d %+v, want %d", tc.name, status, r, tc.status)
		}
	}
	store := e.Objects()
	// The credential of bucket 0 writes there, and deletes nothing, not
	// even its bucket's _METADATA: a delete cannot be fenced against a
	// coordinator that lost its term.
	if status, r := gatewayPut(ctx, t, addr, credA0.Token, dirA+"/_METADATA", body, ""); status != 200 {
		t.Fatalf("put with the credential of its bucket: %d %+v", status, r)
	}
	for _, uri := range []string{dirA1 + "/_METADATA", dirA + "/_METADATA"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, addr+uploadcap.Path+"?uri="+url.QueryEscape(uri), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+credA0.Token.Reveal())
		if status, r := gatewayDo(t, req); status != http.StatusMethodNotAllowed {
			t.Errorf("DELETE %s with the credential of bucket 0: %d %+v, want 405", uri, status, r)
		}
	}
	if key, err := e.Objects().Key(dirA + "/_METADATA"); err != nil {
		t.Fatal(err)
	} else if _, err := e.Objects().Stat(ctx, key); err != nil {
		t.Fatalf("the _METADATA after the refused DELETE: %v", err)
	}
	if key, err := e.Objects().Key(dirA + "/_METADATA"); err == nil {
		_ = e.Objects().Delete(ctx, key) // the test's own cleanup, for the checks below
	}
	for _, bc := range []*bulkloadclient.BuildContext{a, b} {
		if keys := objectsUnder(ctx, t, store, bc); len(keys) != 0 {
			t.Fatalf("refused requests stored %v", keys)
		}
		for _, uri := range []string{bc.ManifestPath(), bc.SnapshotTarget().TabletDir(0) + "/f"} {
			key, err := store.Key(uri)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("%s: %v, want not found", uri, err)
			}
		}
	}

	// What the capability allows behaves as the store does.
	if status, r := gatewayPut(ctx, t, addr, tokA, dirA+"/f", body, ""); status != 200 {
		t.Fatalf("put: %d %+v", status, r)
	}
	key, err := store.Key(dirA + "/f")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := store.Get(ctx, key); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("stored %q %v", got, err)
	}
	if status, r := gatewayPut(ctx, t, addr, tokA, dirA+"/f", body, ""); status != 200 {
		t.Fatalf("identical put: %d %+v", status, r)
	}
	if status, r := gatewayPut(ctx, t, addr, tokA, dirA+"/f", []byte("other bytes"), ""); status != 409 || r.Class != uploadcap.Conflict {
		t.Fatalf("different put: %d %+v", status, r)
	}
	if status, r := gatewayPut(ctx, t, addr, tokA, a.ManifestPath(), []byte("{}"), ""); status != 200 {
		t.Fatalf("manifest put: %d %+v", status, r)
	}

	// After Abort: no credentials, and the capability writes nothing.
	if _, err := c.Abort(ctx, a.Handle()); err != nil {
		t.Fatal(err)
	}
	if status, r := gatewayPut(ctx, t, addr, tokA, dirA+"/g", body, ""); status != 403 || r.Class != uploadcap.NotBegun {
		t.Fatalf("put after abort: %d %+v", status, r)
	}
	if _, err := c.UploadCredentials(ctx, a.Handle()); !errors.Is(err, bulkload.ErrInvalidState) {
		t.Fatalf("credentials after abort: %v", err)
	}
	s := c.ScopedStore(a)
	k, err := s.Key(dirA + "/g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutIfAbsent(ctx, k, objstore.BytesSource(body)); !errors.Is(err, bulkloadclient.ErrNotBegun) || !errors.Is(err, objstore.ErrPermission) || objstore.IsTransient(err) {
		t.Fatalf("scoped put after abort: %v", err)
	}
	if strings.Contains(logs.String(), tokA.Reveal()) {
		t.Fatal("a log line holds the token")
	}
}

// TestScopedUploadsFailover builds half of a target, kills the active
// coordinator and builds the other half with the same ScopedStore: the
// new active coordinator refuses the old capability (another key), the
// store asks it for a new one and goes on; the commit succeeds.
func TestScopedUploadsFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var logs testlog.Buffer
	e, tc := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{Coordinators: 2, Coordinator: daemon.CoordinatorOptions{LeaseTTL: time.Second}}, "items")
	c, err := bulkloadclient.New(ctx, e.Address(), bulkloadclient.WithScopedUploads())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "failover-1")
	if err != nil {
		t.Fatal(err)
	}
	store := c.ScopedStore(bc)
	rows := itemRows(400, "")
	results := buildThrough(ctx, t, bc, rows, []int{0, 1}, store)
	first, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.KillCoordinator(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "another coordinator leads", func() error {
		l, err := e.Leader(ctx)
		if err != nil || l.ID == "" || l.ID == first.ID {
			return fmt.Errorf("leader %+v %v", l, err)
		}
		// ... and serves the transaction.
		_, err = c.Status(ctx, bc.Handle())
		return err
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "bulk") || strings.Contains(l, "lead") {
					t.Log(l)
				}
			}
		}
	})
	results = append(results, buildThrough(ctx, t, bc, rows, []int{2, 3}, store)...)
	if n, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_upload_requests_total", map[string]string{"op": "put", "result": uploadcap.UnknownKey}); err != nil || n < 1 {
		t.Fatalf("the new coordinator refused %v old capabilities (%v): the refresh path was not taken", n, err)
	}
	st, err := c.Commit(ctx, bc, results, 30*time.Second)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v %v", st, err)
	}
	expectRows(ctx, t, tc, "items", rows)
}

// TestUploadGatewayExpiry: a capability of a two-second lifetime is
// refused as expired afterwards, and a ScopedStore holding an expired one
// asks for a new one instead of failing.
func TestUploadGatewayExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var logs testlog.Buffer
	e, _ := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{
		Coordinator: daemon.CoordinatorOptions{BulkLoad: daemon.BulkLoadOptions{UploadCredentialTTL: 2 * time.Second}},
	}, "items")
	c, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "expiry-1")
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	cr, err := c.UploadCredentials(ctx, bc.Handle())
	if err != nil {
		t.Fatal(err)
	}
	// Minted between asked and got (a loaded machine may take a while to
	// answer), for two seconds.
	got := time.Now()
	if d := cr.Expires.Sub(asked); d > got.Sub(asked)+2100*time.Millisecond || d <= 0 {
		t.Fatalf("a two-second capability asked for %v ago expires in %v", got.Sub(asked), d)
	}
	time.Sleep(time.Until(cr.Expires) + 50*time.Millisecond)
	dir := bc.SnapshotTarget().SnapshotDir(1, bc.SnapshotIDs()[1])
	if status, r := gatewayPut(ctx, t, e.Address(), cr.Token, dir+"/f", []byte("x"), ""); status != 401 || r.Class != uploadcap.Expired {
		t.Fatalf("put with an expired capability: %d %+v", status, r)
	}
	s := c.ScopedStore(bc)
	k, err := s.Key(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	minted := func() float64 {
		t.Helper()
		v, _, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_bulkload_requests_total", map[string]string{"rpc": "get_upload_credentials", "result": "OK"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := minted()
	// Two puts at once share one capability (renewed halfway through its
	// two-second life); one after it expired gets a new one.
	for i, pause := range []time.Duration{0, 0, 2100 * time.Millisecond} {
		time.Sleep(pause)
		if _, err := s.PutIfAbsent(ctx, k, objstore.BytesSource([]byte("x"))); err != nil {
			t.Fatalf("scoped put %d: %v", i, err)
		}
	}
	if n := minted() - before; n != 2 {
		t.Fatalf("three puts minted %v capabilities, want 2", n)
	}
}

// TestScopedStoreAfterItsGatewaysCoordinatorDied: a client given the
// coordinators' own addresses (as a tier on several hosts is configured);
// the ScopedStore's credentials were minted by the leading coordinator,
// which is killed, and the standby takes over. The store kept sending
// every upload to the dead coordinator's gateway (a failure without a
// gateway's answer was no reason for new credentials, which stayed cached
// for up to 14 minutes) while the client itself moved on.
func TestScopedStoreAfterItsGatewaysCoordinatorDied(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var logs testlog.Buffer
	e, _ := scopedTier(ctx, t, &logs, daemon.EmbeddedConfig{Coordinators: 2, Coordinator: daemon.CoordinatorOptions{LeaseTTL: time.Second}}, "items")
	first, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := "coord-1"
	if first.ID == other {
		other = "coord-2"
	}
	c, err := bulkloadclient.New(ctx, e.CoordinatorAddress(first.ID)+","+e.CoordinatorAddress(other), bulkloadclient.WithScopedUploads())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, bulkload.Target{Database: "shop", Table: "items"}, "failover-2")
	if err != nil {
		t.Fatal(err)
	}
	store := c.ScopedStore(bc)
	ids := bc.SnapshotIDs()
	key := func(b int) string {
		k, err := store.Key(bc.SnapshotTarget().SnapshotDir(b, ids[b]) + "/probe.sst")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if _, err := store.PutIfAbsent(ctx, key(0), objstore.BytesSource([]byte("before"))); err != nil {
		t.Fatalf("upload before the failover: %v", err)
	}
	if err := e.KillCoordinator(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "another coordinator leads and serves the transaction", func() error {
		l, err := e.Leader(ctx)
		if err != nil || l.ID == "" || l.ID == first.ID {
			return fmt.Errorf("leader %+v %v", l, err)
		}
		_, err = c.Status(ctx, bc.Handle())
		return err
	})
	// Control: a fresh store of the same client uploads at once.
	if _, err := c.ScopedStore(bc).PutIfAbsent(ctx, key(1), objstore.BytesSource([]byte("fresh"))); err != nil {
		t.Fatalf("fresh store after the failover: %v", err)
	}
	// The store a builder holds uploads too.
	if _, err := store.PutIfAbsent(ctx, key(2), objstore.BytesSource([]byte("after"))); err != nil {
		t.Fatalf("the builder's store after the failover (a fresh one worked): %v", err)
	}
}
