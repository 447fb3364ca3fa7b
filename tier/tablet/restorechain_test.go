package tablet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/tablet"
)

// gatedProvider wraps a changelog provider; while armed, closing a log
// handle blocks until the gate opens (a slow teardown: Pebble's Close
// waiting for a compaction, a remote log's Close, ...).
type gatedProvider struct {
	changelog.Provider
	mu    sync.Mutex
	armed bool
	gate  chan struct{}
	hit   chan struct{}
}

type gatedLog struct {
	changelog.Log
	p *gatedProvider
}

func (p *gatedProvider) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	l, err := p.Provider.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	return gatedLog{l, p}, nil
}

func (l gatedLog) Close() error {
	l.p.mu.Lock()
	armed := l.p.armed
	l.p.mu.Unlock()
	if armed {
		select {
		case l.p.hit <- struct{}{}:
		default:
		}
		<-l.p.gate
	}
	return l.Log.Close()
}

// TestRestoreChainWaitsForOriginalReplica: two RestoreSnapshot calls in a
// row while the bucket's original replica is still being torn down. The
// second replacement started at once (the first replacement, stopped while
// it waited, said the bucket's earlier replicas were gone): its restore
// ran while the original replica was still open ("replica: already
// open") and stayed FAILED, and the original's directory removal could
// run under it. It now waits for the original and becomes READY.
func TestRestoreChainWaitsForOriginalReplica(t *testing.T) {
	c := newCluster(t)
	gp := &gatedProvider{gate: make(chan struct{}), hit: make(chan struct{}, 1)}
	ts1 := c.startServer("ts-1")
	c.deps = func(d *tablet.Deps) { gp.Provider = d.Changelog; d.Changelog = gp }
	ts2 := c.startServer("ts-2")
	c.deps = nil
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)
	epoch := int64(c.lead.Epoch())
	want := model{}
	take := func(i int64) *tierv1.BucketSnapshot {
		t.Helper()
		muts := tb.upsert(t, row{"a", i, "x"})
		mustWrite(t, ts1, tb, 0, 1, muts...)
		want.apply(muts)
		resp, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: epoch, Target: tb.id}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Snapshot
	}
	s1, s2 := take(1), take(2)
	restore := func(s *tierv1.BucketSnapshot) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := ts2.client.RestoreSnapshot(ctx, connect.NewRequest(&tierv1.RestoreSnapshotRequest{
			CoordinatorEpoch: epoch, Target: tb.id, SnapshotId: s.SnapshotId, MetadataPath: s.MetadataPath,
		}))
		if err != nil && connect.CodeOf(err) != connect.CodeDeadlineExceeded { // accepted, still restoring
			t.Fatal(err)
		}
	}
	gp.mu.Lock()
	gp.armed = true
	gp.mu.Unlock()
	restore(s1) // replaces the original replica; its teardown blocks
	select {
	case <-gp.hit:
	case <-time.After(10 * time.Second):
		t.Fatal("original replica not torn down")
	}
	restore(s2) // replaces the waiting replacement
	time.Sleep(300 * time.Millisecond)
	gp.mu.Lock()
	gp.armed = false
	gp.mu.Unlock()
	close(gp.gate)

	var last *tierv1.ReplicaStatus
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := ts2.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Msg.Replicas[0]
		if last.State == tierv1.ReplicaState_REPLICA_STATE_READY && last.GetLatestSnapshotId() == s2.SnapshotId {
			got, err := scanAll(t, ts2, tb, 0, nil, 10)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRows(got, want); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("restore of snapshot %d never became READY: %v", s2.SnapshotId, last)
}
