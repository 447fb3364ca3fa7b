package meta_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testproxy"
	"github.com/thawdb/thaw/tier/meta"
)

func TestPutAssignmentCAS(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "t", 2, false)
	target := tbl.Value.Target()
	cur, err := e.s.GetAssignment(ctx, target)
	if err != nil {
		t.Fatal(err)
	}

	next := cur.Value
	next.Buckets = slices.Clone(next.Buckets)
	next.Buckets[0] = meta.BucketAssignment{Replicas: []string{"ts-2", "ts-3", "ts-4"}, Leader: "ts-4", LeaderEpoch: 1}
	rev, err := e.s.PutAssignment(ctx, e.g, next, cur.Rev)
	if err != nil || rev <= cur.Rev {
		t.Fatalf("put: %d, %v", rev, err)
	}
	if got, err := e.s.GetAssignment(ctx, target); err != nil || got.Rev != rev || got.Value.Buckets[0].Leader != "ts-4" || got.Value.Buckets[0].LeaderEpoch != 1 {
		t.Fatalf("after put: %+v, %v", got, err)
	}

	before := e.dump()
	if _, err := e.s.PutAssignment(ctx, e.g, cur.Value, cur.Rev); !errors.Is(err, fencing.ErrPreconditionFailed) {
		t.Fatalf("put at a stale revision: %v", err)
	}
	if _, err := e.s.PutAssignment(ctx, e.g, cur.Value, 0); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("put at revision 0: %v", err)
	}
	missing := cur.Value
	missing.TableID = 99
	if _, err := e.s.PutAssignment(ctx, e.g, missing, rev); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("put for an unknown target: %v", err)
	}
	bad := next
	bad.Buckets = []meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-2"}}
	if _, err := e.s.PutAssignment(ctx, e.g, bad, rev); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("put an invalid assignment: %v", err)
	}
	e.unchanged(before, "rejected assignment puts")
	if as, err := e.s.ListAssignments(ctx); err != nil || len(as) != 1 || as[0].Rev != rev {
		t.Fatalf("list: %+v, %v", as, err)
	}
}

// expectUpdate receives the next update and checks its shape.
func expectUpdate(t *testing.T, ch <-chan meta.AssignmentUpdate, reset bool, put, deleted []meta.Target) meta.AssignmentUpdate {
	t.Helper()
	u := recv(t, ch, 10*time.Second, "assignment update")
	var got []meta.Target
	for _, a := range u.Put {
		got = append(got, a.Value.Target())
		if a.Rev > u.Rev {
			t.Fatalf("update at %d holds revision %d", u.Rev, a.Rev)
		}
	}
	if u.Reset != reset || !slices.Equal(got, put) || !slices.Equal(u.Deleted, deleted) {
		t.Fatalf("update %+v: reset %v, put %v, deleted %v; want %v, %v, %v", u, u.Reset, got, u.Deleted, reset, put, deleted)
	}
	return u
}

func TestWatchAssignments(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	plain := e.createTable("d", "plain", 2, false).Value.Target()

	wctx, cancel := context.WithCancel(ctx)
	ch := e.s.WatchAssignments(wctx)
	first := expectUpdate(t, ch, true, []meta.Target{plain}, nil)

	e.createTable("d", "parted", 2, true)
	part := e.createPartition("d", "parted", "a", 2).Value.Target()
	u := expectUpdate(t, ch, false, []meta.Target{part}, nil)
	if u.Rev <= first.Rev {
		t.Fatalf("revision went from %d to %d", first.Rev, u.Rev)
	}

	cur, err := e.s.GetAssignment(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	cur.Value.Buckets[1].Leader, cur.Value.Buckets[1].LeaderEpoch = cur.Value.Buckets[1].Replicas[1], 1
	rev, err := e.s.PutAssignment(ctx, e.g, cur.Value, cur.Rev)
	if err != nil {
		t.Fatal(err)
	}
	u = expectUpdate(t, ch, false, []meta.Target{plain}, nil)
	if u.Rev != rev || u.Put[0].Rev != rev || u.Put[0].Value.Buckets[1].LeaderEpoch != 1 {
		t.Fatalf("update %+v, want the put at %d", u, rev)
	}

	if err := e.s.DropPartition(ctx, e.g, "d", "parted", "a"); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, ch, false, nil, []meta.Target{part})
	if err := e.s.DropTable(ctx, e.g, "d", "plain"); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, ch, false, nil, []meta.Target{plain})

	cancel()
	for range ch { // closed once ctx is done
	}
}

// TestWatchAssignmentsRelistsAfterCompaction cuts the watch's connection,
// changes and compacts etcd meanwhile, and expects a Reset with the state
// after the changes once the connection is back.
func TestWatchAssignmentsRelistsAfterCompaction(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	a := e.createTable("d", "a", 2, false).Value.Target()

	p := testproxy.New(t, endpoints[0])
	watcher, err := meta.New(newClient(t, []string{"http://" + p.Addr()}), e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	ch := watcher.WatchAssignments(ctx)
	expectUpdate(t, ch, true, []meta.Target{a}, nil)

	p.Pause(true)
	if err := e.s.DropTable(ctx, e.g, "d", "a"); err != nil {
		t.Fatal(err)
	}
	b := e.createTable("d", "b", 2, false).Value.Target()
	resp, err := e.cli.Get(ctx, "compact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-ch:
		t.Fatalf("update while cut off: %+v", u)
	case <-time.After(200 * time.Millisecond):
	}
	p.Pause(false)
	u := expectUpdate(t, ch, true, []meta.Target{b}, nil)
	if u.Rev < resp.Header.Revision {
		t.Fatalf("reset at %d, before the compaction at %d", u.Rev, resp.Header.Revision)
	}
}

// TestDroppedTargets: only targets this metadata created and has dropped
// (or is dropping) come back; live ones and ids it never allocated do not.
func TestDroppedTargets(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if got, err := e.s.DroppedTargets(ctx, []meta.Target{{TableID: 1}, {TableID: 1, PartitionID: 1}}); err != nil || len(got) != 0 {
		t.Fatalf("nothing allocated yet: %v, %v", got, err)
	}
	e.createDB("d")
	live := e.createTable("d", "live", 2, false).Value.Target()
	gone := e.createTable("d", "gone", 2, false).Value.Target()
	e.createTable("d", "parted", 2, true)
	p1 := e.createPartition("d", "parted", "a", 2).Value.Target()
	p2 := e.createPartition("d", "parted", "b", 2).Value.Target()
	if err := e.s.DropTable(ctx, e.g, "d", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DropPartition(ctx, e.g, "d", "parted", "a"); err != nil {
		t.Fatal(err)
	}
	never := meta.Target{TableID: 99}
	neverPart := meta.Target{TableID: p2.TableID, PartitionID: 99}
	ask := []meta.Target{never, p2, gone, live, p1, neverPart}
	got, err := e.s.DroppedTargets(ctx, ask)
	if want := []meta.Target{gone, p1}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("DroppedTargets(%v) = %v, %v; want %v", ask, got, err, want)
	}
	if _, err := e.s.DroppedTargets(ctx, []meta.Target{live, {TableID: 0}}); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("an invalid target: %v, want ErrInvalid", err)
	}
}
