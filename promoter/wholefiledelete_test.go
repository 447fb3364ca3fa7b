package promoter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// TestWholeFileDeleteMakesStale: a delete that removes a whole data file of
// a promoted partition (adding none) changes the partition's data, and so
// its identity: the plan says stale, also after the delete's snapshot
// expired. It said "already promoted" while the tier held the deleted
// rows.
func TestWholeFileDeleteMakesStale(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC))
	day := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: day, FirstID: 1_000_000, Rows: 50, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: day, FirstID: 2_000_000, Rows: 50, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	pol := windowPolicy(t, "events-wfd", "events", "3d", "")
	p := e.promoter(e.config([]*policies.Policy{pol}))
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	part := e.partitionOf("2024-01-08")
	before, _ := p.Plan(ctx, pol.Name())
	var src int64
	for _, it := range before.Items {
		if it.Key.Partition == part {
			src = it.SourceSnapshotID
			if !strings.HasPrefix(it.Reason, "already promoted") {
				t.Fatalf("before the delete: %s %q", it.Action, it.Reason)
			}
		}
	}
	ids := make([]int64, 50)
	for i := range ids {
		ids[i] = 1_000_000 + int64(i)
	}
	del, err := lake.SampleDelete(ctx, e.sample, ids)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.lakeRowCount("2024-01-08"); n != 50 {
		t.Fatalf("the day holds %d rows after the delete, want 50", n)
	}
	check := func(stage string) {
		t.Helper()
		after, err := p.Plan(ctx, pol.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range after.Items {
			if it.Key.Partition != part {
				continue
			}
			if it.SourceSnapshotID != del.ID || !strings.HasPrefix(it.Reason, "stale: ") {
				t.Errorf("%s: the lake partition lost 50 rows (snapshot %d): source snapshot %d (was %d), %q", stage, del.ID, it.SourceSnapshotID, src, it.Reason)
			}
		}
	}
	check("after the delete")
	// Also once the delete's snapshot expired (another day's append is
	// current): the removal counted only while its snapshot was in the
	// metadata, and a promoter started then (nothing cached) said
	// "already promoted" again.
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: day.AddDate(0, 0, 1), FirstID: 3_000_000, Rows: 5, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	e.expireAllButCurrent(t)
	p = e.promoter(e.config([]*policies.Policy{pol}))
	check("after the delete's snapshot expired")
}
