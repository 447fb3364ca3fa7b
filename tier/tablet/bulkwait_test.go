package tablet_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
)

// TestReplicaWaitsForBulkRestore: while a bulk load holds the target, a
// replica whose (empty) changelog the load moved to its snapshot's offset
// (as the load's first restore of the bucket does) waits for its own
// restore: RESTORING, no failure counted. If the target leaves LOADING
// without that restore, the replica restores from the latest registered
// snapshot, the load's, and serves again.
func TestReplicaWaitsForBulkRestore(t *testing.T) {
	c := newCluster(t)
	ctx := t.Context()
	ts1, ts2 := c.startServer("ts-1"), c.startServer("ts-2")
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)

	// The load's snapshot of the bucket: empty, at log offset 50.
	const offset = 50
	ids, err := c.store.AllocateSnapshotIDs(ctx, c.guard, tb.mtgt, 1)
	if err != nil {
		t.Fatal(err)
	}
	snapID := ids[0]
	b, err := snapshotbuild.New(c.objects, snapshotbuild.Target{
		Table:       tb.t,
		Snapshot:    snapshot.Target{RemoteDir: c.objects.Base(), Database: c.db, Table: "t", TableID: tb.rec.ID},
		SnapshotIDs: []int64{snapID},
		LogOffsets:  map[int]int64{0: offset},
	}, snapshotbuild.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	res, err := b.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c.setState(tb, meta.Loading, "bl-1")
	state := func(s *server) (*tierv1.ReplicaStatus, error) {
		resp, err := s.client.ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id, Buckets: []int32{0}}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.Replicas[0], nil
	}
	await := func(what string, ok func(*tierv1.ReplicaStatus) bool) {
		t.Helper()
		for _, s := range []*server{ts1, ts2} {
			eventually(t, s.id+" "+what, func() error {
				st, err := state(s)
				if err == nil && !ok(st) {
					err = fmt.Errorf("replica %v", st)
				}
				return err
			})
		}
	}
	await("sees LOADING", func(st *tierv1.ReplicaStatus) bool { return st.GetDataState() == tierv1.DataState_DATA_STATE_LOADING })
	l, err := c.logs.Open(ctx, changelog.BucketLogID{TableID: tb.rec.ID, Bucket: 0})
	if err != nil {
		t.Fatal(err)
	}
	err = l.ResetTo(ctx, offset)
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	await("waits", func(st *tierv1.ReplicaStatus) bool {
		return st.GetState() == tierv1.ReplicaState_REPLICA_STATE_RESTORING
	})
	time.Sleep(200 * time.Millisecond) // several polls of the data state
	for _, s := range []*server{ts1, ts2} {
		if st, err := state(s); err != nil || st.GetState() != tierv1.ReplicaState_REPLICA_STATE_RESTORING {
			t.Fatalf("%s while waiting: %v, %v", s.id, st, err)
		}
		if n := c.metric("thaw_tablet_replica_failures_total", s.id, nil); n != 0 {
			t.Fatalf("%s counted %v replica failures", s.id, n)
		}
	}

	// The load's snapshot is adopted and the target ACTIVE again, without
	// a restore command: each replica restores it by itself.
	if _, err := c.store.AddSnapshot(ctx, c.guard, tb.mtgt, 0, meta.BucketSnapshot{SnapshotID: snapID, LogOffset: offset, MetadataPath: res[0].MetadataPath}); err != nil {
		t.Fatal(err)
	}
	c.setState(tb, meta.Active, "")
	if st := waitReady(t, ts1, tb, 0, leader, 1); st.GetLatestSnapshotId() != snapID {
		t.Fatalf("ts-1 serves %v, want snapshot %d", st, snapID)
	}
	if st := waitReady(t, ts2, tb, 0, follower, 1); st.GetLatestSnapshotId() != snapID {
		t.Fatalf("ts-2 serves %v, want snapshot %d", st, snapID)
	}
	mustWrite(t, ts1, tb, 0, 1, tb.upsert(t, row{"a", 1, "after"})...)
}
