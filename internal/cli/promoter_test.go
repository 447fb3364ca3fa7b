package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/tier/tierclient"
)

// promoterSetup is a sample lake, the quickstart policy (plus a policy
// that refuses on-request promotion) and a promoter config with the
// embedded tier in dir/data.
type promoterSetup struct {
	dir, dataDir, configPath string
	lake                     lake.SampleInfo
}

// catalogExtra is appended to the catalog's YAML mapping (indented).
func newPromoterSetup(t *testing.T, rows int, catalogExtra string) promoterSetup {
	t.Helper()
	dir := t.TempDir()
	info, err := lake.Sample(t.Context(), lake.SampleOptions{Dir: filepath.Join(dir, "lake"), Rows: rows, Days: 4, Seed: 3, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pols := filepath.Join(dir, "policies")
	if err := os.MkdirAll(pols, 0o755); err != nil {
		t.Fatal(err)
	}
	noRequest := strings.Replace(strings.Replace(quickstartPolicy, "name: quickstart", "name: scheduled-only", 1),
		"onRequest: true", "onRequest: false\n    schedule: {cron: \"0 3 * * *\", timeZone: UTC}", 1)
	noRequest = strings.Replace(noRequest, "database: quickstart", "database: nightly", 1)
	noRequest = strings.Replace(noRequest, "catalog: default", "catalog: second", 1) // one policy per lake table
	for name, text := range map[string]string{"quickstart.yaml": quickstartPolicy, "scheduled.yaml": noRequest} {
		if err := os.WriteFile(filepath.Join(pols, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := promoterSetup{dir: dir, dataDir: filepath.Join(dir, "data"), configPath: filepath.Join(dir, "promoter.yaml"), lake: info}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
data_dir: %q
policies: [policies]
reconcile_interval: -1s
shutdown_timeout: 20s
catalogs:
  default:
    type: sql
    uri: %q
    warehouse: %q
%s
  second: {type: sql, uri: %q, warehouse: %q}
tier:
  tablets: 1
log: {level: debug, format: json}
`, s.dataDir, info.Config.URI, info.Config.Warehouse, catalogExtra, info.Config.URI, info.Config.Warehouse)
	if err := os.WriteFile(s.configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs the daemon on the setup's config with a small embedded tier.
func (s promoterSetup) start(t *testing.T, opts daemon.PromoterOptions) *daemon.PromoterDaemon {
	t.Helper()
	cfg, err := daemon.LoadPromoterConfig(s.configPath)
	if err != nil {
		t.Fatal(err)
	}
	extra := opts.Embedded
	opts.Embedded = func(ec *daemon.EmbeddedConfig) {
		smallTier(ec)
		if extra != nil {
			extra(ec)
		}
	}
	d, err := daemon.StartPromoter(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := d.WaitReady(ctx); err != nil {
		t.Fatal(withClose(err, d.Close()))
	}
	return d
}

func withClose(a, b error) error {
	if b != nil {
		return fmt.Errorf("%w (close: %v)", a, b)
	}
	return a
}

func smallTier(ec *daemon.EmbeddedConfig) {
	ec.EtcdUnsafeNoFsync = true
	ec.Tablet.CacheSize, ec.Tablet.MemTableBudget = 4<<20, 4<<20
}

// ledgerState is every key under the promoter's ledger prefix with its
// value and revision.
func ledgerState(t *testing.T, cli *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := cli.Get(t.Context(), daemon.DefaultPromoterPrefix+"/promotions/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("%d:%s", kv.ModRevision, kv.Value)
	}
	return out
}

// tierState lists the tier's tables of the two policies' databases with
// their partitions.
func tierState(t *testing.T, e *daemon.Embedded) string {
	t.Helper()
	tc, err := tierclient.New(t.Context(), e.Address(), tierclient.WithHTTPClient(e.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var b strings.Builder
	for _, db := range []string{"quickstart", "nightly"} {
		parts, err := tc.Partitions(t.Context(), db, "events")
		fmt.Fprintf(&b, "%s.events: %v %v\n", db, parts, err != nil)
	}
	return b.String()
}

// TestPlanChangesNothing promotes one partition, then runs `thaw plan
// --config` in-process: it reports that partition as promoted and the
// other two of the window as to promote, and afterwards the ledger and the tier's
// tables and partitions are exactly as before.
func TestPlanChangesNothing(t *testing.T) {
	s := newPromoterSetup(t, 400, "")
	d := s.start(t, daemon.PromoterOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := d.Promoter().Promote(ctx, promoter.Key{Policy: "quickstart", Partition: "2024-01-04"}); err != nil {
		t.Fatal(withClose(err, d.Close()))
	}
	ledger, tier := ledgerState(t, d.Etcd()), tierState(t, d.Tier())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ledger) != 1 {
		t.Fatalf("ledger before plan: %v", ledger)
	}

	promoterLogOutput = &bytes.Buffer{}
	defer func() { promoterLogOutput = os.Stderr }()
	code, out, errOut := run(t, "plan", "--config", s.configPath, "--policy", "quickstart", "--output", "json")
	if code != 0 {
		t.Fatalf("plan: %d %s", code, errOut)
	}
	var resp promoterhttp.PlansResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Plans) != 1 {
		t.Fatalf("plan json: %v\n%s", err, out)
	}
	p := resp.Plans[0]
	actions := map[string]string{}
	for _, it := range p.Items {
		actions[it.Partition] = it.Action + " " + it.Reason
	}
	if !p.TableExists || p.WillCreate || p.Promote != 2 || p.Skip != 2 || !strings.HasPrefix(actions["2024-01-03"], "promote") ||
		!strings.HasPrefix(actions["2024-01-02"], "promote") ||
		!strings.Contains(actions["2024-01-04"], "already promoted") || !strings.HasPrefix(actions["2024-01-01"], "skip not selected") {
		t.Fatalf("plan: %+v\n%v", p, actions)
	}
	code, out, errOut = run(t, "plan", "--config", s.configPath)
	if code != 0 || !strings.Contains(out, "policy quickstart: lake default/lake.events at snapshot") ||
		!strings.Contains(out, "policy scheduled-only:") || !strings.Contains(out, "total: 2 to promote") || !strings.Contains(out, "will be created") {
		t.Fatalf("plan table: %d %s\n%s", code, errOut, out)
	}
	// --policy FILE plans that file's policies instead of the config's.
	code, out, errOut = run(t, "plan", "--config", s.configPath, "--policy", filepath.Join("..", "..", "examples", "policies", "events-recent.yaml"))
	if code != 0 || !strings.Contains(out, "policy events-recent:") || strings.Contains(out, "policy quickstart:") || !strings.Contains(out, "total: 3 to promote") {
		t.Fatalf("plan --policy FILE: %d %s\n%s", code, errOut, out)
	}

	e, err := daemon.StartEmbedded(t.Context(), daemon.EmbeddedConfig{DataDir: filepath.Join(s.dataDir, "tier"), TabletServers: 1, EtcdUnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	waitReady(t, e)
	// The data_dir in use (as by the config's own running promoter): the
	// error says whom to ask instead.
	if code, _, errOut := run(t, "plan", "--config", s.configPath); code != 1 ||
		!strings.Contains(errOut, "is another thaw process using it?") || !strings.Contains(errOut, "(if a promoter runs with this config, ask it: thaw plan --promoter ") {
		t.Errorf("plan --config while the tier runs: %d %s", code, errOut)
	}
	if after := ledgerState(t, e.Etcd()); !mapsEqual(after, ledger) {
		t.Errorf("ledger changed by plan:\nbefore %v\nafter  %v", ledger, after)
	}
	if after := tierState(t, e); after != tier {
		t.Errorf("tier changed by plan:\nbefore %s\nafter  %s", tier, after)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPromoteAndStatus drives a running promoter through the CLI: status
// of an empty ledger, promote --wait, status as table and JSON, one
// promotion, and the refusals (a policy without onRequest, an unknown id).
func TestPromoteAndStatus(t *testing.T) {
	s := newPromoterSetup(t, 300, "")
	d := s.start(t, daemon.PromoterOptions{})
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	url := d.URL()
	if code, out, errOut := run(t, "status", "--promoter", url); code != 0 || !strings.Contains(out, "no promotions") {
		t.Fatalf("status: %d %s %s", code, out, errOut)
	}
	code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url)
	if code != 0 {
		t.Fatalf("promote: %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "2024-01-03  promote") || !strings.Contains(out, "committed") {
		t.Fatalf("promote output:\n%s", out)
	}
	code, out, _ = run(t, "status", "--promoter", url, "--output", "json")
	var list promoterhttp.PromotionsResponse
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Promotions) != 1 {
		t.Fatalf("status json: %d %s", code, out)
	}
	r := list.Promotions[0].Record
	if r.Phase != promoter.PhaseCommitted || r.Partition != "2024-01-03" || r.Database != "quickstart" || r.Rows == 0 {
		t.Fatalf("record %+v", r)
	}
	code, out, _ = run(t, "status", "--promoter", url)
	if code != 0 || !strings.Contains(out, r.ID) || !strings.Contains(out, "quickstart.events/2024-01-03") || !strings.Contains(out, "committed") {
		t.Fatalf("status table: %s", out)
	}
	code, out, _ = run(t, "status", r.ID, "--promoter", url)
	if code != 0 || !strings.Contains(out, "phase:") || !strings.Contains(out, "transaction:") || !strings.Contains(out, r.TxnID) {
		t.Fatalf("status one: %s", out)
	}
	if code, _, errOut := run(t, "status", "p-0000000000000000", "--promoter", url); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("status unknown: %d %s", code, errOut)
	}
	if code, _, errOut := run(t, "promote", "nightly.events", "--promoter", url); code != 1 || !strings.Contains(errOut, "not_allowed") {
		t.Fatalf("promote without onRequest: %d %s", code, errOut)
	}
	// The same partition again: nothing new to promote.
	code, out, _ = run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--promoter", url, "--output", "json")
	var pr promoterhttp.PromoteResponse
	if code != 0 || json.Unmarshal([]byte(out), &pr) != nil || len(pr.Items) != 1 || pr.Items[0].Action != promoter.ActionSkip {
		t.Fatalf("second promote: %d %s", code, out)
	}
}

// TestPromoteWaitsForARunningPromotion: `thaw promote --wait` for a target
// whose promotion is already running (started by someone else) waits for
// that promotion and prints it, instead of returning at once with nothing;
// with nothing promoted or running it says there is nothing to wait for.
func TestPromoteWaitsForARunningPromotion(t *testing.T) {
	s := newPromoterSetup(t, 300, "")
	logs := &testlog.Buffer{}
	running, release := make(chan string, 1), make(chan struct{})
	d := s.start(t, daemon.PromoterOptions{
		RunOptions: daemon.RunOptions{Logger: daemon.NewLogger(logs, daemon.LogConfig{Level: "info", Format: "text"})},
		Hooks: promoter.Hooks{AfterPhase: func(ctx context.Context, r promoter.Record) error {
			if r.Phase != promoter.PhaseBuilding {
				return nil
			}
			running <- r.ID
			select {
			case <-release:
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return nil
		}},
	})
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	url := d.URL()
	if code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--promoter", url); code != 0 || !strings.Contains(out, "2024-01-03  promote") {
		t.Fatalf("promote: %d\n%s\n%s", code, out, errOut)
	}
	var id string
	select {
	case id = <-running:
	case <-time.After(time.Minute):
		t.Fatal("the promotion did not reach building")
	}
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url)
		done <- result{code, out, errOut}
	}()
	// The second request has been planned (its item is "in progress")
	// before the promotion may go on.
	for deadline := time.Now().Add(time.Minute); strings.Count(logs.String(), "promotion requested") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second request did not arrive:\n%s", logs.String())
		}
	}
	close(release)
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("promote --wait did not return")
	}
	if r.code != 0 || !strings.Contains(r.out, "in progress: "+id) || !strings.Contains(r.out, id) || !strings.Contains(r.out, "committed") {
		t.Fatalf("promote --wait of a running promotion: %d\n%s\n%s", r.code, r.out, r.err)
	}
	// Now it is promoted: nothing to wait for, and it says so.
	code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url)
	if code != 0 || !strings.Contains(out, "already promoted by "+id) || !strings.Contains(out, "nothing to wait for") {
		t.Fatalf("promote --wait of a promoted partition: %d\n%s\n%s", code, out, errOut)
	}
	// Dropped from the tier, it is promoted again on request, as attempt
	// 2 of the same record: --wait waits for that attempt, not attempt 1's
	// committed record it finds at first.
	tc, err := tierclient.New(t.Context(), d.Tier().Address(), tierclient.WithHTTPClient(d.Tier().HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.DropPartition(t.Context(), "quickstart", "events", "2024-01-03"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url, "--output", "json")
	var again promoterhttp.PromotionsResponse
	if code != 0 || json.Unmarshal([]byte(out), &again) != nil || len(again.Promotions) != 1 {
		t.Fatalf("promote --wait of the dropped partition: %d\n%s\n%s", code, out, errOut)
	}
	if r := again.Promotions[0].Record; r.ID != id || r.Attempt != 2 || r.Phase != promoter.PhaseCommitted {
		t.Fatalf("promote --wait of the dropped partition ended with %s attempt %d %s, want %s attempt 2 committed", r.ID, r.Attempt, r.Phase, id)
	}
}

// TestPromoterCLIUsage: bad invocations exit 2 before contacting anything.
func TestPromoterCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"promoter"}, "needs --config"},
		{[]string{"plan"}, "exactly one of --config"},
		{[]string{"plan", "--config", "x", "--promoter", "y"}, "exactly one of --config"},
		{[]string{"plan", "--promoter", "h:1", "--output", "yaml"}, "want table or json"},
		{[]string{"promote"}, "needs one DATABASE.TABLE"},
		{[]string{"promote", "orders"}, "want DATABASE.TABLE"},
		{[]string{"promote", "a.b", "--partition", "x/y"}, `partition "x/y"`},
		{[]string{"promote", "a.b", "--promoter", "ftp://h"}, "want HOST:PORT"},
		{[]string{"status", "a", "b"}, "at most one promotion id"},
		{[]string{"status", "quickstart.events"}, `thaw status: "quickstart.events" is not a promotion id: an id is p- and 16 lowercase hex digits`},
		{[]string{"quickstart", "--rows", "1"}, "--rows >= 2"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code=%d stderr=%q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestProgressLine: the bar is the fraction of buckets done.
func TestProgressLine(t *testing.T) {
	pr := promoterhttp.Promotion{Record: promoter.Record{Phase: promoter.PhaseBuilding},
		Progress: &promoterhttp.Progress{Phase: "building", RowsRead: 1500, BytesRead: 2048, BucketsDone: 1,
			Buckets: []promoterhttp.BucketProgress{{Bucket: 0, Done: true}, {Bucket: 1}, {Bucket: 2}, {Bucket: 3}}}}
	got := progressLine(pr, 8)
	if want := "[##......]  25% building: 1/4 buckets, 1500 rows read (2.0 KiB)"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	var b bytes.Buffer
	if err := printPromotions(&b, []promoterhttp.Promotion{pr}, true); err != nil || !strings.Contains(b.String(), "[") {
		t.Fatalf("table with bar: %v %s", err, b.String())
	}
	b.Reset()
	if err := printPromotions(&b, []promoterhttp.Promotion{pr}, false); err != nil || strings.Contains(b.String(), "[#") {
		t.Fatalf("table without bar: %v %s", err, b.String())
	}
	// Before Begin there are no buckets to count yet.
	planned := promoterhttp.Promotion{Record: promoter.Record{Phase: promoter.PhasePlanned},
		Progress: &promoterhttp.Progress{Phase: "planned"}}
	if got, want := progressLine(planned, 8), "[........]   0% planned"; got != want {
		t.Fatalf("planned: got %q, want %q", got, want)
	}
	// A count outside 0..buckets (a promoter's bug, a proxy's garbage)
	// draws a full or empty bar: it panicked on a negative padding.
	for done, bar := range map[int]string{5: "[########] 100%", -3: "[........]   0%"} {
		odd := pr
		odd.Progress = &promoterhttp.Progress{Phase: "building", BucketsDone: done, Buckets: pr.Progress.Buckets}
		if got := progressLine(odd, 8); !strings.HasPrefix(got, bar) {
			t.Errorf("%d of 4 buckets done: %q, want %q...", done, got, bar)
		}
	}
}

// TestStatusDuration: a promotion's duration is its first attempt's from
// the record's creation, and a later attempt's (a promotion again after
// the target was dropped, days later) from that attempt's Begin.
func TestStatusDuration(t *testing.T) {
	created := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := created.Add(d); return &t }
	first := promoter.Record{ID: "p-1", Attempt: 1, Phase: promoter.PhaseCommitted, CreatedAt: created,
		UpdatedAt: *at(1500 * time.Millisecond), BegunAt: at(200 * time.Millisecond), CommittedAt: at(1500 * time.Millisecond)}
	again := first
	again.Attempt, again.BegunAt, again.CommittedAt, again.UpdatedAt = 2, at(72*time.Hour), at(72*time.Hour+400*time.Millisecond), *at(72*time.Hour + 400*time.Millisecond)
	planned := again
	planned.Phase, planned.BegunAt, planned.CommittedAt = promoter.PhasePlanned, nil, nil
	for _, tc := range []struct {
		r    promoter.Record
		want time.Duration
	}{
		{first, 1500 * time.Millisecond},
		{again, 400 * time.Millisecond},
		{planned, 72*time.Hour + 400*time.Millisecond}, // not begun yet: since the creation
	} {
		if got := recordDuration(tc.r); got != tc.want {
			t.Errorf("attempt %d %s: duration %v, want %v", tc.r.Attempt, tc.r.Phase, got, tc.want)
		}
	}
	var b bytes.Buffer
	if err := printPromotion(&b, promoterhttp.Promotion{Record: again}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(attempt 2, from its begin)") || !strings.Contains(b.String(), "begun") || strings.Contains(b.String(), "requested again") ||
		strings.Contains(b.String(), "interrupted") {
		t.Errorf("one promotion, attempt 2:\n%s", b.String())
	}
	b.Reset()
	interrupted := again
	interrupted.InterruptedBuilds = 2
	if err := printPromotion(&b, promoterhttp.Promotion{Record: interrupted}, false); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^interrupted builds: +2 \(began and never ended: `).MatchString(b.String()) {
		t.Errorf("one promotion, two builds interrupted:\n%s", b.String())
	}
	// A build running now is counted in its record too; the line shows
	// only the builds before it that never ended.
	for _, tc := range []struct {
		count int
		want  string
	}{{1, ""}, {3, "2"}} {
		b.Reset()
		running := interrupted
		running.Phase, running.InterruptedBuilds = promoter.PhaseBuilding, tc.count
		if err := printPromotion(&b, promoterhttp.Promotion{Record: running, Progress: &promoterhttp.Progress{Phase: "building"}}, false); err != nil {
			t.Fatal(err)
		}
		got := regexp.MustCompile(`(?m)^interrupted builds: +(\d+) `).FindStringSubmatch(b.String())
		if (tc.want == "") != (got == nil) || (got != nil && got[1] != tc.want) {
			t.Errorf("one promotion building now, count %d: want interrupted builds %q:\n%s", tc.count, tc.want, b.String())
		}
	}
	b.Reset()
	skip := promoter.Skip{Reason: "target not empty", At: *at(96 * time.Hour)}
	if err := printPromotion(&b, promoterhttp.Promotion{Record: again, Skipped: &skip}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "requested again:") || !strings.Contains(b.String(), "skipped when its turn came (") || !strings.Contains(b.String(), "): target not empty") {
		t.Errorf("one promotion whose later request was skipped:\n%s", b.String())
	}
}

// TestWaitThroughUnavailable: the waiter of `thaw promote --wait` keeps
// polling while the promoter answers unavailable (restarting, failing
// over) and follows an attempt the shutdown interrupted to the next one,
// saying so on stderr; the answers come from a scripted API.
func TestWaitThroughUnavailable(t *testing.T) {
	const id = "p-0123456789abcdef"
	rec := promoter.Record{ID: id, Phase: promoter.PhaseAborted, Attempt: 1, Retriable: true, Error: "shutdown: context canceled"}
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {
			promoterhttp.WriteError(w, http.StatusServiceUnavailable, promoterhttp.CodeUnavailable, "this promoter is not leading")
		},
		func(w http.ResponseWriter) {
			promoterhttp.WriteError(w, http.StatusServiceUnavailable, promoterhttp.CodeUnavailable, "this promoter is not leading")
		},
		func(w http.ResponseWriter) { _ = json.NewEncoder(w).Encode(promoterhttp.Promotion{Record: rec}) },
		func(w http.ResponseWriter) {
			r := rec
			r.Phase, r.Attempt, r.Error, r.Retriable = promoter.PhaseCommitted, 2, "", false
			_ = json.NewEncoder(w).Encode(promoterhttp.Promotion{Record: r})
		},
	}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != promoterhttp.PathPromotions+"/"+id {
			t.Errorf("unexpected call %s", r.URL.Path)
		}
		answers[min(int(calls.Add(1))-1, len(answers)-1)](w)
	}))
	defer srv.Close()
	c, err := promoterhttp.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var notes bytes.Buffer
	progressOutput = &notes
	t.Cleanup(func() { progressOutput = os.Stderr })
	var out bytes.Buffer
	items := []promoterhttp.Item{{Action: promoter.ActionPromote, PromotionID: id, Attempt: 1}}
	if err := waitPromotions(t.Context(), &out, c, items, false); err != nil {
		t.Fatalf("wait: %v\n%s\n%s", err, out.String(), notes.String())
	}
	want := "thaw: promoter api: this promoter is not leading (unavailable, HTTP 503); still waiting for it\n" +
		"thaw: the promoter answers again\n" +
		"thaw: promotion " + id + " attempt 1 was interrupted (shutdown: context canceled); waiting for attempt 2\n"
	if notes.String() != want || !strings.Contains(out.String(), "committed") {
		t.Fatalf("notes:\n%s\nwant\n%s\nstdout:\n%s", notes.String(), want, out.String())
	}
}

// TestWaitFoundRunningInterrupted: a promotion `thaw promote --wait` found
// running (its item a skip, nothing requested) that the promoter's shutdown
// then interrupts ends the wait as failed, and the error says why it is
// not followed to a next attempt and what to do.
func TestWaitFoundRunningInterrupted(t *testing.T) {
	const id = "p-0123456789abcdef"
	serve := func(rec promoter.Record) *promoterhttp.Client {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(promoterhttp.Promotion{Record: rec})
		}))
		t.Cleanup(srv.Close)
		c, err := promoterhttp.NewClient(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var out bytes.Buffer
	c := serve(promoter.Record{ID: id, Phase: promoter.PhaseAborted, Attempt: 1, Retriable: true, Error: "shutdown: context canceled"})
	items := []promoterhttp.Item{{Action: promoter.ActionSkip, Reason: promoter.ReasonInProgress + id}}
	err := waitPromotions(t.Context(), &out, c, items, false)
	if err == nil || !strings.Contains(err.Error(), id+" aborted: shutdown: context canceled (the promoter stopped during it; this command found it running and did not request it") {
		t.Fatalf("wait: %v\n%s", err, out.String())
	}
	// A requested one that fails otherwise carries no such words.
	c = serve(promoter.Record{ID: id, Phase: promoter.PhaseAborted, Attempt: 1, Error: "build: disk full"})
	items = []promoterhttp.Item{{Action: promoter.ActionPromote, PromotionID: id, Attempt: 1}}
	if err := waitPromotions(t.Context(), &out, c, items, false); err == nil || strings.Contains(err.Error(), "found it running") {
		t.Fatalf("wait of a failed requested promotion: %v", err)
	}
}

// TestPromoteWaitRefusedTarget: a requested partition skipped at the
// request (its tier partition holds rows: target not empty) makes
// promote --wait exit 1, naming why; it exited 0 ("nothing to wait for"),
// and a script went on as if the data were there.
func TestPromoteWaitRefusedTarget(t *testing.T) {
	s := newPromoterSetup(t, 300, "")
	d := s.start(t, daemon.PromoterOptions{})
	defer d.Close()
	url, addr := d.URL(), d.Tier().Address()
	// The target table, by promoting one partition.
	if code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-02", "--wait", "--promoter", url); code != 0 {
		t.Fatalf("first promote: %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "put", "quickstart.events", "--create-partitions", "--server", addr,
		`{"id":1,"event_ts":"2024-01-03T00:00:00Z","user_name":"x","updated_at":"2024-01-03T00:00:00","version":1,"event_day":"2024-01-03"}`); code != 0 {
		t.Fatalf("put: %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url)
	if code != 1 || !strings.Contains(out, "target not empty") || !strings.Contains(errOut, "not promoted: ") || !strings.Contains(errOut, "2024-01-03: target not empty") {
		t.Fatalf("promote --wait of a target that is not empty: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// As JSON too, stdout holds a document (it was empty: a script
	// decoding it failed on EOF instead of reading the error).
	code, out, errOut = run(t, "promote", "quickstart.events", "--partition", "2024-01-03", "--wait", "--promoter", url, "--output", "json")
	var doc promoterhttp.PromotionsResponse
	if code != 1 || json.Unmarshal([]byte(out), &doc) != nil || doc.Promotions == nil || len(doc.Promotions) != 0 || !strings.Contains(errOut, "2024-01-03: target not empty") {
		t.Fatalf("promote --wait --output json of a target that is not empty: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// Already promoted is no failure.
	if code, out, errOut := run(t, "promote", "quickstart.events", "--partition", "2024-01-02", "--wait", "--promoter", url); code != 0 {
		t.Fatalf("promote --wait of a promoted partition: exit %d\n%s\n%s", code, out, errOut)
	}
}
