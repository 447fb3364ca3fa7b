package promoter_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// TestInterruptedByEveryRunFails: a promotion whose every build brings its
// promoter down (Hooks.BeforeBuild crashes each run of one target's
// build, as arrow-go's panics on a damaged lake file do) is resumed by
// the next MaxResumes promoter starts, each counting itself in the ledger
// first, and failed by the start after them: its transaction aborted, the
// target empty and free, the record failed with ErrInterrupted, not
// retriable, so no reconcile runs it again. The other target of the policy
// is promoted, and a request of the failed partition promotes it afresh
// (its count starts again).
func TestInterruptedByEveryRunFails(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table = "interrupted"
	pols := []*policies.Policy{twoDayPolicy(t, "interrupted", table)}
	prefix := "/thaw-test/" + table
	bad, good := e.partitionOf("2024-01-02"), e.partitionOf("2024-01-03")

	var crashes atomic.Int32
	crashing := func() promoter.Config {
		cfg := e.configAt(pols, prefix)
		cfg.Hooks.BeforeBuild = func(_ context.Context, r promoter.Record) error {
			if r.Partition == bad {
				crashes.Add(1)
				return errKilled
			}
			return nil
		}
		return cfg
	}
	record := func(p *promoter.Promoter) promoter.Record {
		t.Helper()
		recs, err := p.Promotions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Partition == bad {
				return r
			}
		}
		t.Fatalf("no record of %s in %+v", bad, recs)
		return promoter.Record{}
	}
	stored := func(id string) []byte {
		t.Helper()
		b, _ := rawValue(t, e.tier.Etcd(), prefix+"/promotions/"+id)
		return b
	}

	first := e.reconciled(ctx, t, crashing())
	r := record(first)
	if crashes.Load() != 1 || r.Phase != promoter.PhaseBuilding || r.Resumes != 0 {
		t.Fatalf("after the first run: %d crashes, record %s with %d resumes", crashes.Load(), r.Phase, r.Resumes)
	}
	e.checkTier(table, good, e.lakeRows("2024-01-03"))

	// Each start resumes it, counting itself before the build.
	txn := r.TxnID
	for n := 1; n <= promoter.MaxResumes; n++ {
		p := e.promoter(crashing())
		if err := p.Resume(ctx); !errors.Is(err, errKilled) || errors.Is(err, promoter.ErrInterrupted) {
			t.Fatalf("resume %d: %v", n, err)
		}
		r = record(p)
		if got := crashes.Load(); got != int32(n+1) || r.Phase != promoter.PhaseBuilding || r.Resumes != n || r.TxnID != txn || r.Attempt != 1 {
			t.Fatalf("after resume %d: %d crashes, record %+v", n, got, r)
		}
		if b := stored(r.ID); !bytes.HasPrefix(b, []byte(`{"version":2,`)) || !bytes.Contains(b, []byte(`"resumes":`)) {
			t.Fatalf("stored record with resumes: %s", b)
		}
	}

	// The next start fails it without building it again.
	p := e.promoter(crashing())
	err := p.Resume(ctx)
	if !errors.Is(err, promoter.ErrInterrupted) {
		t.Fatalf("resume after %d resumes: %v, want ErrInterrupted", promoter.MaxResumes, err)
	}
	r = record(p)
	if crashes.Load() != promoter.MaxResumes+1 {
		t.Fatalf("%d crashes: the failed promotion was built again", crashes.Load())
	}
	if r.Phase != promoter.PhaseFailed || r.Retriable || promoter.IsRetriable(err) ||
		!strings.Contains(r.Error, "promoter starts in a row") || r.TxnID != txn {
		t.Fatalf("failed record %+v", r)
	}
	e.noTxnInProgress(table, []string{bad, good})
	e.checkTier(table, bad, nil)
	e.checkTier(table, good, e.lakeRows("2024-01-03"))

	// No reconcile runs it again: the plan says it failed.
	rep, err := p.Reconcile(ctx)
	if err != nil || rep.Enqueued != 0 {
		t.Fatalf("reconcile after the failure: %+v %v", rep, err)
	}
	plan, err := p.Plan(ctx, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		if it.Key.Partition == bad && (it.Action != promoter.ActionSkip || !strings.HasPrefix(it.Reason, "failed: ")) {
			t.Fatalf("plan of the failed partition: %+v", it)
		}
	}

	// A request promotes it afresh (the damaged file replaced, say): a new
	// attempt whose count starts at zero, stored at version 1 again.
	healthy := e.promoter(e.configAt(pols, prefix))
	nr, err := healthy.Promote(ctx, promoter.Key{Policy: "interrupted", Partition: bad})
	if err != nil || nr.Phase != promoter.PhaseCommitted || nr.Attempt != 2 || nr.Resumes != 0 {
		t.Fatalf("promote after the failure: %+v %v", nr, err)
	}
	if b := stored(nr.ID); !bytes.HasPrefix(b, []byte(`{"version":1,`)) || bytes.Contains(b, []byte(`"resumes"`)) {
		t.Fatalf("stored record after the new attempt: %s", b)
	}
	e.checkTier(table, bad, e.lakeRows("2024-01-02"))
}
