package promoter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/cli"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
)

// requestEnv is an env on 2024-01-08 with a window policy of the last 3
// days; its configurations run no reconcile, lake poll or prune, so that
// only requests promote.
func requestEnv(t *testing.T) (*env, *policies.Policy, promoter.Config) {
	e := newEnv(t, 500)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "events-window", "events", "3d", "")
	cfg := e.config([]*policies.Policy{pol})
	cfg.ReconcileInterval, cfg.LakePollInterval, cfg.LedgerRetention = -1, -1, -1
	return e, pol, cfg
}

// request asks p for one partition and returns the promotion id it was
// answered with.
func request(ctx context.Context, t *testing.T, p *promoter.Promoter, pol *policies.Policy, partition string) string {
	t.Helper()
	items, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: partition})
	if err != nil || len(items) != 1 || items[0].Action != promoter.ActionPromote {
		t.Fatalf("request %s: %+v %v", partition, items, err)
	}
	return items[0].PromotionID
}

// storedRequests returns the ledger's stored requests.
func storedRequests(ctx context.Context, t *testing.T, l promoter.Ledger) []promoter.StoredRequest {
	t.Helper()
	rs, err := l.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// run runs p until the test ends and returns a function that stops it and
// returns Run's error.
func run(t *testing.T, p *promoter.Promoter) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitCommitted waits until p's record id is committed at attempt and
// returns it.
func waitCommitted(ctx context.Context, t *testing.T, p *promoter.Promoter, id string, attempt int) promoter.Record {
	t.Helper()
	var r promoter.Record
	waitFor(t, "promotion "+id+" committed", func() bool {
		var err error
		r, err = p.Promotion(ctx, id)
		return err == nil && r.Phase == promoter.PhaseCommitted && r.Attempt == attempt
	})
	return r
}

// runUntilPromoted runs a new promoter of cfg (the next one after a
// restart) until it has committed promotion id at attempt and deleted
// every stored request, then stops it.
func (e *env) runUntilPromoted(ctx context.Context, t *testing.T, cfg promoter.Config, id string, attempt int) {
	t.Helper()
	next := e.promoter(cfg)
	stop := run(t, next)
	waitCommitted(ctx, t, next, id, attempt)
	waitFor(t, "every stored request deleted", func() bool { return len(storedRequests(ctx, t, cfg.Ledger)) == 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRequestSurvivesRestart: a request answered by a promoter that stops
// before the request's turn is kept in the ledger, and the next promoter
// promotes it (the queue alone forgot it: the next promoter's reconcile
// does not select a partition outside the window).
func TestRequestSurvivesRestart(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-02") // outside the window
	first := e.promoter(cfg)
	id := request(ctx, t, first, pol, part)
	rs := storedRequests(ctx, t, cfg.Ledger)
	if len(rs) != 1 || rs[0].Key != (promoter.Key{Policy: pol.Name(), Partition: part}) || !rs[0].Forced ||
		len(rs[0].IDs) != 1 || rs[0].IDs[0] != id || rs[0].Revision == 0 || !rs[0].At.Equal(e.clock()) {
		t.Fatalf("stored requests after the request: %+v", rs)
	}
	// The first promoter never runs its queue: it stopped.

	e.runUntilPromoted(ctx, t, cfg, id, 1)
	e.checkTier("events", part, e.lakeRows("2024-01-02"))
}

// holdFirstBuild makes cfg's first promotion to start building hold there
// until the promoter stops (its build then fails with the shutdown); the
// channel is closed when it holds.
func holdFirstBuild(cfg *promoter.Config) <-chan struct{} {
	holding := make(chan struct{})
	var once atomic.Bool
	cfg.Hooks.AfterPhase = func(ctx context.Context, r promoter.Record) error {
		if r.Phase == promoter.PhaseBuilding && once.CompareAndSwap(false, true) {
			close(holding)
			<-ctx.Done()
		}
		return nil
	}
	return holding
}

// interruptedRequest runs a promoter with cfg, requests partition part
// of pol and stops the promoter while the promotion builds (its attempt 1
// aborted by the shutdown, its request kept); it returns the promoter
// and the promotion id. cfg keeps the hook that held the build.
func interruptedRequest(t *testing.T, e *env, pol *policies.Policy, cfg *promoter.Config, part string) (*promoter.Promoter, string) {
	t.Helper()
	stopping := holdFirstBuild(cfg)
	first := e.promoter(*cfg)
	stop := run(t, first)
	id := request(t.Context(), t, first, pol, part)
	<-stopping
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return first, id
}

// TestRequestInterruptedByShutdown: a requested promotion that the
// promoter's shutdown aborts keeps its stored request, and the next
// promoter promotes it as attempt 2.
func TestRequestInterruptedByShutdown(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	first, id := interruptedRequest(t, e, pol, &cfg, e.partitionOf("2024-01-03"))
	r, err := first.Promotion(ctx, id)
	if err != nil || r.Phase != promoter.PhaseAborted || !strings.HasPrefix(r.Error, "shutdown: ") {
		t.Fatalf("after the shutdown: %+v %v", r, err)
	}
	if rs := storedRequests(ctx, t, cfg.Ledger); len(rs) != 1 || rs[0].IDs[0] != id {
		t.Fatalf("stored requests after the shutdown: %+v", rs)
	}

	cfg.Hooks.AfterPhase = nil
	e.runUntilPromoted(ctx, t, cfg, id, 2)
}

// TestPruneKeepsRecordOfQueuedRequest: a request answered with the
// attempt after an old aborted record keeps that record from the prune
// while it waits (without it the run would be attempt 1 again, and the
// request's waiter would wait for attempt 2 for ever).
func TestPruneKeepsRecordOfQueuedRequest(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-03")
	_, id := interruptedRequest(t, e, pol, &cfg, part)
	cfg.Hooks.AfterPhase = nil
	e.setNow(e.clock().Add(2 * time.Hour))
	cfg.LedgerRetention = time.Hour
	p := e.promoter(cfg)
	items, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
	if err != nil || len(items) != 1 || items[0].PromotionID != id || items[0].Attempt != 2 {
		t.Fatalf("request after the aborted attempt: %+v %v", items, err)
	}
	if n, err := p.PruneLedger(ctx); err != nil || n != 0 {
		t.Fatalf("prune while the request waits: %d deleted, %v", n, err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	waitCommitted(ctx, t, p, id, 2)
}

// failingLake fails Describe while fail is set.
type failingLake struct {
	promoter.Lake
	fail atomic.Bool
}

var errLakeDown = errors.New("the lake catalog is down")

func (l *failingLake) Describe(ctx context.Context, name string) (*lake.TableInfo, error) {
	if l.fail.Load() {
		return nil, errLakeDown
	}
	return l.Lake.Describe(ctx, name)
}

// TestRequestThatCannotStart: a request whose turn comes while its plan
// fails (the lake is down) gets a note saying why, which ends its waiter,
// and its stored request is deleted: the request is answered, not kept.
func TestRequestThatCannotStart(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	lk := &failingLake{Lake: e.lake}
	cfg.Lakes = map[string]promoter.Lake{"default": lk}
	p := e.promoter(cfg)
	id := request(ctx, t, p, pol, e.partitionOf("2024-01-02"))
	lk.fail.Store(true)
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	s, ok := p.Skipped(id)
	if !ok || !strings.HasPrefix(s.Reason, "it could not start: ") || !strings.Contains(s.Reason, errLakeDown.Error()) {
		t.Fatalf("Skipped(%s) = %+v %t", id, s, ok)
	}
	if rs := storedRequests(ctx, t, cfg.Ledger); len(rs) != 0 {
		t.Fatalf("stored requests after the turn: %+v", rs)
	}
}

// noRequestsLedger is a ledger that cannot store requests.
type noRequestsLedger struct{ promoter.Ledger }

var errNoStore = errors.New("etcdserver: request timed out")

func (noRequestsLedger) PutRequests(context.Context, []promoter.StoredRequest) ([]int64, error) {
	return nil, errNoStore
}

// TestRequestNotStored: a request the ledger cannot store fails with the
// ledger's error and queues nothing.
func TestRequestNotStored(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	cfg.Ledger = noRequestsLedger{cfg.Ledger}
	p := e.promoter(cfg)
	ctx := t.Context()
	if _, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: e.partitionOf("2024-01-02")}); !errors.Is(err, errNoStore) {
		t.Fatalf("a request the ledger could not store: %v", err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, err := p.Promotions(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("promotions after a request that failed: %+v %v", recs, err)
	}
}

// TestEtcdLedgerRequests: stored requests replace their key's, come back
// oldest first with their revisions, are deleted only at the revision
// that stored them, and are read strictly: a value that is not a request
// of this version, or one stored under another key, is reported and left.
func TestEtcdLedgerRequests(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	l := promoter.NewEtcdLedger(cli, "/test/promoter", nil)
	at := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	id := func(p string) string { return promoter.PromotionID("default", "lake.events", "shop.events", p, 42) }
	a := promoter.StoredRequest{Key: promoter.Key{Policy: "events", Partition: "2024-01-02"}, Forced: true, IDs: []string{id("2024-01-02")}, At: at}
	b := promoter.StoredRequest{Key: promoter.Key{Policy: "events"}, IDs: []string{id("")}, At: at}

	// More than one transaction's worth, so that chunks are exercised.
	many := []promoter.StoredRequest{a, b}
	for i := range 150 {
		p := fmt.Sprintf("p%03d", i)
		many = append(many, promoter.StoredRequest{Key: promoter.Key{Policy: "bulk", Partition: p}, IDs: []string{id(p)}, At: at})
	}
	revs, err := l.PutRequests(ctx, many)
	if err != nil || len(revs) != len(many) || revs[0] == 0 || revs[0] == revs[len(revs)-1] {
		t.Fatalf("put %d requests: %v %v", len(many), revs, err)
	}
	got := storedRequests(ctx, t, l)
	if len(got) != len(many) {
		t.Fatalf("%d stored requests, want %d", len(got), len(many))
	}
	for _, r := range got[len(got)-50:] {
		if r.Policy != "bulk" || r.Revision != revs[len(revs)-1] {
			t.Fatalf("the second transaction's requests come last: %+v", r)
		}
	}
	for i, r := range many[2:] {
		if err := l.DeleteRequest(ctx, r.Key, revs[2+i]); err != nil {
			t.Fatal(err)
		}
	}

	// A later request of a key replaces the earlier; deleting the earlier
	// revision leaves it.
	a2 := a
	a2.IDs = append([]string{id("x")}, a.IDs...)
	revs2, err := l.PutRequests(ctx, []promoter.StoredRequest{a2})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRequest(ctx, a.Key, revs[0]); err != nil {
		t.Fatal(err)
	}
	got = storedRequests(ctx, t, l)
	want := []promoter.StoredRequest{b, a2}
	want[0].Revision, want[1].Revision = revs[1], revs2[0]
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored requests:\n got %+v\nwant %+v", got, want)
	}
	if err := l.DeleteRequest(ctx, a.Key, revs2[0]); err != nil {
		t.Fatal(err)
	}
	if got := storedRequests(ctx, t, l); len(got) != 1 || got[0].Key != b.Key {
		t.Fatalf("after deleting %s: %+v", a.Key, got)
	}

	// Values this promoter does not read are reported and left.
	bKey := storedKey(ctx, t, cli, "/test/promoter/requests/")
	valid := `{"version":1,"policy":"events","partition":"","forced":false,"ids":[],"requested_at":"2024-01-08T00:00:00Z"}`
	for _, tc := range []struct{ value, want string }{
		{`{"version":2,"policy":"events","partition":"","forced":false,"ids":[],"requested_at":"2024-01-08T00:00:00Z"}`, "request version 2: this promoter reads version 1; upgrade it"},
		{`{"version":1,"policy":"events","partition":"","forced":false,"ids":[],"requested_at":"2024-01-08T00:00:00Z","extra":1}`, `unknown member "extra"`},
		{`{"version":1,"policy":"events","partition":"","forced":false,"ids":["p-1"],"requested_at":"2024-01-08T00:00:00Z"}`, `member "ids": "p-1" is not a promotion id`},
		{`{"version":1,"policy":"","partition":"","forced":false,"ids":[],"requested_at":"2024-01-08T00:00:00Z"}`, `member "policy" is empty`},
		{`{"version":1,"policy":"events","partition":"","forced":"yes","ids":[],"requested_at":"2024-01-08T00:00:00Z"}`, "decode request: "},
		{`[]`, "not a JSON object"},
		{`{"version":1,"policy":"other","partition":"","forced":false,"ids":[],"requested_at":"2024-01-08T00:00:00Z"}`, "the request of other stored under another key"},
	} {
		if _, err := cli.Put(ctx, bKey, tc.value); err != nil {
			t.Fatal(err)
		}
		rs, err := l.Requests(ctx)
		u := promoter.UnreadableRecords(err)
		if len(rs) != 0 || !errors.Is(err, promoter.ErrUnreadable) || len(u) != 1 || u[0].Key != bKey || !strings.Contains(u[0].Err.Error(), tc.want) {
			t.Errorf("%s: %+v %v, want an unreadable request: %s", tc.value, rs, err, tc.want)
		}
		if resp, err := cli.Get(ctx, bKey); err != nil || string(resp.Kvs[0].Value) != tc.value {
			t.Fatalf("the unreadable request was changed: %v", err)
		}
	}
	if _, err := cli.Put(ctx, bKey, valid); err != nil {
		t.Fatal(err)
	}
	if rs := storedRequests(ctx, t, l); len(rs) != 1 || rs[0].Key != b.Key {
		t.Fatalf("the valid value back: %+v", rs)
	}
}

// storedKey returns the one etcd key under prefix.
func storedKey(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) string {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("keys under %s: %v %v", prefix, resp, err)
	}
	return string(resp.Kvs[0].Key)
}

// TestEtcdLedgerRequestsFenced: a deposed promoter can neither store nor
// delete requests.
func TestEtcdLedgerRequestsFenced(t *testing.T) {
	cli, lead, l := fencedLedger(t)
	ctx := t.Context()
	r := promoter.StoredRequest{Key: promoter.Key{Policy: "events", Partition: "2024-01-02"}, IDs: []string{}, At: time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)}
	revs, err := l.PutRequests(ctx, []promoter.StoredRequest{r})
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PutRequests(ctx, []promoter.StoredRequest{r}); !fencing.IsFenced(err) {
		t.Fatalf("put after leadership loss: %v, want a fencing error", err)
	}
	if err := l.DeleteRequest(ctx, r.Key, revs[0]); !fencing.IsFenced(err) {
		t.Fatalf("delete after leadership loss: %v, want a fencing error", err)
	}
	if rs := storedRequests(ctx, t, promoter.NewEtcdLedger(cli, "/test/promoter", nil)); len(rs) != 1 || rs[0].Revision != revs[0] {
		t.Fatalf("after fenced writes: %+v", rs)
	}
}

// switchHandler serves with the handler it holds, or answers
// `unavailable` as a promoter that does not lead does when it holds none.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) {
	if h == nil {
		s.h.Store(nil)
		return
	}
	s.h.Store(&h)
}

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	promoterhttp.WriteError(w, http.StatusServiceUnavailable, promoterhttp.CodeUnavailable, "this promoter is not leading")
}

// TestWaitThroughRestart: `thaw promote --wait` of a promotion that a
// promoter restart interrupts keeps waiting while no promoter serves,
// follows the interrupted attempt to the next one, and ends when the next
// promoter (which took the stored request up) commits it.
func TestWaitThroughRestart(t *testing.T) {
	e, _, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-02")
	building := holdFirstBuild(&cfg)
	first := e.promoter(cfg)
	stopFirst := run(t, first)
	sw := &switchHandler{}
	sw.set(promoterhttp.NewHandler(first, nil))
	srv := httptest.NewServer(sw)
	defer srv.Close()

	var out, errOut testlog.Buffer
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(ctx, []string{"promote", "shop.events", "--partition", part, "--wait", "--promoter", srv.URL, "--timeout", "2m"}, &out, &errOut)
	}()
	<-building
	// The first promoter stops: the API answers unavailable meanwhile.
	sw.set(nil)
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}
	recs, err := first.Promotions(ctx)
	if err != nil || len(recs) != 1 || !recs[0].Interrupted() {
		t.Fatalf("after the first promoter stopped: %+v %v", recs, err)
	}
	time.Sleep(600 * time.Millisecond) // a few of the waiter's polls see no promoter

	// The next promoter answers before its workers took the request up
	// (they may be busy with other keys): the waiter sees the interrupted
	// attempt first.
	cfg.Hooks.AfterPhase = nil
	next := e.promoter(cfg)
	sw.set(promoterhttp.NewHandler(next, nil))
	time.Sleep(600 * time.Millisecond)
	run(t, next)
	select {
	case c := <-code:
		if c != 0 || !strings.Contains(out.String(), "committed") {
			t.Fatalf("thaw promote --wait: exit %d\nstdout %s\nstderr %s", c, out.String(), errOut.String())
		}
	case <-time.After(90 * time.Second): // a hang guard, not a speed goal
		t.Fatalf("thaw promote --wait still waits:\n%s", out.String())
	}
	if r, err := next.Promotion(ctx, recs[0].ID); err != nil || r.Phase != promoter.PhaseCommitted || r.Attempt != 2 {
		t.Fatalf("after the wait: %+v %v", r, err)
	}
	e.checkTier("events", part, e.lakeRows("2024-01-02"))
}

