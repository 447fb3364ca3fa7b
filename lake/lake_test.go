package lake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/thawdb/thaw/kv"
)

// The sample lake is shared by the tests that only read it.
var (
	sampleOnce sync.Once
	sampleDir  string
	sampleInfo SampleInfo
	sampleErr  error
)

const (
	sampleRows = 3000
	sampleDays = 5
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{sampleDir, benchDir} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// sample returns the shared sample lake, opened.
func sample(t testing.TB) (*Lake, SampleInfo) {
	t.Helper()
	sampleOnce.Do(func() {
		sampleDir, sampleErr = os.MkdirTemp("", "lake-sample-")
		if sampleErr == nil {
			sampleInfo, sampleErr = Sample(context.Background(), SampleOptions{Dir: sampleDir, Rows: sampleRows, Days: sampleDays, Seed: 42})
		}
	})
	if sampleErr != nil {
		t.Fatalf("sample: %v", sampleErr)
	}
	l, err := Open(t.Context(), sampleInfo.Config)
	if err != nil {
		t.Fatalf("open sample: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l, sampleInfo
}

// openSample writes a sample of its own (opts.Dir: a temporary directory)
// and opens it for the test.
func openSample(t *testing.T, opts SampleOptions) (*Lake, SampleInfo) {
	t.Helper()
	opts.Dir = t.TempDir()
	info, err := Sample(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(t.Context(), info.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, info
}

// scratch returns a writable empty SQL catalog with namespace "t".
func scratch(t *testing.T) *Lake {
	t.Helper()
	dir := t.TempDir()
	l, err := open(t.Context(), Config{URI: filepath.Join(dir, "catalog.db"), Warehouse: "file://" + dir + "/wh"}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.cat.CreateNamespace(t.Context(), table.Identifier{"t"}, nil); err != nil {
		t.Fatal(err)
	}
	return l
}

// rows is a scan result as Go values, column by column.
type rows struct {
	schema *arrow.Schema
	cols   map[string][]any
	n      int
}

func (r rows) col(t testing.TB, name string) []any {
	t.Helper()
	c, ok := r.cols[name]
	if !ok {
		t.Fatalf("no column %q in %v", name, r.schema)
	}
	return c
}

// collect drains a scan into Go values (GetOneForMarshal), releasing batches.
func collect(t testing.TB, schema *arrow.Schema, seq iter.Seq2[arrow.RecordBatch, error]) rows {
	t.Helper()
	r := rows{schema: schema, cols: map[string][]any{}}
	for rec, err := range seq {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if !rec.Schema().Equal(schema) {
			t.Fatalf("batch schema %v differs from announced %v", rec.Schema(), schema)
		}
		for i, f := range rec.Schema().Fields() {
			col := rec.Column(i)
			for j := range col.Len() {
				if col.IsNull(j) {
					r.cols[f.Name] = append(r.cols[f.Name], nil)
				} else {
					r.cols[f.Name] = append(r.cols[f.Name], col.GetOneForMarshal(j))
				}
			}
		}
		r.n += int(rec.NumRows())
		rec.Release()
	}
	return r
}

func scan(t testing.TB, l *Lake, name string, opts ScanOptions) rows {
	t.Helper()
	schema, seq, err := l.Scan(t.Context(), name, opts)
	if err != nil {
		t.Fatalf("scan %s: %v", name, err)
	}
	return collect(t, schema, seq)
}

// TestSampleFewerIDsThanDays: with fewer ids than days, the sample's
// Partitions counts the day partitions that hold live rows, as a scan
// sees them, not the days asked for.
func TestSampleFewerIDsThanDays(t *testing.T) {
	l, info := openSample(t, SampleOptions{Rows: 10, Days: 400, Seed: 1})
	r := scan(t, l, "lake.events", ScanOptions{})
	days := map[string]bool{}
	for _, ts := range r.col(t, "event_ts") {
		days[fmt.Sprint(ts)[:10]] = true
	}
	if len(days) == 0 || info.Partitions != len(days) || info.Keys != r.n {
		t.Fatalf("info: %d partitions, %d keys; a scan: %d rows on %d days", info.Partitions, info.Keys, r.n, len(days))
	}
}

func TestSamplePartitionsMatchInspect(t *testing.T) {
	l, info := sample(t)
	ctx := t.Context()
	if len(info.Snapshots) != 6 {
		t.Fatalf("sample made %d snapshots, want 6: %+v", len(info.Snapshots), info.Snapshots)
	}
	parts, err := l.Partitions(ctx, "lake.events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != sampleDays || info.Partitions != sampleDays {
		t.Fatalf("got %d partitions (info says %d), want %d: %+v", len(parts), info.Partitions, sampleDays, parts)
	}
	var records int64
	var posDeletes, eqDeletes int64
	for i, p := range parts {
		day := SampleStart.AddDate(0, 0, i).Format("2006-01-02")
		if p.Path != "event_day="+day || p.SpecID != 0 {
			t.Errorf("partition %d: spec %d path %q, want spec 0 event_day=%s", i, p.SpecID, p.Path, day)
		}
		if len(p.Values) != 1 || p.Values[0].Value != int32(SampleStart.AddDate(0, 0, i).Unix()/86400) || p.Values[0].Type != "date" || p.Values[0].Human != day {
			t.Errorf("partition %d values %+v", i, p.Values)
		}
		if p.LastUpdatedAtSource != TimeFromSnapshot || p.LastUpdatedAt.IsZero() {
			t.Errorf("partition %d last updated %v from %s", i, p.LastUpdatedAt, p.LastUpdatedAtSource)
		}
		records += p.RecordCount
		posDeletes += p.PositionDeleteRecords
		eqDeletes += p.EqualityDeleteRecords
	}
	// RecordCount counts every data row ever appended and still referenced:
	// 2 appends + 2 update appends; deletes are not subtracted.
	wantRecords := int64(sampleRows + len(info.UpdatedByDelete) + len(info.UpdatedByAppend))
	if records != wantRecords {
		t.Errorf("sum of record counts %d, want %d (an upper bound: deletes not subtracted)", records, wantRecords)
	}
	if posDeletes != int64(len(info.Deleted)) || eqDeletes != int64(len(info.UpdatedByDelete)) {
		t.Errorf("delete records pos=%d eq=%d, want %d and %d", posDeletes, eqDeletes, len(info.Deleted), len(info.UpdatedByDelete))
	}
	// The newest file of every partition is the position delete of snapshot 6.
	for _, p := range parts {
		if p.LastUpdatedSnapshotID != info.Snapshots[5].ID {
			t.Errorf("partition %s last updated by %d, want %d", p.Path, p.LastUpdatedSnapshotID, info.Snapshots[5].ID)
		}
	}

	// Cross-check against iceberg-go's own partitions table.
	tbl, err := l.loadTable(ctx, "lake.events")
	if err != nil {
		t.Fatal(err)
	}
	rr, err := tbl.Inspect().Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var inspected []string
	for rr.Next() {
		rec := rr.RecordBatch()
		s := rec.Schema()
		get := func(name string) arrow.Array { return rec.Column(s.FieldIndices(name)[0]) }
		for i := range int(rec.NumRows()) {
			inspected = append(inspected, fmt.Sprintf("records=%d files=%d pos=%d eq=%d snap=%d",
				get("record_count").(*array.Int64).Value(i), get("file_count").(*array.Int32).Value(i),
				get("position_delete_record_count").(*array.Int64).Value(i), get("equality_delete_record_count").(*array.Int64).Value(i),
				get("last_updated_snapshot_id").(*array.Int64).Value(i)))
		}
	}
	var ours []string
	for _, p := range parts {
		ours = append(ours, fmt.Sprintf("records=%d files=%d pos=%d eq=%d snap=%d", p.RecordCount, p.FileCount,
			p.PositionDeleteRecords, p.EqualityDeleteRecords, p.LastUpdatedSnapshotID))
	}
	slices.Sort(inspected)
	slices.Sort(ours)
	if !slices.Equal(ours, inspected) {
		t.Errorf("partition stats differ from Inspect().Partitions:\nours    %v\ninspect %v", ours, inspected)
	}

	// At snapshot 1 only the first half exists, with no deletes.
	first := info.Snapshots[0].ID
	parts1, err := l.Partitions(ctx, "lake.events", &first)
	if err != nil {
		t.Fatal(err)
	}
	var n1 int64
	for _, p := range parts1 {
		n1 += p.RecordCount
		if p.PositionDeleteFiles+p.EqualityDeleteFiles != 0 || p.LastUpdatedSnapshotID != first {
			t.Errorf("snapshot 1 partition %+v", p)
		}
	}
	if n1 != sampleRows/2 {
		t.Errorf("snapshot 1 has %d records, want %d", n1, sampleRows/2)
	}
	missing := int64(12345)
	if _, err := l.Partitions(ctx, "lake.events", &missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown snapshot: err %v, want ErrNotFound", err)
	}
}

func TestScanAppliesDeletesAndOrdersNewestLast(t *testing.T) {
	l, info := sample(t)
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			r := scan(t, l, "lake.events", ScanOptions{Concurrency: conc, BatchSize: 100})
			if r.n != info.Rows {
				t.Fatalf("scan returned %d rows, want %d", r.n, info.Rows)
			}
			ids, versions := r.col(t, "id"), r.col(t, "version")
			seen := map[int64][]int32{}
			for i := range ids {
				id := ids[i].(int64)
				seen[id] = append(seen[id], versions[i].(int32))
			}
			if len(seen) != info.Keys {
				t.Errorf("%d distinct ids, want %d", len(seen), info.Keys)
			}
			for _, id := range info.Deleted {
				if _, ok := seen[id]; ok {
					t.Errorf("position-deleted id %d is still there", id)
				}
			}
			for _, id := range info.UpdatedByDelete {
				if !slices.Equal(seen[id], []int32{2}) {
					t.Errorf("id %d updated by equality delete: versions %v, want [2]", id, seen[id])
				}
			}
			for _, id := range info.UpdatedByAppend {
				if !slices.Equal(seen[id], []int32{1, 2}) {
					t.Errorf("id %d updated by append: versions %v, want [1 2] (newest last)", id, seen[id])
				}
			}
		})
	}
}

func TestScanOnePartitionAndColumns(t *testing.T) {
	l, info := sample(t)
	parts, err := l.Partitions(t.Context(), "lake.events", nil)
	if err != nil {
		t.Fatal(err)
	}
	all := scan(t, l, "lake.events", ScanOptions{Columns: []string{"id", "event_ts"}})
	if len(all.cols) != 2 || all.n != info.Rows {
		t.Fatalf("projected scan: %d columns, %d rows", len(all.cols), all.n)
	}
	total := 0
	for _, p := range parts {
		r := scan(t, l, "lake.events", ScanOptions{Partitions: []PartitionRef{p.Ref()}, Columns: []string{"id", "event_ts"}})
		day := p.Values[0].Human
		for _, ts := range r.col(t, "event_ts") {
			if got := ts.(string)[:10]; got != day {
				t.Fatalf("partition %s returned a row of %s", p.Path, got)
			}
		}
		if int64(r.n) > p.RecordCount {
			t.Errorf("partition %s: %d rows exceed the record count upper bound %d", p.Path, r.n, p.RecordCount)
		}
		total += r.n
	}
	if total != info.Rows {
		t.Errorf("partitions add up to %d rows, want %d", total, info.Rows)
	}
	// A partition that does not exist reads nothing; a spec that does not exist is an error.
	if r := scan(t, l, "lake.events", ScanOptions{Partitions: []PartitionRef{{SpecID: 0, Path: "event_day=1999-01-01"}}}); r.n != 0 {
		t.Errorf("absent partition returned %d rows", r.n)
	}
	// ... unless the caller requires the partitions it names (a promotion
	// of partitions it listed): then it is an error, not an empty read.
	absent := []PartitionRef{parts[0].Ref(), {SpecID: 0, Path: "event_day=1999-01-01"}}
	if _, _, err := l.Scan(t.Context(), "lake.events", ScanOptions{Partitions: absent, RequirePartitions: true}); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "partition event_day=1999-01-01 (spec 0) has no data file in this snapshot") {
		t.Errorf("a required absent partition: %v", err)
	}
	if _, _, err := l.Scan(t.Context(), "lake.events", ScanOptions{Partitions: []PartitionRef{{SpecID: 9}}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown spec: %v", err)
	}
	// Column names are exact; a wrong one names the columns there are.
	if _, _, err := l.Scan(t.Context(), "lake.events", ScanOptions{Columns: []string{"id", "ID"}}); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), `no column "ID" (its columns: id, event_ts,`) {
		t.Errorf("unknown column: %v", err)
	}
	// Time travel: snapshot 2 has every id once at version 1.
	s2 := info.Snapshots[1].ID
	r := scan(t, l, "lake.events", ScanOptions{SnapshotID: &s2, Columns: []string{"version"}})
	if r.n != sampleRows {
		t.Errorf("snapshot 2: %d rows, want %d", r.n, sampleRows)
	}
	for _, v := range r.col(t, "version") {
		if v.(int32) != 1 {
			t.Fatalf("snapshot 2 has version %v", v)
		}
	}
}

func TestMapSampleAndDerivedPartitionColumn(t *testing.T) {
	l, _ := sample(t)
	ctx := t.Context()
	info, err := l.Describe(ctx, "lake.events")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Schema.IdentifierFields; !slices.Equal(got, []string{"id"}) {
		t.Errorf("identifier fields %v", got)
	}
	if len(info.Specs) != 1 || info.Spec.Fields[0].Transform != "day" || info.Spec.Fields[0].Source != "event_ts" {
		t.Errorf("specs %+v", info.Specs)
	}
	if len(info.Snapshots) != 6 || info.Properties["write.delete.mode"] != "merge-on-read" || info.FormatVersion != 2 {
		t.Errorf("describe: %d snapshots, props %v, v%d", len(info.Snapshots), info.Properties, info.FormatVersion)
	}
	ts, pm, err := MapSchema(info, MappingOptions{Buckets: 8})
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range ts.Columns {
		cols = append(cols, fmt.Sprintf("%s %s %v", c.Name, c.Type, c.Nullable))
	}
	want := []string{
		"id BIGINT false", "event_ts TIMESTAMP_LTZ(6) false", "user_name STRING false", "region STRING true",
		"amount DECIMAL(12,2) true", "score DOUBLE true", "active BOOLEAN true", "updated_at TIMESTAMP(6) false",
		"version INT false", "event_day DATE false",
	}
	if !slices.Equal(cols, want) {
		t.Errorf("columns\n got %v\nwant %v", cols, want)
	}
	if !slices.Equal(ts.PrimaryKey, []string{"id", "event_day"}) || !slices.Equal(ts.PartitionKeys, []string{"event_day"}) ||
		!slices.Equal(ts.BucketKey, []string{"id"}) || ts.Buckets != 8 || ts.Bucketing != kv.BucketingFluss {
		t.Errorf("keys: pk %v partition %v bucket %v %d %s", ts.PrimaryKey, ts.PartitionKeys, ts.BucketKey, ts.Buckets, ts.Bucketing)
	}
	if len(pm.Keys) != 1 || !pm.Keys[0].Derived || pm.Keys[0].Source != "event_ts" || pm.Keys[0].Transform != "day" {
		t.Fatalf("mapping %+v", pm)
	}
	tierTable, err := kv.NewTable(ts)
	if err != nil {
		t.Fatal(err)
	}

	parts, err := l.Partitions(ctx, "lake.events", nil)
	if err != nil {
		t.Fatal(err)
	}
	// PartitionStats survive a JSON round trip (a promoter's ledger).
	js, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []PartitionStats
	if err := json.Unmarshal(js, &decoded); err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		name, err := pm.PartitionName(p)
		if err != nil {
			t.Fatal(err)
		}
		if name != p.Values[0].Human {
			t.Errorf("tier partition of %s is %q", p.Path, name)
		}
		if again, err := pm.PartitionName(decoded[i]); again != name || err != nil {
			t.Errorf("after a JSON round trip: %q %v, want %q", again, err, name)
		}
		// Scanning with the mapping adds event_day; every row's tier partition
		// name (kv's rule over the row) equals the lake partition's.
		r := scan(t, l, "lake.events", ScanOptions{Partitions: []PartitionRef{p.Ref()}, Mapping: &pm, Columns: []string{"id", "event_ts"}})
		days := r.col(t, "event_day")
		for i, d := range days {
			dt, err := time.Parse("2006-01-02", d.(string))
			if err != nil {
				t.Fatal(err)
			}
			row := make(kv.Row, tierTable.NumColumns())
			row[len(row)-1] = kv.Date(dt.Unix() / 86400)
			got, err := tierTable.PartitionName(row)
			if err != nil || got != name {
				t.Fatalf("row %d of %s: tier partition %q (%v), want %q", i, p.Path, got, err, name)
			}
			if ts := r.col(t, "event_ts")[i].(string); ts[:10] != d.(string) {
				t.Fatalf("row %d: event_day %s for event_ts %s", i, d, ts)
			}
		}
	}
	// The derived column needs its source in the projection.
	if _, _, err := l.Scan(ctx, "lake.events", ScanOptions{Mapping: &pm, Columns: []string{"id"}}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "event_ts") {
		t.Errorf("mapping without source column: %v", err)
	}
}

