package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
)

func TestDatabases(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	e := newEnv(t, meta.WithClock(func() time.Time { return now }))
	ctx := t.Context()

	v, err := e.s.CreateDatabase(ctx, e.g, "sales")
	if err != nil || v.Rev <= 0 || v.Value != (meta.DatabaseRecord{Version: 1, Name: "sales", CreatedMs: 1700000000000}) {
		t.Fatalf("create: %+v, %v", v, err)
	}
	if got, err := e.s.GetDatabase(ctx, "sales"); err != nil || got != v {
		t.Fatalf("get: %+v, %v; want %+v", got, err, v)
	}
	if _, err := e.s.CreateDatabase(ctx, e.g, "sales"); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	e.createDB("hr")
	dbs, err := e.s.ListDatabases(ctx)
	if err != nil || len(dbs) != 2 || dbs[0].Value.Name != "hr" || dbs[1] != v {
		t.Fatalf("list: %+v, %v", dbs, err)
	}
	if err := e.s.DropDatabase(ctx, e.g, "hr", false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.GetDatabase(ctx, "hr"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get dropped: %v", err)
	}
	if err := e.s.DropDatabase(ctx, e.g, "hr", false); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("drop twice: %v", err)
	}
	before := e.dump()
	for _, name := range []string{"", "a.b", "a/b", strings.Repeat("x", 201)} {
		if _, err := e.s.CreateDatabase(ctx, e.g, name); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("create database %q: %v; want ErrInvalid", name, err)
		}
	}
	e.unchanged(before, "invalid database names")
	if got := e.keys(); !slices.Equal(got, []string{"/databases/sales"}) {
		t.Fatalf("keys %v", got)
	}
}

func TestDropDatabaseWithTables(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "plain", 4, false)
	e.createTable("d", "parted", 2, true)
	e.createPartition("d", "parted", "p1", 2)

	before := e.dump()
	if err := e.s.DropDatabase(ctx, e.g, "d", false); !errors.Is(err, meta.ErrNotEmpty) {
		t.Fatalf("drop non-empty: %v", err)
	}
	e.unchanged(before, "a rejected drop")
	if err := e.s.DropDatabase(ctx, e.g, "d", true); err != nil {
		t.Fatalf("cascade: %v", err)
	}
	// Only the id sequences remain, and the records of the data the
	// coordinator is to delete.
	if got := e.keys(); !slices.Equal(got, []string{"/dropped/1", "/dropped/2", "/seq/partition", "/seq/table"}) {
		t.Fatalf("after cascade: %v", got)
	}
}

// TestDropDatabaseCascadeRace: a table another caller drops between the
// cascade's listing and its drop of that table does not fail the cascade.
func TestDropDatabaseCascadeRace(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "plain", 2, false)
	e.createTable("d", "other", 2, false)

	cli := newClient(t, endpoints)
	tableKey, raced := e.prefix+"/tables/d/plain", false
	cli.KV = &getHookKV{KV: cli.KV, onGet: func(key string) {
		if key == tableKey && !raced {
			raced = true
			if err := e.s.DropTable(ctx, e.g, "d", "plain"); err != nil {
				t.Errorf("the racing drop: %v", err)
			}
		}
	}}
	s, err := meta.New(cli, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DropDatabase(ctx, e.g, "d", true); err != nil {
		t.Fatalf("cascade with a table dropped meanwhile: %v", err)
	}
	if !raced {
		t.Fatal("the cascade never read the table")
	}
	if got := e.keys(); !slices.Equal(got, []string{"/dropped/1", "/dropped/2", "/seq/table"}) {
		t.Fatalf("after cascade: %v", got)
	}
}

// getHookKV calls onGet with the key of every Get before making it.
type getHookKV struct {
	clientv3.KV
	onGet func(key string)
}

func (h *getHookKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	h.onGet(key)
	return h.KV.Get(ctx, key, opts...)
}

