package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
)

// getFailer fails Get of one key while armed.
type getFailer struct {
	ObjectStore
	key   atomic.Value
	armed atomic.Bool
}

func (g *getFailer) Get(ctx context.Context, key string) ([]byte, error) {
	if g.armed.Load() && g.key.Load() == key {
		return nil, errors.New("injected: transient read error")
	}
	return g.ObjectStore.Get(ctx, key)
}

// TestRetentionKeepsWhatItCannotRead: a failure to read one retained
// snapshot's _METADATA during retention prunes nothing at that report: the
// pruned snapshots' registry entries went anyway, their files unknown, and
// no later pass could find them again. The next report prunes them, files
// and all.
func TestRetentionKeepsWhatItCannotRead(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 10*time.Second)
	gf := &getFailer{}
	e.wrapObjects = func(o ObjectStore) ObjectStore { gf.ObjectStore = o; return gf }
	n := e.startNode("c-1", nil) // retention 3
	term := e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(1), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}
	ids := make([]int64, 7)
	paths := make([]string, 7)
	for i := 1; i < 7; i++ {
		if ids[i], err = e.store.NextSnapshotID(ctx, term.guard, tgt, 0); err != nil {
			t.Fatal(err)
		}
		paths[i] = w.write(t, 0, ids[i], int64(100*i), nil, 2)
	}
	report := func(i int) {
		t.Helper()
		if _, err := n.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, SnapshotId: ids[i], LogOffset: int64(100 * i), MetadataPath: paths[i], ServerId: "ts-1",
		})); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	files1 := w.files(t, 0, ids[1])
	for i := 1; i <= 3; i++ {
		report(i)
	}
	// Report 4 while snapshot 3's document (retained) cannot be read once.
	k3, _ := e.objects.Key(paths[3])
	gf.key.Store(k3)
	gf.armed.Store(true)
	report(4)
	gf.armed.Store(false)
	vs, err := e.store.ListSnapshots(ctx, tgt, 0)
	if err != nil || len(vs) != 4 {
		t.Fatalf("after the report whose retention could not read a retained document: %d registered, %v; want all 4", len(vs), err)
	}
	// At the next report the document of snapshot 1 (to be pruned) cannot
	// be read: nothing is pruned (snapshot 2 went, and with it the files
	// it shared with snapshot 1, which stayed registered:
	// TestRetentionKeepsSharedFilesOfAnUnreadSnapshot).
	k1, _ := e.objects.Key(paths[1])
	gf.key.Store(k1)
	gf.armed.Store(true)
	report(5)
	gf.armed.Store(false)
	vs, err = e.store.ListSnapshots(ctx, tgt, 0)
	if err != nil || len(vs) != 5 {
		t.Fatalf("after the report that could not read snapshot 1's document: %d registered, %v; want all 5", len(vs), err)
	}
	// Everything readable again; the bucket goes on snapshotting.
	report(6)
	var left []string
	for _, u := range files1 {
		if w.exists(t, u) {
			left = append(left, u)
		}
	}
	vs, _ = e.store.ListSnapshots(ctx, tgt, 0)
	var reg []int64
	for _, v := range vs {
		reg = append(reg, v.Value.SnapshotID)
	}
	if len(left) > 0 || len(reg) != 3 {
		t.Fatalf("registry %v; %d objects of snapshot %d left: %v", reg, len(left), ids[1], left)
	}
}

// TestRetentionKeepsSharedFilesOfAnUnreadSnapshot: a snapshot past
// retention whose document cannot be read for now stays registered; the
// snapshot pruned beside it took the files they share with it (retention
// knew only the documents it read), and the registered snapshot could no
// longer be restored. Nothing is pruned while such a document is unknown.
func TestRetentionKeepsSharedFilesOfAnUnreadSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 10*time.Second)
	gf := &getFailer{}
	e.wrapObjects = func(o ObjectStore) ObjectStore { gf.ObjectStore = o; return gf }
	n := e.startNode("c-1", nil) // retention 3
	term := e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(1), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}
	ids := make([]int64, 6)
	paths := make([]string, 6)
	layout := map[int][]string{1: {"a.sst"}, 2: {"a.sst"}} // snapshots 1 and 2 share a file
	for i := 1; i < 6; i++ {
		if ids[i], err = e.store.NextSnapshotID(ctx, term.guard, tgt, 0); err != nil {
			t.Fatal(err)
		}
		paths[i] = w.write(t, 0, ids[i], int64(100*i), layout[i], 1)
	}
	report := func(i int) {
		t.Helper()
		if _, err := n.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, SnapshotId: ids[i], LogOffset: int64(100 * i), MetadataPath: paths[i], ServerId: "ts-1",
		})); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	for i := 1; i <= 3; i++ {
		report(i)
	}
	k1, _ := e.objects.Key(paths[1])
	gf.key.Store(k1)
	gf.armed.Store(true)
	report(4)
	report(5) // snapshot 1 unread: retention would keep 5, 4, 3 and prune 2
	gf.armed.Store(false)
	vs, err := e.store.ListSnapshots(ctx, tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reg []int64
	for _, v := range vs {
		reg = append(reg, v.Value.SnapshotID)
	}
	shared := w.st.SharedDir(0) + "/a.sst"
	if !slices.Contains(reg, ids[1]) || !w.exists(t, shared) {
		t.Fatalf("registry %v (snapshot %d kept: %t); its shared file %s exists: %t", reg, ids[1], slices.Contains(reg, ids[1]), shared, w.exists(t, shared))
	}
}
