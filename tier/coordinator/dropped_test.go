package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/meta"
)

// TestCleanDropped drives the leader's dropped-data passes one at a time:
// a failed delete keeps the drop's record (and only that object), a pass
// that deleted something keeps it too, as does one within the grace, and
// an upload that lands late is deleted before the target is forgotten.
// Another table's objects are never touched.
func TestCleanDropped(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	inner, err := objstore.OpenBucket(ctx, e.remote)
	if err != nil {
		t.Fatal(err)
	}
	faults := objstore.NewFaults(inner)
	store := objstore.New(faults, e.remote)
	n := e.newNode("c1", func(c *Config) { c.DroppedDataCleanInterval = -1; c.DroppedDataGrace = time.Hour })
	n.c.objects, n.c.bulkObjects = store, store
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { n.done <- n.c.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-n.done })
	term := e.awaitLeader(n)

	if _, err := e.store.CreateDatabase(ctx, term.guard, "d"); err != nil {
		t.Fatal(err)
	}
	schema := kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}, {Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true}},
		PrimaryKey: []string{"id"}, Buckets: 1,
	}
	var dirs []string
	for _, name := range []string{"gone", "kept"} {
		tv, err := e.store.CreateTable(ctx, term.guard, meta.TableSpec{Database: "d", Name: name, Schema: schema, ReplicationFactor: 1,
			RemoteDataDir: e.remote, Buckets: []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, tv.Value.SnapshotTarget().Dir())
	}
	put := func(uri string) {
		t.Helper()
		key, err := store.Key(uri)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.PutIfAbsent(ctx, key, objstore.BytesSource([]byte(uri))); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(uri string) bool {
		key, _ := store.Key(uri)
		_, err := store.Stat(ctx, key)
		return err == nil
	}
	gone := []string{dirs[0] + "/0/snap-1/_METADATA", dirs[0] + "/0/snap-1/private-a", dirs[0] + "/0/shared/b.sst"}
	kept := dirs[1] + "/0/snap-1/_METADATA"
	for _, u := range append(gone, kept) {
		put(u)
	}
	if err := e.store.DropTable(ctx, term.guard, "d", "gone"); err != nil {
		t.Fatal(err)
	}
	remembered := func() int {
		t.Helper()
		ds, err := e.store.ListDroppedData(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	pass := func(wantErr bool, wantRemembered int, what string) {
		t.Helper()
		err := n.c.cleanDropped(ctx, term)
		if (err != nil) != wantErr {
			t.Fatalf("%s: pass error %v, want error %v", what, err, wantErr)
		}
		if got := remembered(); got != wantRemembered {
			t.Fatalf("%s: %d drops remembered, want %d", what, got, wantRemembered)
		}
		if !exists(kept) {
			t.Fatalf("%s: another table's object was deleted", what)
		}
	}

	faults.FailKey(objstore.OpDelete, func(k string) bool { return strings.HasSuffix(k, "/private-a") }, errors.New("injected: delete refused"))
	pass(true, 1, "a refused delete")
	if exists(gone[0]) || !exists(gone[1]) || exists(gone[2]) {
		t.Fatalf("after a refused delete: %v %v %v, want only private-a left", exists(gone[0]), exists(gone[1]), exists(gone[2]))
	}
	faults.Reset()
	pass(false, 1, "the rest deleted")
	pass(false, 1, "nothing left, within the grace")
	put(dirs[0] + "/0/snap-2/_METADATA") // a snapshot upload that lands late
	n.c.cfg.DroppedDataGrace = time.Millisecond
	time.Sleep(2 * time.Millisecond)
	pass(false, 1, "a late upload deleted")
	if exists(dirs[0] + "/0/snap-2/_METADATA") {
		t.Fatal("the late upload is still there")
	}
	pass(false, 0, "nothing left after the grace")

	// A table whose directory lies outside this object store (created when
	// the tier used another): reported and forgotten, not retried forever.
	if _, err := e.store.CreateTable(ctx, term.guard, meta.TableSpec{Database: "d", Name: "moved", Schema: schema, ReplicationFactor: 1,
		RemoteDataDir: "file:///thaw-elsewhere", Buckets: []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DropTable(ctx, term.guard, "d", "moved"); err != nil {
		t.Fatal(err)
	}
	if remembered() != 1 {
		t.Fatal("the drop of a table outside the store was not recorded")
	}
	pass(false, 0, "a directory outside the store")
	if got := testutil.ToFloat64(n.c.m.droppedFilesDeleted); got != 4 {
		t.Errorf("dropped files deleted: %v, want 4", got)
	}
	if got := testutil.ToFloat64(n.c.m.droppedPending); got != 0 {
		t.Errorf("dropped targets pending: %v, want 0", got)
	}
}
