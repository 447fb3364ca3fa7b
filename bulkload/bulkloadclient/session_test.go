package bulkloadclient

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
)

const partitionedSchema = `{"schema_id":0,"columns":[{"name":"region","type":"STRING","nullable":false},` +
	`{"name":"id","type":"BIGINT","nullable":false},{"name":"name","type":"STRING","nullable":true}],` +
	`"primary_key":["region","id"],"partition_keys":["region"],"buckets":4,"bucketing":"fluss"}`

// partitionedContext is the context of partition "us" of a partitioned
// table whose remote data dir is a fresh file:// directory.
func partitionedContext(t *testing.T) *BuildContext {
	t.Helper()
	return partitionedContextIDs(t, []int64{1, 1, 1, 1})
}

// partitionedContextIDs is partitionedContext with the given snapshot ids.
func partitionedContextIDs(t testing.TB, ids []int64) *BuildContext {
	t.Helper()
	remote := "file://" + filepath.ToSlash(t.TempDir())
	txn := "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	bc, err := fromTargetInfo(&tierv1.BulkLoadTargetInfo{
		Handle: &tierv1.BulkLoadHandle{
			Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: new("us")}, TableId: 7, PartitionId: 3, TxnId: txn,
		},
		SchemaId: 0, TableSchemaJson: []byte(partitionedSchema), BucketCount: 4, Bucketing: "fluss",
		RemoteDataDir: remote, SnapshotIds: ids,
		ManifestPath: remote + "/kv/shop/events-7/us-p3/_bulkload/" + txn + "/manifest", BuildDeadlineMs: time.Now().Add(time.Hour).UnixMilli(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return bc
}

var eventsArrow = arrow.NewSchema([]arrow.Field{
	{Name: "region", Type: arrow.BinaryTypes.String},
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// batch returns rows (region, id, name; a nil id is NULL) as an Arrow batch
// of schema sc, whose fields are a prefix of region, id, name.
func batch(sc *arrow.Schema, rows ...[3]any) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		for i := range sc.NumFields() {
			switch fb := b.Field(i).(type) {
			case *array.StringBuilder:
				if r[i] == nil {
					fb.AppendNull()
				} else {
					fb.Append(r[i].(string))
				}
			case *array.Int64Builder:
				if r[i] == nil {
					fb.AppendNull()
				} else {
					fb.Append(int64(r[i].(int)))
				}
			case *array.Int32Builder:
				fb.Append(int32(r[i].(int)))
			}
		}
	}
	return b.NewRecordBatch()
}

