package lake

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// SampleAppend describes rows to append to a sample table.
type SampleAppend struct {
	// Day is the day (UTC) every appended row's event_ts falls on: its
	// partition event_day.
	Day time.Time
	// FirstID and Rows: the ids FirstID..FirstID+Rows-1 (version 1). Use
	// ids beyond the sample's (SampleOptions.Rows) for new keys.
	FirstID int64
	Rows    int
	// Seed makes the rows deterministic.
	Seed uint64
}

// SampleAppendDay appends rows to the sample table that Sample created
// (info from Sample), all in one day partition, in one new snapshot, as a
// lake writer adding a day would. It returns that snapshot.
func SampleAppendDay(ctx context.Context, info SampleInfo, a SampleAppend) (SampleSnapshot, error) {
	if a.Rows < 1 {
		return SampleSnapshot{}, fmt.Errorf("%w: sample append needs rows >= 1", ErrConfig)
	}
	l, tbl, err := openSampleTable(ctx, info)
	if err != nil {
		return SampleSnapshot{}, err
	}
	defer l.Close()
	arrSchema, err := table.SchemaToArrowSchema(sampleSchema(), nil, true, false)
	if err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample schema: %w", err)
	}
	day := time.Date(a.Day.Year(), a.Day.Month(), a.Day.Day(), 0, 0, 0, 0, time.UTC)
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrSchema)
	defer b.Release()
	regions := []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south"}
	for i := range int64(a.Rows) {
		id := a.FirstID + i
		r := rand.New(rand.NewPCG(a.Seed, uint64(id)))
		ts := day.Add(time.Duration(r.Int64N(int64(24 * time.Hour))).Truncate(time.Microsecond))
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user-%d", r.IntN(100)))
		b.Field(3).(*array.StringBuilder).Append(regions[r.IntN(len(regions))])
		b.Field(4).(*array.Decimal128Builder).Append(decimal128.FromI64(r.Int64N(10_000_000)))
		b.Field(5).(*array.Float64Builder).Append(float64(r.IntN(1_000_000)) / 1000)
		b.Field(6).(*array.BooleanBuilder).Append(r.IntN(2) == 0)
		b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.Add(time.Hour).UnixMicro()))
		b.Field(8).(*array.Int32Builder).Append(1)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rdr, err := array.NewRecordReader(arrSchema, []arrow.RecordBatch{rec})
	if err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample append: %w", err)
	}
	defer rdr.Release()
	what := "append day " + day.Format(time.DateOnly)
	tbl, err = tbl.Append(ctx, rdr, iceberg.Properties{"thaw.sample": what})
	if err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample %s: %w", what, err)
	}
	return sampleSnapshot(tbl, what), nil
}

// openSampleTable opens the sample's lake and loads its table; the caller
// closes the lake.
func openSampleTable(ctx context.Context, info SampleInfo) (*Lake, *table.Table, error) {
	l, err := Open(ctx, info.Config)
	if err != nil {
		return nil, nil, err
	}
	tbl, err := l.loadTable(ctx, info.Table)
	if err != nil {
		_ = l.Close()
		return nil, nil, err
	}
	return l, tbl, nil
}

// sampleSnapshot describes tbl's current snapshot, which what made.
func sampleSnapshot(tbl *table.Table, what string) SampleSnapshot {
	s := tbl.CurrentSnapshot()
	op := ""
	if s.Summary != nil {
		op = string(s.Summary.Operation)
	}
	return SampleSnapshot{ID: s.SnapshotID, Operation: op, What: what}
}

// SampleDelete deletes the rows of the sample table whose id is in ids, as
// a copy-on-write delete (Iceberg's default delete mode, and Spark's): the
// data files holding them are rewritten without them, and the rows they
// carry over take the new snapshot's sequence number (what
// Lake.RewrittenFiles counts).
func SampleDelete(ctx context.Context, info SampleInfo, ids []int64) (SampleSnapshot, error) {
	if len(ids) == 0 {
		return SampleSnapshot{}, fmt.Errorf("%w: sample delete needs ids", ErrConfig)
	}
	l, tbl, err := openSampleTable(ctx, info)
	if err != nil {
		return SampleSnapshot{}, err
	}
	defer l.Close()
	what := fmt.Sprintf("delete ids %v (copy-on-write)", ids)
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{"write.delete.mode": "copy-on-write"}); err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample %s: %w", what, err)
	}
	if err := tx.Delete(ctx, iceberg.IsIn(iceberg.Reference("id"), ids...), iceberg.Properties{"thaw.sample": what}); err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample %s: %w", what, err)
	}
	if tbl, err = tx.Commit(ctx); err != nil {
		return SampleSnapshot{}, fmt.Errorf("lake: sample %s: %w", what, err)
	}
	return sampleSnapshot(tbl, what), nil
}
