package promoter

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/thawdb/thaw/lake"
)

func v1Append(t *testing.T, tbl *table.Table, id int64, ts time.Time) *table.Table {
	t.Helper()
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(id)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
	rec := b.NewRecordBatch()
	defer rec.Release()
	rdr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	out, err := tbl.Append(t.Context(), rdr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestV1GroupIdentityFollowsAppends: a format-v1 table (sequence numbers
// all 0) whose day partition has files under two specs (day; then day +
// bucket): one tier partition. Every later append to it changes the
// promotion identity. group.newest broke the sequence-number tie by the
// (random) snapshot id, so about half of them did not.
func TestV1GroupIdentityFollowsAppends(t *testing.T) {
	for trial := range 6 {
		t.Run(fmt.Sprint(trial), v1GroupIdentity)
	}
}

func v1GroupIdentity(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(dir, "catalog.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := sqlcat.NewCatalog("default", db, sqlcat.SQLite, iceberg.Properties{"uri": "", "warehouse": "file://" + dir + "/wh", "init_catalog_tables": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"lake"}, nil); err != nil {
		t.Fatal(err)
	}
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true})
	spec, err := iceberg.NewPartitionSpecOpts(iceberg.AddPartitionFieldBySourceID(2, "ts_day", iceberg.DayTransform{}, schema, nil))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.CreateTable(ctx, table.Identifier{"lake", "ev"}, schema, catalog.WithPartitionSpec(&spec),
		catalog.WithProperties(iceberg.Properties{"format-version": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	d := time.Date(2024, 3, 1, 5, 0, 0, 0, time.UTC)
	tbl = v1Append(t, tbl, 1, d)
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("id", iceberg.BucketTransform{NumBuckets: 1}, "id_bucket").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := lake.Open(ctx, lake.Config{Type: lake.CatalogSQL, URI: "file:" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + dir + "/wh"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	identity := func() (int64, int) {
		info, err := l.Describe(ctx, "lake.ev")
		if err != nil {
			t.Fatal(err)
		}
		_, m, err := lake.MapSchema(info, lake.MappingOptions{})
		if err != nil {
			t.Fatal(err)
		}
		parts, err := l.Partitions(ctx, "lake.ev", nil)
		if err != nil {
			t.Fatal(err)
		}
		g := &group{}
		for _, p := range parts {
			name, err := m.PartitionName(p)
			if err != nil {
				t.Fatal(err)
			}
			if name != "2024-03-01" {
				t.Fatalf("partition %s", name)
			}
			g.parts = append(g.parts, p)
		}
		return g.newest().LastUpdatedSnapshotID, len(g.parts)
	}
	for i := range 12 {
		before, _ := identity()
		tbl = v1Append(t, tbl, int64(10+i), d)
		after, n := identity()
		if after == before {
			t.Fatalf("append %d (snapshot %d) to tier partition 2024-03-01 (%d lake partitions) left its identity at snapshot %d",
				i, tbl.CurrentSnapshot().SnapshotID, n, after)
		}
	}
}
