package promoter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// countingLake counts Partitions calls, and can make Describe report
// another current snapshot (as a lake commit, or a rollback, would).
type countingLake struct {
	promoter.Lake
	partitions atomic.Int32
	current    atomic.Int64 // 0: the lake's own
}

func (l *countingLake) Describe(ctx context.Context, name string) (*lake.TableInfo, error) {
	info, err := l.Lake.Describe(ctx, name)
	if id := l.current.Load(); err == nil && id != 0 {
		info.CurrentSnapshotID = &id
	}
	return info, err
}

func (l *countingLake) Partitions(ctx context.Context, name string, snapshotID *int64) ([]lake.PartitionStats, error) {
	l.partitions.Add(1)
	return l.Lake.Partitions(ctx, name, snapshotID)
}

// TestLakePartitionsListedOncePerSnapshot: promoting a table's partitions
// one by one lists the lake's partitions once for the snapshot, not once
// for each promotion; another current snapshot is listed anew.
func TestLakePartitionsListedOncePerSnapshot(t *testing.T) {
	e := newEnv(t, 400)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	lk := &countingLake{Lake: e.lake}
	cfg := e.configAt([]*policies.Policy{windowPolicy(t, "memo", "memo", "3d", "")}, "/thaw-test/memo")
	cfg.Lakes = map[string]promoter.Lake{"default": lk}
	p := e.promoter(cfg)
	e.reconcile(ctx, t, p)
	recs, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 {
		t.Fatalf("%d promotions: the window must select several partitions", len(recs))
	}
	for _, r := range recs {
		if r.Phase != promoter.PhaseCommitted {
			t.Fatalf("%s: %s %s", r.ID, r.Phase, r.Error)
		}
	}
	if n := lk.partitions.Load(); n != 1 {
		t.Fatalf("a reconcile and %d promotions listed the lake's partitions %d times, want once", len(recs), n)
	}

	// Another current snapshot (an older one here) is listed, and the
	// plan is of it; back at the newest, it is listed again.
	older := e.sample.Snapshots[len(e.sample.Snapshots)-2].ID
	lk.current.Store(older)
	plan, err := p.Plan(ctx, "memo")
	if err != nil {
		t.Fatal(err)
	}
	if plan.LakeSnapshotID != older || lk.partitions.Load() != 2 {
		t.Fatalf("plan at snapshot %d after the lake moved to %d; %d listings, want 2", plan.LakeSnapshotID, older, lk.partitions.Load())
	}
	lk.current.Store(0)
	if _, err := p.Plan(ctx, "memo"); err != nil {
		t.Fatal(err)
	}
	if n := lk.partitions.Load(); n != 3 {
		t.Fatalf("%d listings after the lake moved back, want 3", n)
	}
}