// TestStatusOfQueuedRequest: `thaw status ID` of a requested promotion
// that waits for its turn says so, and where it is in the queue, rather
// than only "not found".
func TestStatusOfQueuedRequest(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	p := e.promoter(cfg)
	first := request(ctx, t, p, pol, e.partitionOf("2024-01-01"))
	second := request(ctx, t, p, pol, e.partitionOf("2024-01-02"))
	srv := httptest.NewServer(promoterhttp.NewHandler(p, nil))
	defer srv.Close()
	for _, tc := range []struct{ id, want string }{
		{first, "promotion " + first + " has no record yet: it is queued as events-window/" + e.partitionOf("2024-01-01") + ", next to start (not_found, HTTP 404)"},
		{second, "promotion " + second + " has no record yet: it is queued as events-window/" + e.partitionOf("2024-01-02") + ", behind 1 other key (not_found, HTTP 404)"},
	} {
		var out, errOut testlog.Buffer
		if code := cli.Main(ctx, []string{"status", tc.id, "--promoter", srv.URL}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("thaw status %s: exit %d\n%s\nwant %q", tc.id, code, errOut.String(), tc.want)
		}
	}
	// The list shows them as queued, in queue order, before the records.
	var out, errOut testlog.Buffer
	if code := cli.Main(ctx, []string{"status", "--promoter", srv.URL}, &out, &errOut); code != 0 {
		t.Fatalf("thaw status: exit %d\n%s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^`+first+`\s+events-window\s+shop\.events/`+e.partitionOf("2024-01-01")+`\s+queued\s+next to start$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^`+second+`\s+events-window\s+shop\.events/\S+\s+queued\s+behind 1 other key$`).MatchString(lines[2]) {
		t.Fatalf("thaw status:\n%s", out.String())
	}
	var jsonOut testlog.Buffer
	if code := cli.Main(ctx, []string{"status", "--promoter", srv.URL, "--output", "json"}, &jsonOut, &errOut); code != 0 {
		t.Fatalf("thaw status --output json: exit %d\n%s", code, errOut.String())
	}
	var st promoterhttp.PromotionsResponse
	if err := json.Unmarshal([]byte(jsonOut.String()), &st); err != nil || len(st.Queued) != 2 ||
		st.Queued[1] != (promoterhttp.QueuedPromotion{ID: second, Policy: pol.Name(), Database: "shop", Table: "events",
			Partition: e.partitionOf("2024-01-02"), Ahead: 1, Where: "behind 1 other key"}) {
		t.Fatalf("thaw status --output json: %v\n%s", err, jsonOut.String())
	}

	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Queued(second); ok {
		t.Fatal("queued after its turn")
	}
	waitCommitted(ctx, t, p, second, 1)

	// Requested again after a drop: its record (attempt 1) says that the
	// next attempt waits in the queue.
	if err := e.tc.DropPartition(ctx, "shop", "events", e.partitionOf("2024-01-01")); err != nil {
		t.Fatal(err)
	}
	if again := request(ctx, t, p, pol, e.partitionOf("2024-01-01")); again != first {
		t.Fatalf("requested again as %s, want %s", again, first)
	}
	var one testlog.Buffer
	if code := cli.Main(ctx, []string{"status", first, "--promoter", srv.URL}, &one, &errOut); code != 0 ||
		!regexp.MustCompile(`(?m)^phase:\s+committed$`).MatchString(one.String()) ||
		!regexp.MustCompile(`(?m)^requested again:\s+queued for its next attempt, next to start$`).MatchString(one.String()) {
		t.Fatalf("thaw status %s: exit %d\n%s%s", first, code, one.String(), errOut.String())
	}
}

// TestStoredRequestOfGonePolicy: at Run, a stored request of a policy the
// promoter does not have, or of one that no longer takes requests, is
// deleted and not promoted; the others are queued and promoted.
func TestStoredRequestOfGonePolicy(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	id := request(ctx, t, e.promoter(cfg), pol, e.partitionOf("2024-01-02"))
	if _, err := cfg.Ledger.PutRequests(ctx, []promoter.StoredRequest{
		{Key: promoter.Key{Policy: "gone", Partition: e.partitionOf("2024-01-02")}, At: e.clock()},
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(storedRequests(ctx, t, cfg.Ledger)); n != 2 {
		t.Fatalf("%d stored requests, want 2", n)
	}
	e.runUntilPromoted(ctx, t, cfg, id, 1)

	// The policy stops taking requests: a request stored before is dropped.
	late := request(ctx, t, e.promoter(cfg), pol, e.partitionOf("2024-01-03"))
	closed := cfg
	closed.Policies = []*policies.Policy{windowPolicy(t, pol.Name(), "events", "3d", "  triggers:\n    onRequest: false\n    schedule: {cron: \"0 2 * * *\"}\n")}
	last := e.promoter(closed)
	run(t, last)
	waitFor(t, "the stored request deleted", func() bool { return len(storedRequests(ctx, t, cfg.Ledger)) == 0 })
	if err := last.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := last.Promotion(ctx, late); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("the request of a policy that no longer takes requests ran: %v", err)
	}
}

// TestCancelQueuedRequest: `thaw cancel ID` withdraws a requested
// promotion that waits in the queue: it leaves the queue and the ledger's
// stored requests, its waiter ends saying it was cancelled, and it never
// runs; a promotion that does not wait in the queue is not cancelled.
func TestCancelQueuedRequest(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	p := e.promoter(cfg)
	srv := httptest.NewServer(promoterhttp.NewHandler(p, nil))
	defer srv.Close()
	thaw := func(args ...string) (int, string, string) {
		var out, errOut testlog.Buffer
		code := cli.Main(ctx, append(args, "--promoter", srv.URL), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	first := request(ctx, t, p, pol, e.partitionOf("2024-01-01"))
	second := request(ctx, t, p, pol, e.partitionOf("2024-01-02"))
	var waitOut, waitErr testlog.Buffer
	waited := make(chan int, 1)
	go func() {
		waited <- cli.Main(ctx, []string{"promote", "shop.events", "--partition", e.partitionOf("2024-01-03"), "--wait", "--promoter", srv.URL, "--timeout", "1m"}, &waitOut, &waitErr)
	}()
	waitFor(t, "the third request", func() bool { return len(p.QueuedRequests()) == 3 })
	third := p.QueuedRequests()[2].ID

	code, out, errOut := thaw("cancel", second, third)
	want := "cancelled " + second + ": shop.events/" + e.partitionOf("2024-01-02") + " (it was behind 1 other key)\n" +
		"cancelled " + third + ": shop.events/" + e.partitionOf("2024-01-03") + " (it was behind 1 other key)\n"
	if code != 0 || out != want {
		t.Fatalf("thaw cancel: exit %d\n%s%s\nwant\n%s", code, out, errOut, want)
	}
	if rs := storedRequests(ctx, t, cfg.Ledger); len(rs) != 1 || rs[0].IDs[0] != first {
		t.Fatalf("stored requests after the cancel: %+v", rs)
	}
	select {
	case c := <-waited:
		if c != 1 || !strings.Contains(waitErr.String(), "promotion "+third+" was requested and then skipped when its turn came (") ||
			!strings.Contains(waitErr.String(), "): cancelled while it waited in the queue") {
			t.Fatalf("the waiter of the cancelled promotion: exit %d\n%s%s", c, waitOut.String(), waitErr.String())
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed goal
		t.Fatal("the waiter of a cancelled promotion still waits")
	}

	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	waitCommitted(ctx, t, p, first, 1)
	for _, id := range []string{second, third} {
		if _, err := p.Promotion(ctx, id); !errors.Is(err, promoter.ErrNotFound) {
			t.Fatalf("the cancelled promotion %s ran: %v", id, err)
		}
	}
	// Nothing to cancel: a promotion that has run, one never requested.
	for _, id := range []string{first, "p-0123456789abcdef"} {
		if code, _, errOut := thaw("cancel", id); code != 1 || !strings.Contains(errOut, "promotion "+id+" waits in no queue (thaw status lists what does) (conflict, HTTP 409)") {
			t.Errorf("thaw cancel %s: exit %d %s", id, code, errOut)
		}
	}
	// Several ids: one error line each.
	code, _, errOut = thaw("cancel", first, "p-0123456789abcdef")
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	if code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], "thaw: ") || !strings.HasSuffix(lines[0], "promotion "+first+" waits in no queue (thaw status lists what does) (conflict, HTTP 409)") ||
		!strings.HasPrefix(lines[1], "thaw: ") || !strings.HasSuffix(lines[1], "promotion p-0123456789abcdef waits in no queue (thaw status lists what does) (conflict, HTTP 409)") {
		t.Errorf("thaw cancel of two ids: exit %d %q", code, errOut)
	}
	if code, _, errOut := thaw("cancel", "shop.events"); code != 2 || !strings.Contains(errOut, `"shop.events" is not a promotion id`) {
		t.Errorf("thaw cancel shop.events: exit %d %s", code, errOut)
	}
}

// failTxnKV fails its n-th Txn (from 1) as a request whose context ended.
type failTxnKV struct {
	clientv3.KV
	n     int64
	calls atomic.Int64
}

func (k *failTxnKV) Txn(ctx context.Context) clientv3.Txn {
	if k.calls.Add(1) == k.n {
		c, cancel := context.WithCancel(ctx)
		cancel()
		return k.KV.Txn(c)
	}
	return k.KV.Txn(ctx)
}

// TestEtcdLedgerRequestsPartlyStored: a store of more requests than one
// transaction takes whose second transaction fails keeps the first
// transaction's requests, and says which: deleting them again would lose
// the earlier request of a key (which the caller's merge replaced).
func TestEtcdLedgerRequestsPartlyStored(t *testing.T) {
	cli := startEtcd(t)
	ctx := t.Context()
	const prefix = "/test/promoter"
	l := promoter.NewEtcdLedger(cli, prefix, nil)
	at := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	id := func(p string) string { return promoter.PromotionID("default", "lake.events", "shop.events", p, 42) }
	early := promoter.StoredRequest{Key: promoter.Key{Policy: "events", Partition: "p000"}, Forced: true, IDs: []string{id("p000")}, At: at}
	if _, err := l.PutRequests(ctx, []promoter.StoredRequest{early}); err != nil {
		t.Fatal(err)
	}
	w := clientv3.NewCtxClient(ctx)
	w.KV = &failTxnKV{KV: cli.KV, n: 2}
	many := []promoter.StoredRequest{early} // the queue's merge of the earlier request
	for i := 1; i <= 120; i++ {
		p := fmt.Sprintf("p%03d", i)
		many = append(many, promoter.StoredRequest{Key: promoter.Key{Policy: "events", Partition: p}, IDs: []string{id(p)}, At: at})
	}
	revs, err := promoter.NewEtcdLedger(w, prefix, nil).PutRequests(ctx, many)
	if err == nil || len(revs) != 100 {
		t.Fatalf("a store whose second transaction fails: %d revisions, %v", len(revs), err)
	}
	got := storedRequests(ctx, t, l)
	if len(got) != 100 {
		t.Fatalf("%d stored requests, want the first transaction's 100", len(got))
	}
	for _, r := range got {
		if i := slices.IndexFunc(many[:100], func(m promoter.StoredRequest) bool { return m.Key == r.Key }); i < 0 || r.Revision != revs[i] {
			t.Fatalf("stored %+v, not of the first transaction at revision %d", r, revs[0])
		}
	}
}

// partLedger stores only the first n requests of a call, then fails.
type partLedger struct {
	promoter.Ledger
	n int
}

func (l partLedger) PutRequests(ctx context.Context, rs []promoter.StoredRequest) ([]int64, error) {
	revs, err := l.Ledger.PutRequests(ctx, rs[:min(l.n, len(rs))])
	if err != nil {
		return revs, err
	}
	return revs, errNoStore
}

// TestRequestPartlyStored: a request whose keys the ledger stores only in
// part fails, and queues what was stored (each queued key has its stored
// request: a restart would queue it too).
func TestRequestPartlyStored(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	cfg.Ledger = partLedger{cfg.Ledger, 1}
	p := e.promoter(cfg)
	ctx := t.Context()
	if _, err := p.Request(ctx, promoter.Request{Policy: pol.Name()}); !errors.Is(err, errNoStore) {
		t.Fatalf("a request the ledger stored in part: %v", err)
	}
	q, rs := p.QueuedRequests(), storedRequests(ctx, t, cfg.Ledger)
	if len(q) != 1 || len(rs) != 1 || q[0].ID != rs[0].IDs[0] {
		t.Fatalf("queued %+v, stored %+v: want the one stored request queued", q, rs)
	}
}

// cancelRaceLedger holds a Cancel's delete of a stored request until
// released, and says when a plan has listed the ledger.
type cancelRaceLedger struct {
	promoter.Ledger
	armDelete atomic.Bool
	inDelete  chan struct{}
	release   chan struct{}
	armList   atomic.Bool
	listed    chan struct{}
}

func (l *cancelRaceLedger) DeleteRequest(ctx context.Context, k promoter.Key, rev int64) error {
	if l.armDelete.CompareAndSwap(true, false) {
		close(l.inDelete)
		<-l.release
	}
	return l.Ledger.DeleteRequest(ctx, k, rev)
}

func (l *cancelRaceLedger) List(ctx context.Context) ([]promoter.Record, error) {
	rs, err := l.Ledger.List(ctx)
	if l.armList.CompareAndSwap(true, false) {
		close(l.listed)
	}
	return rs, err
}

// TestCancelRacingRequest: a request of a promotion made while a Cancel of
// it is storing its end leaves the promotion queued and not noted as
// cancelled (its waiter waits for it), whichever lands first.
func TestCancelRacingRequest(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	l := &cancelRaceLedger{Ledger: cfg.Ledger, inDelete: make(chan struct{}), release: make(chan struct{}), listed: make(chan struct{})}
	cfg.Ledger = l
	p := e.promoter(cfg)
	part := e.partitionOf("2024-01-02")
	id := request(ctx, t, p, pol, part)

	l.armDelete.Store(true)
	cancelled := make(chan error, 1)
	go func() { _, err := p.Cancel(ctx, id); cancelled <- err }()
	<-l.inDelete
	l.armList.Store(true)
	requested := make(chan error, 1)
	go func() {
		_, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
		requested <- err
	}()
	<-l.listed
	// Let the request get as far as it can before the cancel ends (it
	// waits for the cancel's lock).
	time.Sleep(300 * time.Millisecond)
	close(l.release)
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	if err := <-requested; err != nil {
		t.Fatal(err)
	}
	_, queued := p.Queued(id)
	s, skipped := p.Skipped(id)
	if !queued || skipped {
		t.Fatalf("after the cancel and the new request: queued %t, noted skipped %t (%s)", queued, skipped, s.Reason)
	}
}
