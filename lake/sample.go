package lake

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// SampleOptions size the sample lake.
type SampleOptions struct {
	// Dir receives catalog.db and warehouse/; it is created if missing and
	// must not already hold a sample.
	Dir string
	// Rows is the number of distinct ids (default 10,000); Days the number of
	// day partitions they spread over (default 7, from 2024-01-01 UTC).
	Rows int
	Days int
	// Seed makes the data deterministic (the same seed gives the same rows;
	// snapshot ids and file names are random, as Iceberg makes them).
	Seed uint64
	// AppendOnly writes only the two initial appends: no updates, no deletes.
	AppendOnly bool
}

// SampleInfo says what Sample created.
type SampleInfo struct {
	Config Config `json:"config"` // opens the sample lake
	Table  string `json:"table"`  // "lake.events"
	// Snapshots are the snapshot ids in commit order, with what each did.
	Snapshots []SampleSnapshot `json:"snapshots"`
	// Keys is the number of distinct live ids; Rows the number of rows a scan
	// returns (deletes applied, but ids updated by append-only still have
	// their older row too, before the newer one).
	Keys int `json:"keys"`
	Rows int `json:"rows"`
	// Partitions is the number of day partitions that hold live rows: Days
	// at most, fewer when there are fewer ids than days or a partition's
	// every id was deleted.
	Partitions int `json:"partitions"`
	// UpdatedByDelete are ids rewritten by equality delete + append;
	// UpdatedByAppend ids rewritten by a plain append of a newer version;
	// Deleted ids removed by position deletes.
	UpdatedByDelete []int64 `json:"updated_by_delete"`
	UpdatedByAppend []int64 `json:"updated_by_append"`
	Deleted         []int64 `json:"deleted"`
}

// SampleSnapshot is one snapshot of the sample table.
type SampleSnapshot struct {
	ID        int64  `json:"id"`
	Operation string `json:"operation"`
	What      string `json:"what"`
}

// SampleStart is the first day of the sample data.
var SampleStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// sampleSchema is the events table: id is the identifier field; event_ts
// carries the day partition.
func sampleSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "event_ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 3, Name: "user_name", Type: iceberg.PrimitiveTypes.String, Required: true},
		iceberg.NestedField{ID: 4, Name: "region", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 5, Name: "amount", Type: iceberg.DecimalTypeOf(12, 2)},
		iceberg.NestedField{ID: 6, Name: "score", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 7, Name: "active", Type: iceberg.PrimitiveTypes.Bool},
		iceberg.NestedField{ID: 8, Name: "updated_at", Type: iceberg.PrimitiveTypes.Timestamp, Required: true},
		iceberg.NestedField{ID: 9, Name: "version", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	)
}

// Sample creates a realistic Iceberg table in a local SQL catalog under
// opts.Dir: lake.events, partitioned by day(event_ts) as event_day, format
// v2 with merge-on-read deletes, and these snapshots:
//
//  1. append of the first half of the ids;
//  2. append of the second half;
//  3. equality delete (on id) of every 50th id of the first half, and
//  4. append of their new versions (version 2);
//  5. append-only update: new versions of every 50th id of the second half,
//     with no delete (the scan returns the old row, then the new one);
//  6. position deletes of every 97th id (other than the updated ones).
//
// With AppendOnly only snapshots 1 and 2 are written.
func Sample(ctx context.Context, opts SampleOptions) (SampleInfo, error) {
	if opts.Rows == 0 {
		opts.Rows = 10_000
	}
	if opts.Days == 0 {
		opts.Days = 7
	}
	if opts.Rows < 2 || opts.Days < 1 || opts.Dir == "" {
		return SampleInfo{}, fmt.Errorf("%w: sample needs a dir, rows >= 2 and days >= 1", ErrConfig)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return SampleInfo{}, fmt.Errorf("lake: sample dir: %w", err)
	}
	dbPath := filepath.Join(dir, "catalog.db")
	if _, err := os.Stat(dbPath); err == nil {
		return SampleInfo{}, fmt.Errorf("%w: %s already exists", ErrConfig, dbPath)
	}
	wh := filepath.Join(dir, "warehouse")
	if err := os.MkdirAll(wh, 0o755); err != nil {
		return SampleInfo{}, fmt.Errorf("lake: sample dir: %w", err)
	}
	cfg := Config{Type: CatalogSQL, URI: "file:" + dbPath, Warehouse: "file://" + wh}
	l, err := open(ctx, cfg, true)
	if err != nil {
		return SampleInfo{}, err
	}
	info, err := writeSample(ctx, l.cat, opts)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	info.Config = cfg.Defaults()
	return info, err
}