func TestCreateTable(t *testing.T) {
	e := newEnv(t, meta.WithClock(func() time.Time { return time.UnixMilli(42) }))
	ctx := t.Context()
	e.createDB("d")

	spec := tableSpec("d", "orders", 4, false)
	v, err := e.s.CreateTable(ctx, e.g, spec)
	if err != nil {
		t.Fatal(err)
	}
	rec := v.Value
	if rec.ID != 1 || rec.Database != "d" || rec.Name != "orders" || rec.DataState != meta.Active || rec.BulkLoadID != "" ||
		rec.ReplicationFactor != 3 || rec.RemoteDataDir != "file:///remote" || rec.CreatedMs != 42 || rec.ModifiedMs != 42 || rec.Dropping {
		t.Fatalf("record %+v", rec)
	}
	// The stored schema is normalized: the default bucket key is filled in.
	if !slices.Equal(rec.Schema.BucketKey, []string{"id", "day"}) {
		t.Fatalf("bucket key %v", rec.Schema.BucketKey)
	}
	if got, err := e.s.GetTable(ctx, "d", "orders"); err != nil || got.Rev != v.Rev || got.Value.ID != 1 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	a, err := e.s.GetAssignment(ctx, meta.Target{TableID: 1})
	if err != nil || a.Rev != v.Rev || a.Value.TableID != 1 || a.Value.PartitionID != 0 || len(a.Value.Buckets) != 4 ||
		!slices.Equal(a.Value.Buckets[1].Replicas, spec.Buckets[1].Replicas) {
		t.Fatalf("assignment written with the table: %+v, %v (table rev %d)", a, err, v.Rev)
	}

	p := e.createTable("d", "events", 8, true)
	if p.Value.ID != 2 || p.Value.DataState != "" || !p.Value.Partitioned() {
		t.Fatalf("partitioned table %+v", p.Value)
	}
	if _, err := e.s.GetAssignment(ctx, meta.Target{TableID: 2}); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("a partitioned table has no assignment of its own: %v", err)
	}
	e.createDB("e")
	e.createTable("e", "orders", 1, false)
	for _, tc := range []struct {
		db   string
		want []string
	}{{"d", []string{"d.events", "d.orders"}}, {"e", []string{"e.orders"}}, {"", []string{"d.events", "d.orders", "e.orders"}}} {
		ts, err := e.s.ListTables(ctx, tc.db)
		var got []string
		for _, t := range ts {
			got = append(got, t.Value.Database+"."+t.Value.Name)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("list tables of %q: %v, %v; want %v", tc.db, got, err, tc.want)
		}
	}
	if _, err := e.s.CreateTable(ctx, e.g, spec); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := e.s.GetTable(ctx, "d", "nope"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}

func TestCreateTableRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "taken", 2, false)
	before := e.dump()

	for _, tc := range []struct {
		name string
		mod  func(*meta.TableSpec)
		want error
	}{
		{"unknown database", func(s *meta.TableSpec) { s.Database = "nope" }, meta.ErrNotFound},
		{"existing table", func(s *meta.TableSpec) { s.Name = "taken" }, meta.ErrExists},
		{"no columns", func(s *meta.TableSpec) { s.Schema.Columns = nil }, kv.ErrInvalidSchema},
		{"no primary key", func(s *meta.TableSpec) { s.Schema.PrimaryKey = nil }, kv.ErrInvalidSchema},
		{"zero buckets", func(s *meta.TableSpec) { s.Schema.Buckets = 0 }, kv.ErrInvalidSchema},
		{"bad table name", func(s *meta.TableSpec) { s.Name = "a.b" }, meta.ErrInvalid},
		{"bad database name", func(s *meta.TableSpec) { s.Database = "a/b" }, meta.ErrInvalid},
		{"relative remote dir", func(s *meta.TableSpec) { s.RemoteDataDir = "remote" }, meta.ErrInvalid},
		{"no remote dir", func(s *meta.TableSpec) { s.RemoteDataDir = "" }, meta.ErrInvalid},
		{"replication factor 0", func(s *meta.TableSpec) { s.ReplicationFactor = 0 }, meta.ErrInvalid},
		{"too few buckets assigned", func(s *meta.TableSpec) { s.Buckets = s.Buckets[:3] }, meta.ErrInvalid},
		{"no assignment", func(s *meta.TableSpec) { s.Buckets = nil }, meta.ErrInvalid},
		{"more replicas than the factor", func(s *meta.TableSpec) { s.ReplicationFactor = 2 }, meta.ErrInvalid},
		{"leader not a replica", func(s *meta.TableSpec) { s.Buckets[0].Leader = "ts-9" }, meta.ErrInvalid},
		{"bad server id", func(s *meta.TableSpec) { s.Buckets[0].Replicas[0] = "TS_1" }, meta.ErrInvalid},
		{"partitioned with an assignment", func(s *meta.TableSpec) { s.Schema.PartitionKeys = []string{"day"}; s.Buckets = s.Buckets[:1] }, meta.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tableSpec("d", "t", 4, false)
			tc.mod(&spec)
			v, err := e.s.CreateTable(ctx, e.g, spec)
			if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "meta: ") {
				t.Fatalf("got %+v, %v; want %v", v, err, tc.want)
			}
			t.Log(err)
			e.unchanged(before, tc.name)
		})
	}
}