func openSession(t *testing.T, bc *BuildContext, opts SessionOptions) *Session {
	t.Helper()
	opts.TempDir = t.TempDir()
	s, err := OpenBuildSession(t.Context(), bc, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestSessionArrowPartitioned builds a partition from Arrow batches and
// rows, with duplicates, and checks the results.
func TestSessionArrowPartitioned(t *testing.T) {
	bc := partitionedContext(t)
	s := openSession(t, bc, SessionOptions{})
	var rows [][3]any
	for i := range 1000 {
		rows = append(rows, [3]any{"us", i, "a"})
	}
	rec := batch(eventsArrow, rows...)
	defer rec.Release()
	if err := s.Add(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	dup := batch(eventsArrow, [3]any{"us", 5, "b"}, [3]any{"us", 6, nil})
	defer dup.Release()
	if err := s.Add(t.Context(), dup); err != nil {
		t.Fatal(err)
	}
	if err := s.AddRow(t.Context(), kv.Row{"us", int64(5), "c"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n, dups int64
	for _, r := range res {
		n += r.RowCount
		dups += r.Duplicates
	}
	if len(res) != 4 || n != 1000 || dups != 3 {
		t.Fatalf("%d results, %d rows, %d duplicates", len(res), n, dups)
	}
	if err := CheckCoverage(bc, res); err != nil {
		t.Fatal(err)
	}
}

// TestSessionInputErrors: invalid input fails with errors that wrap the
// documented sentinels and are never retriable; a failed Add fails the
// session, a rejected AddRow does not.
func TestSessionInputErrors(t *testing.T) {
	bc := partitionedContext(t)
	tb := bc.Table()
	bucketOf := func(id int) int {
		b, err := tb.Bucket(kv.Row{"us", int64(id), nil})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// ids of bucket 0 and of another bucket.
	var own, other int
	for id := 1; bucketOf(own) != 0 || bucketOf(other) == 0; id++ {
		if bucketOf(id) == 0 {
			own = id
		} else {
			other = id
		}
	}

	listSchema := arrow.NewSchema([]arrow.Field{
		{Name: "region", Type: arrow.BinaryTypes.String},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	int32Schema := arrow.NewSchema([]arrow.Field{
		{Name: "region", Type: arrow.BinaryTypes.String},
		{Name: "id", Type: arrow.PrimitiveTypes.Int32},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	emptyList := func() arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, listSchema)
		defer b.Release()
		b.Field(0).(*array.StringBuilder).Append("us")
		b.Field(1).(*array.Int64Builder).Append(1)
		b.Field(2).(*array.ListBuilder).AppendNull()
		return b.NewRecordBatch()
	}

	adds := []struct {
		name    string
		opts    SessionOptions
		rec     func() arrow.RecordBatch
		want    error
		wantRow bool // a *snapshotbuild.RowError
	}{
		{"another partition", SessionOptions{}, func() arrow.RecordBatch {
			return batch(eventsArrow, [3]any{"us", 1, "a"}, [3]any{"eu", 2, "a"})
		}, snapshotbuild.ErrWrongPartition, true},
		{"null key", SessionOptions{}, func() arrow.RecordBatch { return batch(eventsArrow, [3]any{"us", nil, "a"}) }, snapshotbuild.ErrInvalidRow, true},
		{"missing column", SessionOptions{}, func() arrow.RecordBatch {
			return batch(arrow.NewSchema(eventsArrow.Fields()[:2], nil), [3]any{"us", 1})
		}, snapshotbuild.ErrSchemaMismatch, false},
		{"wrong type", SessionOptions{}, func() arrow.RecordBatch { return batch(int32Schema, [3]any{"us", 1, "a"}) }, snapshotbuild.ErrSchemaMismatch, false},
		{"nested type", SessionOptions{}, emptyList, snapshotbuild.ErrUnsupportedArrowType, false},
		{"another bucket", SessionOptions{Buckets: []int{0}}, func() arrow.RecordBatch {
			return batch(eventsArrow, [3]any{"us", own, "a"}, [3]any{"us", other, "a"})
		}, snapshotbuild.ErrBucketNotOwned, false},
	}
	for _, tc := range adds {
		t.Run("add/"+tc.name, func(t *testing.T) {
			s := openSession(t, bc, tc.opts)
			rec := tc.rec()
			defer rec.Release()
			err := s.Add(t.Context(), rec)
			if !errors.Is(err, tc.want) || IsRetriable(err) {
				t.Fatalf("add: %v, want %v", err, tc.want)
			}
			var re *snapshotbuild.RowError
			if errors.As(err, &re) != tc.wantRow {
				t.Fatalf("add: %v: row error %v, want %v", err, re != nil, tc.wantRow)
			}
			// The session failed: so do later calls.
			ok := batch(eventsArrow, [3]any{"us", own, "a"})
			defer ok.Release()
			if err := s.Add(t.Context(), ok); !errors.Is(err, tc.want) {
				t.Fatalf("add after a failed add: %v", err)
			}
			if _, err := s.Finish(t.Context()); !errors.Is(err, tc.want) {
				t.Fatalf("finish after a failed add: %v", err)
			}
		})
	}

	rowCases := []struct {
		name string
		row  kv.Row
		want []error
	}{
		{"another partition", kv.Row{"eu", int64(own), "a"}, []error{snapshotbuild.ErrWrongPartition}},
		{"null key", kv.Row{"us", nil, "a"}, []error{snapshotbuild.ErrInvalidRow, kv.ErrInvalidRow}},
		{"wrong go type", kv.Row{"us", int32(own), "a"}, []error{snapshotbuild.ErrInvalidRow, kv.ErrInvalidRow}},
		{"short row", kv.Row{"us", int64(own)}, []error{snapshotbuild.ErrInvalidRow, kv.ErrInvalidRow}},
		{"bad partition value", kv.Row{"u s", int64(own), "a"}, []error{snapshotbuild.ErrInvalidRow, kv.ErrInvalidPartition}},
		{"another bucket", kv.Row{"us", int64(other), "a"}, []error{snapshotbuild.ErrBucketNotOwned}},
	}
	t.Run("addrow", func(t *testing.T) {
		s := openSession(t, bc, SessionOptions{Buckets: []int{0}})
		for _, tc := range rowCases {
			err := s.AddRow(t.Context(), tc.row)
			for _, w := range tc.want {
				if !errors.Is(err, w) || IsRetriable(err) {
					t.Errorf("%s: %v, want %v", tc.name, err, w)
				}
			}
		}
		// Rejected rows left the session usable.
		if err := s.AddRow(t.Context(), kv.Row{"us", int64(own), "a"}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Finish(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Bucket != 0 || res[0].RowCount != 1 {
			t.Fatalf("results: %+v", res)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.AddRow(t.Context(), kv.Row{"us", int64(own), "a"}); !errors.Is(err, snapshotbuild.ErrClosed) {
			t.Fatalf("add row after close: %v", err)
		}
	})

	// With SkipOtherBuckets, rows of other buckets are dropped, both ways.
	t.Run("skip", func(t *testing.T) {
		s := openSession(t, bc, SessionOptions{Buckets: []int{0}, SkipOtherBuckets: true})
		rec := batch(eventsArrow, [3]any{"us", own, "a"}, [3]any{"us", other, "a"})
		defer rec.Release()
		if err := s.Add(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		if err := s.AddRow(t.Context(), kv.Row{"us", int64(other), "b"}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Finish(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].RowCount != 1 {
			t.Fatalf("results: %+v", res)
		}
		if st := s.Stats(); st.InputRows != 1 || st.SkippedRows != 2 {
			t.Fatalf("stats: %d input rows, %d skipped", st.InputRows, st.SkippedRows)
		}
	})
}
