package bulkloadtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"
)

// writeRows writes rows through the bucket leaders.
func (h *harness) writeRows(tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) {
	h.t.Helper()
	loc, err := h.locations(tp)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, r := range rows {
		b, _ := tb.Bucket(r)
		k, _ := tb.EncodeKey(r)
		v, _ := tb.EncodeValue(r)
		bl := loc.GetBuckets()[b]
		if _, err := h.tablet(bl.GetLeaderId()).Write(h.t.Context(), connect.NewRequest(&tierv1.WriteRequest{
			Target: loc.GetTargetId(), Bucket: int32(b), LeaderEpoch: bl.GetLeaderEpoch(),
			Mutations: []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: k, Value: v}},
		})); err != nil {
			h.t.Fatal(err)
		}
	}
}

// The requests a caller can get wrong fail with clear reasons, and change
// nothing they must not.
func TestClearErrors(t *testing.T) {
	var blockRestore atomic.Bool
	h := newHarness(t, withBulkConfig(func(c *coordinator.BulkLoadConfig) { c.MaxActive = 2 }))
	h.setHook(func(_, step string) error {
		if step == "send:restore" && blockRestore.Load() {
			return errors.New("restore held by the test")
		}
		return nil
	})
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "items", 4, "")
	tb, err := kv.NewTable(kvSchema(t, itemsSchema(4, false)))
	if err != nil {
		t.Fatal(err)
	}
	rows := makeRows(40, "")

	// Malformed requests.
	_, err = begin(ctx, n, tp, "has space")
	wantReason(t, err, tierpb.ReasonInvalidArgument)
	_, err = begin(ctx, n, target("nope", ""), "job")
	wantReason(t, err, tierpb.ReasonTargetNotFound) // the target, not a transaction
	_, err = status(ctx, n, "00000000-0000-4000-8000-000000000000")
	wantReason(t, err, tierpb.ReasonNotFound)
	_, err = status(ctx, n, "not-a-uuid")
	wantReason(t, err, tierpb.ReasonInvalidArgument)

	// A second Begin on an occupied target.
	info := h.mustBegin(n, tp, "job-1")
	_, err = begin(ctx, n, tp, "job-2")
	md := wantReason(t, err, tierpb.ReasonTargetOccupied)
	if md[tierpb.KeyTxnID] != info.GetHandle().GetTxnId() {
		t.Fatalf("occupied metadata %v", md)
	}
	// Dropping the loading table fails naming the bulk load that holds it.
	_, err = n.coord.DropTable(ctx, connect.NewRequest(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: tp.GetDatabase(), Table: tp.GetTable()}}))
	md = wantReason(t, err, tierpb.ReasonTargetLoading)
	if md[tierpb.KeyBulkLoadID] != info.GetHandle().GetTxnId() || md[tierpb.KeyDataState] != "LOADING" {
		t.Fatalf("drop of a loading table: metadata %v", md)
	}
	// Commit with a malformed manifest reference freezes nothing.
	_, err = commit(ctx, n, info.GetHandle(), manifestRef{path: info.GetManifestPath(), length: 10, sha: "xyz"})
	wantReason(t, err, tierpb.ReasonInvalidArgument)
	// Commit after Abort; Begin with the aborted token.
	if _, err := abort(ctx, n, info.GetHandle()); err != nil {
		t.Fatal(err)
	}
	if st, err := abort(ctx, n, info.GetHandle()); err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED {
		t.Fatalf("abort again: %v, %v", st, err)
	}
	m := h.load(info, rows)
	_, err = commit(ctx, n, info.GetHandle(), m)
	md = wantReason(t, err, tierpb.ReasonInvalidState)
	if md[tierpb.KeyAbortReason] != "ABORTED_BY_CALLER" || md[tierpb.KeyState] != "ABORTED" {
		t.Fatalf("commit after abort metadata %v", md)
	}
	_, err = begin(ctx, n, tp, "job-1")
	wantReason(t, err, tierpb.ReasonTokenAborted)
	h.noFence(tp)
	h.expectEmpty(tp, tb, rows)

	// Abort after COMMITTING: the restore is held back by the hook, so the
	// transaction stays COMMITTING until the test lets it go.
	info = h.mustBegin(n, tp, "job-3")
	m = h.load(info, rows)
	blockRestore.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := commit(context.WithoutCancel(ctx), n, info.GetHandle(), m)
		done <- err
	}()
	h.awaitState(info.GetHandle().GetTxnId(), tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTING)
	_, err = abort(ctx, n, info.GetHandle())
	md = wantReason(t, err, tierpb.ReasonInvalidState)
	if md[tierpb.KeyState] != "COMMITTING" {
		t.Fatalf("abort after COMMITTING metadata %v", md)
	}
	res, err := h.readAll(ctx, tp, tb, rows)
	if err != nil || res.loading != res.replicas {
		t.Fatalf("read while committing: %+v, %v", res, err)
	}
	blockRestore.Store(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.expectAll(tp, tb, rows)

	// A target with data: admission refuses it once snapshots are
	// registered (above); a target written online, without a snapshot, is
	// found by the fence round and the transaction aborts.
	tp2 := h.createTable(n, "online", 4, "")
	written := makeRows(8, "")
	h.writeRows(tp2, tb, written)
	_, err = begin(ctx, n, tp2, "job-4")
	md = wantReason(t, err, tierpb.ReasonNotEmpty)
	if md[tierpb.KeyAbortReason] != "TARGET_NOT_EMPTY" || md[tierpb.KeyState] != "ABORTED" {
		t.Fatalf("not empty metadata %v", md)
	}
	h.noFence(tp2)
	h.expectAll(tp2, tb, written)

	// Too many transactions: the limit is 2 active ones.
	tp3, tp4, tp5 := h.createTable(n, "t3", 2, ""), h.createTable(n, "t4", 2, ""), h.createTable(n, "t5", 2, "")
	h.mustBegin(n, tp3, "a")
	h.mustBegin(n, tp4, "b")
	_, err = begin(ctx, n, tp5, "c")
	wantReason(t, err, tierpb.ReasonTooManyTransactions)
	h.noFence(tp5)
}