// TestConcurrentCreateTableIDs creates tables from many goroutines: every
// id is used once, without gaps, in the order the tables were created.
func TestConcurrentCreateTableIDs(t *testing.T) {
	e := newEnv(t)
	e.createDB("d")
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := e.s.CreateTable(t.Context(), e.g, tableSpec("d", fmt.Sprintf("t%d_%d", w, i), 2, false))
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ts, err := e.s.ListTables(t.Context(), "d")
	if err != nil || len(ts) != workers*each {
		t.Fatalf("%d tables, %v", len(ts), err)
	}
	slices.SortFunc(ts, func(a, b meta.Versioned[meta.TableRecord]) int { return int(a.Rev - b.Rev) })
	for i, v := range ts {
		if v.Value.ID != int64(i+1) {
			t.Fatalf("table created %d-th has id %d", i+1, v.Value.ID)
		}
		if a, err := e.s.GetAssignment(t.Context(), v.Value.Target()); err != nil || a.Rev != v.Rev {
			t.Fatalf("assignment of %s: %+v, %v", v.Value.Name, a, err)
		}
	}
}

func TestPartitions(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "events", 2, true)
	e.createTable("d", "plain", 2, false)

	p1 := e.createPartition("d", "events", "2024-01-01", 2)
	p2 := e.createPartition("d", "events", "2024-01-02", 2)
	if p1.Value.ID != 1 || p2.Value.ID != 2 || p1.Value.TableID != tbl.Value.ID || p1.Value.DataState != meta.Active || p1.Value.Name != "2024-01-01" {
		t.Fatalf("partitions %+v %+v", p1.Value, p2.Value)
	}
	target := meta.Target{TableID: tbl.Value.ID, PartitionID: 2}
	if a, err := e.s.GetAssignment(ctx, target); err != nil || a.Rev != p2.Rev || a.Value.Target() != target || len(a.Value.Buckets) != 2 {
		t.Fatalf("assignment of %s: %+v, %v", target, a, err)
	}
	if got, err := e.s.GetPartition(ctx, tbl.Value.ID, "2024-01-02"); err != nil || got != p2 {
		t.Fatalf("get: %+v, %v", got, err)
	}
	ps, err := e.s.ListPartitions(ctx, tbl.Value.ID)
	if err != nil || len(ps) != 2 || ps[0] != p1 || ps[1] != p2 {
		t.Fatalf("list: %+v, %v", ps, err)
	}

	before := e.dump()
	for _, tc := range []struct {
		name, table, partition string
		buckets                int
		want                   error
	}{
		{"existing", "events", "2024-01-01", 2, meta.ErrExists},
		{"slash", "events", "a/b", 2, kv.ErrInvalidPartition},
		{"empty", "events", "", 2, kv.ErrInvalidPartition},
		{"dot dot", "events", "..", 2, kv.ErrInvalidPartition},
		{"two values for one key", "events", "a$b", 2, kv.ErrInvalidPartition},
		{"too long", "events", strings.Repeat("x", 201), 2, kv.ErrInvalidPartition},
		{"wrong bucket count", "events", "2024-01-03", 3, meta.ErrInvalid},
		{"non-partitioned table", "plain", "x", 2, meta.ErrInvalid},
		{"unknown table", "nope", "x", 2, meta.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := e.s.CreatePartition(ctx, e.g, "d", tc.table, tc.partition, assign(tc.buckets, "ts-1"))
			if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "meta: ") {
				t.Fatalf("got %+v, %v; want %v", v, err, tc.want)
			}
			t.Log(err)
		})
	}
	e.unchanged(before, "rejected partitions")

	// DropPartition takes the partition's record, assignment, snapshots
	// and snapshot id sequences, and nothing of the other partition.
	if _, err := e.s.NextSnapshotID(ctx, e.g, target, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.AddSnapshot(ctx, e.g, target, 1, meta.BucketSnapshot{SnapshotID: 1, MetadataPath: "file:///m"}); err != nil {
		t.Fatal(err)
	}
	other := meta.Target{TableID: tbl.Value.ID, PartitionID: 1}
	if _, err := e.s.NextSnapshotID(ctx, e.g, other, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DropPartition(ctx, e.g, "d", "events", "2024-01-02"); err != nil {
		t.Fatal(err)
	}
	for _, k := range e.keys() {
		if (strings.Contains(k, "/p2/") || strings.HasSuffix(k, "/p2") || strings.HasSuffix(k, "/2024-01-02")) && k != "/dropped/1/p2" {
			t.Errorf("key %s survived the drop", k)
		}
	}
	if _, err := e.s.GetPartition(ctx, tbl.Value.ID, "2024-01-02"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get dropped: %v", err)
	}
	if _, err := e.s.GetAssignment(ctx, other); err != nil {
		t.Fatalf("the other partition lost its assignment: %v", err)
	}
	if err := e.s.DropPartition(ctx, e.g, "d", "events", "2024-01-02"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("drop twice: %v", err)
	}
}

// populate creates a non-partitioned and a partitioned table with
// snapshots in several buckets and returns their targets.
func (e *env) populate(db string) []meta.Target {
	e.t.Helper()
	ctx := e.t.Context()
	plain := e.createTable(db, "plain", 4, false)
	parted := e.createTable(db, "parted", 4, true)
	targets := []meta.Target{plain.Value.Target()}
	for _, name := range []string{"a", "b"} {
		targets = append(targets, e.createPartition(db, "parted", name, 4).Value.Target())
	}
	_ = parted
	for _, tg := range targets {
		ids, err := e.s.AllocateSnapshotIDs(ctx, e.g, tg, 4)
		if err != nil {
			e.t.Fatal(err)
		}
		for b, id := range ids {
			snap := meta.BucketSnapshot{SnapshotID: id, LogOffset: int64(b), MetadataPath: fmt.Sprintf("file:///%s/%d", tg, b)}
			if _, err := e.s.AddSnapshot(ctx, e.g, tg, b, snap); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return targets
}

func TestDropTable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createDB("keep")
	e.createTable("keep", "other", 2, false) // its keys must survive
	e.populate("d")
	survivors := func() []string {
		var out []string
		for _, k := range e.keys() {
			if !strings.Contains(k, "/1/") && !strings.HasSuffix(k, "/1") && !strings.HasPrefix(k, "/tables/keep/") {
				out = append(out, k)
			}
		}
		return out
	}
	for _, name := range []string{"plain", "parted"} {
		if err := e.s.DropTable(ctx, e.g, "d", name); err != nil {
			t.Fatalf("drop %s: %v", name, err)
		}
		if _, err := e.s.GetTable(ctx, "d", name); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("get dropped %s: %v", name, err)
		}
	}
	want := []string{"/databases/d", "/databases/keep", "/dropped/2", "/dropped/3", "/seq/partition", "/seq/table"}
	if got := survivors(); !slices.Equal(got, want) {
		t.Fatalf("keys after drop: %v\nwant (besides table 1 in keep) %v", got, want)
	}
	// What the coordinator is to delete: each table's snapshot directory
	// (the partitioned table's holds its partitions').
	ds, err := e.s.ListDroppedData(ctx)
	if err != nil || len(ds) != 2 {
		t.Fatalf("dropped data: %v, %v", ds, err)
	}
	for i, name := range []string{"plain", "parted"} {
		d := ds[i].Value
		if wantDir := "file:///remote/kv/d/" + name + "-" + strconv.Itoa(i+2); d.Dir != wantDir || d.Target() != (meta.Target{TableID: int64(i + 2)}) || d.DroppedMs <= 0 {
			t.Errorf("dropped data of %s: %+v, want dir %s", name, d, wantDir)
		}
	}
	before := e.dump()
	if err := e.s.DeleteDroppedData(ctx, e.g, ds[0].Value.Target(), ds[0].Rev-1); !errors.Is(err, fencing.ErrPreconditionFailed) {
		t.Fatalf("forget at a stale revision: %v", err)
	}
	e.unchanged(before, "a stale forget")
	if err := e.s.DeleteDroppedData(ctx, e.g, ds[0].Value.Target(), ds[0].Rev); err != nil {
		t.Fatal(err)
	}
	if ds, err := e.s.ListDroppedData(ctx); err != nil || len(ds) != 1 || ds[0].Value.TableID != 3 {
		t.Fatalf("after a forget: %v, %v", ds, err)
	}
	if _, err := e.s.GetAssignment(ctx, meta.Target{TableID: 1}); err != nil {
		t.Fatalf("the other table lost its assignment: %v", err)
	}
	if err := e.s.DropTable(ctx, e.g, "d", "plain"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("drop twice: %v", err)
	}
}

// TestDropTableResumes interrupts drops after their first step, checks what
// a half-dropped table allows, and finishes them by dropping again.
func TestDropTableResumes(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	targets := e.populate("d")
	crash := errors.New("crash")
	meta.SetAfterMark(e.s, func() error { return crash })

	if err := e.s.DropPartition(ctx, e.g, "d", "parted", "a"); !errors.Is(err, crash) {
		t.Fatalf("interrupted partition drop: %v", err)
	}
	p, err := e.s.GetPartition(ctx, targets[1].TableID, "a")
	if err != nil || !p.Value.Dropping {
		t.Fatalf("half-dropped partition: %+v, %v", p, err)
	}
	if _, err := e.s.NextSnapshotID(ctx, e.g, targets[1], 0); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("snapshot id of a half-dropped partition: %v", err)
	}

	for _, name := range []string{"plain", "parted"} {
		if err := e.s.DropTable(ctx, e.g, "d", name); !errors.Is(err, crash) {
			t.Fatalf("interrupted drop of %s: %v", name, err)
		}
		v, err := e.s.GetTable(ctx, "d", name)
		if err != nil || !v.Value.Dropping {
			t.Fatalf("half-dropped %s: %+v, %v", name, v, err)
		}
		if _, err := e.s.CreateTable(ctx, e.g, tableSpec("d", name, 2, name == "parted")); !errors.Is(err, meta.ErrExists) {
			t.Fatalf("re-create half-dropped %s: %v", name, err)
		}
	}
	if _, err := e.s.GetAssignment(ctx, targets[0]); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("assignment of a half-dropped table: %v", err)
	}
	if _, err := e.s.NextSnapshotID(ctx, e.g, targets[0], 0); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("snapshot id of a half-dropped table: %v", err)
	}
	if _, err := e.s.CreatePartition(ctx, e.g, "d", "parted", "c", assign(4, "ts-1")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("partition of a half-dropped table: %v", err)
	}
	if _, err := e.s.SetDataState(ctx, e.g, meta.DataStateChange{Target: meta.TargetName{Database: "d", Table: "plain"}, State: meta.Loading, BulkLoadID: "x"}); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("data state of a half-dropped table: %v", err)
	}

	meta.SetAfterMark(e.s, nil)
	for _, name := range []string{"plain", "parted"} {
		if err := e.s.DropTable(ctx, e.g, "d", name); err != nil {
			t.Fatalf("finish drop of %s: %v", name, err)
		}
	}
	if got, want := e.keys(), []string{"/databases/d", "/dropped/1", "/dropped/2", "/dropped/2/p1", "/seq/partition", "/seq/table"}; !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
}

