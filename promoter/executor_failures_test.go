package promoter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// Regression tests of the executor's failure paths around the tier
// transaction: a commit whose ledger write fails, a transaction begun but
// not (yet) recorded or not aborted, a commit outcome the tier forgot.

// failingCommitLedger fails the next failCommitted Updates that record a
// commit with err, without writing.
type failingCommitLedger struct {
	promoter.Ledger
	failCommitted atomic.Int32
	err           error
}

func (l *failingCommitLedger) Update(ctx context.Context, r promoter.Record) (promoter.Record, error) {
	if r.Phase == promoter.PhaseCommitted && l.failCommitted.Add(-1) >= 0 {
		return promoter.Record{}, l.err
	}
	return l.Ledger.Update(ctx, r)
}

// unavailableSchemaTier fails the next failSchema TableSchema calls as an
// unreachable coordinator would.
type unavailableSchemaTier struct {
	promoter.Tier
	failSchema atomic.Int32
}

func (f *unavailableSchemaTier) TableSchema(ctx context.Context, db, table string) (kv.TableSchema, bool, error) {
	if f.failSchema.Add(-1) >= 0 {
		return kv.TableSchema{}, false, errors.New("tierclient: coordinator unavailable (injected)")
	}
	return f.Tier.TableSchema(ctx, db, table)
}

// lostBeginAnswer is a BulkLoader whose first Begin reaches the tier (the
// coordinator admits the transaction) but whose answer is lost to a
// shutdown: it cancels the promoter and the call ends with its context.
type lostBeginAnswer struct {
	promoter.BulkLoader
	cancel func()
	n      atomic.Int32
}

func (c *lostBeginAnswer) Begin(ctx context.Context, tg bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	if c.n.Add(1) == 1 {
		if _, err := c.BulkLoader.Begin(context.WithoutCancel(ctx), tg, token, o); err != nil {
			return nil, err
		}
		c.cancel()
		<-ctx.Done()
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w", tg, ctx.Err())
	}
	return c.BulkLoader.Begin(ctx, tg, token, o)
}

// recordsOf returns p's records of table by tier partition; it fails on
// two records of one partition.
func recordsOf(t *testing.T, p *promoter.Promoter, table string) map[string]promoter.Record {
	t.Helper()
	recs, err := p.Promotions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]promoter.Record{}
	for _, r := range recs {
		if r.Table != table {
			continue
		}
		t.Logf("record %s %s attempt=%d phase=%s retriable=%t txn=%s err=%q", r.ID, r.Partition, r.Attempt, r.Phase, r.Retriable, r.TxnID, r.Error)
		if _, ok := out[r.Partition]; ok {
			t.Fatalf("two records of %s.%s/%s", "shop", table, r.Partition)
		}
		out[r.Partition] = r
	}
	return out
}

// wantPromoted checks that every record of table is committed at attempt
// and that each target holds exactly the lake's rows of its day.
func (e *env) wantPromoted(p *promoter.Promoter, table string, attempt int, days ...string) {
	e.t.Helper()
	recs := recordsOf(e.t, p, table)
	if len(recs) != len(days) {
		e.t.Fatalf("%d records of %s, want %d", len(recs), table, len(days))
	}
	for _, day := range days {
		part := e.partitionOf(day)
		r, ok := recs[part]
		switch {
		case !ok:
			e.t.Fatalf("no record of %s/%s", table, part)
		case r.Phase != promoter.PhaseCommitted || r.Attempt != attempt:
			e.t.Fatalf("%s (%s): %s at attempt %d (%q), want committed at attempt %d", r.ID, part, r.Phase, r.Attempt, r.Error, attempt)
		}
	}
	e.wantPromotedTargets(table, days...)
}

// wantPromotedTargets checks that each target of table holds exactly the
// lake's rows of its day and that no transaction holds it.
func (e *env) wantPromotedTargets(table string, days ...string) {
	e.t.Helper()
	var parts []string
	for _, day := range days {
		part := e.partitionOf(day)
		parts = append(parts, part)
		e.checkTier(table, part, e.lakeRows(day))
	}
	e.noTxnInProgress(table, parts)
}

