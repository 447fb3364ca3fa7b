package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
)

// deleteFailer fails Delete of one key while armed.
type deleteFailer struct {
	ObjectStore
	key   atomic.Value
	armed atomic.Bool
}

func (d *deleteFailer) Delete(ctx context.Context, key string) error {
	if d.armed.Load() && d.key.Load() == key {
		return errors.New("injected: transient delete error")
	}
	return d.ObjectStore.Delete(ctx, key)
}

// TestRetentionRetriesFailedDeletes: a file of a pruned snapshot whose
// delete fails is deleted by a later retention pass. The registry entry
// went first, so no later pass knew the object again and it stayed in the
// store for good (docs promised a sweep that did not exist).
func TestRetentionRetriesFailedDeletes(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 10*time.Second)
	df := &deleteFailer{}
	e.wrapObjects = func(o ObjectStore) ObjectStore { df.ObjectStore = o; return df }
	node := e.startNode("c-1", nil) // retention 3
	term := e.awaitLeader(node)
	if _, err := node.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	ct, err := node.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(1), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}
	const n = 10
	ids, paths := make([]int64, n), make([]string, n)
	for i := 1; i < n; i++ {
		if ids[i], err = e.store.NextSnapshotID(ctx, term.guard, tgt, 0); err != nil {
			t.Fatal(err)
		}
		paths[i] = w.write(t, 0, ids[i], int64(100*i), nil, 1)
	}
	report := func(i int) {
		t.Helper()
		if _, err := node.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, SnapshotId: ids[i], LogOffset: int64(100 * i), MetadataPath: paths[i], ServerId: "ts-1",
		})); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	files1 := w.files(t, 0, ids[1])
	private1 := files1[1]
	for i := 1; i <= 3; i++ {
		report(i)
	}
	k, _ := e.objects.Key(private1)
	df.key.Store(k)
	df.armed.Store(true)
	report(4) // prunes 1; its private file cannot be deleted this once
	df.armed.Store(false)
	for i := 5; i < n; i++ {
		report(i) // many more retention passes, all deletes succeed
	}
	if w.exists(t, private1) {
		t.Fatalf("file %s of pruned snapshot %d is still in the store after %d more retention passes", private1, ids[1], n-5)
	}
}
