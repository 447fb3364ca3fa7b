package promoter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// oneDayPolicy promotes 2024-01-02 into shop.table.
func oneDayPolicy(t *testing.T, name, table string) *policies.Policy {
	return daysPolicy(t, name, table, "2024-01-02")
}

// holdAt returns an AfterPhase hook that holds every promotion reaching
// phase until release is closed; reached is closed when the first does.
func holdAt(phase promoter.Phase) (hook func(context.Context, promoter.Record) error, reached, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook = func(_ context.Context, r promoter.Record) error {
		if r.Phase == phase {
			once.Do(func() { close(reached) })
			<-release
		}
		return nil
	}
	return hook, reached, release
}

// abortRecorder records the Aborts a promoter sends.
type abortRecorder struct {
	promoter.BulkLoader
	mu     sync.Mutex
	aborts []string
}

func (a *abortRecorder) Abort(ctx context.Context, h bulkload.Handle) (bulkload.Status, error) {
	a.mu.Lock()
	a.aborts = append(a.aborts, h.TxnID)
	a.mu.Unlock()
	return a.BulkLoader.Abort(ctx, h)
}

// TestDeposedPromoterLeavesTheTierAlone: promoter A is building when its
// term ends; promoter B is elected, resumes the record (same caller token:
// same transaction T1) and is about to commit. A's build then fails with
// its cancelled context (context.Canceled, not a fenced error): A aborted
// T1 before its fenced ledger write failed, and B's commit of the
// transaction it resumed failed. A deposed promoter stops "without
// touching the tier again" (docs/promoter.md).
func TestDeposedPromoterLeavesTheTierAlone(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table, prefix = "dep", "/thaw-test/dep"
	part := e.partitionOf("2024-01-02")
	pols := []*policies.Policy{oneDayPolicy(t, "dep", table)}
	cli := e.tier.Etcd()

	leadA, err := fencing.Elect(ctx, cli, prefix+"/leader", "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfgA := e.configAt(pols, prefix)
	cfgA.Ledger = promoter.NewEtcdLedger(cli, prefix, leadA)
	cfgA.LakePollInterval, cfgA.LedgerRetention = -1, -1
	recA := &abortRecorder{BulkLoader: cfgA.BulkLoad}
	cfgA.BulkLoad = recA
	var reachedA, releaseA chan struct{}
	cfgA.Hooks.AfterPhase, reachedA, releaseA = holdAt(promoter.PhaseBuilding)
	pA := e.promoter(cfgA)
	doneA := make(chan error, 1)
	go func() { doneA <- pA.Run(leadA.Context()) }()
	<-reachedA
	recs := recordsOf(t, pA, table)
	t1 := recs[part].TxnID
	t.Logf("A building with %s", t1)

	// A's term ends (as when its lease is lost); B takes over.
	if err := leadA.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	leadB, err := fencing.Elect(ctx, cli, prefix+"/leader", "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = leadB.Resign(context.Background()) }()
	cfgB := e.configAt(pols, prefix)
	cfgB.Ledger = promoter.NewEtcdLedger(cli, prefix, leadB)
	cfgB.LakePollInterval, cfgB.LedgerRetention, cfgB.ReconcileInterval = -1, -1, -1
	var reachedB, releaseB chan struct{}
	cfgB.Hooks.AfterPhase, reachedB, releaseB = holdAt(promoter.PhaseCommitting)
	pB := e.promoter(cfgB)
	resumed := make(chan error, 1)
	go func() { resumed <- pB.Resume(ctx) }()
	<-reachedB
	t.Logf("B resumed and is committing %s", recordsOf(t, pB, table)[part].TxnID)

	// A wakes up: its term is over.
	close(releaseA)
	errA := <-doneA
	t.Logf("A stopped: %v", errA)
	close(releaseB)
	if err := <-resumed; err != nil {
		t.Logf("B resume: %v", err)
	}
	r := recordsOf(t, pB, table)[part]
	recA.mu.Lock()
	aborts := append([]string(nil), recA.aborts...)
	recA.mu.Unlock()
	if len(aborts) > 0 {
		t.Errorf("deposed promoter A sent Abort(%v) after its term ended; B's resumed transaction %s was killed", aborts, t1)
	}
	if r.Phase != promoter.PhaseCommitted || r.Attempt != 1 {
		t.Errorf("B: %s at attempt %d (%q), want committed at attempt 1 (the transaction it resumed)", r.Phase, r.Attempt, r.Error)
	}
}

// lostResumedBegin's first Begin reaches the tier and its answer is lost
// to a shutdown (the promoter's context is cancelled).
type lostResumedBegin struct {
	promoter.BulkLoader
	cancel func()
	n      atomic.Int32
	txn    atomic.Value
}

func (c *lostResumedBegin) Begin(ctx context.Context, tg bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error) {
	if c.n.Add(1) == 1 {
		bc, err := c.BulkLoader.Begin(context.WithoutCancel(ctx), tg, token, o)
		if err != nil {
			return nil, err
		}
		c.txn.Store(bc.Handle().TxnID)
		c.cancel()
		<-ctx.Done()
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w", tg, ctx.Err())
	}
	return c.BulkLoader.Begin(ctx, tg, token, o)
}

// TestLostBeginOfResumedRecord: a record building with T1, whose
// transaction the tier has aborted and forgotten, is resumed; Begin with its
// token begins a new transaction T2, and the answer is lost (shutdown). The
// attempt aborted only T1 (NotFound, ignored): T2 was left BEGUN, holding
// the target until the tier's build deadline. A Begin of unknown outcome now
// learns the token's transaction (Begin again) and aborts it.
func TestLostBeginOfResumedRecord(t *testing.T) {
	e := forgetfulEnv(t)
	ctx := t.Context()
	const table, prefix = "lbr", "/thaw-test/lbr"
	part := e.partitionOf("2024-01-02")
	pols := []*policies.Policy{oneDayPolicy(t, "lbr", table)}
	first, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseBuilding)
	if killed != 1 {
		t.Fatalf("setup: killed %d", killed)
	}
	r := recordsOf(t, first, table)[part]
	if _, err := e.bl.Abort(ctx, bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}); err != nil {
		t.Fatal(err)
	}
	e.waitForgotten(r)

	cfg := e.configAt(pols, prefix)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lb := &lostResumedBegin{BulkLoader: cfg.BulkLoad, cancel: cancel}
	cfg.BulkLoad = lb
	next := e.promoter(cfg)
	err := next.Resume(rctx)
	t.Logf("resume: %v", err)
	t2, _ := lb.txn.Load().(string)
	r = recordsOf(t, next, table)[part]
	t.Logf("T1=%s T2 (begun by the lost Begin)=%s; record %s attempt %d txn %s", r.TxnID, t2, r.Phase, r.Attempt, r.TxnID)
	st, _, gerr := e.bl.GetInProgress(ctx, r.Target())
	if gerr == nil && st.Handle.TxnID != "" && !st.State.Terminal() {
		t.Errorf("after the record was aborted (%s, %q), transaction %s is still %s on %s", r.Phase, r.Error, st.Handle.TxnID, st.State, r.Target())
	}
	// The next promoter's attempt meets the leftover transaction.
	third := e.promoter(e.configAt(pols, prefix))
	pr, perr := third.Promote(ctx, promoter.Key{Policy: "lbr", Partition: part})
	if perr != nil || pr.Phase != promoter.PhaseCommitted {
		t.Errorf("next promoter: %s at attempt %d: %v, want committed", pr.Phase, pr.Attempt, perr)
	}
}
