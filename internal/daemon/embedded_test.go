package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/flock"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/tier/tierpb"
)

func startTest(t *testing.T, cfg EmbeddedConfig) *Embedded {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.EtcdUnsafeNoFsync = true
	if cfg.Coordinator.LeaseTTL == 0 {
		cfg.Coordinator.LeaseTTL = 2 * time.Second
	}
	if cfg.Tablet.LeaseTTL == 0 {
		cfg.Tablet.LeaseTTL = 2 * time.Second
	}
	e, err := StartEmbedded(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return send(t, http.MethodGet, url, "", "")
}

// send makes one request and returns the status and body.
func send(t *testing.T, method, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEmbeddedServes(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := startTest(t, EmbeddedConfig{TabletServers: 2, Registry: reg})
	if code, body := get(t, e.Address()+PathHealthz); code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, body := get(t, e.Address()+PathReadyz); code != 200 || !strings.Contains(body, "tablets: ok") {
		t.Errorf("readyz: %d %q", code, body)
	}
	ctx := t.Context()
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	if _, err := coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	servers, err := coord.ListServers(ctx, connect.NewRequest(&tierv1.ListServersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range servers.Msg.GetServers() {
		addrs = append(addrs, s.GetServerId()+"="+s.GetAddress())
	}
	want := []string{"ts-1=" + e.TabletAddress("ts-1"), "ts-2=" + e.TabletAddress("ts-2")}
	if strings.Join(addrs, " ") != strings.Join(want, " ") {
		t.Errorf("servers %v, want %v", addrs, want)
	}
	// The coordinator is also at /c/coord-1/, a tablet server at /t/{id}/.
	leader, err := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.CoordinatorAddress("coord-1")).
		GetLeader(ctx, connect.NewRequest(&tierv1.GetLeaderRequest{}))
	if err != nil || leader.Msg.GetCoordinatorId() != "coord-1" || leader.Msg.GetAddress() != e.HostPort() {
		t.Errorf("GetLeader: %v %v", leader, err)
	}
	ts := tierv1connect.NewTabletServiceClient(e.HTTPClient(), e.TabletAddress("ts-1"))
	if _, err := ts.Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: &tierv1.TargetId{TableId: 99}, Keys: [][]byte{{1}}})); tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
		t.Errorf("lookup on an unknown target: %v", err)
	}
	code, body := get(t, e.Address()+PathMetrics)
	if code != 200 || !strings.Contains(body, `thaw_coordinator_leader{coordinator="coord-1"} 1`) || !strings.Contains(body, `server="ts-2"`) {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	// A killed tablet server's mount answers UNAVAILABLE.
	if err := e.KillTablet(ctx, "ts-2"); err != nil {
		t.Fatal(err)
	}
	ts2 := tierv1connect.NewTabletServiceClient(e.HTTPClient(), e.TabletAddress("ts-2"))
	if _, err := ts2.Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: &tierv1.TargetId{TableId: 1}})); tierpb.ReasonOf(err) != tierpb.ReasonUnavailable {
		t.Errorf("lookup on a killed server: %v", err)
	}
	if err := e.StartTablet(ctx, "ts-2"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedStartsQuietAndPrivate: the embedded tier creates its data
// directories for its own user only (etcd warns of anything looser), and
// a start logs no etcd warning: none of those etcd logs by default applies
// to the embedded member (see meta.quietEvents), so one that does reach
// the log is news.
func TestEmbeddedStartsQuietAndPrivate(t *testing.T) {
	var logs testlog.Buffer
	dir := t.TempDir()
	startTest(t, EmbeddedConfig{DataDir: dir, TabletServers: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	for _, d := range []string{"etcd", "changelog", "tablets"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o700 {
			t.Errorf("%s: permission %v, want %v", d, perm, os.FileMode(0o700))
		}
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "component=etcd") {
			t.Errorf("etcd warned: %s", line)
		}
	}
}

// TestEmbeddedRefusesBusyDataDirAndPort: a second tier on the data
// directory of a running one fails at once (it waited for etcd's database
// lock forever, without a word), and a listener address in use fails
// before etcd starts, quietly, leaving the data directory free.
func TestEmbeddedRefusesBusyDataDirAndPort(t *testing.T) {
	dir := t.TempDir()
	first := startTest(t, EmbeddedConfig{DataDir: dir, TabletServers: 1})
	try := func(cfg EmbeddedConfig) error {
		t.Helper()
		cfg.EtcdUnsafeNoFsync = true
		done := make(chan error, 1)
		go func() {
			e, err := StartEmbedded(t.Context(), cfg)
			if err == nil {
				err = errors.Join(errors.New("started"), e.Close())
			}
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute): // a hang guard, not a speed goal
			t.Fatal("StartEmbedded did not return within a minute")
			return nil
		}
	}
	if err := try(EmbeddedConfig{DataDir: dir, TabletServers: 1}); !errors.Is(err, flock.ErrLocked) ||
		!strings.Contains(err.Error(), "data_dir "+dir+" (is another thaw process using it?)") {
		t.Errorf("second tier on the same data_dir: %v", err)
	}
	var logs testlog.Buffer
	other := t.TempDir()
	err := try(EmbeddedConfig{DataDir: other, TabletServers: 1, Listen: first.HostPort(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err == nil || !strings.Contains(err.Error(), "daemon: listen: ") {
		t.Errorf("tier on a listener address in use: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(other, "etcd", "member")); !errors.Is(serr, os.ErrNotExist) || logs.String() != "" {
		t.Errorf("etcd started before the listener failed (stat etcd/member: %v); logs:\n%s", serr, logs.String())
	}
	// The lock goes with the tier: the same directory starts again after
	// Close.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	startTest(t, EmbeddedConfig{DataDir: dir, TabletServers: 1})
}

// TestEmbeddedJSONIsStrict: a JSON request (curl, a browser) with a member
// the message does not have is INVALID_ARGUMENT naming it, on the
// coordinator, the bulk-load service and a tablet server; connect's own
// JSON codec dropped it, so a misspelt flag was silently not applied.
func TestEmbeddedJSONIsStrict(t *testing.T) {
	e := startTest(t, EmbeddedConfig{TabletServers: 1})
	post := func(url, contentType, body string) (int, string) {
		t.Helper()
		return send(t, http.MethodPost, url, contentType, body)
	}
	for _, tc := range []struct{ url, body, unknown string }{
		{e.Address() + "/thaw.tier.v1.CoordinatorService/CreateDatabase", `{"database":"d","ignoreIfExist":true}`, "ignoreIfExist"},
		{e.Address() + "/thaw.tier.v1.BulkLoadService/Status", `{"handle":{"txnId":"x","epoch":1}}`, "epoch"},
		{e.TabletAddress("ts-1") + "/thaw.tier.v1.TabletService/Lookup", `{"target":{"tableId":"1"},"keyz":[]}`, "keyz"},
	} {
		for _, ct := range []string{"application/json", "application/json; charset=utf-8"} {
			code, body := post(tc.url, ct, tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, `"code":"invalid_argument"`) || !strings.Contains(body, `unknown field \"`+tc.unknown+`\"`) {
				t.Errorf("%s (%s) %s: %d %s", tc.url, ct, tc.body, code, body)
			}
		}
	}
	// Nothing was created (this would be ALREADY_EXISTS), and known
	// members still work.
	if code, body := post(e.Address()+"/thaw.tier.v1.CoordinatorService/CreateDatabase", "application/json", `{"database":"d"}`); code != http.StatusOK {
		t.Errorf("CreateDatabase with known members: %d %s", code, body)
	}
}
