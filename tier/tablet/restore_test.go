package tablet_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

// A server that dies (its context cancelled mid-stream, nothing flushed)
// loses nothing: another server assigned the bucket restores it from the
// latest snapshot plus the changelog after it, with every acknowledged
// write.
func TestKillAndRestore(t *testing.T) {
	c := newCluster(t)
	ts1 := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts1, tb, 0, leader, 1)

	want := model{}
	writeBatch := func(s *server, epoch int32, from int) {
		t.Helper()
		muts := tb.upsert(t, row{"a", int64(from), "x"}, row{"b", int64(from), "y"}, row{"c", int64(from), "z"})
		muts = append(muts, tb.del(t, row{"a", int64(from - 3), ""}))
		mustWrite(t, s, tb, 0, epoch, muts...)
		want.apply(muts)
	}
	for i := range 20 {
		writeBatch(ts1, 1, i)
	}
	snap, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id}))
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Msg.Snapshot
	if s.SnapshotId != 1 || s.LogOffset != 80 || len(c.coord.reportList()) != 1 {
		t.Fatalf("snapshot %v, reports %d", s, len(c.coord.reportList()))
	}
	for i := 20; i < 30; i++ {
		writeBatch(ts1, 1, i)
	}
	ts1.stop() // the process dies: its replica is gone with it

	c.assign(tb, 0, []string{"ts-2"}, "ts-2", 2)
	ts2 := c.startServer("ts-2")
	st := waitReady(t, ts2, tb, 0, leader, 2)
	if st.GetLatestSnapshotId() != 1 || st.LogEndOffset != 120 {
		t.Fatalf("restored replica %v", st)
	}
	epoch := int32(2)
	got, err := scanAll(t, ts2, tb, 0, &epoch, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatal(err)
	}
	writeBatch(ts2, 2, 30)
	// The old epoch is refused.
	_, err = write(t.Context(), ts2, tb, 0, 1, tb.upsert(t, row{"a", 1, ""})...)
	wantReason(t, err, tierpb.ReasonStaleEpoch)
}

// A leader snapshots itself periodically while it changes, reports each
// snapshot and truncates the changelog below the oldest retained one; it
// skips the snapshot when nothing changed. A follower that restarts
// restores from the latest snapshot.
func TestPeriodicSnapshot(t *testing.T) {
	c := newCluster(t)
	fast := func(cfg *tablet.Config) { cfg.SnapshotInterval = 100 * time.Millisecond }
	ts1, ts2 := c.startServer("ts-1", fast), c.startServer("ts-2", fast)
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)

	// Nothing written: no snapshot.
	time.Sleep(400 * time.Millisecond)
	if n := len(c.coord.reportList()); n != 0 {
		t.Fatalf("%d snapshots of an empty replica", n)
	}
	want := model{}
	for round := range 3 {
		for i := range 10 {
			muts := tb.upsert(t, row{"a", int64(round*100 + i), fmt.Sprintf("%0300d", i)})
			mustWrite(t, ts1, tb, 0, 1, muts...)
			want.apply(muts)
		}
		n := round + 1
		eventually(t, "snapshot reported", func() error {
			if got := len(c.coord.reportList()); got < n {
				return fmt.Errorf("%d reports, want %d", got, n)
			}
			return nil
		})
	}
	var reports []*tierv1.ReportSnapshotRequest
	eventually(t, "snapshot of everything", func() error {
		reports = c.coord.reportList()
		if last := reports[len(reports)-1]; last.LogOffset != 30 {
			return fmt.Errorf("last snapshot at %d", last.LogOffset)
		}
		return nil
	})
	last := reports[len(reports)-1]
	if last.ServerId != "ts-1" || last.LeaderEpoch != 1 || last.Bucket != 0 {
		t.Fatalf("last report %v", last)
	}
	// Nothing changed since: no more snapshots.
	time.Sleep(400 * time.Millisecond)
	if n := len(c.coord.reportList()); n != len(reports) {
		t.Fatalf("%d reports after idling, want %d", n, len(reports))
	}
	// The fake coordinator keeps 2: the changelog may drop what precedes
	// the older one, and the 4 KiB segments make it drop some.
	oldest := reports[len(reports)-2].LogOffset
	eventually(t, "changelog truncated", func() error {
		if start, end := c.logOffsets(tb, 0); start == 0 || start > oldest || end != 30 {
			return fmt.Errorf("changelog [%d, %d), oldest retained snapshot at %d", start, end, oldest)
		}
		return nil
	})

	// The follower restarts on another server id from the latest snapshot
	// (the changelog no longer holds the beginning).
	c.assign(tb, 0, []string{"ts-1", "ts-3"}, "ts-1", 1)
	ts3 := c.startServer("ts-3", fast)
	st := waitReady(t, ts3, tb, 0, follower, 1)
	if st.GetLatestSnapshotId() != last.SnapshotId {
		t.Fatalf("restored %v, want snapshot %d", st, last.SnapshotId)
	}
	got, err := scanAll(t, ts3, tb, 0, nil, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatal(err)
	}
}