// TestKeyUpdatedAcrossThreeSnapshots writes one key in three snapshots; the
// first file is large so that, decoded concurrently, later files finish first.
func TestKeyUpdatedAcrossThreeSnapshots(t *testing.T) {
	l := scratch(t)
	ctx := t.Context()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "k", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String, Required: true})
	tbl, err := l.cat.CreateTable(ctx, table.Identifier{"t", "kv"}, schema, v2())
	if err != nil {
		t.Fatal(err)
	}
	arrSchema, _ := table.SchemaToArrowSchema(schema, nil, true, false)
	write := func(keys []int64, value string) {
		t.Helper()
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrSchema)
		defer b.Release()
		for _, k := range keys {
			b.Field(0).(*array.Int64Builder).Append(k)
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", value, k))
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		rdr, _ := array.NewRecordReader(arrSchema, []arrow.RecordBatch{rec})
		defer rdr.Release()
		if tbl, err = tbl.Append(ctx, rdr, nil); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]int64, 200_000)
	for i := range big {
		big[i] = int64(i)
	}
	write(big, "v1")                   // key 7 at v1, in a large file
	write([]int64{1_000_001, 7}, "v2") // key 7 at v2
	write([]int64{7, 1_000_002}, "v3") // key 7 at v3
	for _, conc := range []int{1, 3} {
		r := scan(t, l, "t.kv", ScanOptions{Concurrency: conc, BatchSize: 4096})
		var sevens []string
		for i, k := range r.col(t, "k") {
			if k.(int64) == 7 {
				sevens = append(sevens, r.col(t, "v")[i].(string))
			}
		}
		if !slices.Equal(sevens, []string{"v1-7", "v2-7", "v3-7"}) {
			t.Errorf("concurrency %d: key 7 came as %v, want oldest to newest", conc, sevens)
		}
		if r.n != len(big)+4 {
			t.Errorf("concurrency %d: %d rows", conc, r.n)
		}
	}
}

// v2 makes a format v2 table with merge-on-read deletes.
func v2() catalog.CreateTableOpt {
	return catalog.WithProperties(iceberg.Properties{"format-version": "2", "write.delete.mode": "merge-on-read"})
}
