package lake

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// A format-v1 table's data files all have sequence number 0: a key
// appended by three snapshots still comes oldest first, newest last (in
// the order of the snapshots that added the files, not of their random
// paths), so the builder keeps its newest row.
func TestScanV1NewestLast(t *testing.T) {
	for trial := range 6 {
		l := scratch(t)
		ctx := t.Context()
		tbl := newV1KV(t, l)
		if v := tbl.Metadata().Version(); v != 1 {
			t.Fatalf("setup: format v%d", v)
		}
		arrSchema, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, value := range []string{"v1", "v2", "v3"} {
			b := array.NewRecordBuilder(memory.DefaultAllocator, arrSchema)
			b.Field(0).(*array.Int64Builder).Append(7)
			b.Field(1).(*array.StringBuilder).Append(value)
			rec := b.NewRecordBatch()
			rdr, err := array.NewRecordReader(arrSchema, []arrow.RecordBatch{rec})
			if err != nil {
				t.Fatal(err)
			}
			tbl, err = tbl.Append(ctx, rdr, nil)
			rdr.Release()
			rec.Release()
			b.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		r := scan(t, l, "t.kv", ScanOptions{Concurrency: 1})
		var got []string
		for _, v := range r.col(t, "v") {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, []string{"v1", "v2", "v3"}) {
			t.Fatalf("trial %d: key 7 came as %v, want the oldest first, the newest last", trial, got)
		}
	}
}

// v1VersionsNewestLast writes key 7 of a format-v1 table once per value,
// one snapshot each, changes the table with change (in one transaction),
// checks the committed table with check (if any), and checks eight times
// (fresh tables: file paths are random) that a scan returns the versions
// oldest first, newest last.
func v1VersionsNewestLast(t *testing.T, values []string, change func(*table.Transaction) error, check func(*table.Table)) {
	t.Helper()
	for trial := range 8 {
		l := scratch(t)
		ctx := t.Context()
		tbl := newV1KV(t, l)
		for _, value := range values {
			tbl = appendRows(t, tbl, []any{int64(7)}, []any{value})
		}
		tx := tbl.NewTransaction()
		if err := change(tx); err != nil {
			t.Fatal(err)
		}
		tbl, err := tx.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if check != nil {
			check(tbl)
		}
		var got []string
		for _, v := range scan(t, l, "t.kv", ScanOptions{Concurrency: 1}).col(t, "v") {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, values) {
			t.Fatalf("trial %d: key 7 came as %v, want the oldest first, the newest last", trial, got)
		}
	}
}

// TestScanUpgradedV1NewestLast: a table written as format v1 (files with
// sequence number 0) and then upgraded to v2: the v1-era files still come
// in the order of the snapshots that added them (they came in the order
// of their random paths: an older version of a key could win).
func TestScanUpgradedV1NewestLast(t *testing.T) {
	v1VersionsNewestLast(t, []string{"v1", "v2", "v3"}, func(tx *table.Transaction) error { return tx.UpgradeFormatVersion(2) },
		func(tbl *table.Table) {
			if v := tbl.Metadata().Version(); v != 2 {
				t.Fatalf("upgrade: v%d", v)
			}
		})
}

// TestScanV1ExpiredNewestLast: a format-v1 table whose older snapshots
// have expired: the files they added are still live and still come oldest
// first (they came in random path order: an older version could win).
func TestScanV1ExpiredNewestLast(t *testing.T) {
	v1VersionsNewestLast(t, []string{"v1", "v2", "v3", "v4"}, func(tx *table.Transaction) error {
		return tx.ExpireSnapshots(table.WithRetainLast(1), table.WithOlderThan(0))
	}, nil)
}

// newV1KV creates the format-v1 table t.kv (k BIGINT key, v STRING) in l.
func newV1KV(t *testing.T, l *Lake) *table.Table {
	t.Helper()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String, Required: true})
	tbl, err := l.cat.CreateTable(t.Context(), table.Identifier{"t", "kv"}, schema,
		catalog.WithProperties(iceberg.Properties{"format-version": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}