// committedWritesFailing promotes the two days of twoDayPolicy into
// table (one reconcile, drained) while the ledger fails the first
// failures writes that record a commit, as a timed-out etcd write does.
func committedWritesFailing(t *testing.T, table string, failures int32) (*env, *promoter.Promoter, *failingCommitLedger) {
	e := newEnv(t, 1000)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	cfg := e.configAt([]*policies.Policy{twoDayPolicy(t, table, table)}, "/thaw-test/"+table)
	fl := &failingCommitLedger{Ledger: cfg.Ledger, err: errors.New("etcdserver: request timed out (injected)")}
	fl.failCommitted.Store(failures)
	cfg.Ledger = fl
	return e, e.reconciled(t.Context(), t, cfg), fl
}

// TestCommittedWriteFailureIsRetried: Commit succeeds and the first ledger
// write that records it fails (a transient etcd error). The write is tried
// again: the promotion ends committed at attempt 1, not failed by a second
// attempt that finds its own data in the target.
func TestCommittedWriteFailureIsRetried(t *testing.T) {
	const table = "cwr"
	e, p, fl := committedWritesFailing(t, table, 2)
	if n := fl.failCommitted.Load(); n > 0 {
		t.Fatalf("%d injected failures left unused", n)
	}
	e.wantPromoted(p, table, 1, "2024-01-02", "2024-01-03")
}

// TestCommittedWriteFailureLeavesCommitting: Commit succeeds and the
// ledger cannot record it for a while. The record stays committing at
// attempt 1 (never a new attempt, never failed); once the ledger takes
// writes again, the next reconcile settles it committed through Status.
func TestCommittedWriteFailureLeavesCommitting(t *testing.T) {
	const table = "cwl"
	e, p, fl := committedWritesFailing(t, table, 1<<20)
	for part, r := range recordsOf(t, p, table) {
		if r.Phase != promoter.PhaseCommitting || r.Attempt != 1 {
			t.Fatalf("%s (%s): %s at attempt %d (%q), want committing at attempt 1", r.ID, part, r.Phase, r.Attempt, r.Error)
		}
	}
	fl.failCommitted.Store(0)
	e.reconcile(t.Context(), t, p)
	e.wantPromoted(p, table, 1, "2024-01-02", "2024-01-03")
}

// TestResumeAbortsRecordedTxnOnTransientTierError: a promoter dies while
// building (its transactions BEGUN and recorded). The next promoter's
// resume meets one transient tier error before Begin: it aborts the
// recorded transaction before recording the attempt aborted, so the retry
// (attempt 2) finds the target free and commits.
func TestResumeAbortsRecordedTxnOnTransientTierError(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table = "rtt"
	pols := []*policies.Policy{twoDayPolicy(t, "rtt", table)}
	const prefix = "/thaw-test/rtt"
	if _, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseBuilding); killed != 2 {
		t.Fatalf("setup: killed %d promotions, want 2", killed)
	}
	cfg := e.configAt(pols, prefix)
	ft := &unavailableSchemaTier{Tier: cfg.Tier}
	ft.failSchema.Store(1)
	cfg.Tier = ft
	next := e.promoter(cfg)
	if err := next.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if ft.failSchema.Load() >= 0 {
		t.Fatal("setup: the injected tier error was not met")
	}
	retried := 0
	for part, r := range recordsOf(t, next, table) {
		if r.Phase != promoter.PhaseCommitted {
			t.Fatalf("%s (%s): %s after resume (%q)", r.ID, part, r.Phase, r.Error)
		}
		if r.Attempt == 2 {
			retried++
		}
	}
	if retried != 1 {
		t.Fatalf("%d promotions retried, want the 1 that met the tier error", retried)
	}
	e.wantPromotedTargets(table, "2024-01-02", "2024-01-03")
}

