package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

const (
	tokenA = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	tokenB = "0f9e8d7c6b5a49382716f5e4d3c2b1a00f9e8d7c6b5a49382716f5e4d3c2b1a0"
	tokenC = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
)

func writeTokenFile(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "internal-token")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReadInternalToken: the file's first token is sent, every token is
// accepted; anything else in the file is an error naming the line, and
// never the token.
func TestReadInternalToken(t *testing.T) {
	if tok, err := readInternalToken("", slog.New(slog.DiscardHandler)); tok != nil || err != nil {
		t.Fatalf("no file: %v %v", tok, err)
	}
	tok, err := readInternalToken(writeTokenFile(t, "# rotation: new first\n\n  "+tokenA+"  \n"+tokenB+"\n"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tok.current().send != tokenA || !tok.accepts(tokenA) || !tok.accepts(tokenB) || tok.accepts(tokenA[1:]) || tok.accepts("") {
		t.Fatalf("token %q accepts A %t, B %t", tok.current().send, tok.accepts(tokenA), tok.accepts(tokenB))
	}
	short := strings.Repeat("x", MinInternalTokenLen-1)
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "holds no token"},
		{"comments only", "# nothing\n\n", "holds no token"},
		{"short", short + "\n", "line 1: a token is at least 32"},
		{"inner space", tokenA[:40] + " " + tokenA[40:] + "\n", "line 1"},
		{"second line bad", tokenA + "\n\tnot-a-token-but-quite-long-enough-é-x\n", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := readInternalToken(writeTokenFile(t, tc.text), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) || tok != nil {
				t.Fatalf("got %v, %v; want an error with %q", tok, err, tc.want)
			}
			if strings.Contains(err.Error(), tokenA) {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
	if _, err := readInternalToken(filepath.Join(t.TempDir(), "missing"), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "internal_token_file") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestInternalTokenGuard: internal procedures, under any prefix, need an
// accepted token; every other path passes without one.
func TestInternalTokenGuard(t *testing.T) {
	tok, err := readInternalToken(writeTokenFile(t, tokenA+"\n"+tokenB+"\n"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tok.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})))
	defer srv.Close()
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{tierv1connect.TabletServiceRestoreSnapshotProcedure, "", http.StatusUnauthorized},
		{tierv1connect.TabletServiceSetDataStateProcedure, tokenA + "x", http.StatusUnauthorized},
		{"/t/ts-1" + tierv1connect.TabletServiceNotifyAssignmentProcedure, "", http.StatusUnauthorized},
		{"/c/coord-1" + tierv1connect.CoordinatorServiceReportSnapshotProcedure, "", http.StatusUnauthorized},
		{tierv1connect.TabletServiceTakeSnapshotProcedure, tokenB, http.StatusTeapot},
		{"/t/ts-1" + tierv1connect.TabletServiceReplicaStatusProcedure, tokenA, http.StatusTeapot},
		{tierv1connect.TabletServiceWriteProcedure, "", http.StatusTeapot},
		{tierv1connect.CoordinatorServiceCreateTableProcedure, "", http.StatusTeapot},
		{tierv1connect.BulkLoadServiceCommitProcedure, "", http.StatusTeapot},
		{PathReadyz, "", http.StatusTeapot},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			req.Header.Set(InternalTokenHeader, tc.token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s with token %t: %d, want %d", tc.path, tc.token != "", resp.StatusCode, tc.want)
		}
	}
	var nilTok *internalToken
	if h := http.NotFoundHandler(); nilTok.guard(h) == nil || nilTok.client(http.DefaultClient) != http.DefaultClient {
		t.Fatal("a nil token changes nothing")
	}
}

// internalCalls makes every internal RPC against a tablet server and a
// coordinator with hc and returns the error codes, in internalProcedures
// order. The requests are empty: what they would do never matters, as the
// guard answers first or the service refuses them as invalid.
func internalCalls(ctx context.Context, hc *http.Client, tabletURL, coordURL string) []connect.Code {
	ts := tierv1connect.NewTabletServiceClient(hc, tabletURL)
	co := tierv1connect.NewCoordinatorServiceClient(hc, coordURL)
	errs := []error{
		errOf(ts.NotifyAssignment(ctx, connect.NewRequest(&tierv1.NotifyAssignmentRequest{}))),
		errOf(ts.SetDataState(ctx, connect.NewRequest(&tierv1.SetDataStateRequest{}))),
		errOf(ts.RestoreSnapshot(ctx, connect.NewRequest(&tierv1.RestoreSnapshotRequest{}))),
		errOf(ts.TakeSnapshot(ctx, connect.NewRequest(&tierv1.TakeSnapshotRequest{}))),
		errOf(ts.ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{}))),
		errOf(co.ReportSnapshot(ctx, connect.NewRequest(&tierv1.ReportSnapshotRequest{}))),
	}
	codes := make([]connect.Code, len(errs))
	for i, err := range errs {
		codes[i] = connect.CodeOf(err)
	}
	return codes
}

