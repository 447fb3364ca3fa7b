package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
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
	// The _METADATA goes only after every file did.
	if !exists(gone[0]) || !exists(gone[1]) || exists(gone[2]) {
		t.Fatalf("after a refused delete: %v %v %v, want _METADATA and private-a left", exists(gone[0]), exists(gone[1]), exists(gone[2]))
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

// TestFinishInterruptedDrops: a coordinator marked a table and a partition
// Dropping (the first step of a drop: record marked, assignment deleted)
// and died before finishing. The next leader finishes both drops at the
// start of its term: the records go, and the names can be created again
// (before, the table read as gone yet blocked its name and its database).
func TestFinishInterruptedDrops(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	n1 := e.shopLeader(t)
	cl := n1.client
	ct, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(2), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	et, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Schema: eventsSchema(2), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2026-11-29$7"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	n1.cancel()
	<-n1.done
	n1.done <- nil // for the cleanup
	// The first step of both drops, as the dead coordinator left them.
	tableID, eventsID, partID := ct.Msg.GetTable().GetTableId(), et.Msg.GetTable().GetTableId(), cp.Msg.GetPartition().GetPartitionId()
	e.markDropping(t, e.prefix+"/tables/shop/orders", fmt.Sprintf("%s/assignment/%d", e.prefix, tableID))
	e.markDropping(t, fmt.Sprintf("%s/partitions/%d/2026-11-29$7", e.prefix, eventsID), fmt.Sprintf("%s/assignment/%d/p%d", e.prefix, eventsID, partID))

	n2 := e.startNode("c-2", nil)
	e.awaitLeader(n2)
	eventually(t, 15*time.Second, "the interrupted drops finished", func() bool {
		_, terr := e.store.GetTable(ctx, "shop", "orders")
		_, perr := e.store.GetPartition(ctx, eventsID, "2026-11-29$7")
		return errors.Is(terr, meta.ErrNotFound) && errors.Is(perr, meta.ErrNotFound)
	})
	if _, err := n2.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(2), ReplicationFactor: 1})); err != nil {
		t.Fatalf("create the dropped table's name again: %v", err)
	}
	if _, err := n2.client.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2026-11-29$7"},
	})); err != nil {
		t.Fatalf("create the dropped partition's name again: %v", err)
	}
}

// failDeleteOnce is an etcd KV whose first transaction deleting key fails
// (an etcd error between a drop's steps), storing nothing.
type failDeleteOnce struct {
	clientv3.KV
	key    string
	failed atomic.Bool
}

func (k *failDeleteOnce) Txn(ctx context.Context) clientv3.Txn {
	return &failDeleteTxn{Txn: k.KV.Txn(ctx), k: k}
}

type failDeleteTxn struct {
	clientv3.Txn
	k    *failDeleteOnce
	hits bool
}

func (t *failDeleteTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *failDeleteTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *failDeleteTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.hits = t.hits || deletes(ops, t.k.key)
	t.Txn = t.Txn.Then(ops...)
	return t
}

// deletes reports whether ops (or a transaction among them: the fencing
// guard nests the guarded one) delete key.
func deletes(ops []clientv3.Op, key string) bool {
	for _, op := range ops {
		if op.IsTxn() {
			if _, then, els := op.Txn(); deletes(then, key) || deletes(els, key) {
				return true
			}
		}
		if op.IsDelete() && string(op.KeyBytes()) == key {
			return true
		}
	}
	return false
}

func (t *failDeleteTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.hits && t.k.failed.CompareAndSwap(false, true) {
		return nil, errors.New("etcdserver: request timed out (injected, not applied)")
	}
	return t.Txn.Commit()
}

// TestFinishFailedDropInTerm: a drop request that fails between its steps
// (here its last etcd write) leaves the table marked Dropping; the
// coordinator finishes it within its term, so the name can be created
// again (the drops left unfinished were finished only when a term began:
// for the rest of the term the table read as gone while creating it
// answered ALREADY_EXISTS).
func TestFinishFailedDropInTerm(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	kv := &failDeleteOnce{key: e.prefix + "/tables/shop/orders"}
	e.wrapKV = func(inner clientv3.KV) clientv3.KV { kv.KV = inner; return kv }
	e.register(e.cli, "ts-1", 10*time.Second)
	n1 := e.startNode("c-1", nil)
	e.awaitLeader(n1)
	cl := n1.client
	if _, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	path := &tierv1.TablePath{Database: "shop", Table: "orders"}
	if _, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: ordersSchema(2), ReplicationFactor: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DropTable(ctx, req(&tierv1.DropTableRequest{Path: path})); err == nil || !kv.failed.Load() {
		t.Fatalf("drop whose last write fails: %v (failed %t)", err, kv.failed.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: ordersSchema(2), ReplicationFactor: 1}))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create after a drop that failed midway, in the same term: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// markDropping leaves a drop at its first step, as a coordinator that died
// after it left it: the table's or partition's record at key marked
// dropping and its assignment deleted.
func (e *env) markDropping(t *testing.T, key, assignment string) {
	t.Helper()
	ctx := t.Context()
	resp, err := e.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec["dropping"] = true
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Put(ctx, key, string(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Delete(ctx, assignment); err != nil {
		t.Fatal(err)
	}
}

// shopLeader starts coordinator c-1 with tablet server ts-1 registered,
// waits until it leads and creates database shop.
func (e *env) shopLeader(t *testing.T) *node {
	t.Helper()
	e.register(e.cli, "ts-1", 10*time.Second)
	n := e.startNode("c-1", nil)
	e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(t.Context(), req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	return n
}
