package promoter_test

import (
	"context"
	"database/sql"
	"strings"
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

// sampleTable loads the sample lake table through iceberg-go's SQLite
// catalog (to change it as a lake writer would).
func (e *env) sampleTable(t *testing.T) *table.Table {
	t.Helper()
	path := strings.TrimPrefix(e.sample.Config.URI, "file:")
	db, err := sql.Open(sqliteshim.ShimName, "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	cat, err := sqlcat.NewCatalog(e.sample.Config.Name, db, sqlcat.SQLite, iceberg.Properties{"warehouse": e.sample.Config.Warehouse, "init_catalog_tables": "false"})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"lake", "events"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// expireAllButCurrent expires every snapshot of the sample table but the
// current one (Iceberg's routine snapshot expiry).
func (e *env) expireAllButCurrent(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	tbl := e.sampleTable(t)
	tx := tbl.NewTransaction()
	if err := tx.ExpireSnapshots(table.WithRetainLast(1), table.WithOlderThan(0)); err != nil {
		t.Fatal(err)
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Fatalf("expiry kept %d snapshots", n)
	}
}

// expiredMidPromotion kills a promoter of a two-day policy on table (the
// policy's name too) while it builds both partitions, then a lake writer
// adds another day and the table's maintenance expires every older
// snapshot, the promotions' pinned one included. It returns the second
// promoter, not started.
func expiredMidPromotion(t *testing.T, table string) *promoter.Promoter {
	t.Helper()
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pols := []*policies.Policy{twoDayPolicy(t, table, table)}
	prefix := "/thaw-test/" + table
	if _, killed := e.killedAt(ctx, t, e.configAt(pols, prefix), promoter.PhaseBuilding); killed != 2 {
		t.Fatalf("killed %d", killed)
	}
	if _, err := lake.SampleAppendDay(ctx, e.sample, lake.SampleAppend{Day: time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC), FirstID: 1_000_000, Rows: 50, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	e.expireAllButCurrent(t)
	return e.promoter(e.configAt(pols, prefix))
}

// TestResumeAfterSnapshotExpiry: a promotion in flight when the promoter
// died is resumed after the lake expired its scan snapshot (a later commit
// to another partition made a new current snapshot; the identity of the
// in-flight partition is unchanged). The partition's data is still there,
// at the current snapshot: the resume fails the attempt retriably and the
// next reconcile promotes it. The missing snapshot was taken for a schema
// error, terminal: the partition was never promoted again on its own.
func TestResumeAfterSnapshotExpiry(t *testing.T) {
	const table = "expired"
	second := expiredMidPromotion(t, table)
	ctx := t.Context()
	rerr := second.Resume(ctx)
	t.Logf("resume: %v", rerr)
	// Whatever Resume did, a reconcile afterwards should get the
	// partitions promoted (their data is unchanged in the lake).
	rep, err := second.Reconcile(ctx)
	t.Logf("reconcile: %+v %v", rep, err)
	if err := second.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	plan, err := second.Plan(ctx, "expired")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range plan.Items {
		if strings.HasPrefix(it.Reason, "not selected") {
			continue
		}
		t.Logf("item %s: %s %s", it.Key, it.Action, it.Reason)
	}
	recs := recordsOf(t, second, table)
	bad := 0
	for _, r := range recs {
		t.Logf("record %s %s attempt %d retriable=%v err=%s", r.ID, r.Phase, r.Attempt, r.Retriable, r.Error)
		if r.Phase != promoter.PhaseCommitted {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d promotions not committed after resume + reconcile: the expired scan snapshot failed them terminally", bad, len(recs))
	}
}

// TestRunStartsDespiteOneRecordsResumeError: a record whose resume ends in
// an error (here the expired scan snapshot; likewise an Abort the tier
// refuses or a commit still undecided after CommitBudget) does not stop
// Run: it made Run return at once, and with it every other policy (the
// daemon exited, and did again at every start while the record stayed).
func TestRunStartsDespiteOneRecordsResumeError(t *testing.T) {
	const table = "expired2"
	second := expiredMidPromotion(t, table)
	ctx := t.Context()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- second.Run(rctx) }()
	// Run goes on and its reconcile promotes both partitions.
	for {
		select {
		case err := <-done:
			t.Fatalf("Run returned before its context ended: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		committed := 0
		for _, r := range recordsOf(t, second, table) {
			if r.Phase == promoter.PhaseCommitted {
				committed++
			}
		}
		if committed == 2 {
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("%d of 2 promotions committed within a minute", committed)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
