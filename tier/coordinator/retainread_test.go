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
	// delKey, while delArmed, is a key whose Delete fails.
	delKey   atomic.Value
	delArmed atomic.Bool
}

func (g *getFailer) Get(ctx context.Context, key string) ([]byte, error) {
	if g.armed.Load() && g.key.Load() == key {
		return nil, errors.New("injected: transient read error")
	}
	return g.ObjectStore.Get(ctx, key)
}

func (g *getFailer) Delete(ctx context.Context, key string) error {
	if g.delArmed.Load() && g.delKey.Load() == key {
		return errors.New("injected: transient delete error")
	}
	return g.ObjectStore.Delete(ctx, key)
}

// TestRetentionKeepsWhatItCannotRead: a failure to read one retained
// snapshot's _METADATA during retention prunes nothing at that report: the
// pruned snapshots' registry entries went anyway, their files unknown, and
// no later pass could find them again. The next report prunes them, files
// and all.
func TestRetentionKeepsWhatItCannotRead(t *testing.T) {
	rc := newRetentionCase(t, 7, nil, 2)
	files1 := rc.w.files(t, 0, rc.ids[1])
	for i := 1; i <= 3; i++ {
		rc.report(i)
	}
	// Report 4 while snapshot 3's document (retained) cannot be read once.
	rc.failGet(3)
	rc.report(4)
	rc.failGet(0)
	if reg := rc.registered(t); len(reg) != 4 {
		t.Fatalf("after the report whose retention could not read a retained document: registry %v; want all 4", reg)
	}
	// At the next report the document of snapshot 1 (to be pruned) cannot
	// be read: nothing is pruned (snapshot 2 went, and with it the files
	// it shared with snapshot 1, which stayed registered:
	// TestRetentionKeepsSharedFilesOfAnUnreadSnapshot).
	rc.failGet(1)
	rc.report(5)
	rc.failGet(0)
	if reg := rc.registered(t); len(reg) != 5 {
		t.Fatalf("after the report that could not read snapshot 1's document: registry %v; want all 5", reg)
	}
	// Everything readable again; the bucket goes on snapshotting.
	rc.report(6)
	var left []string
	for _, u := range files1 {
		if rc.w.exists(t, u) {
			left = append(left, u)
		}
	}
	if reg := rc.registered(t); len(left) > 0 || len(reg) != 3 {
		t.Fatalf("registry %v; %d objects of snapshot %d left: %v", reg, len(left), rc.ids[1], left)
	}
}

// TestRetentionKeepsSharedFilesOfAnUnreadSnapshot: a snapshot past
// retention whose document cannot be read for now stays registered; the
// snapshot pruned beside it took the files they share with it (retention
// knew only the documents it read), and the registered snapshot could no
// longer be restored. Nothing is pruned while such a document is unknown.
func TestRetentionKeepsSharedFilesOfAnUnreadSnapshot(t *testing.T) {
	rc := newRetentionCase(t, 6, map[int][]string{1: {"a.sst"}, 2: {"a.sst"}}, 1) // 1 and 2 share a file
	for i := 1; i <= 3; i++ {
		rc.report(i)
	}
	rc.failGet(1)
	rc.report(4)
	rc.report(5) // snapshot 1 unread: retention would keep 5, 4, 3 and prune 2
	rc.failGet(0)
	reg := rc.registered(t)
	shared := rc.w.st.SharedDir(0) + "/a.sst"
	if !slices.Contains(reg, rc.ids[1]) || !rc.w.exists(t, shared) {
		t.Fatalf("registry %v (snapshot %d kept: %t); its shared file %s exists: %t", reg, rc.ids[1], slices.Contains(reg, rc.ids[1]), shared, rc.w.exists(t, shared))
	}
}

// retentionCase is one bucket of a table on a coordinator of retention 3
// whose object store fails Get of one key while armed, with snapshots
// 1..n-1 written (layout: each one's shared files, by index) and a report
// of each.
type retentionCase struct {
	e      *env
	gf     *getFailer
	tgt    meta.Target
	w      *snapWriter
	ids    []int64
	paths  []string
	report func(i int)
}

func newRetentionCase(t *testing.T, n int, layout map[int][]string, files int) *retentionCase {
	t.Helper()
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 10*time.Second)
	gf := &getFailer{}
	e.wrapObjects = func(o ObjectStore) ObjectStore { gf.ObjectStore = o; return gf }
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
	rc := &retentionCase{e: e, gf: gf, tgt: tgt, ids: make([]int64, n), paths: make([]string, n),
		w: &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}}
	for i := 1; i < n; i++ {
		if rc.ids[i], err = e.store.NextSnapshotID(ctx, term.guard, tgt, 0); err != nil {
			t.Fatal(err)
		}
		rc.paths[i] = rc.w.write(t, 0, rc.ids[i], int64(100*i), layout[i], files)
	}
	rc.report = func(i int) {
		t.Helper()
		if _, err := node.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, SnapshotId: rc.ids[i], LogOffset: int64(100 * i), MetadataPath: rc.paths[i], ServerId: "ts-1",
		})); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	return rc
}

// failGet arms (or, with i 0, disarms) the failure of snapshot i's
// _METADATA.
func (rc *retentionCase) failGet(i int) {
	if i == 0 {
		rc.gf.armed.Store(false)
		return
	}
	k, _ := rc.e.objects.Key(rc.paths[i])
	rc.gf.key.Store(k)
	rc.gf.armed.Store(true)
}

// registered returns the bucket's registered snapshot ids.
func (rc *retentionCase) registered(t *testing.T) []int64 {
	t.Helper()
	vs, err := rc.e.store.ListSnapshots(t.Context(), rc.tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reg []int64
	for _, v := range vs {
		reg = append(reg, v.Value.SnapshotID)
	}
	return reg
}
