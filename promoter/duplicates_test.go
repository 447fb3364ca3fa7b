package promoter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/kv"
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
