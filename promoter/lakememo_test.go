package promoter_test

import (
	"context"
	"strings"
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

// countingEnv is an env on 2024-01-08 with a promoter of a window policy
// (name, last) into shop.name that reads the lake through a countingLake.
func countingEnv(t *testing.T, name, last string) (*env, *countingLake, *promoter.Promoter) {
	e := newEnv(t, 400)
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	lk := &countingLake{Lake: e.lake}
	cfg := e.configAt([]*policies.Policy{windowPolicy(t, name, name, last, "")}, "/thaw-test/"+name)
	cfg.Lakes = map[string]promoter.Lake{"default": lk}
	return e, lk, e.promoter(cfg)
}

// TestLakePartitionsListedOncePerSnapshot: promoting a table's partitions
// one by one lists the lake's partitions once for the snapshot, not once
// for each promotion; another current snapshot is listed anew.
func TestLakePartitionsListedOncePerSnapshot(t *testing.T) {
	e, lk, p := countingEnv(t, "memo", "3d")
	ctx := t.Context()
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

// TestRequestSupersededByLakeCommit: a lake commit to the requested
// partition between the request and its turn gives the target another
// promotion id; the id the request was answered with gets a note naming
// the new one, instead of never getting a record.
func TestRequestSupersededByLakeCommit(t *testing.T) {
	e, lk, p := countingEnv(t, "moved", "1d")
	ctx := t.Context()

	// The request sees the lake one snapshot back; the last snapshot (a
	// position delete) changed every partition.
	lk.current.Store(e.sample.Snapshots[len(e.sample.Snapshots)-2].ID)
	part := e.partitionOf("2024-01-03")
	items, err := p.Request(ctx, promoter.Request{Table: "shop.moved", Partition: part})
	if err != nil || len(items) != 1 || items[0].Action != promoter.ActionPromote {
		t.Fatalf("request: %+v %v", items, err)
	}
	requested := items[0].PromotionID
	lk.current.Store(0)
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID == requested || recs[0].Phase != promoter.PhaseCommitted {
		t.Fatalf("records %+v, want one committed promotion of the current data (requested %s)", recs, requested)
	}
	s, ok := p.Skipped(requested)
	if !ok || !strings.HasPrefix(s.Reason, "the lake partition changed after the request (the lake is at snapshot ") ||
		!strings.HasSuffix(s.Reason, "): its current data is promotion "+recs[0].ID) {
		t.Fatalf("the requested id %s: note %+v %t, want one naming %s", requested, s, ok, recs[0].ID)
	}
	if _, ok := p.Skipped(recs[0].ID); ok {
		t.Fatalf("the promotion that committed has a skip note")
	}
}
