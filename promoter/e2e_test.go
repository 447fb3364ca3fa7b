package promoter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/cli"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/tierclient"
)

// env is a real embedded tier (one tablet server) and a sample lake.
type env struct {
	t      *testing.T
	tier   *daemon.Embedded
	tc     *tierclient.Client
	bl     *bulkloadclient.Client
	sample lake.SampleInfo
	lake   *lake.Lake

	mu  sync.Mutex
	now time.Time
}

func newEnv(t *testing.T, rows int) *env {
	t.Helper()
	return newEnvWith(t, rows, nil)
}

// newEnvWith is newEnv with the embedded tier's configuration changed by
// mod (nil: none).
func newEnvWith(t *testing.T, rows int, mod func(*daemon.EmbeddedConfig)) *env {
	t.Helper()
	ctx := t.Context()
	cfg := daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1}
	if mod != nil {
		mod(&cfg)
	}
	tier, err := daemon.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tier.Close(); err != nil {
			t.Errorf("close tier: %v", err)
		}
	})
	if err := tier.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tierclient.New(ctx, tier.Address())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	bl, err := bulkloadclient.New(ctx, tier.Address())
	if err != nil {
		t.Fatal(err)
	}
	sample, err := lake.Sample(ctx, lake.SampleOptions{Dir: t.TempDir(), Rows: rows, Days: 7, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := lake.Open(ctx, sample.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return &env{t: t, tier: tier, tc: tc, bl: bl, sample: sample, lake: lk}
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) setNow(t time.Time) {
	e.mu.Lock()
	e.now = t
	e.mu.Unlock()
}

// config returns a promoter configuration over e with quick retries and
// the ledger under /thaw-test/promoter.
func (e *env) config(pols []*policies.Policy) promoter.Config {
	return e.configAt(pols, "/thaw-test/promoter")
}

// configAt is config with the ledger under prefix. A promotion's identity
// names the lake table, not the target, so promoters of one lake table into
// different targets need ledgers of their own.
func (e *env) configAt(pols []*policies.Policy, prefix string) promoter.Config {
	return promoter.Config{
		Policies: pols,
		Lakes:    map[string]promoter.Lake{"default": e.lake},
		Tier:     tieradapter.New(e.tc),
		BulkLoad: e.bl,
		Ledger:   promoter.NewEtcdLedger(e.tier.Etcd(), prefix, nil),
		Logger:   slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Now:      e.clock,
		Workers:  2,
		Retry:    promoter.RetryPolicy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Attempts: 3},
		TempDir:  e.t.TempDir(),
	}
}

func (e *env) promoter(cfg promoter.Config) *promoter.Promoter {
	e.t.Helper()
	p, err := promoter.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", b)
	return len(b), nil
}

// policy parses one policy document.
func policy(t *testing.T, doc string) *policies.Policy {
	t.Helper()
	ps, err := policies.Parse([]byte(doc), "test.yaml")
	if err != nil {
		t.Fatalf("parse policy: %v\n%s", err, doc)
	}
	if len(ps) != 1 {
		t.Fatalf("%d policies", len(ps))
	}
	return ps[0]
}

// windowPolicy promotes the sample's day partitions of the last `last`
// into database.table.
func windowPolicy(t *testing.T, name, table, last string, extra string) *policies.Policy {
	return policy(t, fmt.Sprintf(`apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: %s
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: %s
    buckets: 2
    replicationFactor: 1
  selection:
    partitions:
      window:
        field: event_day
        last: %s
  limits:
    buildWorkers: 1
    memory: 8MiB
%s`, name, table, last, extra))
}

// lakeRow is what the test compares of a row.
type lakeRow struct {
	id      int64
	user    string
	region  any // string or nil
	version int32
	day     kv.Date
}

// lakeRows reads the lake partitions whose day (Human value) is in days, at
// the current snapshot, keeping the last row of each id: what the tier must
// hold after the promotion.
func (e *env) lakeRows(days ...string) map[int64]lakeRow {
	e.t.Helper()
	rows, _ := e.lakeScan(days...)
	return rows
}

// lakeRowCount is the number of rows a scan of the days returns, repeated
// keys included.
func (e *env) lakeRowCount(days ...string) int {
	e.t.Helper()
	_, n := e.lakeScan(days...)
	return n
}

// lakeScan returns the last row of each id of the days and how many rows
// the scan returned.
func (e *env) lakeScan(days ...string) (map[int64]lakeRow, int) {
	e.t.Helper()
	ctx := e.t.Context()
	parts, err := e.lake.Partitions(ctx, e.sample.Table, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	var refs []lake.PartitionRef
	for _, p := range parts {
		if slices.Contains(days, p.Values[0].Human) {
			refs = append(refs, p.Ref())
		}
	}
	if len(refs) != len(days) {
		e.t.Fatalf("lake partitions of %v: %d", days, len(refs))
	}
	info, err := e.lake.Describe(ctx, e.sample.Table)
	if err != nil {
		e.t.Fatal(err)
	}
	_, m, err := lake.MapSchema(info, lake.MappingOptions{Buckets: 2})
	if err != nil {
		e.t.Fatal(err)
	}
	_, seq, err := e.lake.Scan(ctx, e.sample.Table, lake.ScanOptions{Partitions: refs, Mapping: &m})
	if err != nil {
		e.t.Fatal(err)
	}
	out, n := map[int64]lakeRow{}, 0
	for rec, err := range seq {
		if err != nil {
			e.t.Fatal(err)
		}
		s := rec.Schema()
		col := func(name string) int {
			idx := s.FieldIndices(name)
			if len(idx) != 1 {
				e.t.Fatalf("column %s: %v", name, idx)
			}
			return idx[0]
		}
		ids := rec.Column(col("id")).(*array.Int64)
		users := rec.Column(col("user_name")).(*array.String)
		regions := rec.Column(col("region")).(*array.String)
		versions := rec.Column(col("version")).(*array.Int32)
		dayCol := rec.Column(col("event_day")).(*array.Date32)
		for i := range int(rec.NumRows()) {
			r := lakeRow{id: ids.Value(i), user: users.Value(i), version: versions.Value(i), day: kv.Date(dayCol.Value(i))}
			if !regions.IsNull(i) {
				r.region = regions.Value(i)
			}
			out[r.id] = r
			n++
		}
		rec.Release()
	}
	return out, n
}

// checkTier checks that the tier partition holds exactly want: every key
// readable by Get with the lake's last row, and nothing else (Scan).
func (e *env) checkTier(table, partition string, want map[int64]lakeRow) {
	e.t.Helper()
	ctx := e.t.Context()
	info, err := e.tc.Table(ctx, "shop", table)
	if err != nil {
		e.t.Fatal(err)
	}
	ks := info.KV
	idx := func(name string) int {
		i, ok := ks.ColumnIndex(name)
		if !ok {
			e.t.Fatalf("tier column %s missing", name)
		}
		return i
	}
	iID, iUser, iRegion, iVersion := idx("id"), idx("user_name"), idx("region"), idx("version")
	target := tierclient.Target{Database: "shop", Table: table, Partition: partition}
	ids := make([]int64, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	keys := make([]kv.Row, len(ids))
	for i, id := range ids {
		if keys[i], err = info.KeyRow(id, want[id].day); err != nil {
			e.t.Fatal(err)
		}
	}
	rows, err := e.tc.Get(ctx, target, keys)
	if err != nil {
		e.t.Fatalf("get from %s: %v", target, err)
	}
	for i, row := range rows {
		w := want[ids[i]]
		if row == nil {
			e.t.Fatalf("%s: id %d missing", target, w.id)
		}
		if row[iID] != w.id || row[iUser] != w.user || row[iRegion] != w.region || row[iVersion] != w.version {
			e.t.Fatalf("%s: id %d is %v, lake has %+v", target, w.id, row, w)
		}
	}
	n := 0
	if err := e.tc.Scan(ctx, target, func(kv.Row) error { n++; return nil }); err != nil {
		e.t.Fatal(err)
	}
	if n != len(want) {
		e.t.Fatalf("%s holds %d rows, the lake %d keys", target, n, len(want))
	}
}

// partitionOf returns the tier partition name of a sample day.
func (e *env) partitionOf(day string) string {
	e.t.Helper()
	ctx := e.t.Context()
	parts, err := e.lake.Partitions(ctx, e.sample.Table, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := e.lake.Describe(ctx, e.sample.Table)
	if err != nil {
		e.t.Fatal(err)
	}
	_, m, err := lake.MapSchema(info, lake.MappingOptions{Buckets: 2})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range parts {
		if p.Values[0].Human == day {
			name, err := m.PartitionName(p)
			if err != nil {
				e.t.Fatal(err)
			}
			return name
		}
	}
	e.t.Fatalf("no lake partition of %s", day)
	return ""
}

// committedByPartition returns the committed records of a table by tier
// partition, failing on a partition committed twice.
func committedByPartition(t *testing.T, recs []promoter.Record, table string) map[string]promoter.Record {
	t.Helper()
	out := map[string]promoter.Record{}
	for _, r := range recs {
		if r.Table != table || r.Phase != promoter.PhaseCommitted {
			continue
		}
		if o, dup := out[r.Partition]; dup {
			t.Fatalf("partition %s committed twice: %s and %s", r.Partition, o.ID, r.ID)
		}
		out[r.Partition] = r
	}
	return out
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// noTxnInProgress checks that no bulk load holds a target.
func (e *env) noTxnInProgress(table string, partitions []string) {
	e.t.Helper()
	for _, p := range partitions {
		target := bulkload.Target{Database: "shop", Table: table, Partition: p}
		st, bc, err := e.bl.GetInProgress(e.t.Context(), target)
		if err != nil {
			if errors.Is(err, bulkload.ErrNotFound) {
				continue
			}
			e.t.Fatalf("get in progress %s: %v", target, err)
		}
		if st.Handle.TxnID == "" && bc == nil {
			continue // none
		}
		if !st.State.Terminal() || bc != nil {
			e.t.Fatalf("%s: transaction %s in progress (%s)", target, st.Handle.TxnID, st.State)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWindowPolicy: a window policy promotes exactly the partitions in the
// window; reconciling again does nothing; a lake commit that adds a day in
// the window gets it promoted by Run's lake poll.
func TestWindowPolicy(t *testing.T) {
	e := newEnv(t, 2000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)) // window [01-05, 01-08)
	pol := windowPolicy(t, "events-window", "events", "3d", "  triggers:\n    onLakeCommit: true\n")
	cfg := e.config([]*policies.Policy{pol})
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	p := e.promoter(cfg)

	inWindow := []string{"2024-01-05", "2024-01-06", "2024-01-07"}
	wantParts := map[string]string{} // tier partition -> day
	for _, d := range inWindow {
		wantParts[e.partitionOf(d)] = d
	}

	plan, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	if plan.TableExists || !plan.WillCreate || len(plan.Items) != 7 {
		t.Fatalf("plan: exists %t, create %t, %d items", plan.TableExists, plan.WillCreate, len(plan.Items))
	}
	for _, it := range plan.Items {
		_, in := wantParts[it.Key.Partition]
		if in != (it.Action == promoter.ActionPromote) {
			t.Errorf("plan item %s: %s (%s)", it.Key.Partition, it.Action, it.Reason)
		}
		if it.PromotionID != promoter.PromotionID("default", "lake.events", "shop.events", it.Key.Partition, it.SourceSnapshotID) {
			t.Errorf("plan item %s: id %s", it.Key.Partition, it.PromotionID)
		}
	}
	if recs, _ := p.Promotions(ctx); len(recs) != 0 {
		t.Fatalf("Plan wrote %d records", len(recs))
	}
	if _, ok, _ := tieradapter.New(e.tc).TableSchema(ctx, "shop", "events"); ok {
		t.Fatal("Plan created the table")
	}

	rep, err := p.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selected != 3 || rep.Enqueued != 3 {
		t.Fatalf("reconcile: %+v", rep)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed := committedByPartition(t, recs, "events")
	if got, want := keysOf(committed), keysOf(wantParts); !slices.Equal(got, want) || len(recs) != 3 {
		t.Fatalf("committed %v (of %d records), want %v", got, len(recs), want)
	}
	tierParts, err := e.tc.Partitions(ctx, "shop", "events")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tierParts)
	if !slices.Equal(tierParts, keysOf(wantParts)) {
		t.Fatalf("tier partitions %v, want %v", tierParts, keysOf(wantParts))
	}
	for part, day := range wantParts {
		e.checkTier("events", part, e.lakeRows(day))
		r := committed[part]
		if r.Attempt != 1 || r.Rows == 0 || r.Bytes == 0 || r.TxnID == "" || r.CommittedAt == nil || r.BegunAt == nil {
			t.Errorf("record %+v", r)
		}
	}
	e.noTxnInProgress("events", keysOf(wantParts))
	var rows int64
	for _, r := range committed {
		rows += r.Rows
	}
	if got := metricValue(t, reg, "thaw_promoter_promotions_total", "outcome", "committed"); got != 3 {
		t.Errorf("promotions_total{outcome=committed} = %v, want 3", got)
	}
	if got := metricValue(t, reg, "thaw_promoter_rows_total", "policy", pol.Name()); got != float64(rows) {
		t.Errorf("rows_total = %v, want %d", got, rows)
	}

	// Reconciling again changes nothing: no records, no transactions.
	before := map[string]int64{}
	for _, r := range recs {
		before[r.ID] = r.Revision
	}
	bulkIDs := e.bulkLoadIDs("events", keysOf(wantParts))
	rep, err = p.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Enqueued != 0 || rep.Promoted != 3 {
		t.Fatalf("second reconcile: %+v", rep)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(recs) {
		t.Fatalf("second reconcile: %d records, was %d", len(again), len(recs))
	}
	for _, r := range again {
		if before[r.ID] != r.Revision {
			t.Fatalf("second reconcile rewrote %s", r.ID)
		}
	}
	if got := e.bulkLoadIDs("events", keysOf(wantParts)); !slices.Equal(got, bulkIDs) {
		t.Fatalf("second reconcile: bulk loads %v, were %v", got, bulkIDs)
	}

	// A lake commit adds 2024-01-08; the clock moves a day: the window is
	// [01-06, 01-09). Run's lake poll promotes the new day.
	snap, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC), FirstID: 1_000_000, Rows: 150, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	e.setNow(time.Date(2024, 1, 9, 0, 0, 0, 0, time.UTC))
	newPart := e.partitionOf("2024-01-08")
	cfg.ReconcileInterval = -1
	cfg.LakePollInterval = 50 * time.Millisecond
	runner := e.promoter(cfg)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runner.Run(rctx) }()
	waitFor(t, "the new day promoted", func() bool {
		r, err := runner.Promotion(ctx, promoter.PromotionID("default", "lake.events", "shop.events", newPart, snap.ID))
		return err == nil && r.Phase == promoter.PhaseCommitted
	})
	if !runner.Ready() {
		t.Error("Run is not ready")
	}
	if err := runner.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if runner.Ready() {
		t.Error("ready after Run returned")
	}
	final, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed = committedByPartition(t, final, "events")
	wantParts[newPart] = "2024-01-08"
	if got, want := keysOf(committed), keysOf(wantParts); !slices.Equal(got, want) || len(final) != 4 {
		t.Fatalf("after the lake commit: committed %v (of %d records), want %v", got, len(final), want)
	}
	e.checkTier("events", newPart, e.lakeRows("2024-01-08"))
	for _, r := range final {
		if r.Partition != newPart && before[r.ID] != r.Revision {
			t.Errorf("the lake commit rewrote %s", r.ID)
		}
	}

	t.Run("unmappable", func(t *testing.T) {
		bad := policy(t, `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: bad-key
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: bad
    buckets: 2
    primaryKey: [id, no_such_column]
`)
		bp := e.promoter(e.config([]*policies.Policy{bad}))
		_, err := bp.Plan(ctx, "bad-key")
		if !errors.Is(err, promoter.ErrSchema) || !strings.Contains(err.Error(), "no_such_column") {
			t.Fatalf("plan: %v, want ErrSchema naming no_such_column", err)
		}
		if _, err := bp.Reconcile(ctx); !errors.Is(err, promoter.ErrSchema) {
			t.Fatalf("reconcile: %v", err)
		}
		if _, err := bp.Promote(ctx, promoter.Key{Policy: "bad-key", Partition: newPart}); !errors.Is(err, promoter.ErrSchema) {
			t.Fatalf("promote: %v", err)
		}
	})

	t.Run("unknown selection field", func(t *testing.T) {
		// A selection naming a field the lake table is not partitioned by
		// (a typo) is refused, rather than selecting nothing forever.
		for field, sel := range map[string]string{
			"event_dy": "      window: {field: event_dy, last: 3d}\n",
			"region":   "      where:\n        region: {eq: eu}\n",
		} {
			name := "typo-" + field
			typo := policy(t, `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: `+strings.ReplaceAll(name, "_", "-")+`
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: typo
    buckets: 2
  selection:
    partitions:
`+sel)
			tp := e.promoter(e.config([]*policies.Policy{typo}))
			_, err := tp.Plan(ctx, typo.Name())
			if !errors.Is(err, promoter.ErrSchema) || !strings.Contains(err.Error(), "names partition field "+field+", which lake table lake.events does not have (its partition fields: event_day)") {
				t.Fatalf("plan of a selection on %s: %v", field, err)
			}
			if _, err := tp.Reconcile(ctx); !errors.Is(err, promoter.ErrSchema) {
				t.Fatalf("reconcile: %v", err)
			}
		}
	})

	t.Run("request", func(t *testing.T) {
		// A partition outside the window is promoted on request.
		items, err := runner.Request(ctx, promoter.Request{Table: "shop.events", Partition: e.partitionOf("2024-01-01")})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 || items[0].Action != promoter.ActionPromote {
			t.Fatalf("request of an unselected partition: %+v", items)
		}
		if _, err := runner.Request(ctx, promoter.Request{Table: "shop.nothing"}); !errors.Is(err, promoter.ErrUnknownPolicy) {
			t.Fatalf("request of an unknown table: %v", err)
		}
		if _, err := runner.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: "2099-01-01"}); !errors.Is(err, promoter.ErrNotFound) {
			t.Fatalf("request of an unknown partition: %v", err)
		}
		if err := runner.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := runner.Promote(ctx, promoter.Key{Policy: pol.Name(), Partition: e.partitionOf("2024-01-01")})
		if err != nil || r.Phase != promoter.PhaseCommitted {
			t.Fatalf("promote of a requested partition after drain: %+v %v", r, err)
		}
		e.checkTier("events", r.Partition, e.lakeRows("2024-01-01"))
		// The plan still does not select it, and says the tier holds it.
		plan, err := runner.Plan(ctx, pol.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range plan.Items {
			if it.Key.Partition == r.Partition && (it.Action != promoter.ActionSkip ||
				!strings.HasPrefix(it.Reason, "not selected: ") || !strings.HasSuffix(it.Reason, " (promoted by "+r.ID+")")) {
				t.Errorf("plan item of the requested partition: %+v", it)
			}
		}

		noReq := windowPolicy(t, "no-request", "other", "3d", "  triggers:\n    onRequest: false\n")
		np := e.promoter(e.config([]*policies.Policy{noReq}))
		if _, err := np.Request(ctx, promoter.Request{Policy: "no-request"}); !errors.Is(err, promoter.ErrNotAllowed) {
			t.Fatalf("request without onRequest: %v", err)
		}
	})

	t.Run("dropped", func(t *testing.T) {
		// A promoted partition dropped from the tier (by an operator, or a
		// retention job): plans and reconciles leave it dropped and say
		// so; a request promotes it again, as its record's next attempt.
		key := promoter.Key{Policy: pol.Name(), Partition: newPart}
		before, err := runner.Promote(ctx, key)
		if err != nil || before.Phase != promoter.PhaseCommitted {
			t.Fatalf("the promoted partition: %+v %v", before, err)
		}
		if err := e.tc.DropPartition(ctx, "shop", "events", newPart); err != nil {
			t.Fatal(err)
		}
		planned := func() promoter.PlanItem {
			t.Helper()
			plan, err := runner.Plan(ctx, pol.Name())
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range plan.Items {
				if it.Key == key {
					return it
				}
			}
			t.Fatalf("no plan item of %s", newPart)
			return promoter.PlanItem{}
		}
		want := "already promoted by " + before.ID + " (dropped from the tier since; a request promotes it again)"
		if it := planned(); it.Action != promoter.ActionSkip || it.Reason != want {
			t.Fatalf("plan item of the dropped partition: %+v, want reason %q", it, want)
		}
		if _, err := runner.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if err := runner.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if parts, err := e.tc.Partitions(ctx, "shop", "events"); err != nil || slices.Contains(parts, newPart) {
			t.Fatalf("after a reconcile the tier has partitions %v (%v): the dropped %s came back", parts, err, newPart)
		}
		items, err := runner.Request(ctx, promoter.Request{Table: "shop.events", Partition: newPart})
		if err != nil || len(items) != 1 || items[0].Action != promoter.ActionPromote || items[0].PromotionID != before.ID || items[0].Attempt != before.Attempt+1 {
			t.Fatalf("request of the dropped partition: %+v %v", items, err)
		}
		if err := runner.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := runner.Promote(ctx, key)
		if err != nil || after.Phase != promoter.PhaseCommitted || after.ID != before.ID || after.Attempt != before.Attempt+1 || after.TxnID == before.TxnID {
			t.Fatalf("promoted again: %+v %v (before: attempt %d, txn %s)", after, err, before.Attempt, before.TxnID)
		}
		e.checkTier("events", newPart, e.lakeRows("2024-01-08"))
		if it := planned(); it.Reason != "already promoted by "+before.ID {
			t.Fatalf("plan item after the new promotion: %+v", it)
		}

		// A partition outside the selection, promoted on request ("request"
		// above) and dropped since: its not-selected reason says both.
		old := e.partitionOf("2024-01-01")
		oldKey := promoter.Key{Policy: pol.Name(), Partition: old}
		r, err := runner.Promote(ctx, oldKey)
		if err != nil || r.Phase != promoter.PhaseCommitted {
			t.Fatalf("the requested partition: %+v %v", r, err)
		}
		if err := e.tc.DropPartition(ctx, "shop", "events", old); err != nil {
			t.Fatal(err)
		}
		key = oldKey
		if it := planned(); it.Action != promoter.ActionSkip || !strings.HasPrefix(it.Reason, "not selected: ") ||
			!strings.HasSuffix(it.Reason, " (promoted by "+r.ID+"; dropped from the tier since)") {
			t.Fatalf("plan item of a requested partition dropped since: %+v", it)
		}

		// The whole table dropped by another client (thaw table drop): the
		// promoter's client cached the table, and plans read it from the
		// cache ("exists", then "cannot check the target: not found").
		other, err := tierclient.New(ctx, e.tier.Address())
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if err := other.DropTable(ctx, "shop", "events"); err != nil {
			t.Fatal(err)
		}
		plan, err := runner.Plan(ctx, pol.Name())
		if err != nil {
			t.Fatal(err)
		}
		if plan.TableExists {
			t.Fatalf("plan after the table was dropped: exists %t", plan.TableExists)
		}
		key = promoter.Key{Policy: pol.Name(), Partition: newPart}
		if it := planned(); it.Reason != "already promoted by "+before.ID+" (dropped from the tier since; a request promotes it again)" {
			t.Fatalf("plan item after the table was dropped: %+v", it)
		}
		// A request of the whole table promotes again what the policy
		// selects, and only that.
		items, err = runner.Request(ctx, promoter.Request{Table: "shop.events"})
		if err != nil {
			t.Fatal(err)
		}
		promoted := 0
		for _, it := range items {
			switch {
			case it.Action == promoter.ActionPromote && it.Key != oldKey && it.Attempt > 1:
				promoted++
			case it.Action == promoter.ActionSkip && strings.HasPrefix(it.Reason, "not selected: "):
			default:
				t.Errorf("request of the table after it was dropped: %+v", it)
			}
			if it.Key == key && it.Action != promoter.ActionPromote {
				t.Errorf("request of the table after it was dropped: %s not promoted: %s", newPart, it.Reason)
			}
		}
		if promoted == 0 {
			t.Errorf("request of the table after it was dropped promotes nothing: %+v", items)
		}
		if err := runner.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := runner.Promote(ctx, key)
		if err != nil || again.Phase != promoter.PhaseCommitted || again.Attempt != after.Attempt+1 {
			t.Fatalf("promoted into the table created again: %+v %v (attempt before %d)", again, err, after.Attempt)
		}
		e.checkTier("events", newPart, e.lakeRows("2024-01-08"))
	})
}

// metricValue sums the counters or gauges of family name whose label has
// value.
func metricValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// bulkLoadIDs returns the bulk load ids the tier reports for the targets.
func (e *env) bulkLoadIDs(table string, partitions []string) []string {
	e.t.Helper()
	var out []string
	for _, p := range partitions {
		loc, err := e.tc.Locations(e.t.Context(), tierclient.Target{Database: "shop", Table: table, Partition: p}, true)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, loc.BulkLoadID)
	}
	return out
}

// TestRequestSkippedAtItsTurn: a requested promotion that the plan no
// longer promotes when its turn comes (its target was written meanwhile)
// is noted as skipped: Skipped names the reason, GET
// /v1/promotions/{id} answers a conflict saying so, and `thaw promote
// --wait`, which waited for a record that would never come until its
// --timeout, ends at once with the reason.
func TestRequestSkippedAtItsTurn(t *testing.T) {
	e := newEnv(t, 500)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "events-window", "events", "3d", "")
	runner := e.promoter(e.config([]*policies.Policy{pol}))
	inWindow := promoter.Key{Policy: pol.Name(), Partition: e.partitionOf("2024-01-05")}
	if r, err := runner.Promote(ctx, inWindow); err != nil || r.Phase != promoter.PhaseCommitted {
		t.Fatalf("promote %s: %+v %v", inWindow.Partition, r, err)
	}
	srv := httptest.NewServer(promoterhttp.NewHandler(runner, nil))
	defer srv.Close()

	// thaw promote --wait of a partition outside the window: the request
	// is queued (the runner's queue is drained below, by hand).
	part := e.partitionOf("2024-01-02")
	var out, errOut testlog.Buffer
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(ctx, []string{"promote", "shop.events", "--partition", part, "--wait", "--promoter", srv.URL, "--timeout", "1m"}, &out, &errOut)
	}()
	waitFor(t, "the request", func() bool { return strings.Contains(out.String(), "promote") })

	// Meanwhile a row is written into the target (its partition created).
	var row kv.Row
	src := tierclient.Target{Database: "shop", Table: "events", Partition: inWindow.Partition}
	if err := e.tc.Scan(ctx, src, func(r kv.Row) error { row = slices.Clone(r); return errors.New("one row") }); row == nil {
		t.Fatalf("scan %s: %v", src, err)
	}
	info, err := e.tc.Table(ctx, "shop", "events")
	if err != nil {
		t.Fatal(err)
	}
	day := slices.IndexFunc(info.KV.Schema().Columns, func(c kv.Column) bool { return c.Name == "event_day" })
	for _, lr := range e.lakeRows("2024-01-02") {
		row[day] = lr.day
		break
	}
	if err := e.tc.CreatePartition(ctx, "shop", "events", part); err != nil {
		t.Fatal(err)
	}
	if err := e.tc.Upsert(ctx, tierclient.Target{Database: "shop", Table: "events", Partition: part}, []kv.Row{row}); err != nil {
		t.Fatal(err)
	}

	// Its turn: skipped, and said so.
	if err := runner.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	plan, err := runner.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, it := range plan.Items {
		if it.Key.Partition == part {
			id = it.PromotionID
		}
	}
	if s, ok := runner.Skipped(id); !ok || s.Reason != "target not empty" {
		t.Fatalf("Skipped(%s) = %+v %t", id, s, ok)
	}
	if _, err := runner.Promotion(ctx, id); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("a record of the skipped promotion: %v", err)
	}
	select {
	case c := <-code:
		want := "promotion " + id + " was requested and then skipped when its turn came ("
		if c != 1 || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "): target not empty") {
			t.Fatalf("thaw promote --wait: exit %d\nstdout %s\nstderr %s", c, out.String(), errOut.String())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed goal
		t.Fatalf("thaw promote --wait still waits after the skip:\n%s", out.String())
	}

	// A promoted partition dropped, requested again (its record's attempt
	// 2), and created again before its turn: the plan then finds it
	// promoted and skips it; the waiter for attempt 2 ends with that.
	if err := e.tc.DropPartition(ctx, "shop", "events", inWindow.Partition); err != nil {
		t.Fatal(err)
	}
	var out2, errOut2 testlog.Buffer
	go func() {
		code <- cli.Main(ctx, []string{"promote", "shop.events", "--partition", inWindow.Partition, "--wait", "--promoter", srv.URL, "--timeout", "1m"}, &out2, &errOut2)
	}()
	waitFor(t, "the second request", func() bool { return strings.Contains(out2.String(), "promote") })
	if err := e.tc.CreatePartition(ctx, "shop", "events", inWindow.Partition); err != nil {
		t.Fatal(err)
	}
	if err := runner.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 1 || !strings.Contains(errOut2.String(), "was requested and then skipped when its turn came (") ||
			!strings.Contains(errOut2.String(), "): already promoted by p-") {
			t.Fatalf("thaw promote --wait of attempt 2: exit %d\nstdout %s\nstderr %s", c, out2.String(), errOut2.String())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed goal
		t.Fatalf("thaw promote --wait of attempt 2 still waits after the skip:\n%s", out2.String())
	}
}
