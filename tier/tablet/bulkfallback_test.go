package tablet_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
)

// failWaitProvider fails the next Wait of any log once armed (a transient
// changelog error while tailing), and with thenOpen the next Open after it
// (the restore that follows).
type failWaitProvider struct {
	changelog.Provider
	failNext, thenOpen, failOpen atomic.Bool
}

type failWaitLog struct {
	changelog.Log
	p *failWaitProvider
}

func (p *failWaitProvider) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	if p.failOpen.CompareAndSwap(true, false) {
		return nil, errors.New("injected transient changelog open error")
	}
	l, err := p.Provider.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	return failWaitLog{l, p}, nil
}

func (l failWaitLog) Wait(ctx context.Context, offset int64) (int64, error) {
	if l.p.failNext.CompareAndSwap(true, false) {
		l.p.failOpen.Store(l.p.thenOpen.Load())
		return 0, errors.New("injected transient changelog error")
	}
	return l.Log.Wait(ctx, offset)
}

// TestBulkRestoreAfterAFailedTail: a bulk-loaded replica (an explicit
// RestoreSnapshot of a snapshot not yet registered, at log offset 0, of a
// new target) whose tail fails once restored the latest registered
// snapshot instead (none): it reopened empty, yet reported READY with the
// load's snapshot as its latest, so the coordinator confirmed and
// committed it, and the replica served none of the load's rows. It
// restores the load's snapshot again, and reports what it holds.
func TestBulkRestoreAfterAFailedTail(t *testing.T) { bulkRestoreAfterAFailedTail(t, false) }

// TestBulkRestoreRetriedAfterAFailedTail: as TestBulkRestoreAfterAFailedTail,
// and the restore that follows the failed tail fails once too (a changelog
// open): the entry waited FAILED for a RestoreSnapshot of the coordinator's,
// which had confirmed the replica already and never asked again: the
// load's publish round never confirmed it, and it stayed COMMITTING. It is
// retried.
func TestBulkRestoreRetriedAfterAFailedTail(t *testing.T) { bulkRestoreAfterAFailedTail(t, true) }

func bulkRestoreAfterAFailedTail(t *testing.T, openFailsToo bool) {
	c := newCluster(t)
	ctx := t.Context()
	fp := &failWaitProvider{}
	c.deps = func(d *tablet.Deps) { fp.Provider = d.Changelog; d.Changelog = fp }
	ts1 := c.startServer("ts-1")
	c.deps = nil
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts1, tb, 0, leader, 1)

	ids, err := c.store.AllocateSnapshotIDs(ctx, c.guard, tb.mtgt, 1)
	if err != nil {
		t.Fatal(err)
	}
	snapID := ids[0]
	b, err := snapshotbuild.New(c.objects, snapshotbuild.Target{
		Table:       tb.t,
		Snapshot:    snapshot.Target{RemoteDir: c.objects.Base(), Database: c.db, Table: "t", TableID: tb.rec.ID},
		SnapshotIDs: []int64{snapID},
		LogOffsets:  map[int]int64{0: 0},
	}, snapshotbuild.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := model{}
	for i := range 5 {
		k, v, bk := tb.encode(t, row{"a", int64(i), "bulk"})
		if err := b.AddPair(ctx, int(bk), k, v); err != nil {
			t.Fatal(err)
		}
		want[string(k)] = string(v)
	}
	res, err := b.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c.setState(tb, meta.Loading, "bl-1")
	eventually(t, "LOADING seen", func() error {
		resp, err := ts1.client.ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
		if err != nil {
			return err
		}
		if ds := resp.Msg.Replicas[0].GetDataState(); ds != tierv1.DataState_DATA_STATE_LOADING {
			return fmt.Errorf("state %v", ds)
		}
		return nil
	})
	fp.thenOpen.Store(openFailsToo)
	fp.failNext.Store(true) // the restored replica's first tail fails once
	epoch := int64(c.lead.Epoch())
	var st *tierv1.ReplicaStatus
	eventually(t, "bulk restore confirmed", func() error {
		resp, err := ts1.client.RestoreSnapshot(ctx, connect.NewRequest(&tierv1.RestoreSnapshotRequest{
			CoordinatorEpoch: epoch, Target: tb.id, Bucket: 0, SnapshotId: snapID,
			MetadataPath: res[0].MetadataPath, BulkLoadId: "bl-1",
		}))
		if err != nil {
			return err
		}
		st = resp.Msg.Replica
		// The coordinator's test (bulkrunner.go): READY and latest >= id.
		if st.GetState() != tierv1.ReplicaState_REPLICA_STATE_READY || st.GetLatestSnapshotId() < snapID || fp.failNext.Load() {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	// Confirmed, the replica is not asked again; the load's publish round
	// reads its status: by then it has failed its tail and restored again.
	time.Sleep(500 * time.Millisecond)
	eventually(t, "replica ready again", func() error {
		resp, err := ts1.client.ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
		if err != nil {
			return err
		}
		if st = resp.Msg.Replicas[0]; st.GetState() != tierv1.ReplicaState_REPLICA_STATE_READY || st.GetLatestSnapshotId() < snapID {
			return fmt.Errorf("replica %v", st)
		}
		return nil
	})
	// The coordinator commits: registers the snapshot, target ACTIVE.
	if _, err := c.store.AddSnapshot(ctx, c.guard, tb.mtgt, 0, meta.BucketSnapshot{SnapshotID: snapID, LogOffset: 0, MetadataPath: res[0].MetadataPath}); err != nil {
		t.Fatal(err)
	}
	c.setState(tb, meta.Active, "")
	waitReady(t, ts1, tb, 0, leader, 1)
	e1 := int32(1)
	var got map[string]string
	eventually(t, "scan", func() error {
		got, err = scanAll(t, ts1, tb, 0, &e1, 16)
		return err
	})
	if err := sameRows(got, want); err != nil {
		t.Fatalf("after a confirmed bulk restore: %v (got %d rows, want %d)", err, len(got), len(want))
	}
}
