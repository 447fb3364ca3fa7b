package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// item is a row of the test tables: (dt STRING,) id BIGINT, name STRING,
// qty INT NULL.
type item struct {
	dt   string
	id   int64
	name string
	qty  int32
	null bool // qty is null
}

// kvRow is it as the tier returns it.
func (it item) kvRow(withDT bool) kv.Row {
	var qty any = it.qty
	if it.null {
		qty = nil
	}
	if withDT {
		return kv.Row{it.dt, it.id, it.name, qty}
	}
	return kv.Row{it.id, it.name, qty}
}

// parquetLayout says which columns a test file has and how.
type parquetLayout struct {
	withDT    bool
	noName    bool // leave the name column out
	idInt32   bool // write id as int32 (a type mismatch for BIGINT)
	extra     bool // add a column the table does not have
	groupRows int64
}

// writeParquet writes items to path.
func writeParquet(t *testing.T, path string, items []item, l parquetLayout) {
	t.Helper()
	var fields []arrow.Field
	if l.withDT {
		fields = append(fields, arrow.Field{Name: "dt", Type: arrow.BinaryTypes.String})
	}
	if l.idInt32 {
		fields = append(fields, arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int32})
	} else {
		fields = append(fields, arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64})
	}
	if l.extra {
		fields = append(fields, arrow.Field{Name: "comment", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	if !l.noName {
		fields = append(fields, arrow.Field{Name: "name", Type: arrow.BinaryTypes.String})
	}
	fields = append(fields, arrow.Field{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true})
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, it := range items {
		i := 0
		if l.withDT {
			b.Field(i).(*array.StringBuilder).Append(it.dt)
			i++
		}
		if l.idInt32 {
			b.Field(i).(*array.Int32Builder).Append(int32(it.id))
		} else {
			b.Field(i).(*array.Int64Builder).Append(it.id)
		}
		i++
		if l.extra {
			b.Field(i).(*array.StringBuilder).Append("x")
			i++
		}
		if !l.noName {
			b.Field(i).(*array.StringBuilder).Append(it.name)
			i++
		}
		if it.null {
			b.Field(i).AppendNull()
		} else {
			b.Field(i).(*array.Int32Builder).Append(it.qty)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	groupRows := l.groupRows
	if groupRows == 0 {
		groupRows = 4096
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(groupRows)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // closes f
		t.Fatal(err)
	}
}

// makeItems returns n items with ids from first, and the same ids again
// for every step-th one with new values (to test last-wins).
func makeItems(dt string, first int64, n int) []item {
	out := make([]item, 0, n)
	for i := range int64(n) {
		id := first + i
		out = append(out, item{dt: dt, id: id, name: fmt.Sprintf("item-%d", id), qty: int32(id % 1000), null: id%7 == 0})
	}
	return out
}

// lastWins is what a load of the files holding items in this order leaves.
func lastWins(items ...[]item) map[int64]item {
	m := map[int64]item{}
	for _, its := range items {
		for _, it := range its {
			m[it.id] = it
		}
	}
	return m
}

func itemsTable(t *testing.T, partitioned bool) kv.TableSchema {
	t.Helper()
	s := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: mustParseType(t, "BIGINT")},
			{Name: "name", Type: mustParseType(t, "STRING")},
			{Name: "qty", Type: mustParseType(t, "INT"), Nullable: true},
		},
		PrimaryKey: []string{"id"}, Buckets: 4,
	}
	if partitioned {
		s.Columns = append([]kv.Column{{Name: "dt", Type: mustParseType(t, "STRING")}}, s.Columns...)
		s.PrimaryKey = []string{"dt", "id"}
		s.PartitionKeys = []string{"dt"}
	}
	return s
}

func mustParseType(t *testing.T, s string) kv.Type {
	t.Helper()
	ty, err := kv.ParseType(s)
	if err != nil {
		t.Fatal(err)
	}
	return ty
}

// startTestTier starts an embedded tier and a tier client of it.
func startTestTier(t *testing.T) (*daemon.Embedded, *tierclient.Client) {
	t.Helper()
	return startTestTierIn(t, "")
}

// startTestTierIn is startTestTier with the snapshots in objectStore (""
// the default: file:// under its data directory).
func startTestTierIn(t *testing.T, objectStore string) (*daemon.Embedded, *tierclient.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{
		DataDir: t.TempDir(), TabletServers: 2, EtcdUnsafeNoFsync: true, ObjectStore: objectStore,
		Coordinator: daemon.CoordinatorOptions{LeaseTTL: 2 * time.Second, RebalanceInterval: 100 * time.Millisecond, ResyncInterval: time.Second},
		Tablet:      daemon.TabletOptions{LeaseTTL: 2 * time.Second, SnapshotInterval: -1, CacheSize: 8 << 20, MemTableBudget: 8 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close tier: %v", err)
		}
	})
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tierclient.New(t.Context(), e.Address())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return e, tc
}

