package tierclient_test

import (
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

func recreatedSchema(partitionKeys ...string) kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "a", Type: kv.Type{Kind: kv.KindString}},
			{Name: "b", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey:    []string{"a", "b", "id"},
		PartitionKeys: partitionKeys,
		Buckets:       2,
	}
}

// TestTableRecreatedByAnotherClient: another client drops a table and
// creates it again with other partition keys (or partitioned where it was
// not). Client a routed rows by its cached description for good: with the
// old partition key its Get found "no such partition" and answered no row
// for a row that exists, and its Delete skipped the key and succeeded;
// recreated partitioned, its every call failed. Now the first call that
// meets the change fails with ErrTargetChanged (or the coordinator's
// answer), and the next ones read and delete the new table's rows.
func TestTableRecreatedByAnotherClient(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	retry := tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 3 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	b := newClient(t, e.HostPort())
	ctx := t.Context()
	for name, c := range map[string]struct {
		before []string
		old    kv.Row
	}{
		"partition key changed": {[]string{"a"}, kv.Row{"x", "y", int64(1), "old"}},
		"now partitioned":       {nil, kv.Row{"x", "y", int64(1), "old"}},
	} {
		t.Run(name, func(t *testing.T) {
			a := newClient(t, e.HostPort(), retry)
			target, _ := createTable(t, a, "p", recreatedSchema(c.before...), 1)
			if len(c.before) > 0 {
				if err := a.CreatePartition(ctx, "db", "p", "x"); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Upsert(ctx, target, []kv.Row{c.old}); err != nil {
				t.Fatal(err)
			}
			// d deletes through a Writer with the description it cached.
			d := newClient(t, e.HostPort(), retry)
			for _, c := range []*tierclient.Client{a, d} {
				if got, err := c.Get(ctx, target, []kv.Row{{"x", "y", int64(1), nil}}); err != nil || got[0] == nil {
					t.Fatalf("get before: %v %v", got, err)
				}
			}
			if err := b.DropTable(ctx, "db", "p"); err != nil {
				t.Fatal(err)
			}
			if _, err := b.CreateTable(ctx, "db", "p", recreatedSchema("b"), 1); err != nil {
				t.Fatal(err)
			}
			if err := b.CreatePartition(ctx, "db", "p", "y"); err != nil {
				t.Fatal(err)
			}
			if err := b.Upsert(ctx, target, []kv.Row{{"z", "y", int64(2), "new"}}); err != nil {
				t.Fatal(err)
			}
			key := kv.Row{"z", "y", int64(2), nil}
			if err := d.Delete(ctx, target, []kv.Row{key}); err == nil {
				if got, err := b.Get(ctx, target, []kv.Row{key}); err != nil || got[0] != nil {
					t.Fatalf("d's Delete succeeded, and b reads %v, %v", got, err)
				}
				if err := b.Upsert(ctx, target, []kv.Row{{"z", "y", int64(2), "new"}}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := a.Get(ctx, target, []kv.Row{key})
			if err == nil && got[0] == nil {
				t.Fatalf("a's Get answered no row for a row of the new table")
			}
			if err != nil {
				t.Logf("first Get after the change: %v", err)
				if len(c.before) > 0 && !errors.Is(err, tierclient.ErrTargetChanged) {
					t.Errorf("first Get: %v, want ErrTargetChanged", err)
				}
				if got, err = a.Get(ctx, target, []kv.Row{key}); err != nil || got[0] == nil {
					t.Fatalf("the next Get: %v, %v; want the new row", got, err)
				}
			}
			if err := a.Delete(ctx, target, []kv.Row{key}); err != nil {
				t.Fatal(err)
			}
			if got, err := b.Get(ctx, target, []kv.Row{key}); err != nil || got[0] != nil {
				t.Fatalf("after a's Delete b reads %v, %v", got, err)
			}
			if err := b.DropTable(ctx, "db", "p"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
