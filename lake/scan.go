package lake

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// ScanOptions select what Scan reads.
type ScanOptions struct {
	// SnapshotID is the snapshot to read; nil means the current one. The rows
	// are read with that snapshot's schema (Iceberg's time-travel rule), for
	// the current snapshot too, so a given (table, snapshot) always yields the
	// same columns.
	SnapshotID *int64
	// Partitions restricts the scan to the data files of these lake
	// partitions (PartitionStats.Ref); empty reads the whole table. Delete
	// files are applied whatever partition they sit in. A ref that names
	// no partition of the snapshot reads nothing, or with
	// RequirePartitions fails with ErrNotFound (what a caller reading
	// partitions it listed wants: reading nothing would lose them).
	Partitions        []PartitionRef
	RequirePartitions bool
	// Columns selects columns by name, in the schema's order; empty means
	// all. With Mapping, the source columns of derived keys must be selected.
	Columns []string
	// Mapping, when set, appends its derived partition key columns (see
	// PartitionKeyMapping.Derived) to every batch, computed from the rows.
	Mapping *PartitionMapping
	// BatchSize caps the rows of a batch (default: the table's
	// read.parquet.batch-size, else iceberg-go's default).
	BatchSize int
	// Concurrency is how many data files are decoded at once (default
	// GOMAXPROCS). Batches still come in file order.
	Concurrency int
}

// checkColumns checks that the schema a scan with options so reads (the
// snapshot's) has every column of cols, by exact name, so that a wrong
// name gets an ErrNotFound that lists the columns there are.
func checkColumns(name string, tbl *table.Table, so []table.ScanOption, cols []string) error {
	schema, err := tbl.Scan(so...).Projection()
	if err != nil {
		return fmt.Errorf("lake: scan %s: %w", name, err)
	}
	for _, c := range cols {
		if _, ok := schema.FindFieldByName(c); !ok {
			names := make([]string, 0, schema.NumFields())
			for _, f := range schema.Fields() {
				names = append(names, f.Name)
			}
			return fmt.Errorf("%w: scan %s: no column %q (its columns: %s)", ErrNotFound, name, c, strings.Join(names, ", "))
		}
	}
	return nil
}

