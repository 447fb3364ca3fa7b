package clustertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestCoordinatorFailover runs two coordinators and crashes the leader:
// once its lease expires the standby takes over with a higher epoch,
// metadata and data keep working through the same address, and whatever
// the old leader would still try with its epoch is rejected: guarded
// metadata writes in etcd and requests to the tablet servers.
func TestCoordinatorFailover(t *testing.T) {
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) { c.Coordinators = 2 })
	ctx := t.Context()
	cl.createOrders(ctx)
	want := model{}
	rows := []kv.Row{order(dayOne, 1, "a", 1), order(dayTwo, 2, "b", 2)}
	if err := cl.c.Upsert(ctx, target(""), rows); err != nil {
		t.Fatal(err)
	}
	want.upsert(rows...)

	old, err := cl.e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Either may have won the first election.
	leader, other := old.ID, "coord-2"
	switch leader {
	case "coord-1":
	case "coord-2":
		other = "coord-1"
	default:
		t.Fatalf("leader %q", leader)
	}
	oldGuard := meta.Guard{LeaderKey: old.Key, Epoch: old.Epoch}
	// The standby answers NOT_LEADER naming the leader.
	standby := tierv1connect.NewCoordinatorServiceClient(cl.e.HTTPClient(), cl.e.CoordinatorAddress(other))
	_, err = standby.ListDatabases(ctx, connect.NewRequest(&tierv1.ListDatabasesRequest{}))
	if hint, ok := tierpb.IsNotLeader(err); !ok || hint.ID != leader || hint.Address != cl.e.HostPort() {
		t.Fatalf("standby: %v (hint %+v)", err, hint)
	}

	if err := cl.e.KillCoordinator(ctx, leader); err != nil {
		t.Fatal(err)
	}
	var cur *tierv1.GetLeaderResponse
	eventually(t, other+" leads", func(ctx context.Context) error {
		resp, err := cl.coord.GetLeader(ctx, connect.NewRequest(&tierv1.GetLeaderRequest{}))
		if err != nil {
			return err
		}
		if resp.Msg.GetCoordinatorId() != other {
			return fmt.Errorf("leader %q", resp.Msg.GetCoordinatorId())
		}
		cur = resp.Msg
		return nil
	})
	if fencing.Epoch(cur.GetEpoch()) <= old.Epoch {
		t.Fatalf("new epoch %d is not above the old %d", cur.GetEpoch(), old.Epoch)
	}

	// A metadata write with the old epoch changes nothing.
	if _, err := cl.e.Meta().CreateDatabase(ctx, oldGuard, "written-by-the-old-leader"); !errors.Is(err, fencing.ErrNotLeader) {
		t.Fatalf("create database under the old guard: %v, want fencing.ErrNotLeader", err)
	}
	if _, err := cl.e.Meta().GetDatabase(ctx, "written-by-the-old-leader"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("the old leader's database: %v", err)
	}
	// A tablet request with the old epoch is rejected by every server once
	// it has seen the new leader. GetLeader names the elected coordinator
	// while its term is still starting; until it is active, it answers
	// unavailable (retry).
	var loc *tierv1.GetTargetLocationsResponse
	eventually(t, other+" serves locations", func(ctx context.Context) error {
		loc, err = cl.locations(ctx, dayOne)
		return err
	})
	for _, b := range loc.GetBuckets() {
		eventually(t, "old epoch rejected by "+b.GetLeaderId(), func(ctx context.Context) error {
			_, err := cl.tablet(b.GetLeaderId()).TakeSnapshot(ctx, connect.NewRequest(&tierv1.TakeSnapshotRequest{
				CoordinatorEpoch: int64(old.Epoch), Target: loc.GetTargetId(), Bucket: b.GetBucket(),
			}))
			if !tierpb.IsStaleEpoch(err) {
				return fmt.Errorf("TakeSnapshot with the old epoch on %s: %v", b.GetLeaderId(), err)
			}
			return nil
		})
	}

	// The tier keeps working through the same address.
	if err := cl.c.CreatePartition(ctx, db, orders, "2024-01-03"); err != nil {
		t.Fatal(err)
	}
	more := []kv.Row{order("2024-01-03", 3, "c", 3), order(dayOne, 1, "a2", 11)}
	if err := cl.c.Upsert(ctx, target(""), more); err != nil {
		t.Fatal(err)
	}
	want.upsert(more...)
	if err := cl.expectRows(ctx, want); err != nil {
		t.Fatal(err)
	}
	if snaps := cl.snapshotAll(ctx, "2024-01-03"); len(snaps) != buckets {
		t.Fatalf("snapshots under the new leader: %v", snaps)
	}

	// The old leader comes back as a standby.
	if err := cl.e.StartCoordinator(ctx, leader); err != nil {
		t.Fatal(err)
	}
	back := tierv1connect.NewCoordinatorServiceClient(cl.e.HTTPClient(), cl.e.CoordinatorAddress(leader))
	eventually(t, leader+" is a standby", func(ctx context.Context) error {
		_, err := back.ListDatabases(ctx, connect.NewRequest(&tierv1.ListDatabasesRequest{}))
		if hint, ok := tierpb.IsNotLeader(err); !ok || hint.ID != other {
			return fmt.Errorf("%s: %v", leader, err)
		}
		return nil
	})
}
