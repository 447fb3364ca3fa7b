package bulkloadtest

import (
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// A whole load: Begin fences and freezes, snapshots are built offline and
// committed, and every row is then served by every replica of its bucket;
// repeated requests return the outcome.
func TestEndToEnd(t *testing.T) {
	for _, tc := range []struct{ name, partition string }{{"table", ""}, {"partition", "2024-01-01"}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			n := h.standard()
			tp := h.createTable(n, "items", 4, tc.partition)
			ctx := t.Context()

			info := h.mustBegin(n, tp, "job-1")
			if len(info.GetSnapshotIds()) != 4 || len(info.GetSnapshotDirs()) != 4 || info.GetManifestPath() == "" || info.GetSchema().GetBuckets() != 4 {
				t.Fatalf("target info %v", info)
			}
			tb := table(t, info)
			rows := makeRows(300, tc.partition)
			// Fenced while the transaction runs.
			if res, err := h.readAll(ctx, tp, tb, rows); err != nil || res.loading != res.replicas || res.replicas == 0 {
				t.Fatalf("read while loading: %+v, %v", res, err)
			}
			// Begin again with the same token: the same facts.
			again := h.mustBegin(n, tp, "job-1")
			if again.GetHandle().GetTxnId() != info.GetHandle().GetTxnId() {
				t.Fatalf("begin again: txn %s, want %s", again.GetHandle().GetTxnId(), info.GetHandle().GetTxnId())
			}
			inProgress, err := n.bulk.GetInProgress(ctx, connect.NewRequest(&tierv1.GetInProgressBulkLoadRequest{Target: tp}))
			if err != nil || inProgress.Msg.GetStatus().GetHandle().GetTxnId() != info.GetHandle().GetTxnId() || inProgress.Msg.GetTargetInfo() == nil {
				t.Fatalf("in progress: %v, %v", inProgress, err)
			}

			m := h.load(info, rows)
			st, err := commit(ctx, n, info.GetHandle(), m)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED || st.GetAdoptedBuckets() != 4 {
				t.Fatalf("commit: %v", st)
			}
			h.expectAll(tp, tb, rows)
			h.noFence(tp)
			// Every replica was restored once, by the load: none failed on
			// the way (a follower whose changelog the load reset under it).
			for id, tn := range h.tablets {
				if v := metric(t, tn.reg, "thaw_tablet_replica_failures_total", nil); v != 0 {
					t.Errorf("tablet %s: %v replica failures", id, v)
				}
			}

			// Retries return the outcome.
			if st, err := commit(ctx, n, info.GetHandle(), m); err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
				t.Fatalf("commit again: %v, %v", st, err)
			}
			other := m
			other.length++
			_, err = commit(ctx, n, info.GetHandle(), other)
			wantReason(t, err, tierpb.ReasonManifestConflict)
			_, err = abort(ctx, n, info.GetHandle())
			md := wantReason(t, err, tierpb.ReasonInvalidState)
			if md[tierpb.KeyState] != "COMMITTED" || md[tierpb.KeyTxnID] != info.GetHandle().GetTxnId() {
				t.Fatalf("abort after commit metadata %v", md)
			}
			resp, err := begin(ctx, n, tp, "job-1")
			if err != nil || resp.GetStatus().GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED || resp.GetTargetInfo() != nil {
				t.Fatalf("begin after commit with the same token: %v, %v", resp, err)
			}
			// The target holds data now: a new load is refused.
			_, err = begin(ctx, n, tp, "job-2")
			wantReason(t, err, tierpb.ReasonNotEmpty)

			list, err := n.bulk.List(ctx, connect.NewRequest(&tierv1.ListBulkLoadsRequest{IncludeTerminal: true}))
			if err != nil || len(list.Msg.GetTransactions()) != 1 {
				t.Fatalf("list: %v, %v", list, err)
			}
			list, err = n.bulk.List(ctx, connect.NewRequest(&tierv1.ListBulkLoadsRequest{}))
			if err != nil || len(list.Msg.GetTransactions()) != 0 {
				t.Fatalf("list of live transactions: %v, %v", list, err)
			}
			// Metrics: transactions by state, phase durations, requests.
			if v := metric(t, n.reg, "thaw_coordinator_bulkload_transactions", map[string]string{"state": "COMMITTED"}); v != 1 {
				t.Errorf("committed transactions gauge %v", v)
			}
			for _, phase := range []string{"fencing", "building", "validating", "adopting", "restoring", "publishing"} {
				if c := histogramCount(t, n.reg, "thaw_coordinator_bulkload_phase_seconds", map[string]string{"phase": phase}); c < 1 {
					t.Errorf("phase %s observed %d times", phase, c)
				}
			}
			if v := metric(t, n.reg, "thaw_coordinator_bulkload_requests_total", map[string]string{"rpc": "commit", "result": "OK"}); v < 2 {
				t.Errorf("commit requests %v", v)
			}
			// A standby refuses and names the leader.
			for _, id := range []string{"c-1", "c-2"} {
				if s := h.coords[id]; s != n {
					_, err := status(ctx, s, info.GetHandle().GetTxnId())
					wantReason(t, err, tierpb.ReasonNotLeader)
				}
			}
		})
	}
}

// metric returns the value of the counter or gauge name (a histogram's
// sample count) whose labels include labels; -1 if there is none.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok, err := metricvalue.Value(reg, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return v
}

// histogramCount returns the sample count of a histogram; 0 if none.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	return uint64(max(metric(t, reg, name, labels), 0))
}

// TestFencePushCarriesRegistrationRevision: Begin's fence round tells each
// tablet server the registration revision of the LOADING state it just
// wrote. A server ignores a state no newer than its own; with the
// previous revision the push was ignored, the server answered ACTIVE until
// its etcd watch caught up, and Begin waited a resend interval.
func TestFencePushCarriesRegistrationRevision(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	tp := h.createTable(n, "fence", 4, "")
	var mu sync.Mutex
	first := map[string]*tierv1.SetDataStateRequest{} // server → its first LOADING push
	f := func(server string, req *tierv1.SetDataStateRequest) {
		mu.Lock()
		defer mu.Unlock()
		if req.GetDataState() == tierv1.DataState_DATA_STATE_LOADING && first[server] == nil {
			first[server] = req
		}
	}
	h.dataStates.Store(&f)
	info := h.mustBegin(n, tp, "job-1")
	rec, err := h.store.GetTable(t.Context(), db, "fence")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Value.DataState != meta.Loading || rec.Value.BulkLoadID != info.GetHandle().GetTxnId() {
		t.Fatalf("table record %+v", rec.Value)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(first) != len(h.tablets) {
		t.Fatalf("LOADING pushed to %d servers, want %d", len(first), len(h.tablets))
	}
	for server, req := range first {
		if req.GetStateRevision() != rec.Rev {
			t.Errorf("%s: first LOADING push at revision %d, the registration is at %d", server, req.GetStateRevision(), rec.Rev)
		}
	}
}