// Scan streams the rows of table name, deletes applied, as Arrow record
// batches. The schema is returned first, also when there are no rows.
//
// Order: data files are read in ascending data sequence number (a
// format-v1 table has none: in the order of the snapshots that added
// them), ties by file path, and rows keep their order within a file, so when a key was written
// again by a later snapshot its newest row comes last. Concurrency does not
// change this order; it only decodes files ahead.
//
// Memory: batches are produced as the caller consumes them. Up to
// Concurrency files are decoded ahead of the one being returned, so the scan
// holds at most about Concurrency x the rows of the largest data file.
//
// The caller must Release every batch it receives. The iterator is
// single-use; an error ends it. Types: as iceberg-go reads them, except that
// uuid columns come as fixed_size_binary(16) (not the arrow.uuid extension).
func (l *Lake) Scan(ctx context.Context, name string, opts ScanOptions) (*arrow.Schema, iter.Seq2[arrow.RecordBatch, error], error) {
	tbl, err := l.loadTable(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	snap, err := resolveSnapshot(name, tbl, opts.SnapshotID)
	if err != nil {
		return nil, nil, err
	}
	var so []table.ScanOption
	if snap != nil {
		so = append(so, table.WithSnapshotID(snap.SnapshotID))
	}
	if len(opts.Columns) > 0 {
		if err := checkColumns(name, tbl, so, opts.Columns); err != nil {
			return nil, nil, err
		}
		so = append(so, table.WithSelectedFields(opts.Columns...))
	}
	if opts.BatchSize > 0 {
		so = append(so, table.WithArrowBatchSize(opts.BatchSize))
	}
	if opts.Concurrency > 0 {
		so = append(so, table.WithMaxConcurrency(opts.Concurrency))
	}
	sc := tbl.Scan(so...)
	proj, err := sc.Projection()
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	var tasks []table.FileScanTask
	if snap != nil {
		if tasks, err = sc.PlanFiles(ctx); err != nil {
			return nil, nil, fmt.Errorf("lake: plan scan of %s: %w", name, err)
		}
	}
	pt := newPartitionTyper(tbl.Metadata())
	if len(opts.Partitions) > 0 {
		if tasks, err = filterTasks(tbl.Metadata(), pt, tasks, opts.Partitions, opts.RequirePartitions); err != nil {
			return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
		}
	}
	if snap != nil {
		if err := addGlobalPositionDeletes(ctx, tbl, snap, tasks); err != nil {
			return nil, nil, fmt.Errorf("lake: plan scan of %s: %w", name, err)
		}
	}
	// iceberg-go reads Parquet only: an ORC or Avro file would fail late
	// (after the files before it were decoded), without its name, and be
	// retried as if it might pass.
	for _, t := range tasks {
		if f := t.File.FileFormat(); f != iceberg.ParquetFile {
			return nil, nil, fmt.Errorf("%w: scan %s: data file %s is %s; only Parquet data files can be read", ErrUnmappable, name, t.File.FilePath(), f)
		}
		for _, d := range slices.Concat(t.DeleteFiles, t.EqualityDeleteFiles) {
			if f := d.FileFormat(); f != iceberg.ParquetFile && f != iceberg.PuffinFile {
				return nil, nil, fmt.Errorf("%w: scan %s: delete file %s is %s; only Parquet (and Puffin deletion vectors) can be read", ErrUnmappable, name, d.FilePath(), f)
			}
		}
	}
	added, err := addedOrder(ctx, tbl, snap, tasks)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	slices.SortStableFunc(tasks, func(a, b table.FileScanTask) int {
		if c := cmp.Compare(taskSeq(a), taskSeq(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(added[a.File.FilePath()], added[b.File.FilePath()]); c != 0 {
			return c
		}
		return strings.Compare(a.File.FilePath(), b.File.FilePath())
	})
	if err := checkEqualityDeletes(ctx, tbl, tasks); err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	schema, batches, err := sc.ReadTasks(ctx, tasks)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	fills, err := identityFills(pt, tasks, schema, proj)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	conv, err := newConverter(schema, proj, opts.Mapping, fills)
	if err != nil {
		return nil, nil, fmt.Errorf("lake: scan %s: %w", name, err)
	}
	if conv == nil {
		return schema, wrapErrors(name, batches), nil
	}
	return conv.out, conv.apply(name, batches), nil
}

// checkEqualityDeletes refuses equality deletes keyed on a column whose
// type changed (int promoted to long, float to double): iceberg-go (v0.7)
// matches a data file's key in the file's own type against the delete
// file's, so a delete written after the promotion misses rows of files
// written before it, which would be read as if never deleted. The
// table's schemas show most such changes; the files themselves show the
// rest (the old schema removed from the metadata, as Java's
// cleanExpiredMetadata does, or files added by add_files): the key's
// physical type in each data file's Parquet footer must be the one in its
// delete files'.
func checkEqualityDeletes(ctx context.Context, tbl *table.Table, tasks []table.FileScanTask) error {
	md := tbl.Metadata()
	checked := map[int]bool{}
	found := false
	for _, t := range tasks {
		for _, d := range t.EqualityDeleteFiles {
			found = true
			for _, id := range d.EqualityFieldIDs() {
				if checked[id] {
					continue
				}
				checked[id] = true
				var first iceberg.NestedField
				seen := false
				for _, sc := range md.Schemas() {
					f, ok := sc.FindFieldByID(id)
					switch {
					case !ok:
					case !seen:
						first, seen = f, true
					case !f.Type.Equals(first.Type):
						return fmt.Errorf("%w: equality deletes on column %s (field %d), whose type changed from %s to %s: "+
							"the Iceberg reader would miss deletes of rows written before the change", ErrUnmappable, f.Name, id, first.Type, f.Type)
					}
				}
			}
		}
	}
	if !found {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return fmt.Errorf("open file IO: %w", err)
	}
	footers := map[string]map[int]parquet.Type{}
	typesOf := func(f iceberg.DataFile) (map[int]parquet.Type, error) {
		if m, ok := footers[f.FilePath()]; ok {
			return m, nil
		}
		m, err := parquetFieldTypes(fs, f)
		if err != nil {
			return nil, err
		}
		footers[f.FilePath()] = m
		return m, nil
	}
	for _, t := range tasks {
		if len(t.EqualityDeleteFiles) == 0 || t.File.FileFormat() != iceberg.ParquetFile {
			continue
		}
		data, err := typesOf(t.File)
		if err != nil {
			return err
		}
		for _, d := range t.EqualityDeleteFiles {
			if d.FileFormat() != iceberg.ParquetFile {
				continue
			}
			del, err := typesOf(d)
			if err != nil {
				return err
			}
			for _, id := range d.EqualityFieldIDs() {
				dt, ok1 := data[id]
				kt, ok2 := del[id]
				if !ok1 && len(data) > 0 {
					// Written before the column existed: its rows read it
					// as null, and Iceberg matches a delete's null key to
					// them; iceberg-go fails the read of such a file instead
					// (after the files before it were streamed).
					return fmt.Errorf("%w: equality deletes on %s: data file %s was written before the column existed, "+
						"which the Iceberg reader cannot apply them to", ErrUnmappable, fieldName(tbl, id), t.File.FilePath())
				}
				if ok1 && ok2 && promotedStorage(dt, kt) {
					return fmt.Errorf("%w: equality deletes on %s: data file %s holds it as %s, delete file %s as %s "+
						"(a type promoted since): the Iceberg reader would miss its deletes", ErrUnmappable,
						fieldName(tbl, id), t.File.FilePath(), dt, d.FilePath(), kt)
				}
			}
		}
	}
	return nil
}

// promotedStorage reports whether a key column stored as a in one file and
// as b in another tells of a type promoted between them: int to long (a
// decimal widened past 9 digits likewise), float to double. Other
// differences are the writers' (a decimal as INT32 by parquet-mr and as
// FIXED_LEN_BYTE_ARRAY by iceberg-go, a timestamp as INT96 in an added
// file), read as the same values.
func promotedStorage(a, b parquet.Type) bool {
	pair := func(x, y parquet.Type) bool { return a == x && b == y || a == y && b == x }
	return pair(parquet.Types.Int32, parquet.Types.Int64) || pair(parquet.Types.Float, parquet.Types.Double)
}

// fieldName names field id of tbl's current schema for an error.
func fieldName(tbl *table.Table, id int) string {
	if f, ok := tbl.Schema().FindFieldByID(id); ok {
		return fmt.Sprintf("column %s (field %d)", f.Name, id)
	}
	return fmt.Sprintf("field %d", id)
}

// parquetFieldTypes reads a Parquet file's footer: the physical type of
// each primitive column that carries an Iceberg field id.
func parquetFieldTypes(fs icebergio.IO, f iceberg.DataFile) (map[int]parquet.Type, error) {
	in, err := fs.Open(f.FilePath())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", f.FilePath(), err)
	}
	defer in.Close()
	return footerFieldTypes(f.FilePath(), in)
}

// footerFieldTypes reads the field ids' physical types from the footer of
// the Parquet file in (named path). arrow-go panics on some damaged
// footers (an invalid logical type or time unit, a huge count): that is an
// error naming the file, not a crash.
func footerFieldTypes(path string, in parquet.ReaderAtSeeker) (_ map[int]parquet.Type, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("read the footer of %s: damaged Parquet footer: %v", path, p)
		}
	}()
	rdr, err := file.NewParquetReader(in)
	if err != nil {
		return nil, fmt.Errorf("read the footer of %s: %w", path, err)
	}
	defer rdr.Close()
	sc := rdr.MetaData().Schema
	out := make(map[int]parquet.Type, sc.NumColumns())
	for i := range sc.NumColumns() {
		c := sc.Column(i)
		if id := c.SchemaNode().FieldID(); id >= 0 {
			out[int(id)] = c.PhysicalType()
		}
	}
	return out, nil
}

