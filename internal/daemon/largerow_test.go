package daemon

import (
	"strings"
	"testing"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestRowLargerThanARecordDefault: a row between the local changelog's
// default record limit (1 MiB) and a write's limit (tablet.max_batch_bytes,
// 4 MiB) is written and read back. It was refused for good with
// BATCH_TOO_LARGE (a single row cannot be split).
func TestRowLargerThanARecordDefault(t *testing.T) {
	e := startTest(t, EmbeddedConfig{TabletServers: 1})
	ctx := t.Context()
	tc, err := tierclient.New(ctx, e.Address(), tierclient.WithMaxBatchBytes(3<<20), tierclient.WithMaxBufferedBytes(3<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.CreateDatabase(ctx, "db"); err != nil {
		t.Fatal(err)
	}
	schema := kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}, {Name: "v", Type: kv.Type{Kind: kv.KindString}}},
		PrimaryKey: []string{"id"},
		Buckets:    1,
	}
	info, err := tc.CreateTable(ctx, "db", "big", schema, 1)
	if err != nil {
		t.Fatal(err)
	}
	target := tierclient.Target{Database: "db", Table: "big"}
	v := strings.Repeat("x", 3<<19) // 1.5 MiB
	if err := tc.Upsert(ctx, target, []kv.Row{{int64(1), v}}); err != nil {
		t.Fatalf("upsert of a 1.5 MiB row: %v", err)
	}
	key, err := info.KeyRow(int64(1))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tc.Get(ctx, target, []kv.Row{key})
	if err != nil || got[0] == nil || got[0][1] != v {
		t.Fatalf("get: %v", err)
	}
}
