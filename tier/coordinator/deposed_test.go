package coordinator

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
)

// blockingObjects holds the Delete of a key ending in suffix until release
// is closed (a slow store, or a coordinator paused mid-delete).
type blockingObjects struct {
	ObjectStore
	suffix  string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingObjects) Delete(ctx context.Context, key string) error {
	if strings.HasSuffix(key, b.suffix) {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	return b.ObjectStore.Delete(ctx, key)
}

// TestRetentionDeletesStopWithTheTerm: a coordinator whose term ends while
// retention deletes a pruned snapshot's files stops deleting: object
// deletes cannot be fenced, and a successor may register, meanwhile, a
// snapshot that references one of those files. It went on deleting every
// file after its term had ended. What it leaves keeps its _METADATA and
// its registry entry, so the next retention pass deletes it.
func TestRetentionDeletesStopWithTheTerm(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 30*time.Second)
	keep1 := func(c *Config) { c.SnapshotRetention = 1 }
	blk := &blockingObjects{entered: make(chan struct{}), release: make(chan struct{})}
	e.wrapObjects = func(o ObjectStore) ObjectStore { blk.ObjectStore = o; return blk }
	n1 := e.startNode("c-1", keep1)
	e.wrapObjects = nil
	term1 := e.awaitLeader(n1)
	if _, err := n1.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n1.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(1), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}
	report := func(id, off int64, path string) error {
		a, err := e.store.GetAssignment(ctx, tgt)
		if err != nil {
			return err
		}
		_, err = n1.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, LeaderEpoch: a.Value.Buckets[0].LeaderEpoch, SnapshotId: id,
			LogOffset: off, MetadataPath: path, ServerId: a.Value.Buckets[0].Leader,
		}))
		return err
	}
	id1, err := e.store.NextSnapshotID(ctx, term1.guard, tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := report(id1, 100, w.write(t, 0, id1, 100, []string{"x.sst"}, 1)); err != nil {
		t.Fatal(err)
	}
	files1 := w.files(t, 0, id1) // _METADATA first
	id2, err := e.store.NextSnapshotID(ctx, term1.guard, tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	p2 := w.write(t, 0, id2, 200, []string{"y.sst"}, 1)
	// Retention of snapshot 1 (pushed out by 2) blocks on its shared
	// file; then the term ends.
	blk.suffix = "/shared/x.sst"
	done2 := make(chan error, 1)
	go func() { done2 <- report(id2, 200, p2) }()
	select {
	case <-blk.entered:
	case err := <-done2:
		t.Fatalf("report 2 finished early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("retention never reached snapshot 1's _METADATA")
	}
	n1.cancel()
	stopped := <-n1.done
	n1.done <- stopped // for the cleanup, which waits for it too
	close(blk.release)
	<-done2
	if !w.exists(t, files1[0]) {
		t.Errorf("%s was deleted after the term had ended", files1[0])
	}
	vs, err := e.store.ListSnapshots(ctx, tgt, 0)
	if err != nil || !slices.ContainsFunc(vs, func(v meta.Versioned[meta.BucketSnapshot]) bool { return v.Value.SnapshotID == id1 }) {
		t.Errorf("the registry entry of snapshot %d, whose files were not all deleted, is gone: %v, %v", id1, vs, err)
	}
}
