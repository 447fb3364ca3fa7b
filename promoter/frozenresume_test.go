package promoter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// frozenStatus reports every BEGUN transaction with its manifest frozen
// (a Commit of the previous promoter reached the coordinator, which is
// still deciding it: a window too short to hold with the real tier) and
// records the Aborts it is asked for.
type frozenStatus struct {
	promoter.BulkLoader
	mu      sync.Mutex
	aborted []string
}

func (f *frozenStatus) Status(ctx context.Context, h bulkload.Handle) (bulkload.Status, error) {
	st, err := f.BulkLoader.Status(ctx, h)
	if err == nil && st.State == bulkload.Begun {
		st.ManifestFrozen = true
	}
	return st, err
}

func (f *frozenStatus) Abort(ctx context.Context, h bulkload.Handle) (bulkload.Status, error) {
	f.mu.Lock()
	f.aborted = append(f.aborted, h.TxnID)
	f.mu.Unlock()
	return f.BulkLoader.Abort(ctx, h)
}

// TestResumeAwaitsFrozenCommit: a promoter dies with its record committing
// while the coordinator decides its Commit (Status: BEGUN, manifest
// frozen). The next promoter's Resume waits for the decision, with its
// policy (and a transient tier error on the rebuild path it used to take)
// and without it (release): it never aborts a commit being decided, and
// the record stays committing while the decision is pending. A promoter
// that then finds the transaction BEGUN without a frozen manifest rebuilds
// and commits it.
func TestResumeAwaitsFrozenCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy bool
	}{{"policy", true}, {"policy-removed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 600)
			ctx := t.Context()
			e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
			const table = "frz"
			prefix := "/thaw-test/frz-" + tc.name
			pols := []*policies.Policy{daysPolicy(t, "frz", table, "2024-01-02")}
			if _, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseCommitting); killed != 1 {
				t.Fatalf("setup: killed %d promotions, want 1", killed)
			}
			cfg := e.configAt(pols, prefix)
			if !tc.policy {
				cfg = e.configAt(nil, prefix)
			}
			ft := &unavailableSchemaTier{Tier: cfg.Tier}
			ft.failSchema.Store(1)
			cfg.Tier = ft
			fs := &frozenStatus{BulkLoader: cfg.BulkLoad}
			cfg.BulkLoad = fs
			cfg.CommitBudget = time.Second
			next := e.promoter(cfg)
			err := next.Resume(ctx)
			t.Logf("resume: %v", err)
			fs.mu.Lock()
			aborted := fs.aborted
			fs.mu.Unlock()
			if len(aborted) > 0 {
				t.Fatalf("resume aborted %v, whose Status said BEGUN with the manifest frozen (a commit being decided)", aborted)
			}
			if err == nil {
				t.Fatal("resume: no error, want the commit outcome pending")
			}
			for _, r := range recordsOf(t, next, table) {
				if r.Phase != promoter.PhaseCommitting {
					t.Fatalf("%s: %s, want committing while the commit is decided", r.ID, r.Phase)
				}
			}
			if !tc.policy {
				return
			}
			// The transaction is BEGUN and not frozen after all (the
			// first promoter died before its Commit): rebuilt, committed.
			last := e.promoter(e.configAt(pols, prefix))
			if err := last.Resume(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			for _, r := range recordsOf(t, last, table) {
				if r.Phase != promoter.PhaseCommitted {
					t.Fatalf("%s: %s (%q), want committed", r.ID, r.Phase, r.Error)
				}
			}
		})
	}
}
