package tierclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// recreated creates db.x with 3 buckets through client a, writes 20 rows
// and reads them (a caches the table), then has client b drop it and
// create it again with schema s, and write the same keys. It returns the
// target and the keys.
func recreated(t *testing.T, a, b *tierclient.Client, s kv.TableSchema) (tierclient.Target, []kv.Row) {
	t.Helper()
	ctx := t.Context()
	target, info := createTable(t, a, "x", simpleSchema(3), 1)
	var rows, keys []kv.Row
	for i := range 20 {
		rows = append(rows, kv.Row{int64(i), "old"})
		k, err := info.KeyRow(int64(i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := a.Upsert(ctx, target, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, target, keys); err != nil {
		t.Fatal(err)
	}
	if err := b.DropTable(ctx, "db", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateTable(ctx, "db", "x", s, 1); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i] = append(kv.Row{int64(i), "new"}, make(kv.Row, len(s.Columns)-2)...)
	}
	if err := b.Upsert(ctx, target, rows); err != nil {
		t.Fatal(err)
	}
	return target, keys
}

// TestRecreatedWithFewerBuckets: a client that cached a table which
// another client dropped and created again with fewer buckets gets
// ErrTargetChanged once (or nothing) and then reads the new table's rows
// by its buckets: neither a crash (a bucket the new table lacks) nor rows
// looked up in the wrong buckets.
func TestRecreatedWithFewerBuckets(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	withColumn := simpleSchema(2)
	withColumn.Columns = append(withColumn.Columns, kv.Column{Name: "w", Type: kv.Type{Kind: kv.KindBigInt}, Nullable: true})
	for name, s := range map[string]kv.TableSchema{"same columns": simpleSchema(2), "another column": withColumn} {
		t.Run(name, func(t *testing.T) {
			a := newClient(t, e.HostPort(), tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 5 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
			b := newClient(t, e.HostPort())
			target, keys := recreated(t, a, b, s)
			ctx := t.Context()
			if _, err := a.Get(ctx, target, keys); err != nil && !errors.Is(err, tierclient.ErrTargetChanged) {
				t.Fatalf("first Get after the table was created again: %v", err)
			}
			if loc, err := a.Locations(ctx, target, false); err != nil || loc.KV.Buckets() != 2 {
				t.Fatalf("locations after the first Get: %v", err)
			}
			for i := range keys {
				keys[i] = append(kv.Row{int64(i)}, make(kv.Row, len(s.Columns)-1)...)
			}
			got, err := a.Get(ctx, target, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range got {
				if r == nil || r[1] != "new" {
					t.Fatalf("key %d: %v, want the new table's row", i, r)
				}
			}
			if err := b.DropTable(ctx, "db", "x"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
