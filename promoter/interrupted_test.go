package promoter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// flakyTier is a BulkLoader whose Begin and Abort fail while their flag is
// set, with an error that says nothing of the outcome (the coordinator
// unreachable).
type flakyTier struct {
	promoter.BulkLoader
	beginDown, abortDown *atomic.Bool
}

var errUnreachable = errors.New("bulkloadclient: coordinator unreachable (injected)")

func (f *flakyTier) Begin(ctx context.Context, t bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	if f.beginDown != nil && f.beginDown.Load() {
		return nil, errUnreachable
	}
	return f.BulkLoader.Begin(ctx, t, token, o)
}

func (f *flakyTier) Abort(ctx context.Context, h bulkload.Handle) (bulkload.Status, error) {
	if f.abortDown != nil && f.abortDown.Load() {
		return bulkload.Status{}, errUnreachable
	}
	return f.BulkLoader.Abort(ctx, h)
}

// interruptEnv is a lake day whose every build crashes its promoter
// (Hooks.BeforeBuild, as arrow-go's panics on a damaged lake file do)
// beside a day that promotes normally.
type interruptEnv struct {
	*env
	t         *testing.T
	pols      []*policies.Policy
	prefix    string
	bad, good string
	crashes   atomic.Int32
	abortDown atomic.Bool
}

func newInterruptEnv(t *testing.T, table string) *interruptEnv {
	e := newEnv(t, 1000)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	return &interruptEnv{env: e, t: t, pols: []*policies.Policy{twoDayPolicy(t, strings.ReplaceAll(table, "_", "-"), table)}, prefix: "/thaw-test/" + table,
		bad: e.partitionOf("2024-01-02"), good: e.partitionOf("2024-01-03")}
}

// crashing is a promoter whose builds of the bad day crash.
func (ie *interruptEnv) crashing() *promoter.Promoter {
	cfg := ie.configAt(ie.pols, ie.prefix)
	cfg.BulkLoad = &flakyTier{BulkLoader: cfg.BulkLoad, abortDown: &ie.abortDown}
	cfg.Hooks.BeforeBuild = func(_ context.Context, r promoter.Record) error {
		if r.Partition == ie.bad {
			ie.crashes.Add(1)
			return errKilled
		}
		return nil
	}
	return ie.promoter(cfg)
}

// record is the bad day's record.
func (ie *interruptEnv) record(p *promoter.Promoter) promoter.Record {
	ie.t.Helper()
	recs, err := p.Promotions(ie.t.Context())
	if err != nil {
		ie.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Partition == ie.bad {
			return r
		}
	}
	ie.t.Fatalf("no record of %s in %+v", ie.bad, recs)
	return promoter.Record{}
}

// stored is the bad day's record as the ledger holds it.
func (ie *interruptEnv) stored(id string) []byte {
	ie.t.Helper()
	b, _ := rawValue(ie.t, ie.tier.Etcd(), ie.prefix+"/promotions/"+id)
	return b
}

// crashLoop runs the first promoter and MaxInterruptedBuilds-1 restarts,
// each crashing in the bad day's build, and returns the record then.
func (ie *interruptEnv) crashLoop(ctx context.Context) promoter.Record {
	t := ie.t
	t.Helper()
	first := ie.crashing()
	ie.reconcile(ctx, t, first)
	r := ie.record(first)
	if ie.crashes.Load() != 1 || r.Phase != promoter.PhaseBuilding || r.InterruptedBuilds != 1 {
		t.Fatalf("after the first run: %d crashes, record %s with %d interrupted builds", ie.crashes.Load(), r.Phase, r.InterruptedBuilds)
	}
	ie.checkTier(ie.pols[0].Target().Table, ie.good, ie.lakeRows("2024-01-03"))
	txn := r.TxnID
	for n := 2; n <= promoter.MaxInterruptedBuilds; n++ {
		p := ie.crashing()
		if err := p.Resume(ctx); !errors.Is(err, errKilled) || errors.Is(err, promoter.ErrInterrupted) {
			t.Fatalf("start %d: %v", n, err)
		}
		r = ie.record(p)
		if got := ie.crashes.Load(); got != int32(n) || r.Phase != promoter.PhaseBuilding || r.InterruptedBuilds != n || r.TxnID != txn || r.Attempt != 1 {
			t.Fatalf("after start %d: %d crashes, record %+v", n, got, r)
		}
		if b := ie.stored(r.ID); !bytes.HasPrefix(b, []byte(`{"version":2,`)) || !bytes.Contains(b, []byte(`"interrupted_builds":`)) {
			t.Fatalf("stored record with interrupted builds: %s", b)
		}
	}
	return r
}

