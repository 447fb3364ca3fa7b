package daemon

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

func TestParseCallersFile(t *testing.T) {
	dir := t.TempDir()
	h := access.TokenSHA256("token-0123456789abcdef")
	for name, tc := range map[string]struct {
		text string
		data bool
		want string
	}{
		"unknown key":       {"callers:\n  - name: a\n    token_sha256: " + h + "\n    read: ['*']\n    tokn: x\n", false, "line 5"},
		"unknown top key":   {"caller:\n  - {name: a}\n", false, "line 1"},
		"no caller":         {"callers: []\n", false, "names no caller"},
		"empty":             {"", false, "names no caller"},
		"bad hash":          {"callers:\n  - {name: a, token_sha256: abc, read: ['*']}\n", false, "token sha256 is not 64 lowercase hex digits"},
		"bad pattern":       {"callers:\n  - {name: a, token_sha256: " + h + ", write: [shop]}\n", false, `table pattern "shop"`},
		"data without read": {"callers:\n  - {name: a, token_sha256: " + h + ", ddl: ['*']}\n", true, "authorize_data needs a caller with read or write"},
		"two documents":     {"callers:\n  - {name: a, token_sha256: " + h + ", read: ['*']}\n---\ncallers: []\n", false, "more than one YAML document"},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(f, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := parseCallersFile(f, tc.data); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: %v, want an error naming the file and saying %q", name, err, tc.want)
		}
	}
	if _, err := parseCallersFile(filepath.Join(dir, "missing"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
	var sc ServerConfig
	sc.Defaults()
	sc.DataDir, sc.Coordinator.CallersFile = "/d", "/etc/thaw/callers.yaml"
	sc.Coordinator.Callers = []CallerOptions{{Name: "a", TokenSHA256: h, Read: []string{"*"}}}
	if err := sc.Validate(); !errors.Is(err, errCallersTwice) {
		t.Errorf("callers and callers_file: %v", err)
	}
	sc.Coordinator.Callers, sc.Coordinator.AuthorizeData, sc.Coordinator.AuthorizeDDL = nil, true, true
	if err := sc.Validate(); err != nil {
		t.Errorf("authorize_data and authorize_ddl with callers_file: %v", err)
	}
}

// TestRolesCallersFile: thaw coordinator with coordinator.callers_file and
// authorize_data, and a thaw tablet of its own: a rewritten file replaces
// the callers without a restart (the old token is refused by the tablet
// server, the new one served), and a change that does not load is logged
// and changes nothing.
func TestRolesCallersFile(t *testing.T) {
	dir := t.TempDir()
	roles := startRoleTest(t, dir)
	cc, tc := roles.coordinator(), roles.tablet("ts-1")
	const tokA, tokB = "caller-token-a-0123456789", "caller-token-b-0123456789"
	cc.Coordinator.AuthorizeData = true
	cc.Coordinator.CallersFile = filepath.Join(t.TempDir(), "callers.yaml")
	writeCallers := func(text string) {
		t.Helper()
		// Write a new file and rename it over the old: a reader never
		// sees half a file.
		tmp := cc.Coordinator.CallersFile + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cc.Coordinator.CallersFile); err != nil {
			t.Fatal(err)
		}
	}
	callers := func(tok string) string {
		return "callers:\n  - {name: app, token_sha256: " + access.TokenSHA256(tok) + ", read: ['d.*'], write: ['d.t']}\n"
	}
	writeCallers(callers(tokA))
	var logs testlog.Buffer
	ca, _ := runRoles(t, cc, tc, RunOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := t.Context()
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(nil), BaseURL(ca))
	awaitOneServer(t, coord)
	createTable(t, coord, "d", "t", 2, &tierv1.Column{Name: "k", Type: "BIGINT"}, &tierv1.Column{Name: "v", Type: "STRING"})
	retry := tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 20 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	a := newTierClient(t, BaseURL(ca), tierclient.WithBearerToken(tokA), retry)
	b := newTierClient(t, BaseURL(ca), tierclient.WithBearerToken(tokB), retry)
	target := tierclient.Target{Database: "d", Table: "t"}
	upsert := func(c *tierclient.Client, k int64) error { return c.Upsert(ctx, target, []kv.Row{{k, "v"}}) }
	await := func(what string, want tierpb.Reason, fn func() error) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := fn()
			if tierpb.ReasonOf(err) == want && (want != "" || err == nil) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v, want %q", what, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	await("a write with the token of the file", "", func() error { return upsert(a, 1) })
	if err := upsert(b, 2); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("a write with a token not in the file: %v", err)
	}

	writeCallers(callers(tokB))
	await("a read with the replaced token", tierpb.ReasonUnauthenticated, func() error {
		_, err := a.Get(ctx, target, []kv.Row{{int64(1), nil}})
		return err
	})
	if err := upsert(a, 3); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("a write with the replaced token: %v", err)
	}
	if err := upsert(b, 4); err != nil {
		t.Fatalf("a write with the new token: %v", err)
	}

	writeCallers("callers:\n  - {name: app, token_sha256: not-a-hash, read: ['*']}\n")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "the changed callers file does not load") {
		if time.Now().After(deadline) {
			t.Fatal("no log line for the broken callers file")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := upsert(b, 5); err != nil {
		t.Fatalf("a write with the token of the last good file: %v", err)
	}
	rows, err := b.Get(ctx, target, []kv.Row{{int64(1), nil}, {int64(2), nil}, {int64(3), nil}, {int64(4), nil}, {int64(5), nil}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false, true, true} {
		if (rows[i] != nil) != want {
			t.Errorf("row %d: %v, want present %v", i+1, rows[i], want)
		}
	}
	for _, tok := range []string{tokA, tokB} {
		if strings.Contains(logs.String(), tok) {
			t.Fatal("a token in the logs")
		}
	}
}

// TestEmbeddedCallersFile: thaw server's embedded tier with two
// coordinators and coordinator.callers_file: a rewritten file reaches the
// coordinator that leads and the standby alike (DDL authorized with the
// new token, refused with the old), and the standby that takes over keeps
// the new callers.
func TestEmbeddedCallersFile(t *testing.T) {
	ctx := t.Context()
	const tokA, tokB = "ddl-token-a-0123456789", "ddl-token-b-0123456789"
	file := filepath.Join(t.TempDir(), "callers.yaml")
	callers := func(tok string) string {
		return "callers:\n  - {name: admin, token_sha256: " + access.TokenSHA256(tok) + ", ddl: ['*']}\n"
	}
	if err := os.WriteFile(file, []byte(callers(tokA)), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startTier(t, ctx, EmbeddedConfig{DataDir: t.TempDir(), TabletServers: 1, Coordinators: 2,
		Coordinator: CoordinatorOptions{CallersFile: file, AuthorizeDDL: true, LeaseTTL: 2 * time.Second}})
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	createDB := func(tok, db string) error {
		r := connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: db})
		r.Header().Set("Authorization", "Bearer "+tok)
		_, err := coord.CreateDatabase(ctx, r)
		return err
	}
	if err := createDB(tokA, "a"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(callers(tokB)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Probed with a database that exists: nothing is created meanwhile.
	deadline := time.Now().Add(20 * time.Second)
	for tierpb.ReasonOf(createDB(tokA, "a")) != tierpb.ReasonUnauthenticated {
		if time.Now().After(deadline) {
			t.Fatal("the replaced token is still accepted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := createDB(tokB, "b"); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.StopCoordinator(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	retry(t, "the standby takes over, with the new callers", func() error { return createDB(tokB, "c") })
	if err := createDB(tokA, "d"); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("the replaced token at the new leader: %v", err)
	}
}
