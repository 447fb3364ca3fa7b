package coordinator

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// TestStandbyGaugesReset: a coordinator that loses its term (and stays up
// as a standby) kept exporting the last term's under-replicated buckets,
// live servers and pending drops, so an alert on them fired for good after
// the new leader had fixed what it was about.
func TestStandbyGaugesReset(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	a := e.startNode("c-a", nil)
	e.awaitLeader(a)
	b := e.startNode("c-b", nil)
	if _, err := a.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}, Schema: ordersSchema(3)})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a reports under-replication", func() bool {
		return metricValue(t, a.reg, "thaw_coordinator_under_replicated_buckets", nil) == 3
	})
	eventually(t, 5*time.Second, "b campaigning", func() bool { return b.c.current() == nil })
	// Take a's term away: revoke the lease of its election key.
	resp, err := e.cli.Get(ctx, a.c.store.ElectionPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatal(err, len(resp.Kvs))
	}
	if _, err := e.cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	e.awaitLeader(b)
	eventually(t, 5*time.Second, "a standby", func() bool { return a.c.current() == nil })
	// The new leader fixes things: the table goes away.
	if _, err := b.client.DropTable(ctx, req(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b reports no under-replication", func() bool {
		return metricValue(t, b.reg, "thaw_coordinator_under_replicated_buckets", nil) == 0
	})
	time.Sleep(500 * time.Millisecond)
	if v := gaugeValue(t, a.reg, "thaw_coordinator_leader"); v != 0 {
		t.Fatalf("a leader gauge %v", v)
	}
	for _, name := range []string{"thaw_coordinator_under_replicated_buckets", "thaw_coordinator_live_tablet_servers"} {
		if v := metricValue(t, a.reg, name, nil); v != 0 {
			t.Errorf("standby c-a still exports %s=%v", name, v)
		}
	}
}