// checkFailed checks that the bad day's promotion is failed as
// interrupted, its transaction aborted, its target empty and free, and no
// reconcile builds it again.
func (ie *interruptEnv) checkFailed(ctx context.Context, p *promoter.Promoter, txn string) {
	t := ie.t
	t.Helper()
	table := ie.pols[0].Target().Table
	r := ie.record(p)
	if ie.crashes.Load() != promoter.MaxInterruptedBuilds {
		t.Fatalf("%d crashes: the interrupted promotion was built again", ie.crashes.Load())
	}
	if r.Phase != promoter.PhaseFailed || r.Retriable || !strings.Contains(r.Error, "builds of it began and never ended") || r.TxnID != txn {
		t.Fatalf("failed record %+v", r)
	}
	ie.noTxnInProgress(table, []string{ie.bad, ie.good})
	ie.checkTier(table, ie.bad, nil)
	ie.checkTier(table, ie.good, ie.lakeRows("2024-01-03"))
	if rep, err := p.Reconcile(ctx); err != nil || rep.Enqueued != 0 {
		t.Fatalf("reconcile after the failure: %+v %v", rep, err)
	}
	plan, err := p.Plan(ctx, ie.pols[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		if it.Key.Partition == ie.bad && (it.Action != promoter.ActionSkip || !strings.HasPrefix(it.Reason, "failed: ")) {
			t.Fatalf("plan of the failed partition: %+v", it)
		}
	}
	if ie.crashes.Load() != promoter.MaxInterruptedBuilds {
		t.Fatalf("%d crashes: a reconcile built the interrupted promotion again", ie.crashes.Load())
	}
}

// TestInterruptedBuildsFail: a promotion whose every build brings its
// promoter down is resumed by each restart until MaxInterruptedBuilds of
// its builds began and never ended (each counted in the ledger before it
// runs); the next start fails it without building it again: its
// transaction aborted, the target empty and free, the record failed with
// ErrInterrupted, not retriable, so no reconcile runs it again. The
// policy's other target is promoted, and a request of the failed
// partition promotes it afresh (the count starts again, and the commit
// leaves a version 1 record).
func TestInterruptedBuildsFail(t *testing.T) {
	ie := newInterruptEnv(t, "interrupted")
	ctx := t.Context()
	r := ie.crashLoop(ctx)

	p := ie.crashing()
	err := p.Resume(ctx)
	if !errors.Is(err, promoter.ErrInterrupted) || promoter.IsRetriable(err) {
		t.Fatalf("start after %d interrupted builds: %v, want ErrInterrupted", promoter.MaxInterruptedBuilds, err)
	}
	ie.checkFailed(ctx, p, r.TxnID)

	healthy := ie.promoter(ie.configAt(ie.pols, ie.prefix))
	nr, err := healthy.Promote(ctx, promoter.Key{Policy: ie.pols[0].Name(), Partition: ie.bad})
	if err != nil || nr.Phase != promoter.PhaseCommitted || nr.Attempt != 2 || nr.InterruptedBuilds != 0 {
		t.Fatalf("promote after the failure: %+v %v", nr, err)
	}
	if b := ie.stored(nr.ID); !bytes.HasPrefix(b, []byte(`{"version":1,`)) || bytes.Contains(b, []byte(`"interrupted_builds"`)) {
		t.Fatalf("stored record after the new attempt: %s", b)
	}
	ie.checkTier("interrupted", ie.bad, ie.lakeRows("2024-01-02"))
}

// TestInterruptedBuildsFailThroughReconcile: when the start that should
// fail the crash-looping promotion cannot abort its transaction (the tier
// briefly unreachable), the record stays for later; the reconcile that
// settles it must not build it again either.
func TestInterruptedBuildsFailThroughReconcile(t *testing.T) {
	ie := newInterruptEnv(t, "interrupted_rec")
	ctx := t.Context()
	r := ie.crashLoop(ctx)

	p := ie.crashing()
	ie.abortDown.Store(true)
	if err := p.Resume(ctx); !errors.Is(err, errUnreachable) {
		t.Fatalf("start whose abort fails: %v", err)
	}
	if got := ie.record(p); got.Phase != promoter.PhaseBuilding || got.InterruptedBuilds != promoter.MaxInterruptedBuilds {
		t.Fatalf("record after a failed abort: %+v", got)
	}
	ie.abortDown.Store(false)
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	ie.checkFailed(ctx, p, r.TxnID)
}

// TestRestartsWithoutBuildsCountNothing: promoter starts that find a
// promotion unfinished but never get to build it (the tier unreachable,
// so Begin's outcome stays unknown and the record waits) count nothing,
// however many: once the tier answers, the promotion builds and commits.
// A build that returns, with an error or not, is not counted either.
func TestRestartsWithoutBuildsCountNothing(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table = "outage"
	pols := []*policies.Policy{daysPolicy(t, "outage", table, "2024-01-02")}
	prefix := "/thaw-test/" + table
	var down atomic.Bool
	down.Store(true)
	var builds atomic.Int32
	cfg := func() promoter.Config {
		c := e.configAt(pols, prefix)
		c.BulkLoad = &flakyTier{BulkLoader: c.BulkLoad, beginDown: &down}
		c.Hooks.BeforeBuild = func(context.Context, promoter.Record) error { builds.Add(1); return nil }
		return c
	}
	first := e.promoter(cfg())
	if _, err := first.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	_ = first.Drain(ctx) // Begin's outcome unknown: left planned
	for n := 1; n <= promoter.MaxInterruptedBuilds+1; n++ {
		p := e.promoter(cfg())
		if err := p.Resume(ctx); !errors.Is(err, errUnreachable) {
			t.Fatalf("start %d during the outage: %v", n, err)
		}
		recs, err := p.Promotions(ctx)
		if err != nil || len(recs) != 1 || recs[0].Phase != promoter.PhasePlanned || recs[0].InterruptedBuilds != 0 {
			t.Fatalf("after start %d during the outage: %+v %v", n, recs, err)
		}
	}
	down.Store(false)
	p := e.promoter(cfg())
	if err := p.Resume(ctx); err != nil {
		t.Fatalf("start once the tier answers: %v", err)
	}
	recs, err := p.Promotions(ctx)
	if err != nil || len(recs) != 1 || recs[0].Phase != promoter.PhaseCommitted || recs[0].InterruptedBuilds != 0 || builds.Load() != 1 {
		t.Fatalf("after the outage: %+v %v, %d builds", recs, err, builds.Load())
	}
	e.checkTier(table, e.partitionOf("2024-01-02"), e.lakeRows("2024-01-02"))
}

// scanFails is a lake whose scans fail.
type scanFails struct{ promoter.Lake }

func (scanFails) Scan(context.Context, string, lake.ScanOptions) (*arrow.Schema, iter.Seq2[arrow.RecordBatch, error], error) {
	return nil, nil, errors.New("lake unreadable (injected)")
}

// TestFailedBuildIsNotInterrupted: a build that returned is not counted
// as interrupted, also when what follows it fails and its abort fails too
// (the promotion left building for Resume): the build itself failed, or
// it succeeded and the write of the committing phase failed.
func TestFailedBuildIsNotInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name           string
		scanFails      bool
		committingFail bool
	}{{"build failed", true, false}, {"committing write failed", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1000)
			ctx := t.Context()
			e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
			const table = "failedbuild"
			cfg := e.configAt([]*policies.Policy{daysPolicy(t, "failedbuild", table, "2024-01-02")}, "/thaw-test/"+table)
			var down atomic.Bool
			down.Store(true)
			cfg.BulkLoad = &flakyTier{BulkLoader: cfg.BulkLoad, abortDown: &down}
			if tc.scanFails {
				cfg.Lakes = map[string]promoter.Lake{"default": scanFails{e.lake}}
			}
			if tc.committingFail {
				l := &phaseWriteBlips{Ledger: cfg.Ledger, phase: promoter.PhaseCommitting}
				l.n.Store(1)
				cfg.Ledger = l
			}
			var builds atomic.Int32
			cfg.Hooks.BeforeBuild = func(context.Context, promoter.Record) error { builds.Add(1); return nil }
			p := e.reconciled(ctx, t, cfg)
			recs, err := p.Promotions(ctx)
			if err != nil || len(recs) != 1 || builds.Load() != 1 {
				t.Fatalf("records %+v %v, %d builds", recs, err, builds.Load())
			}
			if r := recs[0]; r.Phase != promoter.PhaseBuilding || r.InterruptedBuilds != 0 {
				t.Fatalf("after a returned build whose abort failed: phase %s, interrupted builds %d; want building, 0", r.Phase, r.InterruptedBuilds)
			}
		})
	}
}

