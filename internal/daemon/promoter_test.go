package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
)

const testPolicy = `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: recent
spec:
  source: {catalog: default, table: lake.events}
  target: {database: shop, table: events, buckets: 2}
  selection:
    partitions:
      window: {field: event_day, last: 2d, anchor: latest}
  triggers: {onRequest: true}
`

func promoterTestConfig(t *testing.T) PromoterConfig {
	t.Helper()
	cfg, _ := promoterTestSetup(t, testPolicy)
	return cfg
}

// promoterTestSetup writes a sample lake (3 days of lake.events, 300
// rows) and the policy, and returns a promoter config over them (one
// tablet server, no periodic reconcile) and the sample.
func promoterTestSetup(t *testing.T, policy string) (PromoterConfig, lake.SampleInfo) {
	t.Helper()
	dir := t.TempDir()
	info, err := lake.Sample(t.Context(), lake.SampleOptions{Dir: filepath.Join(dir, "lake"), Rows: 300, Days: 3, Seed: 5, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg PromoterConfig
	cfg.Defaults()
	cfg.Listen, cfg.DataDir, cfg.Policies = "127.0.0.1:0", filepath.Join(dir, "data"), []string{pol}
	cfg.Catalogs = map[string]lake.Config{"default": info.Config}
	cfg.Tier.Tablets, cfg.ReconcileInterval, cfg.LeaseTTL, cfg.ShutdownTimeout = 1, -1, 2*time.Second, 20*time.Second
	return cfg, info
}

// sharedTier starts a tier on cfg's data directory that outlives the
// promoters of the test, and points cfg at it as an external tier, so
// that two promoters (a leader and a standby) can share it.
func sharedTier(t *testing.T, cfg *PromoterConfig) {
	t.Helper()
	e := startTier(t, t.Context(), EmbeddedConfig{DataDir: filepath.Join(cfg.DataDir, "tier"), TabletServers: 1})
	no := false
	cfg.Tier = PromoterTierConfig{Embedded: &no, Address: e.Address()}
	cfg.Tier.Etcd.defaults()
	cfg.Tier.Etcd.Endpoints = e.EtcdEndpoints()
}

// startTier starts a small embedded tier (smallEmbedded) of ec and waits
// until it is ready; the test's end closes it.
func startTier(t *testing.T, ctx context.Context, ec EmbeddedConfig) *Embedded {
	t.Helper()
	smallEmbedded(&ec)
	e, err := StartEmbedded(ctx, ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func smallEmbedded(ec *EmbeddedConfig) {
	ec.EtcdUnsafeNoFsync = true
	ec.Tablet.CacheSize, ec.Tablet.MemTableBudget = 4<<20, 4<<20
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPromoterShutdownDuringBuild stops the daemon while a promotion is
// building: the transaction is aborted (the target holds no BEGUN
// transaction and the record says aborted), the leader resigned, and a
// standby that waited on the same etcd takes over and, since the request
// is stored, promotes the target again by itself.
func TestPromoterShutdownDuringBuild(t *testing.T) {
	cfg := promoterTestConfig(t)
	sharedTier(t, &cfg)
	cfg.ID = "first"
	building, aborted := make(chan promoter.Record, 1), make(chan promoter.Record, 1)
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{Hooks: promoter.Hooks{
		AfterPhase: func(ctx context.Context, r promoter.Record) error {
			if r.Phase == promoter.PhaseBuilding {
				select {
				case building <- r:
				default:
				}
				<-ctx.Done() // hold the build until shutdown
			}
			if r.Phase == promoter.PhaseAborted {
				aborted <- r
			}
			return nil
		}}})
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
	if code, body := httpGet(t, d.URL()+PathReadyz); code != 200 || !strings.Contains(body, "leader: ok") {
		t.Fatalf("readyz %d %s", code, body)
	}

	// A standby on the same etcd and tier.
	scfg := cfg
	scfg.ID, scfg.DataDir = "standby", ""
	standby, err := StartPromoter(t.Context(), scfg, PromoterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	if code, body := httpGet(t, standby.URL()+"/v1/policies"); code != 503 || !strings.Contains(body, `"unavailable"`) {
		t.Fatalf("standby api %d %s", code, body)
	}
	if code, body := httpGet(t, standby.URL()+PathReadyz); code != 503 || !strings.Contains(body, "leader: not leading") {
		t.Fatalf("standby readyz %d %s", code, body)
	}

	if _, err := d.Promoter().Request(t.Context(), promoter.Request{Table: "shop.events", Partition: "2024-01-03"}); err != nil {
		t.Fatal(err)
	}
	var r promoter.Record
	select {
	case r = <-building:
	case <-time.After(time.Minute):
		t.Fatal("no build started")
	}
	closed = true
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-aborted:
		if a.ID != r.ID || a.Attempt != 1 || !a.Interrupted() {
			t.Fatalf("record after shutdown: %+v", a)
		}
	default:
		t.Fatal("the shutdown did not record the attempt aborted")
	}
	// The standby leads now, resumed the ledger, and takes the stored
	// request up: it promotes the target again as attempt 2.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := standby.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := standby.Promoter().Promotion(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Phase == promoter.PhaseCommitted && got.Attempt == 2 {
			break
		}
		if got.Phase.Terminal() && got.Attempt >= 2 {
			t.Fatalf("the standby's attempt: %+v", got)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby did not promote the request again: %+v", got)
		case <-time.After(20 * time.Millisecond):
		}
	}
	bl, err := bulkloadclient.New(ctx, scfg.Tier.Address)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := bl.GetInProgress(ctx, bulkload.Target{Database: "shop", Table: "events", Partition: "2024-01-03"})
	switch {
	case errors.Is(err, bulkload.ErrNotFound):
	case err != nil:
		t.Fatalf("get in progress: %v", err)
	case st.State == bulkload.Begun:
		t.Fatalf("a transaction is still BEGUN after shutdown: %+v", st)
	}
	l, err := fencing.CurrentLeader(ctx, standby.Etcd(), cfg.Prefix+"/leader")
	if err != nil || l.ID != "standby" {
		t.Fatalf("leader %+v %v", l, err)
	}
	// A synchronous promotion of the target finds it promoted.
	rec, err := standby.Promoter().Promote(ctx, promoter.Key{Policy: "recent", Partition: "2024-01-03"})
	if err != nil && !errors.Is(err, promoter.ErrSkipped) {
		t.Fatal(err)
	}
	if rec.Phase != promoter.PhaseCommitted {
		t.Fatalf("re-promotion: %+v %v", rec, err)
	}
}

// TestPromoterRemovesStaleBuilds: a promoter starting on a data_dir whose
// tmp/ holds the build directory of a killed run (a LOCK nobody holds)
// removes it and says so; a directory without a LOCK stays.
func TestPromoterRemovesStaleBuilds(t *testing.T) {
	cfg := promoterTestConfig(t)
	tmp := filepath.Join(cfg.DataDir, "tmp")
	stale, other := filepath.Join(tmp, "thaw-build-1"), filepath.Join(tmp, "thaw-build-2")
	for _, f := range []string{filepath.Join(stale, "LOCK"), filepath.Join(stale, "run-000001"), filepath.Join(other, "x")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, make([]byte, 100), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs testlog.Buffer
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{RunOptions: RunOptions{Logger: NewLogger(&logs, LogConfig{Level: "info", Format: "text"})}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed run's build directory: %v, want it gone", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the directory without a LOCK: %v, want it kept", err)
	}
	if want := `msg="removed the temporary files of builds a killed process left" dir=` + tmp + ` dirs=1 bytes=200`; !strings.Contains(logs.String(), want) {
		t.Errorf("log misses %q:\n%s", want, logs.String())
	}
}