// A server whose registration lease is lost stops serving its replicas,
// registers again and, still assigned, restores them with every write.
func TestLeaseLost(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	want := model{}
	muts := tb.upsert(t, row{"a", 1, "x"}, row{"a", 2, "y"})
	mustWrite(t, ts, tb, 0, 1, muts...)
	want.apply(muts)

	key := c.store.Prefix() + "/servers/ts-1"
	resp, err := c.cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("registration: %v %v", resp, err)
	}
	old := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := c.cli.Revoke(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lease loss noticed", func() error {
		if n := c.metric("thaw_tablet_lease_lost_total", "ts-1", nil); n != 1 {
			return fmt.Errorf("lease_lost_total %v", n)
		}
		return nil
	})
	eventually(t, "registered again", func() error {
		resp, err := c.cli.Get(t.Context(), key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == old {
			return fmt.Errorf("registration %v", resp.Kvs)
		}
		return nil
	})
	waitReady(t, ts, tb, 0, leader, 1)
	epoch := int32(1)
	eventually(t, "data back", func() error {
		got, err := scanAll(t, ts, tb, 0, &epoch, 10)
		if err != nil {
			return err
		}
		return sameRows(got, want)
	})
	if n := c.metric("thaw_tablet_registered", "ts-1", nil); n != 1 {
		t.Fatalf("registered gauge %v", n)
	}
	// A few rows stall nothing; the counters exist (a missing one reads -1).
	for _, name := range []string{"thaw_tablet_write_stalls_total", "thaw_tablet_write_stall_seconds_total"} {
		if n := c.metric(name, "ts-1", nil); n != 0 {
			t.Errorf("%s = %v, want 0", name, n)
		}
	}
}

// RestoreSnapshot replaces a replica's state with a given snapshot (and
// replays the changelog after it), reports a restore of the same snapshot
// without starting another, and refuses an older snapshot or one of a
// bulk load that does not hold the target.
func TestRestoreSnapshotRPC(t *testing.T) {
	c, ts1, ts2, tb, epoch := twoReplicas(t)
	want := model{}
	take := func() *tierv1.BucketSnapshot {
		t.Helper()
		muts := tb.upsert(t, row{"a", int64(len(want)), "x"})
		mustWrite(t, ts1, tb, 0, 1, muts...)
		want.apply(muts)
		resp, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: epoch, Target: tb.id}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Snapshot
	}
	restore := func(s *tierv1.BucketSnapshot, bulkLoadID string) (*tierv1.ReplicaStatus, error) {
		resp, err := ts2.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
			CoordinatorEpoch: epoch, Target: tb.id, SnapshotId: s.SnapshotId, MetadataPath: s.MetadataPath, BulkLoadId: bulkLoadID,
		}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.Replica, nil
	}
	s1, s2 := take(), take()
	mustWrite(t, ts1, tb, 0, 1, tb.upsert(t, row{"a", 100, "after"})...)
	want.apply(tb.upsert(t, row{"a", 100, "after"}))

	if _, err := restore(s2, "bulk-x"); tierpb.ReasonOf(err) != tierpb.ReasonInvalidArgument {
		t.Fatalf("restore for a bulk load that does not hold the target: %v", err)
	}
	st, err := restore(s2, "")
	if err != nil {
		t.Fatal(err)
	}
	switch st.State {
	case tierv1.ReplicaState_REPLICA_STATE_RESTORING:
		if st.GetRestoringSnapshotId() != s2.SnapshotId {
			t.Fatalf("restoring %v", st)
		}
	case tierv1.ReplicaState_REPLICA_STATE_READY:
	default:
		t.Fatalf("restore: %v", st)
	}
	eventually(t, "restored", func() error {
		st, err := restore(s2, "")
		if err != nil {
			return err
		}
		if st.State != tierv1.ReplicaState_REPLICA_STATE_READY || st.GetLatestSnapshotId() != s2.SnapshotId {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	eventually(t, "contents", func() error {
		got, err := scanAll(t, ts2, tb, 0, nil, 10)
		if err != nil {
			return err
		}
		return sameRows(got, want)
	})
	if _, err := restore(s1, ""); tierpb.ReasonOf(err) != tierpb.ReasonInvalidArgument {
		t.Fatalf("restore of an older snapshot: %v", err)
	}
	// A target not hosted here: NOT_FOUND.
	_, err = ts1.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
		CoordinatorEpoch: epoch, Target: &tierv1.TargetId{TableId: 999}, SnapshotId: 1, MetadataPath: s1.MetadataPath,
	}))
	wantReason(t, err, tierpb.ReasonNotFound)
	// A snapshot that cannot be read: the restore starts, fails in the
	// background, and the replica reports FAILED with the error.
	_, err = ts1.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
		CoordinatorEpoch: epoch, Target: tb.id, SnapshotId: s2.SnapshotId + 5, MetadataPath: c.objects.Base() + "/nowhere/_METADATA",
	}))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "failed restore reported", func() error {
		resp, err := ts1.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
		if err != nil {
			return err
		}
		if r := resp.Msg.Replicas[0]; r.State != tierv1.ReplicaState_REPLICA_STATE_FAILED || r.Error == "" {
			return fmt.Errorf("replica %v", r)
		}
		return nil
	})
}