func TestDropLoadingTargetRejected(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	plain := e.createTable("d", "plain", 2, false)
	e.createTable("d", "parted", 2, true)
	part := e.createPartition("d", "parted", "a", 2)
	for _, c := range []meta.DataStateChange{
		{Target: meta.TargetName{Database: "d", Table: "plain"}, Rev: plain.Rev, State: meta.Loading, BulkLoadID: "txn-1"},
		{Target: meta.TargetName{Database: "d", Table: "parted", Partition: "a"}, Rev: part.Rev, State: meta.Active, BulkLoadID: "txn-2"},
	} {
		if _, err := e.s.SetDataState(ctx, e.g, c); err != nil {
			t.Fatal(err)
		}
	}
	before := e.dump()
	for name, drop := range map[string]func() error{
		"table":             func() error { return e.s.DropTable(ctx, e.g, "d", "plain") },
		"partitioned":       func() error { return e.s.DropTable(ctx, e.g, "d", "parted") },
		"partition":         func() error { return e.s.DropPartition(ctx, e.g, "d", "parted", "a") },
		"cascade":           func() error { return e.s.DropDatabase(ctx, e.g, "d", true) },
		"non-empty cascade": func() error { return e.s.DropDatabase(ctx, e.g, "d", false) },
	} {
		err := drop()
		want := meta.ErrLoading
		if name == "non-empty cascade" {
			want = meta.ErrNotEmpty
		}
		if !errors.Is(err, want) {
			t.Errorf("drop %s: %v; want %v", name, err, want)
		}
		// The error names the bulk load that holds the target.
		var le *meta.LoadingError
		switch name {
		case "table":
			if !errors.As(err, &le) || le.BulkLoadID != "txn-1" || le.State != meta.Loading || le.What != "table d.plain" {
				t.Errorf("drop %s: %#v", name, le)
			}
		case "partitioned", "partition":
			if !errors.As(err, &le) || le.BulkLoadID != "txn-2" || le.State != meta.Active || !strings.Contains(le.What, "partition a") {
				t.Errorf("drop %s: %#v", name, le)
			}
		}
	}
	e.unchanged(before, "rejected drops")
}

