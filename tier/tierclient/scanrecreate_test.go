package tierclient_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestScanAcrossRecreate: a Scan whose table is dropped and created again
// (another client) while it runs, and whose entry this client refreshes
// meanwhile (any Get or Write on the same Client), fails with
// ErrTargetChanged. It mixed the two tables' rows (each bucket took the
// current version afresh) or, with fewer buckets in the new table,
// panicked with an index out of range.
func TestScanAcrossRecreate(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	for _, buckets := range []int{3, 1} {
		a := newClient(t, e.HostPort())
		b := newClient(t, e.HostPort())
		ctx := t.Context()
		target, info := createTable(t, a, "x", simpleSchema(3), 1)
		var rows []kv.Row
		for i := range 30 {
			rows = append(rows, kv.Row{int64(i), "old"})
		}
		if err := a.Upsert(ctx, target, rows); err != nil {
			t.Fatal(err)
		}
		k0, _ := info.KeyRow(int64(0))
		seen := map[string]int{}
		first := true
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("PANIC: %v", r)
				}
			}()
			return a.Scan(ctx, target, func(r kv.Row) error {
				seen[r[1].(string)]++
				if first {
					first = false
					if err := b.DropTable(ctx, "db", "x"); err != nil {
						t.Fatal(err)
					}
					if _, err := b.CreateTable(ctx, "db", "x", simpleSchema(buckets), 1); err != nil {
						t.Fatal(err)
					}
					nr := make([]kv.Row, 30)
					for i := range nr {
						nr[i] = kv.Row{int64(i), "new"}
					}
					if err := b.Upsert(ctx, target, nr); err != nil {
						t.Fatal(err)
					}
					// Some other use of client a refreshes the entry.
					_, gerr := a.Get(ctx, target, []kv.Row{k0})
					t.Logf("concurrent Get: %v", gerr)
				}
				return nil
			})
		}()
		t.Logf("new table with %d buckets: scan err=%v, rows seen=%v", buckets, err, seen)
		if err == nil && seen["old"] > 0 && seen["new"] > 0 {
			t.Errorf("new table with %d buckets: scan returned nil mixing %d old and %d new rows", buckets, seen["old"], seen["new"])
		}
		if err == nil && seen["new"] > 0 || err != nil && !errors.Is(err, tierclient.ErrTargetChanged) {
			t.Errorf("new table with %d buckets: scan err %v", buckets, err)
		}
		if err := b.DropTable(ctx, "db", "x"); err != nil {
			t.Fatal(err)
		}
	}
}
