package promoter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// TestUnselectedUnsettledReconciled: a forced request of a partition the
// policy does not select commits in the tier, and the ledger cannot record
// the commit for a while: the record stays committing. Once the ledger
// takes writes again, the next reconcile settles it. A reconcile planned
// the item "not selected" without looking at its records, and it stayed
// committing until the promoter restarted (its waiter waiting).
func TestUnselectedUnsettledReconciled(t *testing.T) {
	const table = "zzu"
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	cfg := e.configAt([]*policies.Policy{twoDayPolicy(t, table, table)}, "/thaw-test/"+table)
	fl := &failingCommitLedger{Ledger: cfg.Ledger, err: errors.New("etcdserver: request timed out (injected)")}
	cfg.Ledger = fl
	p := e.reconciled(ctx, t, cfg) // 01-02 and 01-03 committed
	fl.failCommitted.Store(1 << 20)
	part := e.partitionOf("2024-01-05")
	if _, err := p.Request(ctx, promoter.Request{Policy: table, Partition: part}); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if r := recordsOf(t, p, table)[part]; r.Phase != promoter.PhaseCommitting {
		t.Fatalf("setup: %s is %s", part, r.Phase)
	}
	fl.failCommitted.Store(0)
	e.reconcile(ctx, t, p)
	plan, err := p.Plan(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if r := recordsOf(t, p, table)[part]; r.Phase != promoter.PhaseCommitted {
		t.Fatalf("%s: %s after a reconcile with the ledger back, want committed (settled through Status)", r.ID, r.Phase)
	}
	for _, it := range plan.Items {
		if it.Key.Partition == part && (it.Action != promoter.ActionSkip || !strings.HasPrefix(it.Reason, "not selected")) {
			t.Errorf("plan item %s once settled: %s %q", part, it.Action, it.Reason)
		}
	}
}
