package tieradapter_test

import (
	"slices"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

func mustType(t *testing.T, s string) kv.Type {
	t.Helper()
	ty, err := kv.ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}

func TestTier(t *testing.T) {
	ctx := t.Context()
	_, c := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, TabletServers: 1})
	tier := tieradapter.New(c)

	schema := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: mustType(t, "BIGINT")},
			{Name: "day", Type: mustType(t, "STRING")},
			{Name: "v", Type: mustType(t, "STRING"), Nullable: true},
		},
		PrimaryKey: []string{"id", "day"}, PartitionKeys: []string{"day"}, Buckets: 2,
	}
	if _, ok, err := tier.TableSchema(ctx, "db", "t"); err != nil || ok {
		t.Fatalf("schema of a missing table: ok %t, %v", ok, err)
	}
	if err := tier.CreateTable(ctx, "db", "t", schema, 1); err != nil {
		t.Fatal(err)
	}
	if err := tier.CreateTable(ctx, "db", "t", schema, 1); err != nil {
		t.Fatalf("create again with the same schema: %v", err)
	}
	other := schema
	other.Buckets = 3
	if err := tier.CreateTable(ctx, "db", "t", other, 1); err == nil {
		t.Fatal("create again with another schema: no error")
	}
	have, ok, err := tier.TableSchema(ctx, "db", "t")
	if err != nil || !ok || have.Buckets != 2 || len(have.Columns) != 3 {
		t.Fatalf("schema: %+v %t %v", have, ok, err)
	}

	empty := func(partition string) bool {
		t.Helper()
		e, err := tier.IsEmpty(ctx, "db", "t", partition)
		if err != nil {
			t.Fatalf("is empty %q: %v", partition, err)
		}
		return e
	}
	if !empty("a") || !empty("") {
		t.Fatal("a new table is not empty")
	}
	for range 2 {
		if err := tier.CreatePartition(ctx, "db", "t", "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tier.CreatePartition(ctx, "db", "t", "b"); err != nil {
		t.Fatal(err)
	}
	ps, err := tier.Partitions(ctx, "db", "t")
	slices.Sort(ps)
	if err != nil || !slices.Equal(ps, []string{"a", "b"}) {
		t.Fatalf("partitions %v %v", ps, err)
	}
	if !empty("a") {
		t.Fatal("new partition a is not empty")
	}
	if err := c.Upsert(ctx, tierclient.Target{Database: "db", Table: "t", Partition: "a"}, []kv.Row{{int64(1), "a", "x"}}); err != nil {
		t.Fatal(err)
	}
	if empty("a") || empty("") {
		t.Fatal("partition a (and the table) hold a row but are empty")
	}
	if !empty("b") || !empty("missing") {
		t.Fatal("partition b or a missing partition is not empty")
	}
}