// TestStoredRequestDoesNotRestartACrashLoop: a request stays stored until
// its promotion's turn ends, so a crash mid-build leaves it behind; when a
// start fails the promotion as interrupted and then queues the stored
// requests, that request must not start the builds again (a new attempt,
// its count at zero: a crash loop for ever). It is skipped, its waiters
// told so, and deleted. A request made after the failure promotes it.
func TestStoredRequestDoesNotRestartACrashLoop(t *testing.T) {
	ie := newInterruptEnv(t, "interrupted_req")
	ctx := t.Context()
	// The request a user made (thaw promote --wait) before the crashes,
	// still stored: each of its processes died.
	cfg := ie.configAt(ie.pols, ie.prefix)
	k := promoter.Key{Policy: ie.pols[0].Name(), Partition: ie.bad}
	id := promoter.PromotionID("default", "lake.events", "shop."+ie.pols[0].Target().Table, ie.bad, 0)
	plan, err := ie.promoter(cfg).Plan(ctx, k.Policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		if it.Key.Partition == ie.bad {
			id = it.PromotionID
		}
	}
	if _, err := cfg.Ledger.PutRequests(ctx, []promoter.StoredRequest{{Key: k, Forced: true, IDs: []string{id}, At: ie.clock()}}); err != nil {
		t.Fatal(err)
	}
	r := ie.crashLoop(ctx)

	p := ie.crashing()
	stop := run(t, p)
	waitFor(t, "the stored request settled", func() bool {
		rs, err := cfg.Ledger.Requests(ctx)
		return err == nil && len(rs) == 0
	})
	if s, ok := p.Skipped(id); !ok || !strings.Contains(s.Reason, "requested before it failed") {
		t.Errorf("the stored request's waiters: skipped %t, %q", ok, s.Reason)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ie.checkFailed(ctx, p, r.TxnID)

	// A request made now promotes it again (the damage repaired).
	healthy := ie.promoter(ie.configAt(ie.pols, ie.prefix))
	stop = run(t, healthy)
	if _, err := healthy.Request(ctx, promoter.Request{Policy: k.Policy, Partition: ie.bad}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new request's promotion", func() bool { return ie.record(healthy).Phase == promoter.PhaseCommitted })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if nr := ie.record(healthy); nr.Attempt != 2 || nr.InterruptedBuilds != 0 {
		t.Fatalf("promoted on a new request: %+v", nr)
	}
	ie.checkTier(ie.pols[0].Target().Table, ie.bad, ie.lakeRows("2024-01-02"))
}

// schemaDown is a tier whose TableSchema fails while down is set (the
// tier unreachable for a moment: a retriable failure before any build).
type schemaDown struct {
	promoter.Tier
	down *atomic.Bool
}

func (s schemaDown) TableSchema(ctx context.Context, database, table string) (kv.TableSchema, bool, error) {
	if s.down.Load() {
		return kv.TableSchema{}, false, errUnreachable
	}
	return s.Tier.TableSchema(ctx, database, table)
}

// startTierUnreachable starts a promoter that finds the tier unreachable
// (its Resume fails retriably, the record failed and retriable).
func (ie *interruptEnv) startTierUnreachable(ctx context.Context) {
	ie.t.Helper()
	var down atomic.Bool
	down.Store(true)
	cfg := ie.configAt(ie.pols, ie.prefix)
	cfg.Tier = schemaDown{Tier: cfg.Tier, down: &down}
	if err := ie.promoter(cfg).Resume(ctx); !errors.Is(err, errUnreachable) {
		ie.t.Fatalf("start with the tier unreachable: %v", err)
	}
}

// TestRetriableFailureKeepsTheCount: a crash loop interrupted by a
// retriable failure (a restart that found the tier unreachable: the
// promotion failed, retriable, without a build) is planned again by the
// next reconcile with its count, not afresh: the builds stop after
// MaxInterruptedBuilds crashes all the same.
func TestRetriableFailureKeepsTheCount(t *testing.T) {
	ie := newInterruptEnv(t, "interrupted_retry")
	ctx := t.Context()
	first := ie.crashing()
	ie.reconcile(ctx, t, first)
	ie.startTierUnreachable(ctx)
	if r := ie.record(first); r.Phase != promoter.PhaseFailed || !r.Retriable || r.InterruptedBuilds != 1 {
		t.Fatalf("after the start that found the tier unreachable: %+v", r)
	}
	again := ie.crashing()
	ie.reconcile(ctx, t, again)
	if r := ie.record(again); ie.crashes.Load() != 2 || r.InterruptedBuilds != 2 {
		t.Fatalf("after the reconcile that planned it again: %d crashes, %+v", ie.crashes.Load(), r)
	}
	for ie.crashes.Load() < promoter.MaxInterruptedBuilds {
		if err := ie.crashing().Resume(ctx); !errors.Is(err, errKilled) {
			t.Fatalf("start %d: %v", ie.crashes.Load()+1, err)
		}
	}
	p := ie.crashing()
	if err := p.Resume(ctx); !errors.Is(err, promoter.ErrInterrupted) {
		t.Fatalf("start after %d crashes: %v", ie.crashes.Load(), err)
	}
	if r := ie.record(p); r.Phase != promoter.PhaseFailed || r.Retriable || ie.crashes.Load() != promoter.MaxInterruptedBuilds {
		t.Fatalf("%d crashes, record %+v", ie.crashes.Load(), r)
	}
}

// TestRequestRestartsTheCount: a request made after a crash loop was cut
// short by a retriable failure (a restart that found the tier
// unreachable: failed, retriable, the count kept) starts the count afresh
// — the operator says the cause is repaired — so the promotion builds and
// commits rather than failing as interrupted without a build.
func TestRequestRestartsTheCount(t *testing.T) {
	ie := newInterruptEnv(t, "interrupted_reqcount")
	ctx := t.Context()
	ie.crashLoop(ctx)
	ie.startTierUnreachable(ctx)
	if r := ie.record(ie.crashing()); r.Phase != promoter.PhaseFailed || !r.Retriable || r.InterruptedBuilds != promoter.MaxInterruptedBuilds {
		t.Fatalf("after the start that found the tier unreachable: %+v", r)
	}
	got, err := ie.promoter(ie.configAt(ie.pols, ie.prefix)).Promote(ctx, promoter.Key{Policy: ie.pols[0].Name(), Partition: ie.bad})
	if err != nil || got.Phase != promoter.PhaseCommitted || got.InterruptedBuilds != 0 {
		t.Fatalf("request after the repair: %+v %v", got, err)
	}
	ie.checkTier("interrupted_reqcount", ie.bad, ie.lakeRows("2024-01-02"))
}

// phaseWriteBlips is a ledger whose writes of a record entering phase
// fail n times (an etcd blip): storing nothing, or (land) stored but
// answered with an error (a request that timed out after it was applied).
type phaseWriteBlips struct {
	promoter.Ledger
	phase promoter.Phase
	n     atomic.Int32
	land  bool
}

func (l *phaseWriteBlips) Update(ctx context.Context, r promoter.Record) (promoter.Record, error) {
	if r.Phase == l.phase && l.n.Add(-1) >= 0 {
		if l.land {
			if _, err := l.Ledger.Update(ctx, r); err != nil {
				return promoter.Record{}, err
			}
		}
		return promoter.Record{}, fmt.Errorf("etcdserver: request timed out (injected, applied: %t)", l.land)
	}
	return l.Ledger.Update(ctx, r)
}

// TestBuildingWriteBlipsCountNothing: when the write that counts a build
// fails (no build began), the count is taken back, in the ledger too,
// also when the write landed though it answered an error (the record is
// read again and the abort writes at its revision): MaxInterruptedBuilds
// such blips in a row do not fail a healthy promotion as interrupted.
func TestBuildingWriteBlipsCountNothing(t *testing.T) {
	for _, land := range []bool{false, true} {
		t.Run(fmt.Sprintf("landed=%t", land), func(t *testing.T) {
			e := newEnv(t, 1000)
			ctx := t.Context()
			e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
			pols := []*policies.Policy{daysPolicy(t, "blips", "blips", "2024-01-02")}
			cfg := e.configAt(pols, "/thaw-test/blips")
			cfg.Retry.Attempts = 5
			l := &phaseWriteBlips{Ledger: cfg.Ledger, phase: promoter.PhaseBuilding, land: land}
			l.n.Store(int32(promoter.MaxInterruptedBuilds))
			cfg.Ledger = l
			var builds atomic.Int32
			cfg.Hooks.BeforeBuild = func(context.Context, promoter.Record) error { builds.Add(1); return nil }
			r, err := e.promoter(cfg).Promote(ctx, promoter.Key{Policy: pols[0].Name(), Partition: e.partitionOf("2024-01-02")})
			if err != nil || r.Phase != promoter.PhaseCommitted || builds.Load() != 1 || r.Attempt != promoter.MaxInterruptedBuilds+1 || r.InterruptedBuilds != 0 {
				t.Fatalf("promotion after %d failed building writes: %+v %v, %d builds", promoter.MaxInterruptedBuilds, r, err, builds.Load())
			}
		})
	}
}