// TestStaleEpochRejected deposes the coordinator: every write it still
// makes fails with fencing.ErrNotLeader and changes nothing.
func TestStaleEpochRejected(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "t", 2, false)
	snapID, err := e.s.NextSnapshotID(ctx, e.g, tbl.Value.Target(), 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.s.GetAssignment(ctx, tbl.Value.Target())
	if err != nil {
		t.Fatal(err)
	}
	stale := e.g
	if err := e.lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := e.elect(newClient(t, endpoints), "coordinator-2")
	if next.Epoch() <= stale.Epoch {
		t.Fatalf("epoch %d after %d", next.Epoch(), stale.Epoch)
	}
	before := e.dump()
	target := tbl.Value.Target()
	for name, write := range map[string]func() error{
		"create database": func() error { _, err := e.s.CreateDatabase(ctx, stale, "x"); return err },
		"drop database":   func() error { return e.s.DropDatabase(ctx, stale, "d", true) },
		"create table":    func() error { _, err := e.s.CreateTable(ctx, stale, tableSpec("d", "u", 2, false)); return err },
		"drop table":      func() error { return e.s.DropTable(ctx, stale, "d", "t") },
		"put assignment":  func() error { _, err := e.s.PutAssignment(ctx, stale, a.Value, a.Rev); return err },
		"snapshot id":     func() error { _, err := e.s.NextSnapshotID(ctx, stale, target, 0); return err },
		"add snapshot": func() error {
			_, err := e.s.AddSnapshot(ctx, stale, target, 0, meta.BucketSnapshot{SnapshotID: snapID, MetadataPath: "file:///m"})
			return err
		},
		"data state": func() error {
			_, err := e.s.SetDataState(ctx, stale, meta.DataStateChange{Target: meta.TargetName{Database: "d", Table: "t"}, Rev: tbl.Rev, State: meta.Loading, BulkLoadID: "txn"})
			return err
		},
	} {
		if err := write(); !errors.Is(err, fencing.ErrNotLeader) || !strings.HasPrefix(err.Error(), "meta: ") {
			t.Errorf("%s with a stale epoch: %v; want fencing.ErrNotLeader", name, err)
		}
	}
	e.unchanged(before, "writes with a stale epoch")
	// The new term writes.
	if _, err := e.s.CreateDatabase(ctx, meta.GuardOf(next), "x"); err != nil {
		t.Fatal(err)
	}
}
