package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// snapWriter writes real snapshots (files and _METADATA) of one target to
// the env's object store.
type snapWriter struct {
	e   *env
	st  snapshot.Target
	tgt meta.Target
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// put stores content at uri and returns its handle.
func (w *snapWriter) put(t *testing.T, uri string, content []byte) snapshot.FileHandle {
	t.Helper()
	key, err := w.e.objects.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.e.objects.PutIfAbsent(t.Context(), key, objstore.BytesSource(content)); err != nil {
		t.Fatal(err)
	}
	return snapshot.FileHandle{Path: uri, Size: int64(len(content)), SHA256: sha(content)}
}

// write writes snapshot id of bucket with the given shared files (by name,
// under the bucket's shared dir, written once) and private files (by count)
// and returns its metadata path.
func (w *snapWriter) write(t *testing.T, bucket int, id, logOffset int64, shared []string, private int) string {
	t.Helper()
	m := &snapshot.Metadata{
		TableID:          w.tgt.TableID,
		BucketID:         int32(bucket),
		SnapshotID:       id,
		SnapshotLocation: w.st.SnapshotDir(bucket, id),
		LogOffset:        logOffset,
	}
	if w.tgt.Partitioned() {
		m.PartitionID = &w.tgt.PartitionID
	}
	for _, name := range shared {
		content := []byte("shared " + name)
		h := w.put(t, w.st.SharedDir(bucket)+"/"+name, content)
		m.SharedFiles = append(m.SharedFiles, snapshot.KvFileHandle{Handle: h, LocalPath: name})
	}
	for i := range private {
		content := fmt.Appendf(nil, "snapshot %d private %d", id, i)
		local := fmt.Sprintf("%06d.sst", i)
		h := w.put(t, w.st.SnapshotDir(bucket, id)+"/"+snapshot.PrivateFileName(sha(content), local), content)
		m.PrivateFiles = append(m.PrivateFiles, snapshot.KvFileHandle{Handle: h, LocalPath: local})
		m.IncrementalSize += h.Size
	}
	b, err := snapshot.EncodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	w.put(t, w.st.MetadataPath(bucket, id), b)
	return w.st.MetadataPath(bucket, id)
}

// exists reports whether the object at uri exists.
func (w *snapWriter) exists(t *testing.T, uri string) bool {
	t.Helper()
	key, err := w.e.objects.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.e.objects.Stat(t.Context(), key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// files returns every object of a snapshot as its document lists it, plus
// the document.
func (w *snapWriter) files(t *testing.T, bucket int, id int64) []string {
	t.Helper()
	key, _ := w.e.objects.Key(w.st.MetadataPath(bucket, id))
	b, err := w.e.objects.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.DecodeMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{w.st.MetadataPath(bucket, id)}
	for _, f := range slices.Concat(m.SharedFiles, m.PrivateFiles) {
		out = append(out, f.Handle.Path)
	}
	return out
}

func TestReportSnapshotRetention(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.register(e.cli, "ts-1", 10*time.Second)
	n := e.startNode("c-1", nil) // retention: the default 3
	term := e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(2), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "orders", TableID: tgt.TableID}}
	ids := make([]int64, 8) // ids[i] is snapshot i's id (1-based use)
	for i := 1; i < len(ids); i++ {
		if ids[i], err = e.store.NextSnapshotID(ctx, term.guard, tgt, 0); err != nil {
			t.Fatal(err)
		}
	}
	// 1: shared A + private; 2: A, B + private; 3: B + private; 4: private
	// only (as a bulk-loaded snapshot); 5: B + private; 6, 7: private.
	layout := map[int][]string{1: {"a.sst"}, 2: {"a.sst", "b.sst"}, 3: {"b.sst"}, 5: {"b.sst"}}
	paths := make([]string, len(ids))
	for i := 1; i < len(ids); i++ {
		paths[i] = w.write(t, 0, ids[i], int64(100*i), layout[i], 2)
	}
	files := make([][]string, len(ids))
	for i := 1; i < len(ids); i++ {
		files[i] = w.files(t, 0, ids[i])
	}
	report := func(i int, mutate func(*tierv1.ReportSnapshotRequest)) (*tierv1.ReportSnapshotResponse, error) {
		r := &tierv1.ReportSnapshotRequest{
			Target: targetIDProto(tgt), Bucket: 0, LeaderEpoch: 0, SnapshotId: ids[i],
			LogOffset: int64(100 * i), MetadataPath: paths[i], ServerId: "ts-1",
		}
		if mutate != nil {
			mutate(r)
		}
		resp, err := n.client.ReportSnapshot(ctx, req(r))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	// Rejected reports register nothing and delete nothing.
	bad := []struct {
		name   string
		mutate func(*tierv1.ReportSnapshotRequest)
		want   tierpb.Reason
	}{
		{"stale leader epoch", func(r *tierv1.ReportSnapshotRequest) { r.LeaderEpoch = 1 }, tierpb.ReasonStaleEpoch},
		{"not the leader", func(r *tierv1.ReportSnapshotRequest) { r.ServerId = "ts-9" }, tierpb.ReasonStaleEpoch},
		{"log offset not the document's", func(r *tierv1.ReportSnapshotRequest) { r.LogOffset = 7 }, tierpb.ReasonInvalidArgument},
		{"foreign metadata path", func(r *tierv1.ReportSnapshotRequest) { r.MetadataPath = w.st.MetadataPath(1, ids[1]) }, tierpb.ReasonInvalidArgument},
		{"missing document", func(r *tierv1.ReportSnapshotRequest) {
			r.SnapshotId = ids[1] + 100
			r.MetadataPath = w.st.MetadataPath(0, r.SnapshotId)
		}, tierpb.ReasonInvalidArgument},
		{"unknown table", func(r *tierv1.ReportSnapshotRequest) { r.Target = &tierv1.TargetId{TableId: tgt.TableID + 50} }, tierpb.ReasonNotFound},
		{"unknown bucket", func(r *tierv1.ReportSnapshotRequest) { r.Bucket = 2 }, tierpb.ReasonNotFound},
		{"no target", func(r *tierv1.ReportSnapshotRequest) { r.Target = nil }, tierpb.ReasonInvalidArgument},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			before := e.dump()
			_, err := report(1, b.mutate)
			wantReason(t, err, b.want)
			sameDump(t, before, e.dump())
		})
	}
	_, err = report(1, func(r *tierv1.ReportSnapshotRequest) { r.LeaderEpoch = 3 })
	if md := tierpb.MetadataOf(err); md[tierpb.KeyEpoch] != "0" {
		t.Fatalf("stale epoch error metadata %v (%v)", md, err)
	}

	check := func(resp *tierv1.ReportSnapshotResponse, retained []int, oldest int) {
		t.Helper()
		var got []int64
		for _, s := range resp.GetRetained() {
			got = append(got, s.GetSnapshotId())
		}
		var want []int64
		for _, i := range retained {
			want = append(want, ids[i])
		}
		if !slices.Equal(got, want) || resp.GetOldestRetainedLogOffset() != int64(100*oldest) {
			t.Fatalf("retained %v oldest %d, want %v oldest %d", got, resp.GetOldestRetainedLogOffset(), want, 100*oldest)
		}
		vs, err := e.store.ListSnapshots(ctx, tgt, 0)
		if err != nil {
			t.Fatal(err)
		}
		var reg []int64
		for _, v := range vs {
			reg = append(reg, v.Value.SnapshotID)
		}
		slices.Reverse(reg)
		if !slices.Equal(reg, want) {
			t.Fatalf("registry %v, want %v", reg, want)
		}
	}
	present := func(i int, want bool, uris ...string) {
		t.Helper()
		for _, u := range uris {
			if got := w.exists(t, u); got != want {
				t.Fatalf("snapshot %d: object %s exists %v, want %v", i, u, got, want)
			}
		}
	}
	sharedA, sharedB := w.st.SharedDir(0)+"/a.sst", w.st.SharedDir(0)+"/b.sst"

	for i := 1; i <= 3; i++ {
		resp, err := report(i, nil)
		if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		want := []int{}
		for j := i; j >= 1; j-- {
			want = append(want, j)
		}
		check(resp, want, 1)
	}
	// Idempotent.
	resp, err := report(2, nil)
	if err != nil {
		t.Fatalf("report again: %v", err)
	}
	check(resp, []int{3, 2, 1}, 1)

	// 4 pushes 1 out: its document and private files go, shared A stays
	// (2 references it).
	if resp, err = report(4, nil); err != nil {
		t.Fatal(err)
	}
	check(resp, []int{4, 3, 2}, 2)
	present(1, false, files[1][0], files[1][2], files[1][3])
	present(1, true, sharedA)
	for i := 2; i <= 4; i++ {
		present(i, true, files[i]...)
	}

	// 5 pushes 2 out: A is unreferenced now and goes; B stays (3, 5).
	if resp, err = report(5, nil); err != nil {
		t.Fatal(err)
	}
	check(resp, []int{5, 4, 3}, 3)
	present(2, false, sharedA, files[2][0], files[2][3], files[2][4])
	present(2, true, sharedB)

	// 6 and 7 push 3 and then the bulk-loaded 4 out: all their private
	// files go; B stays while 5 holds it.
	if resp, err = report(6, nil); err != nil {
		t.Fatal(err)
	}
	check(resp, []int{6, 5, 4}, 4)
	if resp, err = report(7, nil); err != nil {
		t.Fatal(err)
	}
	check(resp, []int{7, 6, 5}, 5)
	present(3, false, files[3][0], files[3][2], files[3][3])
	present(4, false, files[4]...)
	present(5, true, files[5]...)
	for i := 6; i <= 7; i++ {
		present(i, true, files[i]...)
	}
	if got := metricValue(t, n.reg, "thaw_coordinator_snapshots_pruned_total", nil); got != 4 {
		t.Errorf("pruned metric %v, want 4", got)
	}
	// Deleted: 1: doc + 2 private; 2: doc + 2 private + A; 3: doc + 2; 4: doc + 2.
	if got := metricValue(t, n.reg, "thaw_coordinator_snapshot_files_deleted_total", nil); got != 13 {
		t.Errorf("deleted files metric %v, want 13", got)
	}

	// A snapshot that reuses a shared file retention deleted (built on
	// snapshot 2, long dropped) is refused and changes nothing: no replica
	// could restore it.
	id8, err := e.store.NextSnapshotID(ctx, term.guard, tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	path8 := w.write(t, 0, id8, 800, []string{"a.sst", "b.sst"}, 1)
	keyA, _ := e.objects.Key(sharedA)
	if err := e.objects.Delete(ctx, keyA); err != nil {
		t.Fatal(err)
	}
	before := e.dump()
	_, err = n.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
		Target: targetIDProto(tgt), Bucket: 0, SnapshotId: id8, LogOffset: 800, MetadataPath: path8, ServerId: "ts-1",
	}))
	wantReason(t, err, tierpb.ReasonInvalidArgument)
	if !strings.Contains(err.Error(), "references 1 shared file the store does not hold (a.sst;") {
		t.Fatalf("err = %v, want it to name a.sst", err)
	}
	sameDump(t, before, e.dump())
	present(7, true, files[7]...)

	// A snapshot below the latest's log offset (a leader that lagged it;
	// the changelog may be truncated past its state) is refused and
	// changes nothing: it would have become the latest, which no replica
	// could restore, and pushed out the snapshots holding what the log
	// no longer does.
	id9, err := e.store.NextSnapshotID(ctx, term.guard, tgt, 0)
	if err != nil {
		t.Fatal(err)
	}
	path9 := w.write(t, 0, id9, 650, nil, 1)
	before = e.dump()
	_, err = n.client.ReportSnapshot(ctx, req(&tierv1.ReportSnapshotRequest{
		Target: targetIDProto(tgt), Bucket: 0, SnapshotId: id9, LogOffset: 650, MetadataPath: path9, ServerId: "ts-1",
	}))
	wantReason(t, err, tierpb.ReasonInvalidArgument)
	if !strings.Contains(err.Error(), "log offset 650 is below the latest snapshot's") {
		t.Fatalf("err = %v, want it to say the snapshot lags the latest", err)
	}
	sameDump(t, before, e.dump())
	present(7, true, files[7]...)
}

