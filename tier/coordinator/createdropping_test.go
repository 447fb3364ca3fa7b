package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestCreateTableBeingDropped: a table whose drop is in progress reads as
// NOT_FOUND (GetTable); CreateTable, with ignore_if_exists or without,
// answers UNAVAILABLE (retry once the drop has finished). It answered
// ALREADY_EXISTS, whose documented action is "use ignore_if_exists": a
// client that did took the table for there.
func TestCreateTableBeingDropped(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	n1 := e.shopLeader(t)
	cl := n1.client
	path := &tierv1.TablePath{Database: "shop", Table: "orders"}
	ct, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: ordersSchema(2), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	// The first step of a drop, as a coordinator that died between the steps left it.
	e.markDropping(t, e.prefix+"/tables/shop/orders", fmt.Sprintf("%s/assignment/%d", e.prefix, ct.Msg.GetTable().GetTableId()))

	_, gerr := cl.GetTable(ctx, req(&tierv1.GetTableRequest{Path: path}))
	if tierpb.ReasonOf(gerr) != tierpb.ReasonNotFound {
		t.Fatalf("GetTable of a table being dropped: %v, want NOT_FOUND", gerr)
	}
	_, cerr := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: ordersSchema(2), ReplicationFactor: 1, IgnoreIfExists: true}))
	if tierpb.ReasonOf(cerr) != tierpb.ReasonUnavailable || !strings.Contains(cerr.Error(), "being dropped") {
		t.Fatalf("CreateTable (ignore_if_exists) of a table being dropped: %v, want UNAVAILABLE: being dropped", cerr)
	}
	// The refusal also has the coordinator finish the drop: a retry
	// creates the table anew.
	eventually(t, 10*time.Second, "the create after the drop finished", func() bool {
		_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: ordersSchema(2), ReplicationFactor: 1}))
		return err == nil
	})
}

// TestCreatePartitionBeingDropped: the partition's case. The promoter's
// tieradapter.CreatePartition takes ALREADY_EXISTS for success, and went
// on to Begin a bulk load on a partition being dropped.
func TestCreatePartitionBeingDropped(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	n1 := e.shopLeader(t)
	cl := n1.client
	path := &tierv1.TablePath{Database: "shop", Table: "events"}
	et, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path, Schema: eventsSchema(2), ReplicationFactor: 1}))
	if err != nil {
		t.Fatal(err)
	}
	const part = "2026-11-29$7"
	cp, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: part}}))
	if err != nil {
		t.Fatal(err)
	}
	tid, pid := et.Msg.GetTable().GetTableId(), cp.Msg.GetPartition().GetPartitionId()
	e.markDropping(t, fmt.Sprintf("%s/partitions/%d/%s", e.prefix, tid, part), fmt.Sprintf("%s/assignment/%d/p%d", e.prefix, tid, pid))
	part2 := part
	if _, lerr := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: &part2}})); tierpb.ReasonOf(lerr) != tierpb.ReasonNotFound {
		t.Fatalf("GetTargetLocations of a partition being dropped: %v, want NOT_FOUND", lerr)
	}
	_, cerr := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: part}, IgnoreIfExists: true}))
	if tierpb.ReasonOf(cerr) != tierpb.ReasonUnavailable || !strings.Contains(cerr.Error(), "being dropped") {
		t.Fatalf("CreatePartition (ignore_if_exists) of a partition being dropped: %v, want UNAVAILABLE: being dropped", cerr)
	}
	eventually(t, 10*time.Second, "the create after the drop finished", func() bool {
		np, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: part}}))
		return err == nil && np.Msg.GetPartition().GetPartitionId() != pid
	})
}