// sampleGen produces the deterministic rows of the sample.
type sampleGen struct {
	opts    SampleOptions
	schema  *arrow.Schema
	regions []string
	users   []string
}

func (g *sampleGen) eventTS(id int64) time.Time {
	// Spread ids over the days; the time of day is a hash of the id.
	day := int(id % int64(g.opts.Days))
	r := rand.New(rand.NewPCG(g.opts.Seed, uint64(id)))
	return SampleStart.AddDate(0, 0, day).Add(time.Duration(r.Int64N(int64(24 * time.Hour))).Truncate(time.Microsecond))
}

// batch builds the rows for ids with the given version.
func (g *sampleGen) batch(ids []int64, version int32) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, g.schema)
	defer b.Release()
	for _, id := range ids {
		r := rand.New(rand.NewPCG(g.opts.Seed^uint64(version)<<32, uint64(id)))
		ts := g.eventTS(id)
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
		b.Field(2).(*array.StringBuilder).Append(g.users[r.IntN(len(g.users))])
		if r.IntN(20) == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.StringBuilder).Append(g.regions[r.IntN(len(g.regions))])
		}
		b.Field(4).(*array.Decimal128Builder).Append(decimal128.FromI64(r.Int64N(10_000_000)))
		if r.IntN(10) == 0 {
			b.Field(5).AppendNull()
		} else {
			b.Field(5).(*array.Float64Builder).Append(float64(r.IntN(1_000_000)) / 1000)
		}
		b.Field(6).(*array.BooleanBuilder).Append(r.IntN(2) == 0)
		upd := ts.Add(time.Duration(version) * time.Hour)
		b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(upd.UnixMicro()))
		b.Field(8).(*array.Int32Builder).Append(version)
	}
	return b.NewRecordBatch()
}

// reader yields ids in batches of at most 65,536 rows.
func (g *sampleGen) reader(ids []int64, version int32) array.RecordReader {
	var recs []arrow.RecordBatch
	for chunk := range slices.Chunk(ids, 1<<16) {
		recs = append(recs, g.batch(chunk, version))
	}
	rdr, _ := array.NewRecordReader(g.schema, recs) // schema matches by construction
	for _, r := range recs {
		r.Release()
	}
	return rdr
}