// TestShutdownDuringBeginAbortsItsTxn: the promoter shuts down while its
// Begin is in flight, after the coordinator admitted the transaction. The
// attempt is recorded aborted ("shutdown: ...") with the transaction it
// began (learnt by beginning again with its token) aborted: the target is
// released at once, and the next promoter promotes it.
func TestShutdownDuringBeginAbortsItsTxn(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table = "sdb"
	part := e.partitionOf("2024-01-02")
	pols := []*policies.Policy{policy(t, `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: sdb
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: sdb
    buckets: 2
    replicationFactor: 1
  selection:
    partitions:
      where:
        event_day:
          in: ["2024-01-02"]
  limits:
    buildWorkers: 1
    memory: 8MiB
`)}
	const prefix = "/thaw-test/sdb"
	cfg := e.configAt(pols, prefix)
	cfg.LakePollInterval = -1
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lb := &lostBeginAnswer{BulkLoader: cfg.BulkLoad, cancel: cancel}
	cfg.BulkLoad = lb
	p := e.promoter(cfg)
	if err := p.Run(rctx); err != nil {
		t.Fatal(err)
	}
	if lb.n.Load() == 0 {
		t.Fatal("setup: no Begin was sent")
	}
	r := recordsOf(t, p, table)[part]
	if !r.Interrupted() || r.Attempt != 1 {
		t.Fatalf("%s: %s at attempt %d (%q), want aborted by the shutdown at attempt 1", r.ID, r.Phase, r.Attempt, r.Error)
	}
	e.noTxnInProgress(table, []string{part})

	next := e.promoter(e.configAt(pols, prefix))
	if err := next.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	e.reconcile(ctx, t, next)
	e.wantPromoted(next, table, 2, "2024-01-02")
}

// forgetfulEnv is newEnv (1,000 rows, the clock at 2024-01-08) whose
// coordinator forgets a finished transaction after a second.
func forgetfulEnv(t *testing.T) *env {
	e := newEnvWith(t, 1000, func(c *daemon.EmbeddedConfig) {
		c.Coordinator.BulkLoad.ResultRetention = time.Second
	})
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	return e
}

// TestCommittingAfterTierForgotCommitted: a promoter commits and loses its
// leadership before recording it (the record stays committing); the tier
// forgets the finished transactions (result retention). The next promoter
// finds the targets holding the rows and records the promotions committed
// instead of leaving them committing forever.
func TestCommittingAfterTierForgotCommitted(t *testing.T) {
	e := forgetfulEnv(t)
	ctx := t.Context()
	const table = "forgot"
	pols := []*policies.Policy{twoDayPolicy(t, "forgot", table)}
	const prefix = "/thaw-test/forgot"
	cfg := e.configAt(pols, prefix)
	fl := &failingCommitLedger{Ledger: cfg.Ledger, err: fencing.ErrLeadershipLost}
	fl.failCommitted.Store(2)
	cfg.Ledger = fl
	first := e.reconciled(ctx, t, cfg)
	recs := recordsOf(t, first, table)
	for part, r := range recs {
		if r.Phase != promoter.PhaseCommitting {
			t.Fatalf("setup: %s (%s) at %s", r.ID, part, r.Phase)
		}
		e.waitForgotten(r)
	}

	next := e.promoter(e.configAt(pols, prefix))
	if err := next.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	e.wantPromoted(next, table, 1, "2024-01-02", "2024-01-03")
}

// TestCommittingAfterTierForgotAborted: a promoter dies once committing is
// recorded, before Commit is sent; the transaction is aborted from outside
// and the tier forgets it. The next promoter's resume finds the target
// empty: the attempt is recorded aborted and attempt 2 promotes it.
func TestCommittingAfterTierForgotAborted(t *testing.T) {
	e := forgetfulEnv(t)
	ctx := t.Context()
	const table = "forgota"
	pols := []*policies.Policy{twoDayPolicy(t, "forgota", table)}
	const prefix = "/thaw-test/forgota"
	first, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseCommitting)
	if killed != 2 {
		t.Fatalf("setup: killed %d promotions, want 2", killed)
	}
	for part, r := range recordsOf(t, first, table) {
		if r.Phase != promoter.PhaseCommitting {
			t.Fatalf("setup: %s (%s) at %s", r.ID, part, r.Phase)
		}
		if _, err := e.bl.Abort(ctx, bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}); err != nil {
			t.Fatalf("setup: abort %s: %v", r.TxnID, err)
		}
		e.waitForgotten(r)
	}

	next := e.promoter(e.configAt(pols, prefix))
	if err := next.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	e.wantPromoted(next, table, 2, "2024-01-02", "2024-01-03")
}

// waitForgotten waits until the tier no longer knows r's transaction.
func (e *env) waitForgotten(r promoter.Record) {
	e.t.Helper()
	h := bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}
	waitFor(e.t, "the tier to forget "+r.TxnID, func() bool {
		_, err := e.bl.Status(e.t.Context(), h)
		return errors.Is(err, bulkload.ErrNotFound)
	})
}