// TestTriggerSnapshot forwards a snapshot request to each bucket's leader
// with the coordinator epoch; the (fake) tablet writes the snapshot and
// reports it back, as a real one does.
func TestTriggerSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	_, ft := e.register(e.cli, "ts-1", 10*time.Second)
	n := e.startNode("c-1", nil)
	term := e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Schema: eventsSchema(3), ReplicationFactor: 1})); err != nil {
		t.Fatal(err)
	}
	cp, err := n.client.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "x$1"}}))
	if err != nil {
		t.Fatal(err)
	}
	part := "x$1"
	loc, err := n.client.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: &part}}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: loc.Msg.GetTargetId().GetTableId(), PartitionID: cp.Msg.GetPartition().GetPartitionId()}
	w := &snapWriter{e: e, tgt: tgt, st: snapshot.Target{RemoteDir: e.remote, Database: "shop", Table: "events", TableID: tgt.TableID, Partition: part, PartitionID: tgt.PartitionID}}
	ft.mu.Lock()
	ft.take = func(ctx context.Context, r *tierv1.TakeSnapshotRequest) (*tierv1.BucketSnapshot, error) {
		b := int(r.GetBucket())
		id, err := e.store.NextSnapshotID(ctx, term.guard, tgt, b)
		if err != nil {
			return nil, err
		}
		path := w.write(t, b, id, int64(10*b), []string{"s.sst"}, 1)
		resp, err := n.client.ReportSnapshot(ctx, connect.NewRequest(&tierv1.ReportSnapshotRequest{
			Target: r.GetTarget(), Bucket: r.GetBucket(), LeaderEpoch: loc.Msg.GetBuckets()[b].GetLeaderEpoch(),
			SnapshotId: id, LogOffset: int64(10 * b), MetadataPath: path, ServerId: "ts-1",
		}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetRetained()[0], nil
	}
	ft.mu.Unlock()

	resp, err := n.client.TriggerSnapshot(ctx, req(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: &part}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetSnapshots()) != 3 {
		t.Fatalf("snapshots %v", resp.Msg.GetSnapshots())
	}
	for b, s := range resp.Msg.GetSnapshots() {
		latest, err := e.store.LatestSnapshot(ctx, tgt, b)
		if err != nil {
			t.Fatal(err)
		}
		if int(s.GetBucket()) != b || s.GetSnapshotId() != latest.Value.SnapshotID || s.GetMetadataPath() != latest.Value.MetadataPath || s.GetLogOffset() != int64(10*b) {
			t.Fatalf("bucket %d: snapshot %v, registry %+v", b, s, latest.Value)
		}
	}
	if got := ft.gate.Highest(); got != term.epoch() {
		t.Fatalf("tablet admitted coordinator epoch %d, want %d", got, term.epoch())
	}
	// One bucket only.
	one, err := n.client.TriggerSnapshot(ctx, req(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: &part}, Bucket: proto.Int32(1)}))
	if err != nil || len(one.Msg.GetSnapshots()) != 1 || one.Msg.GetSnapshots()[0].GetBucket() != 1 {
		t.Fatalf("one bucket: %v, %v", one.Msg.GetSnapshots(), err)
	}
}