// addedOrder returns, when two or more tasks have sequence number 0 (a
// format-v1 table, whose data files carry none, or a table upgraded from
// v1 to v2, whose v1-era files keep 0), where each data file of snap was
// added: the rank of its adding snapshot in snap's ancestry, from 1 for
// the oldest ancestor the metadata still holds; a file of a snapshot
// expired from it ranks below 1, by its place in the manifests (below).
// Nil otherwise: sequence numbers order the files.
func addedOrder(ctx context.Context, tbl *table.Table, snap *table.Snapshot, tasks []table.FileScanTask) (map[string]int, error) {
	zero := 0
	for _, t := range tasks {
		if taskSeq(t) == 0 {
			zero++
		}
	}
	if snap == nil || zero < 2 {
		return nil, nil
	}
	md := tbl.Metadata()
	var chain []int64 // newest first
	for s := snap; s != nil; {
		chain = append(chain, s.SnapshotID)
		if s.ParentSnapshotID == nil {
			break
		}
		s = md.SnapshotByID(*s.ParentSnapshotID)
	}
	rank := make(map[int64]int, len(chain))
	for i, id := range chain {
		rank[id] = len(chain) - i // 1 for the oldest one known
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, fmt.Errorf("order the data files of sequence number 0: %w", err)
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return nil, fmt.Errorf("order the data files of sequence number 0: %w", err)
	}
	out := make(map[string]int, len(tasks))
	pos := 0
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range m.Entries(fs, true) {
			if err != nil {
				return nil, fmt.Errorf("order the data files of sequence number 0: manifest %s: %w", m.FilePath(), err)
			}
			pos++
			r, ok := rank[e.SnapshotID()]
			if !ok {
				// Added by a snapshot expired from the metadata: older than
				// every one it holds. Among such files the manifest list
				// (newest manifest first) and each manifest (newest entry
				// first, also after a merge) give the order, as Iceberg
				// writes them: the later a file comes, the older it is.
				r = -pos
			}
			out[e.DataFile().FilePath()] = r
		}
	}
	return out, nil
}

