package promoter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestDroppedColumnRefused: region is promoted, then dropped from the lake
// table (say for PII removal) and added again, empty, at the same place.
// The mapped tier schema is unchanged (names, types and nullability only):
// the next reconcile accepted the table and promoted nothing (no lake
// partition changed), and the tier went on serving the dropped column's
// values under the name whose lake values are now all null. The policy's
// plans now fail with ErrSchema naming the column.
func TestDroppedColumnRefused(t *testing.T) {
	e := newEnv(t, 200)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "events-window", "events", "1d", "")
	p := e.promoter(e.config([]*policies.Policy{pol}))
	if _, err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	day := "2024-01-07"
	part := e.partitionOf(day)
	e.checkTier("events", part, e.lakeRows(day))

	// Drop region, then add a new region column at the same place.
	tbl := e.sampleTable(t)
	var err error
	tx := tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).DeleteColumn([]string{"region"}).Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx = tbl.NewTransaction()
	if err := tx.UpdateSchema(true, false).AddColumn([]string{"region"}, iceberg.PrimitiveTypes.String, "", false, nil).
		MoveAfter([]string{"region"}, []string{"user_name"}).Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("lake schema now: %v", tbl.Schema())
	// A later commit to another day (2024-01-01, outside the window):
	// the current snapshot now has the new schema.
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	ts := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	b.Field(0).(*array.Int64Builder).Append(100000)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
	b.Field(2).(*array.StringBuilder).Append("late")
	b.Field(3).(*array.StringBuilder).AppendNull()
	b.Field(4).(*array.Decimal128Builder).AppendNull()
	b.Field(5).(*array.Float64Builder).AppendNull()
	b.Field(6).(*array.BooleanBuilder).AppendNull()
	b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
	b.Field(8).(*array.Int32Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	rdr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	if tbl, err = tbl.Append(ctx, rdr, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("current snapshot %d schema id %v", tbl.CurrentSnapshot().SnapshotID, *tbl.CurrentSnapshot().SchemaID)

	for what, err := range map[string]error{
		"reconcile": func() error { _, err := p.Reconcile(ctx); return err }(),
		"plan":      func() error { _, err := p.Plan(ctx, pol.Name()); return err }(),
	} {
		if !errors.Is(err, promoter.ErrSchema) || !strings.Contains(err.Error(), "column region of lake table lake.events is Iceberg field") {
			t.Fatalf("%s after the drop: %v, want ErrSchema naming region", what, err)
		}
	}
	// The lake now reads region as null for every row of the day; the tier
	// still holds the promoted values (dropping the tier table is the way
	// on, as the error says).
	for id, r := range e.lakeRows(day) {
		if r.region != nil {
			t.Fatalf("lake id %d region %v", id, r.region)
		}
	}
	info, err := e.tc.Table(ctx, "shop", "events")
	if err != nil {
		t.Fatal(err)
	}
	iRegion, _ := info.KV.ColumnIndex("region")
	served := 0
	if err := e.tc.Scan(ctx, tierclient.Target{Database: "shop", Table: "events", Partition: part}, func(r kv.Row) error {
		if r[iRegion] != nil {
			served++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if served == 0 {
		t.Fatalf("tier partition %s serves no region values: the scenario did not happen", part)
	}
}