func errOf[T any](_ T, err error) error { return err }

func allCodes(n int, c connect.Code) []connect.Code {
	out := make([]connect.Code, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// TestEmbeddedInternalToken: the embedded tier guards its internal RPCs
// with a token of its own, so a client of its listener cannot order its
// tablet servers about; clients' RPCs work as before.
func TestEmbeddedInternalToken(t *testing.T) {
	ctx := t.Context()
	e, err := StartEmbedded(ctx, EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	got := internalCalls(ctx, e.HTTPClient(), e.TabletAddress("ts-1"), e.Address())
	if want := allCodes(len(internalProcedures), connect.CodeUnauthenticated); !slices.Equal(got, want) {
		t.Fatalf("internal RPCs from a client: %v, want %v", got, want)
	}
	// The tier's own client gets past the guard (and the services then
	// judge the empty requests).
	for i, c := range internalCalls(ctx, e.InternalHTTPClient(), e.TabletAddress("ts-1"), e.Address()) {
		if c == connect.CodeUnauthenticated {
			t.Errorf("%s with the internal token: unauthenticated", internalProcedures[i])
		}
	}
	// Clients' RPCs, and the tier's own work (assignments, snapshot
	// reports), go on.
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, e.Address()), coord)
}

// checkTierWorks writes and reads rows of d.t through client and has the
// coordinator snapshot it (an order to the tablet server, answered by its
// report).
func checkTierWorks(t *testing.T, client *tierclient.Client, coord tierv1connect.CoordinatorServiceClient) {
	t.Helper()
	ctx := t.Context()
	target := tierclient.Target{Database: "d", Table: "t"}
	rows := []kv.Row{{int64(1), "one"}, {int64(2), "two"}}
	retry(t, "upsert", func() error { return client.Upsert(ctx, target, rows) })
	got, err := client.Get(ctx, target, []kv.Row{{int64(1), nil}, {int64(2), nil}})
	if err != nil || len(got) != 2 || !slices.Equal(got[0], rows[0]) || !slices.Equal(got[1], rows[1]) {
		t.Fatalf("get: %v, %v", got, err)
	}
	retry(t, "a snapshot ordered and reported", func() error {
		_, err := coord.TriggerSnapshot(ctx, connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "d", Table: "t"}}))
		return err
	})
}

