package bulkloadtest

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
)

// A Commit whose response is lost (the server committed, the client saw
// an error) is repeated and returns the outcome; Commits sent while one
// runs join it.
func TestCommitRetriedAfterLostResponse(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	tp := h.createTable(n, "items", 4, "")
	rows := makeRows(100, "")
	info := h.mustBegin(n, tp, "job-1")
	m := h.load(info, rows)

	h.loseResponses("/Commit", 1)
	if _, err := commit(t.Context(), n, info.GetHandle(), m); err == nil {
		t.Fatal("the first commit's response was not lost")
	}
	// The server finished the commit all the same.
	st := h.awaitState(info.GetHandle().GetTxnId(), tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED)
	if st.GetPhase() != "committed" {
		t.Fatalf("status %v", st)
	}
	st, err := commit(t.Context(), n, info.GetHandle(), m)
	if err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
		t.Fatalf("commit retried: %v, %v", st, err)
	}
	tb := table(t, info)
	h.expectAll(tp, tb, rows)

	// Concurrent commits of one transaction join it: all succeed.
	tp2 := h.createTable(n, "other", 4, "")
	info2 := h.mustBegin(n, tp2, "job-2")
	m2 := h.load(info2, rows)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = commit(t.Context(), n, info2.GetHandle(), m2) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	h.expectAll(tp2, tb, rows)
}

// An assignment change during the restore round (a tablet server holding
// replicas goes away for good, and the coordinator moves its replicas to
// a fourth server) restarts the round; the new replicas restore the
// adopted snapshots and the commit completes with every row everywhere.
func TestAssignmentChangeMidRestore(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	h.startTablet("ts-4")
	tp := h.createTable(n, "items", 4, "")
	loc, err := h.locations(tp)
	if err != nil {
		t.Fatal(err)
	}
	victim := loc.GetBuckets()[0].GetReplicas()[0]
	before := map[int32][]string{}
	for _, b := range loc.GetBuckets() {
		before[b.GetBucket()] = b.GetReplicas()
	}

	var fired atomic.Bool
	h.setHook(func(_, step string) error {
		if step != "send:restore" || !fired.CompareAndSwap(false, true) {
			return nil
		}
		h.mu.Lock()
		ts := h.tablets[victim]
		h.mu.Unlock()
		t.Logf("stopping %s during the restore round", victim)
		ts.stop()
		// Hold the round until the coordinator has moved the replicas,
		// so that the new holders must restore before the commit ends.
		deadline := time.Now().Add(waitFor)
		for time.Now().Before(deadline) {
			cur, err := h.store.GetAssignment(t.Context(), meta.Target{TableID: loc.GetTargetId().GetTableId()})
			if err == nil && !slices.ContainsFunc(cur.Value.Buckets, func(b meta.BucketAssignment) bool {
				return slices.Contains(b.Replicas, victim) || len(b.Replicas) < 3
			}) {
				t.Logf("the assignment moved off %s", victim)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	rows := makeRows(120, "")
	info := h.mustBegin(n, tp, "job-1")
	m := h.load(info, rows)
	st, err := commit(t.Context(), n, info.GetHandle(), m)
	if err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
		t.Fatalf("commit: %v, %v", st, err)
	}
	if !fired.Load() {
		t.Fatal("the restore round was never reached")
	}
	h.setHook(nil)
	h.waitReady(tp)
	loc, err = h.locations(tp)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, b := range loc.GetBuckets() {
		if slices.Contains(b.GetReplicas(), victim) {
			t.Fatalf("bucket %d still has a replica on the stopped %s: %v", b.GetBucket(), victim, b.GetReplicas())
		}
		if !slices.Equal(b.GetReplicas(), before[b.GetBucket()]) {
			moved = true
		}
	}
	if !moved {
		t.Fatal("no assignment changed")
	}
	h.expectAll(tp, table(t, info), rows)
}

// A coordinator that takes over resumes every non-terminal transaction:
// several, in different states, survive a failover and can be finished.
func TestFailoverResumesEveryTransaction(t *testing.T) {
	h := newHarness(t)
	first := h.startCoordinator("c-1")
	if h.leader() != first {
		t.Fatal("c-1 does not lead")
	}
	h.startCoordinator("c-2")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	rows := makeRows(60, "")
	tpA, tpB, tpC := h.createTable(first, "a", 2, ""), h.createTable(first, "b", 2, ""), h.createTable(first, "c", 2, "")
	infoA := h.mustBegin(first, tpA, "a") // to be committed after the failover
	infoB := h.mustBegin(first, tpB, "b") // to be aborted after the failover
	infoC := h.mustBegin(first, tpC, "c") // committed before the failover
	mA, mC := h.load(infoA, rows), h.load(infoC, rows)
	if _, err := commit(t.Context(), first, infoC.GetHandle(), mC); err != nil {
		t.Fatal(err)
	}
	first.stop()
	n := h.leader()
	list, err := n.bulk.List(t.Context(), connect.NewRequest(&tierv1.ListBulkLoadsRequest{IncludeTerminal: true}))
	if err != nil || len(list.Msg.GetTransactions()) != 3 {
		t.Fatalf("list after failover: %v, %v", list, err)
	}
	if _, err := commit(t.Context(), n, infoA.GetHandle(), mA); err != nil {
		t.Fatal(err)
	}
	if _, err := abort(t.Context(), n, infoB.GetHandle()); err != nil {
		t.Fatal(err)
	}
	tb := table(t, infoA)
	h.expectAll(tpA, tb, rows)
	h.expectEmpty(tpB, tb, rows)
	h.expectAll(tpC, tb, rows)
	for _, tp := range []*tierv1.TargetPath{tpA, tpB, tpC} {
		h.noFence(tp)
	}
	// The old coordinator's epoch is fenced off: it cannot serve.
	_, err = status(t.Context(), first, infoA.GetHandle().GetTxnId())
	if err == nil {
		t.Fatal("a stopped coordinator answered")
	}
}