// addGlobalPositionDeletes adds to each task the position delete files of
// an unpartitioned spec that apply to it (a sequence number at or above
// its data file's) and that iceberg-go's planning left out: it pairs
// position deletes with data files of their own spec and partition only,
// while Iceberg applies a position delete of an unpartitioned spec to the
// data files of every partition — what a merge-on-read delete writes
// after the table's partition fields were dropped. (Its deleted rows came
// back.) The reader applies a file's rows only to the data file they name.
func addGlobalPositionDeletes(ctx context.Context, tbl *table.Table, snap *table.Snapshot, tasks []table.FileScanTask) error {
	md := tbl.Metadata()
	if len(tasks) == 0 || !slices.ContainsFunc(md.PartitionSpecs(), func(s iceberg.PartitionSpec) bool { return !s.IsUnpartitioned() }) {
		return nil // every delete is paired by its (empty) partition already
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return fmt.Errorf("open file IO: %w", err)
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return fmt.Errorf("read manifest list of snapshot %d: %w", snap.SnapshotID, err)
	}
	type global struct {
		f   iceberg.DataFile
		seq int64
	}
	var globals []global
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentDeletes {
			continue
		}
		for entry, err := range m.Entries(fs, true) {
			if err != nil {
				return fmt.Errorf("read manifest %s: %w", m.FilePath(), err)
			}
			df := entry.DataFile()
			if df.ContentType() != iceberg.EntryContentPosDeletes {
				continue
			}
			if spec := md.PartitionSpecByID(int(df.SpecID())); spec == nil || !spec.IsUnpartitioned() {
				continue
			}
			// The data sequence number: a delete file rewritten since keeps
			// it (its file sequence number is newer).
			globals = append(globals, global{df, entry.SequenceNum()})
		}
	}
	for i := range tasks {
		t := &tasks[i]
		for _, g := range globals {
			if taskSeq(*t) > g.seq {
				continue
			}
			if ref := g.f.ReferencedDataFile(); ref != nil && *ref != t.File.FilePath() {
				continue
			}
			if slices.ContainsFunc(t.DeleteFiles, func(d iceberg.DataFile) bool { return d.FilePath() == g.f.FilePath() }) {
				continue
			}
			t.DeleteFiles = append(t.DeleteFiles, g.f)
		}
	}
	return nil
}

func taskSeq(t table.FileScanTask) int64 {
	if t.DataSequenceNumber != nil {
		return *t.DataSequenceNumber
	}
	return 0
}

