package promoter_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestDuplicateKeysError: under `duplicateKeys: error` a lake partition
// whose scan repeats a primary key (the sample rewrites some ids by a plain
// append of a newer version, in the same day) fails terminally with the key
// named, and its target is released: ACTIVE, empty, no transaction. A
// partition without repeated keys is promoted. The same partitions under
// the default (last wins) are all promoted.
func TestDuplicateKeysError(t *testing.T) {
	e := newEnv(t, 600)
	ctx := t.Context()
	days := []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}

	// Which days repeat a key in the lake scan: what the test expects.
	dupDays := map[string]bool{}
	for _, d := range days {
		if e.lakeRowCount(d) != len(e.lakeRows(d)) {
			dupDays[e.partitionOf(d)] = true
		}
	}
	if len(dupDays) == 0 || len(dupDays) == len(days) {
		t.Fatalf("the sample must have days with and without repeated keys: %v", dupDays)
	}

	pol := windowPolicy(t, "strict", "strict", "7d", "  duplicateKeys: error\n")
	p := e.promoter(e.config([]*policies.Policy{pol}))
	for _, d := range days {
		part := e.partitionOf(d)
		r, err := p.Promote(ctx, promoter.Key{Policy: "strict", Partition: part})
		if !dupDays[part] {
			if err != nil || r.Phase != promoter.PhaseCommitted {
				t.Fatalf("%s (no repeated key): %+v %v", part, r, err)
			}
			continue
		}
		if !errors.Is(err, snapshotbuild.ErrDuplicateKey) {
			t.Fatalf("%s: promote error %v, want a duplicate key", part, err)
		}
		if r.Phase != promoter.PhaseFailed || r.Retriable || !strings.Contains(r.Error, "duplicate primary key") {
			t.Fatalf("%s: record %+v", part, r)
		}
		var n int
		if err := e.tc.Scan(ctx, tierclient.Target{Database: "shop", Table: "strict", Partition: part}, func(kv.Row) error { n++; return nil }); err != nil {
			t.Fatalf("%s: scan after the failure: %v", part, err)
		}
		if n != 0 {
			t.Fatalf("%s: %d rows after a failed promotion", part, n)
		}
	}
	parts := make([]string, 0, len(days))
	for _, d := range days {
		parts = append(parts, e.partitionOf(d))
	}
	e.noTxnInProgress("strict", parts)

	// A failure that is not retriable stays until it is requested: a
	// reconcile leaves it, a request of the whole table tries it again.
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)) // the window holds every day
	rep, err := p.Reconcile(ctx)
	if err != nil || rep.Enqueued != 0 || rep.Skipped != len(dupDays) {
		t.Fatalf("reconcile after the failures: %+v %v", rep, err)
	}
	items, err := p.Request(ctx, promoter.Request{Table: "shop.strict"})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if again := dupDays[it.Key.Partition]; (it.Action == promoter.ActionPromote) != again || again && it.Attempt != 2 {
			t.Errorf("request of the table: %+v (a failed one: %t)", it, again)
		}
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := p.Promotions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if dupDays[r.Partition] && (r.Attempt != 2 || r.Phase != promoter.PhaseFailed) {
			t.Errorf("%s after the request: attempt %d, %s", r.Partition, r.Attempt, r.Phase)
		}
	}

	// The default keeps the last row of a key: every day is promoted.
	lenient := windowPolicy(t, "lenient", "lenient", "7d", "")
	lp := e.promoter(e.configAt([]*policies.Policy{lenient}, "/lenient"))
	for _, d := range days {
		part := e.partitionOf(d)
		r, err := lp.Promote(ctx, promoter.Key{Policy: "lenient", Partition: part})
		if err != nil || r.Phase != promoter.PhaseCommitted {
			t.Fatalf("lenient %s: %+v %v", part, r, err)
		}
		if dupDays[part] && r.Duplicates == 0 {
			t.Fatalf("lenient %s: no duplicates counted: %+v", part, r)
		}
		e.checkTier("lenient", part, e.lakeRows(d))
	}
}

// TestDuplicatesInRewrittenFilesRefused: under the default (last wins) a
// partition whose scan repeats a key and reads a data file that a
// copy-on-write delete rewrote fails terminally with
// ErrUnorderedDuplicates, its target released: the rewrite gives the rows
// it carries over its new sequence number, so the older version of the
// key was read after the newer one appended before the delete, and
// promoted. A partition without repeated keys is promoted as before.
func TestDuplicatesInRewrittenFilesRefused(t *testing.T) {
	e := newEnv(t, 600)
	ctx := t.Context()
	// An append-only sample (iceberg-go's copy-on-write rewrite does not
	// apply the delete files the full sample has).
	sample, err := lake.Sample(ctx, lake.SampleOptions{Dir: t.TempDir(), Rows: 600, Days: 7, Seed: 11, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := lake.Open(ctx, sample.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	e.sample, e.lake = sample, lk
	dupDay, cleanDay := "2024-01-03", "2024-01-05"
	ids := slices.Sorted(maps.Keys(e.lakeRows(dupDay)))
	// A newer version of the day's first id, appended; then a delete of
	// another row, copy-on-write: the file holding the older version is
	// rewritten after the append.
	if _, err := lake.SampleAppendDay(ctx, sample, lake.SampleAppend{Day: time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC), FirstID: ids[0], Rows: 1, Seed: 99}); err != nil {
		t.Fatal(err)
	}
	if e.lakeRowCount(dupDay) != len(e.lakeRows(dupDay))+1 || e.lakeRowCount(cleanDay) != len(e.lakeRows(cleanDay)) {
		t.Fatal("the append did not repeat one key of the day")
	}
	snap, err := lake.SampleDelete(ctx, sample, ids[1:2])
	if err != nil {
		t.Fatal(err)
	}
	if n, err := lk.RewrittenFiles(ctx, sample.Table, lake.ScanOptions{SnapshotID: &snap.ID}); err != nil || n == 0 {
		t.Fatalf("the delete (%+v) rewrote no file: %d, %v", snap, n, err)
	}

	pol := windowPolicy(t, "w", "events", "7d", "")
	cfg := e.config([]*policies.Policy{pol})
	cfg.Lakes = map[string]promoter.Lake{"default": lk}
	p := e.promoter(cfg)
	part := e.partitionOf(dupDay)
	r, err := p.Promote(ctx, promoter.Key{Policy: "w", Partition: part})
	if !errors.Is(err, promoter.ErrUnorderedDuplicates) || promoter.IsRetriable(err) {
		t.Fatalf("%s: %v, want ErrUnorderedDuplicates", part, err)
	}
	if r.Phase != promoter.PhaseFailed || r.Retriable || !strings.Contains(r.Error, "rewritten") {
		t.Fatalf("%s: record %+v", part, r)
	}
	var n int
	if err := e.tc.Scan(ctx, tierclient.Target{Database: "shop", Table: "events", Partition: part}, func(kv.Row) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%s: %d rows after the refusal", part, n)
	}
	e.noTxnInProgress("events", []string{part})
	clean := e.partitionOf(cleanDay)
	if r, err := p.Promote(ctx, promoter.Key{Policy: "w", Partition: clean}); err != nil || r.Phase != promoter.PhaseCommitted {
		t.Fatalf("%s (no repeated key): %+v %v", clean, r, err)
	}
	e.checkTier("events", clean, e.lakeRows(cleanDay))
}
