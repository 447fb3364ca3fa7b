package promoter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

var errKilled = errors.New("killed by the test")

// killedAt runs a promoter of cfg that dies with every promotion reaching
// phase (its AfterPhase hook fails them), reconciles once and drains. It
// returns the promoter and how many promotions it killed.
func (e *env) killedAt(ctx context.Context, t *testing.T, cfg promoter.Config, phase promoter.Phase) (*promoter.Promoter, int32) {
	t.Helper()
	var killed atomic.Int32
	cfg.Hooks.AfterPhase = func(_ context.Context, r promoter.Record) error {
		if r.Phase == phase {
			killed.Add(1)
			return errKilled
		}
		return nil
	}
	return e.reconciled(ctx, t, cfg), killed.Load()
}

// reconciled returns a promoter of cfg that has reconciled once and
// drained its queue.
func (e *env) reconciled(ctx context.Context, t *testing.T, cfg promoter.Config) *promoter.Promoter {
	t.Helper()
	p := e.promoter(cfg)
	e.reconcile(ctx, t, p)
	return p
}

// reconcile reconciles p's policies and drains its queue.
func (e *env) reconcile(ctx context.Context, t *testing.T, p *promoter.Promoter) {
	t.Helper()
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

// twoDayPolicy promotes 2024-01-02 and 2024-01-03 into shop.table.
func twoDayPolicy(t *testing.T, name, table string) *policies.Policy {
	return daysPolicy(t, name, table, "2024-01-02", "2024-01-03")
}

// daysPolicy promotes the given days of lake.events into shop.table, all
// at once.
func daysPolicy(t *testing.T, name, table string, days ...string) *policies.Policy {
	return policy(t, fmt.Sprintf(`apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: %s
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: %s
    buckets: 2
    replicationFactor: 1
  selection:
    partitions:
      where:
        event_day:
          in: ["%s"]
  limits:
    concurrentPromotions: %d
    buildWorkers: 1
    memory: 8MiB
`, name, table, strings.Join(days, `", "`), len(days)))
}

// TestKillAndResume kills the promoter at each phase (Hooks.AfterPhase
// fails, as a crash would: no abort, no ledger write) and starts a new one
// on the same etcd and tier: every target ends promoted exactly once, with
// the lake's rows, and no transaction is left in progress. A graceful
// shutdown in the middle of the builds releases the targets (aborted,
// ACTIVE and empty), and the next promoter promotes them.
func TestKillAndResume(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	days := []string{"2024-01-02", "2024-01-03"}
	parts := []string{e.partitionOf(days[0]), e.partitionOf(days[1])}

	check := func(t *testing.T, p *promoter.Promoter, table string) []promoter.Record {
		t.Helper()
		recs, err := p.Promotions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mine []promoter.Record
		for _, r := range recs {
			if r.Table == table {
				mine = append(mine, r)
			}
		}
		committed := committedByPartition(t, mine, table)
		if len(mine) != 2 || len(committed) != 2 {
			t.Fatalf("%s: %d records, %d committed: %+v", table, len(mine), len(committed), mine)
		}
		for i, d := range days {
			e.checkTier(table, parts[i], e.lakeRows(d))
		}
		e.noTxnInProgress(table, parts)
		return mine
	}

	for _, phase := range []promoter.Phase{promoter.PhasePlanned, promoter.PhaseBegun, promoter.PhaseBuilding, promoter.PhaseCommitting} {
		t.Run(string(phase), func(t *testing.T) {
			table := "kill_" + string(phase)
			pols := []*policies.Policy{twoDayPolicy(t, "kill-"+string(phase), table)}
			prefix := "/thaw-test/" + table
			first, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), phase)
			if killed != 2 {
				t.Fatalf("killed %d promotions at %s, want 2", killed, phase)
			}
			recs, err := first.Promotions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range recs {
				if r.Table == table {
					n++
					if r.Phase != phase {
						t.Fatalf("record %s at %s, want %s (the kill wrote to the ledger)", r.ID, r.Phase, phase)
					}
					// Killed once its build was counted (building), the
					// build is interrupted; else none began or it returned.
					if want := map[bool]int{true: 1}[phase == promoter.PhaseBuilding]; r.InterruptedBuilds != want {
						t.Fatalf("record %s killed at %s: %d interrupted builds, want %d", r.ID, phase, r.InterruptedBuilds, want)
					}
				}
			}
			if n != 2 {
				t.Fatalf("%d records of %s", n, table)
			}

			// The restart: a new promoter on the same etcd and tier.
			second := e.promoter(e.configAt(pols, prefix))
			if err := second.Resume(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			mine := check(t, second, table)
			for _, r := range mine {
				if r.Attempt != 1 {
					t.Errorf("%s: attempt %d after resuming from %s, want 1 (the same transaction)", r.ID, r.Attempt, phase)
				}
				if r.InterruptedBuilds != 0 {
					t.Errorf("%s: committed with %d interrupted builds (a commit clears them)", r.ID, r.InterruptedBuilds)
				}
			}
			// A reconcile after the resume has nothing to do.
			rep, err := second.Reconcile(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Enqueued != 0 || rep.Promoted != 2 {
				t.Fatalf("reconcile after resume: %+v", rep)
			}
		})
	}

	t.Run("aborted from outside", func(t *testing.T) {
		// An operator aborts the transactions while they build (thaw
		// bulkload abort): the commits are refused, the attempts are
		// recorded as aborted by the tier, retriable, and the retries
		// promote the targets as second attempts.
		const table = "outside"
		pols := []*policies.Policy{twoDayPolicy(t, "outside", table)}
		cfg := e.configAt(pols, "/thaw-test/outside")
		var aborted atomic.Int32
		var mu sync.Mutex
		var recorded []promoter.Record // the attempts recorded as aborted
		cfg.Hooks.AfterPhase = func(ctx context.Context, r promoter.Record) error {
			switch {
			case r.Phase == promoter.PhaseAborted:
				mu.Lock()
				recorded = append(recorded, r)
				mu.Unlock()
			case r.Phase == promoter.PhaseBuilding && r.Attempt == 1:
				st, err := e.bl.Abort(ctx, bulkload.Handle{Target: r.Target(), TxnID: r.TxnID})
				if err != nil || st.State != bulkload.Aborted {
					return fmt.Errorf("abort %s: %v %v", r.TxnID, st.State, err)
				}
				aborted.Add(1)
			}
			return nil
		}
		p := e.reconciled(ctx, t, cfg)
		if aborted.Load() != 2 {
			t.Fatalf("aborted %d transactions from outside, want 2", aborted.Load())
		}
		for _, r := range check(t, p, table) {
			if r.Attempt != 2 {
				t.Errorf("%s: attempt %d, want 2 (attempt 1 was aborted from outside)", r.ID, r.Attempt)
			}
		}
		if len(recorded) != 2 {
			t.Fatalf("%d attempts recorded as aborted, want 2: %+v", len(recorded), recorded)
		}
		for _, r := range recorded {
			if r.Attempt != 1 || !r.Retriable || !strings.Contains(r.Error, "aborted by the tier: ABORTED_BY_CALLER") {
				t.Errorf("the aborted attempt of %s: attempt %d, retriable %t, error %q", r.ID, r.Attempt, r.Retriable, r.Error)
			}
		}
	})

	t.Run("reconcile while running", func(t *testing.T) {
		// A reconcile while the policy's promotions build counts them as
		// running, neither enqueued again nor skipped.
		const table = "busy"
		pols := []*policies.Policy{twoDayPolicy(t, "busy", table)}
		cfg := e.configAt(pols, "/thaw-test/busy")
		var p *promoter.Promoter
		var mu sync.Mutex
		var reps []promoter.ReconcileReport
		cfg.Hooks.AfterPhase = func(ctx context.Context, r promoter.Record) error {
			if r.Phase != promoter.PhaseBuilding {
				return nil
			}
			rep, err := p.ReconcilePolicy(ctx, "busy")
			mu.Lock()
			reps = append(reps, rep)
			mu.Unlock()
			return err
		}
		p = e.promoter(cfg)
		e.reconcile(ctx, t, p)
		check(t, p, table)
		if len(reps) != 2 {
			t.Fatalf("%d reconciles while building, want 2", len(reps))
		}
		for _, rep := range reps {
			if rep.Selected != 2 || rep.Running < 1 || rep.Enqueued != 0 || rep.Skipped != 0 || rep.Running+rep.Promoted != 2 {
				t.Errorf("reconcile while building: %+v", rep)
			}
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		const table = "shutdown"
		pols := []*policies.Policy{twoDayPolicy(t, "shutdown", table)}
		const prefix = "/thaw-test/shutdown"
		cfg := e.configAt(pols, prefix)
		cfg.LakePollInterval = -1
		var mu sync.Mutex
		building := map[string]bool{}
		cfg.Hooks.AfterPhase = func(ctx context.Context, r promoter.Record) error {
			if r.Phase != promoter.PhaseBuilding {
				return nil
			}
			mu.Lock()
			building[r.ID] = true
			mu.Unlock()
			<-ctx.Done() // hold the build until shutdown
			return nil
		}
		p := e.promoter(cfg)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		waitFor(t, "both promotions building", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(building) == 2
		})
		for id := range building {
			if pr, ok := p.Progress(id); !ok || pr.Phase != promoter.PhaseBuilding {
				t.Errorf("progress of %s: %+v %t", id, pr, ok)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		recs, err := p.Promotions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tier := tieradapter.New(e.tc)
		for _, r := range recs {
			if r.Table != table {
				continue
			}
			if r.Phase != promoter.PhaseAborted || !strings.HasPrefix(r.Error, "shutdown") || !r.Retriable {
				t.Errorf("after shutdown: %s %s %q", r.ID, r.Phase, r.Error)
			}
			if r.InterruptedBuilds != 0 {
				t.Errorf("after shutdown: %s counts %d interrupted builds (a build the shutdown cut returned)", r.ID, r.InterruptedBuilds)
			}
			empty, err := tier.IsEmpty(ctx, "shop", table, r.Partition)
			if err != nil || !empty {
				t.Errorf("%s after shutdown: empty %t, %v", r.Partition, empty, err)
			}
		}
		e.noTxnInProgress(table, parts)

		next := e.promoter(e.configAt(pols, prefix))
		if err := next.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := next.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Enqueued != 2 {
			t.Fatalf("reconcile after shutdown: %+v", rep)
		}
		if err := next.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		for _, r := range check(t, next, table) {
			if r.Attempt != 2 {
				t.Errorf("%s: attempt %d, want 2", r.ID, r.Attempt)
			}
		}
	})
}
