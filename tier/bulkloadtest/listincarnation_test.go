package bulkloadtest

import (
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// TestListPartitionIncarnation: a partition dropped and created again
// under its name is another partition: List filtered to it reported the
// earlier one's transactions too (it compared names, not ids, while their
// records were kept); the same caller token begins a new transaction on
// it, not the earlier one's.
func TestListPartitionIncarnation(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "items", 2, "2024-01-01")
	info := h.mustBegin(n, tp, "job-1")
	if _, err := abort(ctx, n, info.GetHandle()); err != nil {
		t.Fatal(err)
	}
	h.awaitState(info.GetHandle().GetTxnId(), tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED)

	if _, err := n.coord.DropPartition(ctx, connect.NewRequest(&tierv1.DropPartitionRequest{
		Path: &tierv1.TablePath{Database: db, Table: "items"}, Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: "2024-01-01"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := n.coord.CreatePartition(ctx, connect.NewRequest(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: db, Table: "items"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2024-01-01"}})); err != nil {
		t.Fatal(err)
	}
	h.waitReady(tp)
	loc, err := h.locations(tp)
	if err != nil {
		t.Fatal(err)
	}
	newPID := loc.GetTargetId().GetPartitionId()
	if newPID == info.GetHandle().GetPartitionId() {
		t.Fatalf("setup: same partition id")
	}

	// The same caller token on the new partition: a new transaction, not the old aborted one.
	resp, err := begin(ctx, n, tp, "job-1")
	if err != nil {
		t.Fatalf("begin on re-created partition: %v", err)
	}
	if got := resp.GetStatus().GetHandle().GetPartitionId(); got != newPID {
		t.Fatalf("begin with the same token resumed partition id %d, want %d (status %v)", got, newPID, resp.GetStatus())
	}

	lst, err := n.bulk.List(ctx, connect.NewRequest(&tierv1.ListBulkLoadsRequest{Target: tp, IncludeTerminal: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(lst.Msg.GetTransactions()) != 1 {
		t.Errorf("List of %s: %d transactions, want the new one", targetName(tp), len(lst.Msg.GetTransactions()))
	}
	for _, st := range lst.Msg.GetTransactions() {
		if st.GetHandle().GetPartitionId() != newPID {
			t.Errorf("List of %s (partition id %d) reports transaction %s of partition id %d (state %v)",
				targetName(tp), newPID, st.GetHandle().GetTxnId(), st.GetHandle().GetPartitionId(), st.GetState())
		}
	}
}