// beginThenDeposed is a BulkLoader whose Begins reach the tier (the
// coordinator begins the transaction) but whose promoter loses its
// leadership before the answer is recorded.
type beginThenDeposed struct {
	promoter.BulkLoader
	n atomic.Int32
}

func (b *beginThenDeposed) Begin(ctx context.Context, tg bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	if _, err := b.BulkLoader.Begin(ctx, tg, token, o); err != nil {
		return nil, err
	}
	b.n.Add(1)
	return nil, fmt.Errorf("begin answered, then: %w", fencing.ErrLeadershipLost)
}

// TestReleaseAbortsUnrecordedTxn: a promoter's Begins reach the tier and
// it is deposed before recording them (the records stay planned, without
// a transaction id, their targets fenced). The policy is then removed: the
// next promoter releases the records and aborts the transactions their
// tokens began, instead of leaving the targets fenced until the tier's
// build deadline.
func TestReleaseAbortsUnrecordedTxn(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table, prefix = "rel", "/thaw-test/rel"
	parts := []string{e.partitionOf("2024-01-02"), e.partitionOf("2024-01-03")}
	cfg := e.configAt([]*policies.Policy{twoDayPolicy(t, "rel", table)}, prefix)
	bl := &beginThenDeposed{BulkLoader: cfg.BulkLoad}
	cfg.BulkLoad = bl
	first := e.promoter(cfg)
	_, _ = first.Reconcile(ctx) // deposed: errors expected
	_ = first.Drain(ctx)
	if bl.n.Load() == 0 {
		t.Fatal("setup: no Begin reached the tier")
	}
	for _, part := range parts {
		st, _, err := e.bl.GetInProgress(ctx, bulkload.Target{Database: "shop", Table: table, Partition: part})
		if err != nil || st.State != bulkload.Begun {
			t.Fatalf("setup: %s: %v %v, want a BEGUN transaction", part, st, err)
		}
	}
	for part, r := range recordsOf(t, first, table) {
		if r.Phase != promoter.PhasePlanned || r.TxnID != "" {
			t.Fatalf("setup: %s (%s) %s with transaction %q, want planned without one", r.ID, part, r.Phase, r.TxnID)
		}
	}

	next := e.promoter(e.configAt(nil, prefix))
	if err := next.Resume(ctx); !errors.Is(err, promoter.ErrUnknownPolicy) {
		t.Fatalf("resume: %v, want the released records' ErrUnknownPolicy", err)
	}
	for part, r := range recordsOf(t, next, table) {
		if r.Phase != promoter.PhaseAborted || !strings.Contains(r.Error, "is no longer configured") {
			t.Fatalf("%s (%s): %s (%q), want aborted", r.ID, part, r.Phase, r.Error)
		}
	}
	e.noTxnInProgress(table, parts)
}

// noSnapshotLake answers Describe as for a lake table that has no snapshot
// (created empty, or dropped and created again under its name since a
// request for one of its partitions was stored); everything else is the
// real sample lake's.
type noSnapshotLake struct{ *lake.Lake }

func (l noSnapshotLake) Describe(ctx context.Context, name string) (*lake.TableInfo, error) {
	info, err := l.Lake.Describe(ctx, name)
	if err != nil {
		return nil, err
	}
	c := *info
	c.CurrentSnapshotID = nil
	return &c, nil
}

// TestPromoteTableWithoutSnapshot: promoting (or requesting) a partition
// of a lake table that has no snapshot is ErrNotFound, not a panic (in a
// queue worker it killed the daemon, and again at every start while the
// stored request stayed).
func TestPromoteTableWithoutSnapshot(t *testing.T) {
	e := newEnv(t, 200)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	cfg := e.config([]*policies.Policy{windowPolicy(t, "w", "ev", "3d", "    ")})
	cfg.Lakes = map[string]promoter.Lake{"default": noSnapshotLake{e.lake}}
	p := e.promoter(cfg)
	if _, err := p.Promote(t.Context(), promoter.Key{Policy: "w", Partition: "2024-01-05"}); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("promote: %v, want ErrNotFound", err)
	}
	if _, err := p.Request(t.Context(), promoter.Request{Policy: "w", Partition: "2024-01-05"}); !errors.Is(err, promoter.ErrNotFound) {
		t.Fatalf("request: %v, want ErrNotFound", err)
	}
}