func filterTasks(meta table.Metadata, pt *partitionTyper, tasks []table.FileScanTask, refs []PartitionRef, require bool) ([]table.FileScanTask, error) {
	want := map[PartitionRef]bool{}
	for _, r := range refs {
		if meta.PartitionSpecByID(r.SpecID) == nil {
			return nil, fmt.Errorf("%w: partition spec %d", ErrNotFound, r.SpecID)
		}
		want[r] = true
	}
	out := tasks[:0:0]
	matched := map[PartitionRef]bool{}
	for _, t := range tasks {
		spec := int(t.File.SpecID())
		_, path, err := pt.values(spec, t.File.Partition())
		if err != nil {
			return nil, fmt.Errorf("partition of %s: %w", t.File.FilePath(), err)
		}
		if r := (PartitionRef{SpecID: spec, Path: path}); want[r] {
			out = append(out, t)
			matched[r] = true
		}
	}
	// A partition listed at a snapshot has data files there: a ref that
	// matches none names no partition of this snapshot (a typo, a path
	// of another snapshot, or one whose rendering changed since it was
	// listed), and a promotion reading nothing for it would promote it
	// empty.
	for _, r := range refs {
		if require && !matched[r] {
			return nil, fmt.Errorf("%w: partition %s (spec %d) has no data file in this snapshot", ErrNotFound, r.Path, r.SpecID)
		}
	}
	return out, nil
}

func wrapErrors(name string, seq iter.Seq2[arrow.RecordBatch, error]) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for rec, err := range seq {
			if err != nil {
				yield(nil, fmt.Errorf("lake: read %s: %w", name, err))
				return
			}
			if !yield(rec, nil) {
				return
			}
		}
	}
}

// converter rewrites iceberg-go's batches: extension columns to their
// storage, identity partition columns a data file lacks filled in, and
// derived partition key columns appended.
type converter struct {
	out     *arrow.Schema
	unwrap  []bool // per input column
	fills   []identityFill
	derived []derivedColumn
	mem     memory.Allocator
}

// identityFill is an identity-partitioned column whose value the scan's
// data files all share in their partition tuples. A data file without the
// column (a Hive table migrated to Iceberg keeps partition values in its
// paths; the migration records them in the manifest) reads as nulls from
// iceberg-go; the Iceberg spec's column projection says to read the
// partition value instead, which a batch whose column is all null gets.
type identityFill struct {
	col   int // input column
	value any // PartitionValue.Value
	// last is the constant column of the last length built.
	last arrow.Array
}

// identityFills returns the identity partition columns of in whose value
// every task's partition tuple holds alike (not null); none when the tasks
// span several partitions (it stops reading tuples once none is common).
func identityFills(pt *partitionTyper, tasks []table.FileScanTask, in *arrow.Schema, proj *iceberg.Schema) ([]identityFill, error) {
	var common map[int]any // source id -> value
	for i, t := range tasks {
		if i > 0 && len(common) == 0 {
			break
		}
		values, _, err := pt.values(int(t.File.SpecID()), t.File.Partition())
		if err != nil {
			return nil, fmt.Errorf("partition of %s: %w", t.File.FilePath(), err)
		}
		seen := map[int]any{}
		for _, v := range values {
			if v.Transform == "identity" && v.Value != nil {
				seen[v.SourceID] = v.Value
			}
		}
		if i == 0 {
			common = seen
			continue
		}
		for id, v := range common {
			if w, ok := seen[id]; !ok || !reflect.DeepEqual(v, w) {
				delete(common, id)
			}
		}
	}
	var fills []identityFill
	for _, id := range slices.Sorted(maps.Keys(common)) {
		name, ok := proj.FindColumnName(id)
		if !ok {
			continue
		}
		if ix := in.FieldIndices(name); len(ix) == 1 && constantType(in.Field(ix[0]).Type, common[id]) {
			fills = append(fills, identityFill{col: ix[0], value: common[id]})
		}
	}
	return fills, nil
}

// constantType reports whether constant can build a column of type dt
// from v.
func constantType(dt arrow.DataType, v any) bool {
	a := constant(memory.DefaultAllocator, dt, v, 1)
	if a == nil {
		return false
	}
	a.Release()
	return true
}

