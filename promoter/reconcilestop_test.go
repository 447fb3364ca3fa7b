package promoter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// TestReconcileAfterRunEnds: a reconcile handled (as a Kafka control event
// is) once Run's term ended fails with ErrClosed instead of reporting the
// targets enqueued that the closed queue dropped: the trigger would commit
// the event, and with reconcile_interval < 0 nothing would redo it.
func TestReconcileAfterRunEnds(t *testing.T) {
	e := newEnv(t, 200)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "w", "events", "3d", "")
	cfg := e.config([]*policies.Policy{pol})
	cfg.ReconcileInterval, cfg.LakePollInterval, cfg.LedgerRetention = -1, -1, -1
	p := e.promoter(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitFor(t, "ready", p.Ready)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rep, err := p.ReconcilePolicy(t.Context(), pol.Name())
	if !errors.Is(err, promoter.ErrClosed) || !promoter.IsRetriable(err) {
		t.Fatalf("reconcile after Run: %+v, %v; want ErrClosed", rep, err)
	}
	if _, err := p.LakeCommitted(t.Context(), "default", "lake.events"); err != nil {
		t.Fatalf("lake commit of a table no onLakeCommit policy follows: %v", err)
	}
}

// failingPartitions fails the first n Partitions calls.
type failingPartitions struct {
	promoter.Lake
	n atomic.Int32
}

func (f *failingPartitions) Partitions(ctx context.Context, name string, snapshotID *int64) ([]lake.PartitionStats, error) {
	if f.n.Add(-1) >= 0 {
		return nil, errors.New("injected: the catalog is unwell")
	}
	return f.Lake.Partitions(ctx, name, snapshotID)
}

// TestLakePollRetriesAFailedReconcile: a lake commit whose reconcile
// failed (the catalog answered an error) is reconciled again at the next
// poll; it was marked seen before the reconcile, and was promoted only by
// the next lake commit or periodic reconcile (none here).
func TestLakePollRetriesAFailedReconcile(t *testing.T) {
	e := newEnv(t, 200)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "w", "events", "1d", "  triggers:\n    onLakeCommit: true\n")
	cfg := e.config([]*policies.Policy{pol})
	fl := &failingPartitions{Lake: e.lake}
	fl.n.Store(2)
	cfg.Lakes = map[string]promoter.Lake{"default": fl}
	cfg.ReconcileInterval, cfg.LakePollInterval, cfg.LedgerRetention = -1, 50*time.Millisecond, -1
	p := e.promoter(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "the window's day promoted after two failed reconciles", func() bool {
		recs, err := p.Promotions(ctx)
		return err == nil && len(recs) == 1 && recs[0].Phase == promoter.PhaseCommitted
	})
	if fl.n.Load() >= 0 {
		t.Fatalf("the injected failures were not all seen: %d left", fl.n.Load())
	}
}