func writeSample(ctx context.Context, cat catalog.Catalog, opts SampleOptions) (SampleInfo, error) {
	info := SampleInfo{Table: "lake.events"}
	schema := sampleSchema()
	arrSchema, err := table.SchemaToArrowSchema(schema, nil, true, false)
	if err != nil {
		return info, fmt.Errorf("lake: sample schema: %w", err)
	}
	g := &sampleGen{
		opts: opts, schema: arrSchema,
		regions: []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south"},
		users:   []string{"ada", "grace", "linus", "ken", "barbara", "edsger", "donald", "margaret"},
	}
	ns := table.Identifier{"lake"}
	if err := cat.CreateNamespace(ctx, ns, iceberg.Properties{"comment": "thaw sample lake"}); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return info, fmt.Errorf("lake: sample namespace: %w", err)
	}
	spec, err := iceberg.NewPartitionSpecOpts(
		iceberg.AddPartitionFieldBySourceID(2, "event_day", iceberg.DayTransform{}, schema, nil))
	if err != nil {
		return info, fmt.Errorf("lake: sample partition spec: %w", err)
	}
	tbl, err := cat.CreateTable(ctx, table.Identifier{"lake", "events"}, schema,
		catalog.WithPartitionSpec(&spec),
		catalog.WithProperties(iceberg.Properties{
			"format-version":    "2",
			"write.delete.mode": "merge-on-read",
			"comment":           "thaw sample: events with updates and deletes",
		}))
	if err != nil {
		return info, fmt.Errorf("lake: sample create table: %w", err)
	}

	n := int64(opts.Rows)
	var first, second, upd1, upd2, del []int64
	for id := range n {
		if id < n/2 {
			first = append(first, id)
		} else {
			second = append(second, id)
		}
		switch {
		case id%50 == 7 && id < n/2:
			upd1 = append(upd1, id)
		case id%50 == 13 && id >= n/2:
			upd2 = append(upd2, id)
		case id%97 == 3:
			del = append(del, id)
		}
	}
	record := func(t *table.Table, what string) {
		s := t.CurrentSnapshot()
		op := ""
		if s.Summary != nil {
			op = string(s.Summary.Operation)
		}
		info.Snapshots = append(info.Snapshots, SampleSnapshot{ID: s.SnapshotID, Operation: op, What: what})
	}
	appendIDs := func(ids []int64, version int32, what string) error {
		rdr := g.reader(ids, version)
		defer rdr.Release()
		t, err := tbl.Append(ctx, rdr, iceberg.Properties{"thaw.sample": what})
		if err != nil {
			return fmt.Errorf("lake: sample %s: %w", what, err)
		}
		tbl = t
		record(tbl, what)
		return nil
	}
	if err := appendIDs(first, 1, "append first half"); err != nil {
		return info, err
	}
	if err := appendIDs(second, 1, "append second half"); err != nil {
		return info, err
	}
	info.Keys, info.Rows = len(first)+len(second), len(first)+len(second)
	if opts.AppendOnly {
		info.Partitions = livePartitions(n, int64(opts.Days), nil)
		return info, nil
	}

	// Update by equality delete + append.
	if len(upd1) > 0 {
		delSchema := arrow.NewSchema([]arrow.Field{arrSchema.Field(0), arrSchema.Field(1)}, nil)
		rec := g.batch(upd1, 1)
		cols := []arrow.Array{rec.Column(0), rec.Column(1)}
		keys := array.NewRecordBatch(delSchema, cols, rec.NumRows())
		rec.Release()
		tx := tbl.NewTransaction()
		err := tx.CommitEqualityDeletes(ctx, []int{1}, oneBatch(keys), iceberg.Properties{"thaw.sample": "equality delete"})
		keys.Release()
		if err != nil {
			return info, fmt.Errorf("lake: sample equality delete: %w", err)
		}
		if tbl, err = tx.Commit(ctx); err != nil {
			return info, fmt.Errorf("lake: sample equality delete: %w", err)
		}
		record(tbl, "equality delete of updated ids")
		if err := appendIDs(upd1, 2, "append updated ids"); err != nil {
			return info, err
		}
	}
	// Update by append only.
	if len(upd2) > 0 {
		if err := appendIDs(upd2, 2, "append-only update"); err != nil {
			return info, err
		}
		info.Rows += len(upd2)
	}
	// Position deletes.
	if len(del) > 0 {
		lits := make([]int64, len(del))
		copy(lits, del)
		filter := iceberg.IsIn(iceberg.Reference("id"), lits...)
		t, err := tbl.Delete(ctx, filter, iceberg.Properties{"thaw.sample": "position delete"})
		if err != nil {
			return info, fmt.Errorf("lake: sample position delete: %w", err)
		}
		tbl = t
		record(tbl, "position delete")
		info.Keys -= len(del)
		info.Rows -= len(del)
	}
	info.UpdatedByDelete, info.UpdatedByAppend, info.Deleted = upd1, upd2, del
	info.Partitions = livePartitions(n, int64(opts.Days), del)
	return info, nil
}

// livePartitions counts the days that ids 0..n-1 but deleted fall on.
func livePartitions(n, days int64, deleted []int64) int {
	gone := make(map[int64]bool, len(deleted))
	for _, id := range deleted {
		gone[id] = true
	}
	live := make(map[int64]bool)
	for id := range n {
		if !gone[id] {
			live[id%days] = true
		}
	}
	return len(live)
}

func oneBatch(rec arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) }
}
