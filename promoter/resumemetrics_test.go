package promoter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// failCommittedLedger refuses every write of a committed record (an etcd
// outage right after the tier committed), without storing it.
type failCommittedLedger struct{ promoter.Ledger }

func (l failCommittedLedger) Update(ctx context.Context, r promoter.Record) (promoter.Record, error) {
	if r.Phase == promoter.PhaseCommitted {
		return promoter.Record{}, errors.New("injected: etcd unavailable")
	}
	return l.Ledger.Update(ctx, r)
}

// TestCommitSettledByResumeIsCounted: a promotion whose commit the tier
// made but whose committed record could not be written is settled by the
// next promoter's Resume (Status: COMMITTED), and counted once in
// thaw_promoter_promotions_total{outcome="committed"} and
// thaw_promoter_rows_total; neither promoter counted it (aborts on the
// same resume path were).
func TestCommitSettledByResumeIsCounted(t *testing.T) {
	e := newEnv(t, 600)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table = "resume_metrics"
	pols := []*policies.Policy{daysPolicy(t, "resume-metrics", table, "2024-01-02")}
	prefix := "/thaw-test/" + table

	reg1 := prometheus.NewRegistry()
	cfg1 := e.configAt(pols, prefix)
	cfg1.Ledger = failCommittedLedger{cfg1.Ledger}
	cfg1.Registry = reg1
	cfg1.CommitBudget = 5 * time.Second
	first := e.promoter(cfg1)
	if _, err := first.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	_ = first.Drain(ctx)
	recs, err := first.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Phase != promoter.PhaseCommitting {
		t.Fatalf("want one record left committing, got %+v", recs)
	}

	reg2 := prometheus.NewRegistry()
	cfg2 := e.configAt(pols, prefix)
	cfg2.Registry = reg2
	events := &eventLog{}
	cfg2.Status = events
	second := e.promoter(cfg2)
	if err := second.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	recs, err = second.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Phase != promoter.PhaseCommitted || recs[0].Rows == 0 {
		t.Fatalf("want one committed record with rows, got %+v", recs)
	}
	if got := phases(events.of(t, recs[0].ID)); got != "committed" {
		t.Errorf("resume's events %q, want %q", got, "committed")
	}
	c1 := metricValue(t, reg1, "thaw_promoter_promotions_total", "outcome", "committed")
	c2 := metricValue(t, reg2, "thaw_promoter_promotions_total", "outcome", "committed")
	rows := metricValue(t, reg1, "thaw_promoter_rows_total", "policy", "resume-metrics") +
		metricValue(t, reg2, "thaw_promoter_rows_total", "policy", "resume-metrics")
	if c1+c2 != 1 || rows != float64(recs[0].Rows) {
		t.Fatalf("committed promotion counted %v+%v times (want 1), rows_total %v (want %d)", c1, c2, rows, recs[0].Rows)
	}
}
