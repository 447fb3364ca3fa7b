package promoter_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// TestGroupWholeLakePartitionDeleted: a tier partition (a day) grouping
// the day's lake partition of the old spec (event_day) and one of a newer
// spec (event_day, id_bucket): after its promotion, a delete removes every
// row of the old-spec lake partition. The tier partition's lake data
// changed (it lost rows the tier holds), so the plan says stale, as when a
// whole data file of a single lake partition is deleted
// (TestWholeFileDeleteMakesStale); the emptied lake partition dropped out
// of the list, and the identity stayed. It is not among the partitions to
// scan.
func TestGroupWholeLakePartitionDeleted(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 10, 0, 0, 0, 0, time.UTC))
	dayS := "2024-01-08"
	day := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: day, FirstID: 2_000_000, Rows: 30, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	oldIDs := slices.Sorted(maps.Keys(e.lakeRows(dayS)))
	if len(oldIDs) == 0 {
		t.Fatal("no sample rows on the day")
	}
	// Evolve the spec: day + bucket(id, 1).
	uri := strings.TrimPrefix(e.sample.Config.URI, "file:")
	db, err := sql.Open(sqliteshim.ShimName, "file:"+uri+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := sqlcat.NewCatalog("default", db, sqlcat.SQLite, iceberg.Properties{"uri": "", "warehouse": e.sample.Config.Warehouse, "init_catalog_tables": "false"})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"lake", "events"})
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("id", iceberg.BucketTransform{NumBuckets: 2}, "id_bucket").Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: day, FirstID: 1_000_000, Rows: 20, Seed: 5}); err != nil {
		t.Fatal(err)
	}

	pol := policy(t, `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: events-grp
spec:
  source:
    table: lake.events
  target:
    database: shop
    table: events
    buckets: 2
    bucketing: iceberg
    replicationFactor: 1
  selection:
    partitions:
      window:
        field: event_day
        last: 3d
  limits:
    buildWorkers: 1
    memory: 8MiB
`)
	p := e.promoter(e.config([]*policies.Policy{pol}))
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	part := e.partitionOf(dayS)
	before, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	var src int64
	for _, it := range before.Items {
		if it.Key.Partition == part {
			src = it.SourceSnapshotID
			if !strings.HasPrefix(it.Reason, "already promoted") {
				t.Fatalf("before the delete: %s %q", it.Action, it.Reason)
			}
		}
	}
	// Delete every row of the old-spec lake partition of the day.
	del, err := lake.SampleDelete(ctx, e.sample, oldIDs)
	if err != nil {
		t.Fatal(err)
	}
	after, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range after.Items {
		if it.Key.Partition != part {
			continue
		}
		if !strings.HasPrefix(it.Reason, "stale: ") || it.SourceSnapshotID != del.ID {
			t.Errorf("the tier partition's lake data lost %d rows (snapshot %d): source snapshot %d (was %d), %q",
				len(oldIDs), del.ID, it.SourceSnapshotID, src, it.Reason)
		}
		if len(it.LakePartitions) == 0 || slices.ContainsFunc(it.LakePartitions, func(r string) bool { return !strings.Contains(r, "id_bucket=") }) {
			t.Errorf("lake partitions to scan %v: want only the new spec's", it.LakePartitions)
		}
	}
	// Every row of the day deleted: its lake partitions are all removed.
	// Nothing is promoted, and the plan says that the tier keeps what was
	// promoted of the day (stale, with the removal's snapshot); once the
	// tier partition is dropped there is nothing to say.
	var newIDs []int64 // appended under the new spec
	for i := range int64(20) {
		newIDs = append(newIDs, 1_000_000+i)
	}
	gone, err := lake.SampleDelete(ctx, e.sample, newIDs)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for i, it := range empty.Items {
		if i > 0 && empty.Items[i-1].Key.Partition >= it.Key.Partition {
			t.Errorf("plan items out of order: %q before %q", empty.Items[i-1].Key.Partition, it.Key.Partition)
		}
		if it.Key.Partition != part {
			continue
		}
		found++
		if it.Action != promoter.ActionSkip || !strings.HasPrefix(it.Reason, fmt.Sprintf("stale: promoted from snapshot %d by p-", src)) ||
			!strings.Contains(it.Reason, fmt.Sprintf("lake now at %d, which removed every data file of the partition", gone.ID)) ||
			it.SourceSnapshotID != gone.ID || len(it.LakePartitions) != 0 || it.Rows != 0 {
			t.Errorf("a day whose every lake row was deleted: %+v", it)
		}
	}
	if found != 1 {
		t.Errorf("%d items of the emptied day %s in %+v", found, part, empty.Items)
	}
	rep, err := p.Reconcile(ctx)
	if err != nil || rep.Enqueued != 0 {
		t.Fatalf("reconcile of the emptied day: %+v %v", rep, err)
	}
	if err := e.tc.DropPartition(ctx, "shop", "events", part); err != nil {
		t.Fatal(err)
	}
	dropped, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range dropped.Items {
		if it.Key.Partition == part {
			t.Errorf("an emptied day dropped from the tier: %+v", it)
		}
	}
}