// constant builds a column of n copies of v (a PartitionValue.Value) of
// type dt, or returns nil for a type it does not build.
func constant(mem memory.Allocator, dt arrow.DataType, v any, n int) arrow.Array {
	b := array.NewBuilder(mem, dt)
	defer b.Release()
	b.Reserve(n)
	var ok bool
	switch b := b.(type) {
	case *array.StringBuilder:
		ok = appendN(b, v, n, same[string])
	case *array.LargeStringBuilder:
		ok = appendN(b, v, n, same[string])
	case *array.BooleanBuilder:
		ok = appendN(b, v, n, same[bool])
	case *array.Int32Builder:
		ok = appendN(b, v, n, same[int32])
	case *array.Int64Builder:
		ok = appendN(b, v, n, same[int64])
	case *array.Float32Builder:
		ok = appendN(b, v, n, same[float32])
	case *array.Float64Builder:
		ok = appendN(b, v, n, same[float64])
	case *array.Date32Builder:
		ok = appendN(b, v, n, func(days int32) arrow.Date32 { return arrow.Date32(days) })
	case *array.TimestampBuilder:
		ok = appendN(b, v, n, func(units int64) arrow.Timestamp { return arrow.Timestamp(units) })
	case *array.BinaryBuilder:
		ok = appendN(b, v, n, same[[]byte])
	}
	if !ok {
		return nil
	}
	return b.NewArray()
}

// appendN appends v, which must be a V, n times to b as to converts it.
func appendN[V, E any](b interface{ Append(E) }, v any, n int, to func(V) E) bool {
	x, ok := v.(V)
	if !ok {
		return false
	}
	e := to(x)
	for range n {
		b.Append(e)
	}
	return true
}

func same[T any](x T) T { return x }

// fill returns the column for a batch of n rows whose column is all null.
func (f *identityFill) fill(mem memory.Allocator, dt arrow.DataType, n int) arrow.Array {
	if f.last == nil || f.last.Len() != n {
		if f.last != nil {
			f.last.Release()
		}
		f.last = constant(mem, dt, f.value, n)
	}
	f.last.Retain()
	return f.last
}

type derivedColumn struct {
	key    PartitionKeyMapping
	source int // input column index
	unit   int64
	isDate bool
	// memo of the last unit value and what it gave
	memo     bool
	last     int64
	lastS    string
	lastYear int32
}

// newConverter returns nil when batches pass through unchanged.
func newConverter(in *arrow.Schema, proj *iceberg.Schema, m *PartitionMapping, fills []identityFill) (*converter, error) {
	c := &converter{unwrap: make([]bool, in.NumFields()), fills: fills, mem: memory.DefaultAllocator}
	fields := make([]arrow.Field, 0, in.NumFields())
	changed := len(fills) > 0
	for i, f := range in.Fields() {
		if ext, ok := f.Type.(arrow.ExtensionType); ok {
			f.Type = ext.StorageType()
			c.unwrap[i] = true
			changed = true
		}
		fields = append(fields, f)
	}
	if m != nil {
		for _, k := range m.Keys {
			if !k.Derived {
				continue
			}
			idx := -1
			if name, ok := proj.FindColumnName(k.SourceID); ok {
				if ix := in.FieldIndices(name); len(ix) > 0 {
					idx = ix[0]
				}
			}
			if idx < 0 {
				return nil, fmt.Errorf("%w: derived partition key %q needs source column %q (field id %d) in the scan", ErrNotFound, k.Column, k.Source, k.SourceID)
			}
			d := derivedColumn{key: k, source: idx}
			switch t := in.Field(idx).Type.(type) {
			case *arrow.Date32Type:
				d.isDate = true
			case *arrow.TimestampType:
				switch t.Unit {
				case arrow.Microsecond:
					d.unit = 1e6
				case arrow.Nanosecond:
					d.unit = 1e9
				case arrow.Millisecond:
					d.unit = 1e3
				default:
					d.unit = 1
				}
			default:
				return nil, fmt.Errorf("%w: derived partition key %q: source %q has arrow type %s", ErrUnmappable, k.Column, k.Source, t)
			}
			var at arrow.DataType
			switch k.Transform {
			case "day":
				at = arrow.FixedWidthTypes.Date32
			case "year":
				at = arrow.PrimitiveTypes.Int32
			default:
				at = arrow.BinaryTypes.String
			}
			fields = append(fields, arrow.Field{Name: k.Column, Type: at, Nullable: true})
			c.derived = append(c.derived, d)
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	md := in.Metadata()
	c.out = arrow.NewSchema(fields, &md)
	return c, nil
}

func (c *converter) apply(name string, seq iter.Seq2[arrow.RecordBatch, error]) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		defer func() {
			for i := range c.fills {
				if f := &c.fills[i]; f.last != nil {
					f.last.Release()
					f.last = nil
				}
			}
		}()
		for rec, err := range seq {
			if err != nil {
				yield(nil, fmt.Errorf("lake: read %s: %w", name, err))
				return
			}
			out := c.convert(rec)
			rec.Release()
			if !yield(out, nil) {
				return
			}
		}
	}
}