// newTierClient is a tierclient of address, closed with the test.
func newTierClient(t *testing.T, address string, opts ...tierclient.Opt) *tierclient.Client {
	t.Helper()
	client, err := tierclient.New(t.Context(), address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// TestRolesInternalToken: thaw coordinator and thaw tablet with
// internal_token_file, in the middle of a rotation (each sends a different
// one of the two tokens it accepts): the assignment, the snapshot order
// and the snapshot report pass; the internal RPCs without a token, or
// with one the files do not hold, are refused; a rotation to a third token
// by rewriting the files needs no restart; a role whose file is bad does
// not start. No token appears in the roles' debug logs, their
// /metrics, etcd or any file they wrote.
func TestRolesInternalToken(t *testing.T) {
	dir := t.TempDir()
	roles := startRoleTest(t, dir)
	cc, tc := roles.coordinator(), roles.tablet("ts-1")
	secrets := t.TempDir() // outside dir: the scan below must not find the token files
	cc.InternalTokenFile = filepath.Join(secrets, "coordinator-token")
	tc.InternalTokenFile = filepath.Join(secrets, "tablet-token")
	for f, text := range map[string]string{cc.InternalTokenFile: tokenA + "\n" + tokenB + "\n", tc.InternalTokenFile: tokenB + "\n" + tokenA + "\n"} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs testlog.Buffer
	ca, ta := runRoles(t, cc, tc, RunOptions{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := t.Context()
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(nil), BaseURL(ca))
	awaitOneServer(t, coord)
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	checkTierWorks(t, newTierClient(t, BaseURL(ca)), coord)

	want := allCodes(len(internalProcedures), connect.CodeUnauthenticated)
	if got := internalCalls(ctx, NewHTTPClient(nil), BaseURL(ta), BaseURL(ca)); !slices.Equal(got, want) {
		t.Fatalf("internal RPCs without a token: %v, want %v", got, want)
	}
	wrong := &internalToken{fixed: &tokenSet{send: strings.Repeat("f", 64)}}
	if got := internalCalls(ctx, wrong.client(NewHTTPClient(nil)), BaseURL(ta), BaseURL(ca)); !slices.Equal(got, want) {
		t.Fatalf("internal RPCs with a wrong token: %v, want %v", got, want)
	}

	// A rotation to a third token, without restarts: both files are
	// rewritten; the roles read them again, token A stops working and the
	// tier keeps working. A change that does not parse is logged and
	// changes nothing.
	for _, f := range []string{cc.InternalTokenFile, tc.InternalTokenFile} {
		if err := os.WriteFile(f, []byte(tokenC+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	withA := &internalToken{fixed: &tokenSet{send: tokenA}}
	retry(t, "token A refused after the rotation", func() error {
		if got := internalCalls(ctx, withA.client(NewHTTPClient(nil)), BaseURL(ta), BaseURL(ca)); !slices.Equal(got, want) {
			return fmt.Errorf("with token A: %v", got)
		}
		return nil
	})
	retry(t, "a snapshot ordered and reported with token C", func() error {
		_, err := coord.TriggerSnapshot(ctx, connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "d", Table: "t"}}))
		return err
	})
	if err := os.WriteFile(tc.InternalTokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withC := &internalToken{fixed: &tokenSet{send: tokenC}}
	retry(t, "the change that does not parse logged", func() error {
		for i, c := range internalCalls(ctx, withC.client(NewHTTPClient(nil)), BaseURL(ta), BaseURL(ca)) {
			if c == connect.CodeUnauthenticated {
				t.Fatalf("%s with token C after a bad change of the file: unauthenticated", internalProcedures[i])
			}
		}
		if !strings.Contains(logs.String(), "does not load") {
			return errors.New("not logged yet")
		}
		return nil
	})
	if !strings.Contains(logs.String(), "internal token file reloaded") {
		t.Error("no reload logged")
	}

	// The leak scan, and its control.
	found := func(where string, data []byte) {
		for _, tok := range []string{tokenA, tokenB, tokenC} {
			if bytes.Contains(data, []byte(tok)) || bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString([]byte(tok)))) {
				t.Errorf("an internal token in %s", where)
			}
		}
	}
	if b, _ := os.ReadFile(cc.InternalTokenFile); !bytes.Contains(b, []byte(tokenC)) {
		t.Fatal("control: the scan's token is not the file's")
	}
	if !strings.Contains(logs.String(), "debug") && !strings.Contains(logs.String(), "DEBUG") {
		t.Fatal("control: no debug log was captured")
	}
	found("the logs", logs.Bytes())
	for _, addr := range []string{ca, ta} {
		_, body := get(t, "http://"+addr+PathMetrics)
		found(addr+PathMetrics, []byte(body))
	}
	kvs, err := clientv3.New(clientv3.Config{Endpoints: roles.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer kvs.Close()
	all, err := kvs.Get(ctx, "", clientv3.WithPrefix())
	if err != nil || len(all.Kvs) == 0 {
		t.Fatalf("etcd: %v keys, %v", len(all.Kvs), err)
	}
	for _, kv := range all.Kvs {
		found("etcd key "+string(kv.Key), append(kv.Key, kv.Value...))
	}
	files := 0
	if err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		found(path, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("control: no file scanned")
	}

	bad := roles.coordinator()
	bad.InternalTokenFile = writeTokenFile(t, "short\n")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := RunCoordinator(sctx, bad, RunOptions{}); err == nil || !strings.Contains(err.Error(), "internal_token_file") {
		t.Fatalf("a coordinator with a bad token file: %v", err)
	}
	badTablet := roles.tablet("ts-2")
	badTablet.InternalTokenFile = filepath.Join(t.TempDir(), "missing")
	if err := RunTablet(sctx, badTablet, RunOptions{}); err == nil || !strings.Contains(err.Error(), "internal_token_file") {
		t.Fatalf("a tablet server with a missing token file: %v", err)
	}
}

// TestWarnUnguarded: a role listening beyond loopback without an internal
// token says so at start; on loopback, or with a token, it does not.
func TestWarnUnguarded(t *testing.T) {
	tok, err := newInternalToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip   string
		tok  *internalToken
		warn bool
	}{
		{"0.0.0.0", nil, true},
		{"10.1.2.3", nil, true},
		{"127.0.0.1", nil, false},
		{"::1", nil, false},
		{"0.0.0.0", tok, false},
	} {
		var logs testlog.Buffer
		warnUnguarded(slog.New(slog.NewTextHandler(&logs, nil)), tc.tok, &net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 7070})
		if got := strings.Contains(logs.String(), "internal RPCs are unauthenticated"); got != tc.warn {
			t.Errorf("%s with token %t: warned %t", tc.ip, tc.tok != nil, got)
		}
	}
}