// TestLateBulkRestoreRefused: a RestoreSnapshot of a bulk load that
// arrives once the load has published (the target ACTIVE, still carrying
// the load's id: a call delayed past its round) is refused; it replaced a
// replica restored since with the load's snapshot (FAILED for good when
// retention had dropped it).
func TestLateBulkRestoreRefused(t *testing.T) {
	c, ts1, ts2, tb, epoch := twoReplicas(t)
	mustWrite(t, ts1, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)
	resp, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: epoch, Target: tb.id}))
	if err != nil {
		t.Fatal(err)
	}
	snap := resp.Msg.Snapshot
	c.setState(tb, meta.Active, "bulk-1")
	eventually(t, "ts-2 sees the published load", func() error {
		st, err := replicaOf(t, ts2, tb)
		if err != nil {
			return err
		}
		if st.GetBulkLoadId() != "bulk-1" || st.GetDataState() != tierv1.DataState_DATA_STATE_ACTIVE {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	_, err = ts2.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
		CoordinatorEpoch: epoch, Target: tb.id, SnapshotId: snap.SnapshotId, MetadataPath: c.objects.Base() + "/dropped/_METADATA", BulkLoadId: "bulk-1",
	}))
	if tierpb.ReasonOf(err) != tierpb.ReasonInvalidArgument {
		t.Fatalf("bulk restore after the load published: %v", err)
	}
	if st, err := replicaOf(t, ts2, tb); err != nil || st.State != tierv1.ReplicaState_REPLICA_STATE_READY {
		t.Fatalf("replica after the refused restore: %v %v", st, err)
	}
}

// TestFailedBulkRestoreAfterTheLoad: a bulk load's restore that fails
// while the load holds the target waits FAILED for the load's next
// RestoreSnapshot; when the load ends without one (aborted, or published
// by another round), the replica restores from the registry instead of
// staying FAILED for good.
func TestFailedBulkRestoreAfterTheLoad(t *testing.T) {
	c, ts1, ts2, tb, epoch := twoReplicas(t)
	want := model{}
	muts := tb.upsert(t, row{"a", 1, "x"})
	mustWrite(t, ts1, tb, 0, 1, muts...)
	want.apply(muts)
	c.setState(tb, meta.Loading, "bulk-1")
	eventually(t, "ts-2 sees the load", func() error {
		st, err := replicaOf(t, ts2, tb)
		if err != nil {
			return err
		}
		if st.GetBulkLoadId() != "bulk-1" || st.GetDataState() != tierv1.DataState_DATA_STATE_LOADING {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	if _, err := ts2.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
		CoordinatorEpoch: epoch, Target: tb.id, SnapshotId: 7, MetadataPath: c.objects.Base() + "/nowhere/_METADATA", BulkLoadId: "bulk-1",
	})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed bulk restore reported", func() error {
		st, err := replicaOf(t, ts2, tb)
		if err != nil {
			return err
		}
		if st.State != tierv1.ReplicaState_REPLICA_STATE_FAILED {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	c.setState(tb, meta.Active, "")
	eventually(t, "restored from the registry once the load ended", func() error {
		st, err := replicaOf(t, ts2, tb)
		if err != nil {
			return err
		}
		if st.State != tierv1.ReplicaState_REPLICA_STATE_READY {
			return fmt.Errorf("replica %v", st)
		}
		got, err := scanAll(t, ts2, tb, 0, nil, 10)
		if err != nil {
			return err
		}
		return sameRows(got, want)
	})
}

// twoReplicas starts ts-1 and ts-2 holding table t's bucket 0 (ts-1 the
// leader), ready, and returns them with the coordinator's epoch.
func twoReplicas(t *testing.T) (*cluster, *server, *server, *table, int64) {
	t.Helper()
	c := newCluster(t)
	ts1, ts2 := c.startServer("ts-1"), c.startServer("ts-2")
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)
	return c, ts1, ts2, tb, int64(c.lead.Epoch())
}

// replicaOf is s's status of its replica of tb's bucket 0.
func replicaOf(t *testing.T, s *server, tb *table) (*tierv1.ReplicaStatus, error) {
	r, err := s.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
	if err != nil {
		return nil, err
	}
	return r.Msg.Replicas[0], nil
}