func (c *converter) convert(rec arrow.RecordBatch) arrow.RecordBatch {
	cols := make([]arrow.Array, 0, len(c.out.Fields()))
	var owned []arrow.Array
	for i, col := range rec.Columns() {
		if c.unwrap[i] {
			col = col.(array.ExtensionArray).Storage()
		}
		cols = append(cols, col)
	}
	for i := range c.fills {
		f := &c.fills[i]
		if col := cols[f.col]; col.Len() > 0 && col.NullN() == col.Len() {
			a := f.fill(c.mem, col.DataType(), col.Len())
			cols[f.col] = a
			owned = append(owned, a)
		}
	}
	for i := range c.derived {
		a := c.derived[i].build(c.mem, rec.Column(c.derived[i].source))
		cols = append(cols, a)
		owned = append(owned, a)
	}
	out := array.NewRecordBatch(c.out, cols, rec.NumRows())
	for _, a := range owned {
		a.Release()
	}
	return out
}

const microsPerDay = 86_400_000_000

// build computes the derived column from the source column: the same values
// PartitionMapping.PartitionName derives from partition tuples. A derived
// value is null exactly where the source is, so fixed-width results share
// the source's validity bitmap.
func (d *derivedColumn) build(mem memory.Allocator, src arrow.Array) arrow.Array {
	n := src.Len()
	off := src.Data().Offset()
	hour := d.key.Transform == "hour"
	// u holds the epoch units (days, or hours for hour) of the rows; division
	// by a constant compiles to a multiplication.
	u := make([]int64, n)
	if d.isDate {
		for i, v := range src.(*array.Date32).Date32Values() {
			u[i] = int64(v)
			if hour {
				u[i] *= 24
			}
		}
	} else {
		ts := src.(*array.Timestamp).TimestampValues()
		switch {
		case d.unit == 1e6 && !hour:
			for i, v := range ts {
				q, r := int64(v)/microsPerDay, int64(v)%microsPerDay
				if r < 0 {
					q--
				}
				u[i] = q
			}
		default:
			div := d.unit * 86400
			if hour {
				div = d.unit * 3600
			}
			for i, v := range ts {
				u[i] = floorDiv(int64(v), div)
			}
		}
	}
	switch d.key.Transform {
	case "day", "year":
		buf := memory.NewResizableBuffer(mem)
		buf.Resize((off + n) * 4)
		vals := arrow.Int32Traits.CastFromBytes(buf.Bytes())[off:]
		if d.key.Transform == "day" {
			for i, v := range u {
				vals[i] = int32(v)
			}
		} else {
			for i, v := range u {
				if !d.memo || v != d.last {
					d.memo, d.last = true, v
					d.lastYear = int32(epoch.AddDate(0, 0, int(v)).Year())
				}
				vals[i] = d.lastYear
			}
		}
		typ := arrow.DataType(arrow.PrimitiveTypes.Int32)
		if d.key.Transform == "day" {
			typ = arrow.FixedWidthTypes.Date32
		}
		data := array.NewData(typ, n, []*memory.Buffer{src.Data().Buffers()[0], buf}, nil, src.NullN(), off)
		buf.Release()
		defer data.Release()
		return array.MakeFromData(data)
	default: // month, hour: strings
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.Reserve(n)
		layout := "2006-01"
		if hour {
			layout = "2006-01-02-15"
		}
		for i, v := range u {
			if src.IsNull(i) {
				b.AppendNull()
				continue
			}
			if !d.memo || v != d.last {
				d.memo, d.last = true, v
				if hour {
					d.lastS = time.Unix(v*3600, 0).UTC().Format(layout)
				} else {
					d.lastS = epoch.AddDate(0, 0, int(v)).Format(layout)
				}
			}
			b.Append(d.lastS)
		}
		return b.NewArray()
	}
}
