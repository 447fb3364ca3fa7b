package tablet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/tablet"
)

// readGate blocks the Reads of the logs it opens while the gate is
// closed: a follower slow to replay.
type readGate struct {
	changelog.Provider
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	blocked chan struct{} // gets a value when a Read blocks
}

func (p *readGate) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	l, err := p.Provider.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	return &readGatedLog{Log: l, p: p}, nil
}

func (p *readGate) close() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

func (p *readGate) open() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
}

type readGatedLog struct {
	changelog.Log
	p *readGate
}

func (l *readGatedLog) Read(ctx context.Context, from int64, maxBytes int) ([]changelog.Record, error) {
	l.p.mu.Lock()
	g := l.p.gate
	l.p.mu.Unlock()
	if g != nil {
		select {
		case l.p.blocked <- struct{}{}:
		default:
		}
		<-g
	}
	return l.Log.Read(ctx, from, maxBytes)
}

// TestStaleTakeSnapshotBelowLogStart: a follower replaying slowly falls
// behind the old leader's truncation, then leads. A TakeSnapshot that
// arrived while its replay was under way waited for the apply lock, and
// when the replay failed (the records it needed truncated) went on with
// the stale state and was registered as the bucket's latest snapshot, at
// a log offset below the changelog's start: every restore from it failed,
// and the bucket's leader never became ready again. The snapshot now
// catches up first (and a state below the log's start is refused).
func TestStaleTakeSnapshotBelowLogStart(t *testing.T) { staleSnapshot(t, 2) }

// TestStaleTakeSnapshotRetention1: with a retention of 1, registering the
// stale snapshot deleted the only snapshot that held the truncated
// records: acknowledged writes were gone.
func TestStaleTakeSnapshotRetention1(t *testing.T) { staleSnapshot(t, 1) }

func staleSnapshot(t *testing.T, keep int) {
	c := newCluster(t)
	c.coord.keep = keep
	ts1 := c.startServer("ts-1")
	gp := &readGate{Provider: c.logs, blocked: make(chan struct{}, 1)}
	c.deps = func(d *tablet.Deps) { d.Changelog = gp }
	ts2 := c.startServer("ts-2")
	c.deps = nil
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)

	want := model{}
	writeRound := func(r int) {
		var muts []*tierv1.Mutation
		for k := range 8 {
			muts = append(muts, tb.upsert(t, row{"a", int64(r*8 + k), fmt.Sprintf("r%d-%0100d", r, k)})...)
		}
		mustWrite(t, ts1, tb, 0, 1, muts...)
		want.apply(muts)
	}
	writeRound(0)
	_, end := c.logOffsets(tb, 0)
	eventually(t, "ts-2 caught up", func() error {
		if st := waitReady(t, ts2, tb, 0, follower, 1); st.LogEndOffset != end {
			return fmt.Errorf("ts-2 at %d, log end %d", st.LogEndOffset, end)
		}
		return nil
	})

	// ts-2 becomes slow: its replay blocks in a Read (holding its apply lock).
	gp.close()
	for r := 1; r <= 10; r++ {
		writeRound(r)
	}
	select {
	case <-gp.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("ts-2 did not start to replay")
	}
	// The leader snapshots and truncates the changelog below it.
	resp, err := ts1.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id}))
	if err != nil {
		t.Fatal(err)
	}
	s1 := resp.Msg.Snapshot
	start, end := c.logOffsets(tb, 0)
	t.Logf("ts-1 snapshot %d at %d; log [%d, %d)", s1.SnapshotId, s1.LogOffset, start, end)

	// Failover: ts-2 leads.
	c.assign(tb, 0, []string{"ts-1", "ts-2"}, "ts-2", 2)
	st := waitReady(t, ts2, tb, 0, leader, 2)
	t.Logf("ts-2 leads at %d", st.LogEndOffset)

	// A snapshot is asked of the new leader while its replay is blocked.
	type result struct {
		snap *tierv1.BucketSnapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := ts2.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id}))
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{snap: resp.Msg.Snapshot}
	}()
	time.Sleep(500 * time.Millisecond) // the snapshot waits for the apply lock
	gp.open()                          // the replay goes on and fails: its records are truncated
	res := <-done
	if res.err == nil {
		start, _ := c.logOffsets(tb, 0)
		t.Logf("ts-2 snapshot %d registered at log offset %d; the changelog starts at %d", res.snap.SnapshotId, res.snap.LogOffset, start)
		if res.snap.LogOffset < start {
			t.Errorf("a registered snapshot (the bucket's latest) has log offset %d below the changelog's start %d: it cannot be restored", res.snap.LogOffset, start)
		}
	} else {
		t.Logf("ts-2 snapshot refused: %v", res.err)
	}
	if _, err := c.readMetadata(t.Context(), s1.MetadataPath); err != nil {
		t.Errorf("ts-1's snapshot %d (the only copy of offsets %d..%d) is gone: %v", s1.SnapshotId, st.LogEndOffset, s1.LogOffset-1, err)
	}
	// The bucket must recover: ts-2 restores and serves every row.
	deadline := time.Now().Add(5 * time.Second)
	var last *tierv1.ReplicaStatus
	for time.Now().Before(deadline) {
		r, err := ts2.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id, Buckets: []int32{0}}))
		if err == nil && len(r.Msg.Replicas) == 1 {
			last = r.Msg.Replicas[0]
			if last.State == tierv1.ReplicaState_REPLICA_STATE_READY && last.LogEndOffset == end {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last == nil || last.State != tierv1.ReplicaState_REPLICA_STATE_READY {
		t.Fatalf("ts-2 never ready again: %v", last)
	}
	ep := int32(2)
	got, err := scanAll(t, ts2, tb, 0, &ep, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatal(err)
	}
}