// scanTarget returns the rows of a target by id, retrying while the target
// is not yet readable (the client may hold locations from before a load).
func scanTarget(t *testing.T, tc *tierclient.Client, tt tierclient.Target, idCol int) map[int64]kv.Row {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		got := map[int64]kv.Row{}
		err := tc.Scan(ctx, tt, func(r kv.Row) error {
			got[r[idCol].(int64)] = r
			return nil
		})
		if err == nil {
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("scan %s: %v", tt, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkRows compares a scan with the expected items.
func checkRows(t *testing.T, got map[int64]kv.Row, want map[int64]item, withDT bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d rows, want %d", len(got), len(want))
	}
	bad := 0
	for id, w := range want {
		if g, ok := got[id]; !ok || fmt.Sprint(g) != fmt.Sprint(w.kvRow(withDT)) {
			if bad++; bad <= 5 {
				t.Errorf("id %d: got %v, want %v", id, g, w.kvRow(withDT))
			}
		}
	}
}

func TestParseBuckets(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []int
	}{
		{"0-3", []int{0, 1, 2, 3}},
		{"5,1-2,2", []int{1, 2, 5}},
		{"7", []int{7}},
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{" 0 - 1 ", nil},
	} {
		got, err := parseBuckets(tc.spec, 8)
		if tc.want == nil {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("parseBuckets(%q) = %v, %v, want a usage error", tc.spec, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseBuckets(%q) = %v, %v, want %v", tc.spec, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "3-1", "-1", "8", "0-8", "a", "1,,2"} {
		if _, err := parseBuckets(bad, 8); !errors.Is(err, ErrUsage) {
			t.Errorf("parseBuckets(%q): %v, want a usage error", bad, err)
		}
	}
	if _, err := parseBuckets("0-9", 8); err == nil || !strings.Contains(err.Error(), "the target has 8 buckets (0-7)") {
		t.Errorf("out of range: %v", err)
	}
}

// The Parquet input: directories, column matching and its errors, which
// name the file and the column.
func TestParquetInput(t *testing.T) {
	tbl, err := kv.NewTable(itemsTable(t, false))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	items := makeItems("", 1, 100)
	writeParquet(t, filepath.Join(dir, "in", "b", "part-1.parquet"), items[50:], parquetLayout{groupRows: 16})
	writeParquet(t, filepath.Join(dir, "in", "a.parquet"), items[:50], parquetLayout{extra: true})
	writeParquet(t, filepath.Join(dir, "in", "_tmp", "junk.parquet"), items, parquetLayout{})
	writeParquet(t, filepath.Join(dir, "in", ".hidden.parquet"), items, parquetLayout{})
	if err := os.WriteFile(filepath.Join(dir, "in", "_SUCCESS"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := openParquetInput([]string{filepath.Join(dir, "in")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range in.files {
		names = append(names, strings.TrimPrefix(f.path, dir+"/"))
	}
	if !slices.Equal(names, []string{"in/a.parquet", "in/b/part-1.parquet"}) || in.rows != 100 {
		t.Fatalf("files %v, %d rows", names, in.rows)
	}
	if err := checkParquet(in, tbl, ""); err != nil {
		t.Fatalf("check: %v", err)
	}
	// Symbolic links are followed, to directories too (they were skipped
	// without a word: their rows not loaded, and the load said committed);
	// what two links reach, or a loop, counts once; a dangling link fails.
	outside := filepath.Join(dir, "outside")
	writeParquet(t, filepath.Join(outside, "c.parquet"), makeItems("", 101, 10), parquetLayout{})
	links := filepath.Join(dir, "links")
	for _, l := range []struct{ target, name string }{
		{filepath.Join(dir, "in"), filepath.Join(dir, "root-link")},
		{outside, filepath.Join(links, "day2")},
		{outside, filepath.Join(links, "again")},
		{links, filepath.Join(links, "loop")},
		{filepath.Join(outside, "c.parquet"), filepath.Join(links, "c-link.parquet")},
	} {
		if err := os.MkdirAll(filepath.Dir(l.name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l.target, l.name); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path  string
		files int
		rows  int64
	}{{filepath.Join(dir, "root-link"), 2, 100}, {links, 1, 10}} {
		in, err := openParquetInput([]string{tc.path})
		if err != nil || len(in.files) != tc.files || in.rows != tc.rows {
			t.Errorf("input %s: %v; want %d files of %d rows", tc.path, err, tc.files, tc.rows)
			continue
		}
	}
	if err := os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(links, "dangling")); err != nil {
		t.Fatal(err)
	}
	if _, err := openParquetInput([]string{links}); err == nil || !strings.Contains(err.Error(), "dangling") {
		t.Errorf("input with a dangling link: %v", err)
	}
	// Every row comes back, in file order, batch after batch; the extra
	// column is not read.
	var ids []int64
	for _, f := range in.files {
		r, err := openParquet(f, tbl, "")
		if err != nil {
			t.Fatal(err)
		}
		var read int64
		err = r.each(t.Context(), func(first int64, rec arrow.RecordBatch) error {
			if first != read {
				return fmt.Errorf("batch starts at file row %d, %d rows of the file read", first, read)
			}
			read += rec.NumRows()
			if rec.Schema().NumFields() != 3 {
				return fmt.Errorf("read columns %v", rec.Schema())
			}
			col := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
			ids = append(ids, col.Int64Values()...)
			return nil
		})
		if err := errors.Join(err, r.close()); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 100 || ids[0] != 1 || ids[99] != 100 || !slices.IsSorted(ids) {
		t.Fatalf("ids %v", ids)
	}

	// Errors name the file and the column.
	missing := filepath.Join(dir, "missing.parquet")
	writeParquet(t, missing, items, parquetLayout{noName: true})
	wrongType := filepath.Join(dir, "wrongtype.parquet")
	writeParquet(t, wrongType, items, parquetLayout{idInt32: true})
	for _, tc := range []struct {
		path string
		want []string
	}{
		{missing, []string{"file " + missing, `missing column "name" (STRING)`, "the file has id, qty"}},
		{wrongType, []string{"file " + wrongType, `column "id" of type BIGINT cannot be read from arrow int32`}},
	} {
		in, err := openParquetInput([]string{tc.path})
		if err != nil {
			t.Fatal(err)
		}
		err = checkParquet(in, tbl, "")
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("check %s: %v, want %q", tc.path, err, w)
			}
		}
	}
	// Two columns missing: both named, in the plural.
	inMissing, err := openParquetInput([]string{missing})
	if err != nil {
		t.Fatal(err)
	}
	dtTable, err := kv.NewTable(itemsTable(t, true))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkParquet(inMissing, dtTable, ""); err == nil || !strings.Contains(err.Error(), `missing columns "dt" (STRING), "name" (STRING) (the file has id, qty)`) {
		t.Errorf("check of a file without two columns: %v", err)
	}
	// A file that fails inside an Iceberg table's directory: the error says
	// so once; outside one (above) it does not.
	table := filepath.Join(dir, "wh", "db", "events")
	for _, d := range []string{"data/day=1", "metadata"} {
		if err := os.MkdirAll(filepath.Join(table, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(table, "metadata", "00001-x.metadata.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeParquet(t, filepath.Join(table, "data", "day=1", "a.parquet"), items, parquetLayout{noName: true})
	writeParquet(t, filepath.Join(table, "data", "day=1", "b.parquet"), items, parquetLayout{noName: true})
	in, err = openParquetInput([]string{filepath.Join(dir, "wh")})
	if err != nil {
		t.Fatal(err)
	}
	err = checkParquet(in, tbl, "")
	if err == nil || strings.Count(err.Error(), "the files are in the Iceberg table at "+table+": ") != 1 || strings.Count(err.Error(), "missing column") != 2 {
		t.Errorf("check of an Iceberg table's files: %v", err)
	}
	if l, ok := err.(errorList); !ok || len(l) != 3 {
		t.Errorf("check of an Iceberg table's files: %T %v, want a list of 3 (two files, the hint), each printed on a thaw: line", err, err)
	}
	if err := checkParquet(&parquetInput{files: []parquetFile{{path: missing}}}, tbl, ""); err == nil || strings.Contains(err.Error(), "Iceberg") {
		t.Errorf("check of a file outside any Iceberg table: %v", err)
	}
	notParquet := filepath.Join(dir, "x.parquet")
	if err := os.WriteFile(notParquet, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openParquetInput([]string{notParquet}); err == nil || !strings.Contains(err.Error(), "not a readable Parquet file") {
		t.Errorf("not parquet: %v", err)
	}
	if _, err := openParquetInput([]string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "holds no *.parquet files") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := openParquetInput([]string{filepath.Join(dir, "nope")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "x.parquet"}, "thaw load needs --table DATABASE.TABLE"},
		{[]string{"load", "--table", "nodot", "x.parquet"}, `table "nodot": want DATABASE.TABLE`},
		{[]string{"load", "--table", "a.b"}, "thaw load needs Parquet files or directories"},
		{[]string{"load", "--table", "a.b", "--memory", "lots", "x"}, `invalid value "lots" for flag -memory`},
		{[]string{"load", "--table", "a.b", "--memory", "1KiB", "x"}, `invalid value "1KiB" for flag -memory: 1KiB is below the smallest budget, 64.0 KiB (0: the default)`},
		{[]string{"load", "--table", "a.b", "--budget", "0s", "x"}, "--budget positive"},
		{[]string{"load", "--table", "a.b", "--create-partition", "x"}, "--create-partition goes with --partition"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code=%d stderr=%q, want code 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// thaw load end to end on an embedded tier: a partition loaded while its
// sibling keeps its rows; plain progress lines; duplicates last-wins; a
// failing load aborts and leaves its target empty and ACTIVE (a second
// load of it succeeds); files that do not fit the table begin nothing.
func TestLoad(t *testing.T) {
	e, tc := startTestTier(t)
	ctx := t.Context()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "sales", itemsTable(t, true), 2); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"2024-01-01", "2024-01-02", "2024-01-03"} {
		if err := tc.CreatePartition(ctx, "shop", "sales", p); err != nil {
			t.Fatal(err)
		}
	}
	sibling := makeItems("2024-01-01", 1, 20)
	var sibRows []kv.Row
	for _, it := range sibling {
		sibRows = append(sibRows, it.kvRow(true))
	}
	if err := tc.Upsert(ctx, tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-01"}, sibRows); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	first := makeItems("2024-01-02", 1, 3000)
	second := makeItems("2024-01-02", 2001, 2000) // ids 2001..3000 again, then new ones
	for i := range second {
		second[i].name += "-v2"
	}
	f1, f2 := filepath.Join(dir, "in", "1.parquet"), filepath.Join(dir, "in", "2.parquet")
	writeParquet(t, f1, first, parquetLayout{withDT: true})
	// The second file is Hive-style: without the partition column, which
	// the load fills in from --partition.
	writeParquet(t, f2, second, parquetLayout{extra: true})

	var out bytes.Buffer
	server := "--server=" + e.HostPort()
	err := runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-02", server,
		"--memory", "1MiB", "--workers", "2", "--temp-dir", t.TempDir(), filepath.Join(dir, "in")})
	if err != nil {
		t.Fatalf("load: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Logf("thaw load:\n%s", text)
	for _, want := range []string{
		"loading 5000 rows", "from 2 files into shop.sales/2024-01-02",
		"began bulk load ", "read 3000 rows (", "from 1/2 files", "read 5000 rows (", "from 2/2 files",
		"built bucket 0: ", "built bucket 3: ", "committed bulk load ", "(COMMITTED): 4000 rows (1000 duplicates dropped) in 4 buckets",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output misses %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\r") || strings.Contains(text, "\033") {
		t.Errorf("progress bar on a non-terminal:\n%q", text)
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-02"}, 1), lastWins(first, second), true)
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-01"}, 1), lastWins(sibling), true)

	// Loading the same partition again: it is not empty, Begin refuses,
	// nothing to abort.
	out.Reset()
	err = runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-02", server, f1})
	if !errors.Is(err, bulkload.ErrTargetNotEmpty) || !strings.Contains(err.Error(), "\n(a bulk load fills an empty table or partition only: load into a new partition") {
		t.Errorf("second load of a full partition: %v\n%s", err, out.String())
	}
	t.Logf("second load: %v", err)

	// A row of another partition fails the build after Begin: the load
	// aborts, and the partition is empty and ACTIVE (it loads next time).
	bad := append(makeItems("2024-01-03", 1, 100), item{dt: "2024-01-01", id: 5000, name: "stray"})
	fbad := filepath.Join(dir, "bad.parquet")
	writeParquet(t, fbad, bad, parquetLayout{withDT: true})
	out.Reset()
	err = runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-03", server, fbad})
	if err == nil || !strings.Contains(err.Error(), "file "+fbad+": row 100") || !strings.Contains(err.Error(), `partition "2024-01-01"`) ||
		!strings.Contains(err.Error(), "aborted") {
		t.Fatalf("load of a stray row: %v\n%s", err, out.String())
	}
	t.Logf("failing load: %v\n%s", err, out.String())
	if !strings.Contains(out.String(), "aborted bulk load") || !strings.Contains(out.String(), "is empty and ACTIVE again") {
		t.Errorf("output of the aborted load:\n%s", out.String())
	}
	target3 := tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-03"}
	if got := scanTarget(t, tc, target3, 1); len(got) != 0 {
		t.Errorf("aborted partition has %d rows", len(got))
	}
	lst, err := runBulk(t, "list", "--all", "--target", "shop.sales/2024-01-03", "--output", "json", server)
	if err != nil || !strings.Contains(lst, `"state": "ABORTED"`) || !strings.Contains(lst, `"registration": "ACTIVE"`) {
		t.Errorf("transactions of the aborted partition: %v\n%s", err, lst)
	}
	good := makeItems("2024-01-03", 1, 100)
	writeParquet(t, fbad, good, parquetLayout{withDT: true})
	out.Reset()
	if err := runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-03", "--token", "load-2024-01-03", server, fbad}); err != nil {
		t.Fatalf("load after the abort: %v\n%s", err, out.String())
	}
	checkRows(t, scanTarget(t, tc, target3, 1), lastWins(good), true)
	// The same token again: its transaction committed, and the error
	// says what that means.
	out.Reset()
	err = runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-03", "--token", "load-2024-01-03", server, fbad})
	if !errors.Is(err, bulkload.ErrInvalidState) || !strings.Contains(err.Error(), "is COMMITTED\n(this caller token's transaction is past building: COMMITTED means its rows are loaded already") {
		t.Errorf("load repeating a committed token: %v\n%s", err, out.String())
	}

	// Files that do not fit the table are refused before Begin. Compared:
	// which transactions exist and their states; a committed load's
	// registration settles from ACTIVE(id) to ACTIVE after Commit returns,
	// so the whole listing is not stable.
	txns := func() string {
		t.Helper()
		out, err := runBulk(t, "list", "--all", "--output", "json", server)
		var list []bulkStatusJSON
		if err != nil || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("list: %v\n%s", err, out)
		}
		var b strings.Builder
		for _, s := range list {
			fmt.Fprintf(&b, "%s %s %s\n", s.TxnID, s.Target, s.State)
		}
		return b.String()
	}
	before := txns()
	fmiss := filepath.Join(dir, "noname.parquet")
	writeParquet(t, fmiss, good, parquetLayout{withDT: true, noName: true})
	out.Reset()
	err = runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-03", server, fmiss})
	if err == nil || !strings.Contains(err.Error(), "file "+fmiss+": missing column \"name\" (STRING)") {
		t.Errorf("load of a file without a column: %v", err)
	}
	// Two such files: one error line each, each a "thaw: " line that says
	// what failed.
	fmiss2 := filepath.Join(dir, "noname2.parquet")
	writeParquet(t, fmiss2, good, parquetLayout{withDT: true, noName: true})
	err = runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-03", server, fmiss, fmiss2})
	var lines bytes.Buffer
	printError(&lines, err)
	want := []string{
		"thaw: load shop.sales/2024-01-03: file " + fmiss + ": missing column \"name\" (STRING)",
		"thaw: load shop.sales/2024-01-03: file " + fmiss2 + ": missing column \"name\" (STRING)",
	}
	if got := strings.Split(strings.TrimSuffix(lines.String(), "\n"), "\n"); len(got) != len(want) ||
		!strings.HasPrefix(got[0], want[0]) || !strings.HasPrefix(got[1], want[1]) {
		t.Errorf("load of two files without a column printed:\n%s\nwant lines starting\n%s", lines.String(), strings.Join(want, "\n"))
	}
	if after := txns(); after != before {
		t.Errorf("a refused load began a transaction:\nbefore\n%s\nafter\n%s", before, after)
	}

	// The partition: named for a partitioned table only, before anything
	// is read; one that does not exist is refused by Begin with a hint,
	// unless --create-partition creates it.
	if _, err := tc.CreateTable(ctx, "shop", "flat", itemsTable(t, false), 2); err != nil {
		t.Fatal(err)
	}
	f4 := filepath.Join(dir, "day4.parquet")
	day4 := makeItems("2024-01-04", 1, 50)
	writeParquet(t, f4, day4, parquetLayout{withDT: true})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "shop.sales", f4}, "usage: thaw load: shop.sales is partitioned (by dt): name the target partition with --partition"},
		{[]string{"--table", "shop.flat", "--partition", "2024-01-04", f4}, "usage: thaw load: shop.flat is not partitioned: --partition is for partitioned tables"},
		{[]string{"--table", "shop.sales", "--partition", "2024-01-04", f4}, "\n(a bulk load fills an existing empty table or partition: create the partition with `thaw partition create shop.sales 2024-01-04`, or give thaw load --create-partition)"},
	} {
		out.Reset()
		err := runLoad(ctx, &out, append(c.args, server))
		if err == nil || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("load %v: %v, want %q", c.args, err, c.want)
		}
	}
	if parts, err := tc.Partitions(ctx, "shop", "sales"); err != nil || len(parts) != 3 {
		t.Errorf("partitions after the refused loads: %v, %v", parts, err)
	}
	if after := txns(); after != before {
		t.Errorf("a refused load began a transaction:\nbefore\n%s\nafter\n%s", before, after)
	}
	out.Reset()
	if err := runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-04", "--create-partition", server, f4}); err != nil ||
		!strings.Contains(out.String(), "created partition 2024-01-04 of shop.sales (id ") {
		t.Fatalf("load with --create-partition: %v\n%s", err, out.String())
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-04"}, 1), lastWins(day4), true)
	// An existing empty partition is loaded as it is.
	if err := tc.CreatePartition(ctx, "shop", "sales", "2024-01-05"); err != nil {
		t.Fatal(err)
	}
	f5 := filepath.Join(dir, "day5.parquet")
	day5 := makeItems("2024-01-05", 1, 1)
	writeParquet(t, f5, day5, parquetLayout{withDT: true})
	out.Reset()
	if err := runLoad(ctx, &out, []string{"--table", "shop.sales", "--partition", "2024-01-05", "--create-partition", server, f5}); err != nil ||
		strings.Contains(out.String(), "created partition") || !strings.Contains(out.String(), "(COMMITTED): 1 row (0 duplicates dropped) in 4 buckets") {
		t.Fatalf("load of an existing partition with --create-partition: %v\n%s", err, out.String())
	}
	checkRows(t, scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "sales", Partition: "2024-01-05"}, 1), lastWins(day5), true)
}

// TestShareOf: a file's bytes read so far, size*part/whole, without the
// int64 overflow that printed negative byte counts for large files (a
// 10 GiB file after 860 M rows).
func TestShareOf(t *testing.T) {
	for _, c := range []struct{ size, part, whole, want int64 }{
		{100, 1, 4, 25},
		{100, 0, 0, 0},
		{7, 3, 0, 21}, // a file whose row count is not known: whole counts as 1
		{10 << 30, 860_000_000, 1_000_000_000, 9234179686},
		{15 << 40, 573_440, 700_000, 13510798882111},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 2, 1, math.MaxInt64},
	} {
		if got := shareOf(c.size, c.part, c.whole); got != c.want {
			t.Errorf("shareOf(%d, %d, %d) = %d, want %d", c.size, c.part, c.whole, got, c.want)
		}
	}
}

// TestLoadClosedOutputExitsZero: a load whose output pipe closed (thaw
// load ... | head -1) runs to its end and exits 0 (docs/bulkload-cli.md),
// not 141 as a command whose answer was lost.
func TestLoadClosedOutputExitsZero(t *testing.T) {
	e, tc, f1 := itemsLoad(t, 300)
	var errOut bytes.Buffer
	code := Main(t.Context(), []string{"load", "--table", "shop.items", "--server", e.HostPort(), "--temp-dir", t.TempDir(), f1}, closedStdout{}, &errOut)
	if got := scanTarget(t, tc, tierclient.Target{Database: "shop", Table: "items"}, 0); len(got) != 300 || code != 0 {
		t.Fatalf("thaw load with a closed output: exit %d, %d rows (stderr %q); want 0 and 300", code, len(got), errOut.String())
	}
}
