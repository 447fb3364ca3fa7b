package promoter_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// TestPruneLedger: after real promotions and older attempts of the same
// targets, a prune past the retention deletes the attempts, keeps every
// committed record, and leaves every plan decision as it was; an
// unreadable record stops it; Run prunes at its start.
func TestPruneLedger(t *testing.T) {
	e := newEnv(t, 600)
	ctx := t.Context()
	start := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	e.setNow(start)
	pol := windowPolicy(t, "events-all", "events", "45d", "")
	cfg := e.config([]*policies.Policy{pol})
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	p := e.promoter(cfg)
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	committed, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(committedByPartition(t, committed, "events")) != 7 || len(committed) != 7 {
		t.Fatalf("%d records after the promotions, want 7 committed", len(committed))
	}

	// Earlier attempts of each target from older lake snapshots, as a
	// ledger collects them: aborted, a retriable failure, a lasting one.
	var attempts []string
	for _, c := range committed {
		for i, ph := range []promoter.Phase{promoter.PhaseAborted, promoter.PhaseFailed, promoter.PhaseFailed} {
			snap := c.SourceSnapshotID - 1 - int64(i)
			r := promoter.Record{
				ID:     promoter.PromotionID(c.Catalog, c.LakeTable, c.Database+"."+c.Table, c.Partition, snap),
				Policy: c.Policy, Catalog: c.Catalog, LakeTable: c.LakeTable, Partition: c.Partition,
				SourceSnapshotID: snap, ScanSnapshotID: snap, Database: c.Database, Table: c.Table,
				Attempt: 1, Phase: ph, Buckets: c.Buckets, Error: "earlier attempt", Retriable: i == 1,
				CreatedAt: c.CreatedAt.Add(-time.Duration(i+1) * time.Hour), UpdatedAt: c.CreatedAt.Add(-time.Duration(i+1) * time.Hour),
			}
			r.CallerToken = promoter.CallerToken(r.ID, 1)
			if _, err := cfg.Ledger.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			attempts = append(attempts, r.ID)
		}
	}
	decisions := func() []string {
		t.Helper()
		plan, err := p.Plan(ctx, pol.Name())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range plan.Items {
			out = append(out, it.Key.Partition+": "+string(it.Action)+" ("+it.Reason+")")
		}
		return out
	}
	ids := func() []string {
		t.Helper()
		var out []string
		for _, r := range mustList(t, p) {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	all := ids()

	// Within the retention nothing goes.
	if n, err := p.PruneLedger(ctx); err != nil || n != 0 {
		t.Fatalf("prune within the retention: %d, %v", n, err)
	}
	e.setNow(start.Add(promoter.DefaultLedgerRetention + 24*time.Hour))
	before := decisions()

	// A record this promoter cannot read stops the prune.
	bad := "/thaw-test/promoter/promotions/p-0123456789abcdef"
	if _, err := e.tier.Etcd().Put(ctx, bad, `{"version":99}`); err != nil {
		t.Fatal(err)
	}
	if n, err := p.PruneLedger(ctx); !errors.Is(err, promoter.ErrUnreadable) || n != 0 {
		t.Fatalf("prune with an unreadable record: %d, %v", n, err)
	}
	if _, err := e.tier.Etcd().Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, all) {
		t.Fatalf("the refused prune changed the ledger: %v", got)
	}

	// A key being promoted is left alone; the next pass gets it.
	held := committed[0]
	release := promoter.HoldKey(p, promoter.Key{Policy: pol.Name(), Partition: held.Partition})
	n, err := p.PruneLedger(ctx)
	if err != nil || n != len(attempts)-3 {
		t.Fatalf("prune with %s running: %d, %v; want %d", held.Partition, n, err, len(attempts)-3)
	}
	for _, r := range mustList(t, p) {
		if r.Partition != held.Partition && r.Phase != promoter.PhaseCommitted {
			t.Fatalf("record %s of %s (%s) not pruned", r.ID, r.Partition, r.Phase)
		}
	}
	release()
	if n, err = p.PruneLedger(ctx); err != nil || n != 3 {
		t.Fatalf("prune after the key was released: %d, %v; want 3", n, err)
	}
	var want []string
	for _, c := range committed {
		want = append(want, c.ID)
	}
	slices.Sort(want)
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("after the prune %v, want the committed %v", got, want)
	}
	if after := decisions(); !slices.Equal(after, before) {
		t.Fatalf("plan changed by the prune:\nbefore %q\nafter  %q", before, after)
	}
	if v, _, err := metricvalue.Value(reg, "thaw_promoter_ledger_records_pruned_total", nil); err != nil || v != float64(len(attempts)) {
		t.Fatalf("pruned metric %v (%v), want %d", v, err, len(attempts))
	}
	if n, err := p.PruneLedger(ctx); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v", n, err)
	}

	// Run prunes at its start.
	late := committed[0]
	late.ID = promoter.PromotionID(late.Catalog, late.LakeTable, late.Database+"."+late.Table, late.Partition, 1)
	late.SourceSnapshotID, late.Phase, late.TxnID, late.CommittedAt, late.Revision = 1, promoter.PhaseAborted, "", nil, 0
	late.CreatedAt, late.UpdatedAt = start.Add(-time.Hour), start.Add(-time.Hour)
	late.CallerToken = promoter.CallerToken(late.ID, 1)
	if _, err := cfg.Ledger.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	waitFor(t, "Run to prune", func() bool {
		_, err := cfg.Ledger.Get(ctx, late.ID)
		return errors.Is(err, promoter.ErrNotFound)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("after Run %v, want %v", got, want)
	}
}

// mustList returns the ledger's records.
func mustList(t *testing.T, p *promoter.Promoter) []promoter.Record {
	t.Helper()
	recs, err := p.Promotions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