// TestRemovedOutsideTheSelection: a day outside the policy's window,
// promoted on request, whose every lake row is deleted later, stays
// outside the selection: no stale item (it is none of the policy's
// business), and reconciles count it as before.
func TestRemovedOutsideTheSelection(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "events-window", "events", "3d", "")
	p := e.promoter(e.config([]*policies.Policy{pol}))
	const first = int64(2_000_000)
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: time.Date(2023, 12, 20, 0, 0, 0, 0, time.UTC), FirstID: first, Rows: 30, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	part := e.partitionOf("2023-12-20")
	if r, err := p.Promote(ctx, promoter.Key{Policy: pol.Name(), Partition: part}); err != nil || r.Phase != promoter.PhaseCommitted {
		t.Fatalf("promote outside the window: %+v %v", r, err)
	}
	e.reconcile(ctx, t, p)
	before, err := p.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range int64(30) {
		ids = append(ids, first+i)
	}
	if _, err := lake.SampleDelete(ctx, e.sample, ids); err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(ctx, pol.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		if it.Key.Partition == part {
			t.Errorf("an emptied day outside the window planned: %s %q", it.Action, it.Reason)
		}
	}
	after, err := p.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Selected != before.Selected || after.Skipped != before.Skipped {
		t.Errorf("reconcile before the delete %+v, after %+v", before, after)
	}
}

// TestRemovedPartitionUnfinishedIsSettled: a promotion left unfinished (a
// crash mid-build, then a start that could not reach the tier) of a
// partition whose every lake row was deleted meanwhile is still settled by
// the reconciles: the plan has its "in progress" item, which reconciles
// resume it by (the removed partition made no item at all, so the record
// and the transaction holding the target waited for the next start).
func TestRemovedPartitionUnfinishedIsSettled(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const first = int64(2_000_000)
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: time.Date(2023, 12, 20, 0, 0, 0, 0, time.UTC), FirstID: first, Rows: 30, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	const table = "removedunfinished"
	pols := []*policies.Policy{daysPolicy(t, "removed-unfinished", table, "2023-12-20")}
	prefix := "/thaw-test/" + table
	part := e.partitionOf("2023-12-20")
	crashing := e.configAt(pols, prefix)
	crashing.Hooks.BeforeBuild = func(context.Context, promoter.Record) error { return errKilled }
	e.reconcile(ctx, t, e.promoter(crashing))
	var ids []int64
	for i := range int64(30) {
		ids = append(ids, first+i)
	}
	if _, err := lake.SampleDelete(ctx, e.sample, ids); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	cfg := e.configAt(pols, prefix)
	cfg.BulkLoad = &flakyTier{BulkLoader: cfg.BulkLoad, beginDown: &down, abortDown: &down}
	p := e.promoter(cfg)
	if err := p.Resume(ctx); err == nil {
		t.Fatal("resume with the tier unreachable settled the record")
	}
	down.Store(false)
	plan, err := p.Plan(ctx, pols[0].Name())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(plan.Items, func(it promoter.PlanItem) bool { return it.Key.Partition == part })
	if i < 0 || !strings.HasPrefix(plan.Items[i].Reason, promoter.ReasonInProgress) {
		t.Fatalf("plan of the emptied partition with an unfinished promotion: %+v", plan.Items)
	}
	e.reconcile(ctx, t, p)
	recs, err := p.Promotions(ctx)
	if err != nil || len(recs) != 1 || !recs[0].Phase.Terminal() {
		t.Fatalf("after a reconcile: %+v %v", recs, err)
	}
	e.noTxnInProgress(table, []string{part})
}
