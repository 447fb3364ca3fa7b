package coordinator

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
)

// TestAssignmentFollowsServers registers tablet servers under short leases
// (no tablet process: a record and a fake endpoint each) and checks that the
// leader places, rebalances on a join and moves replicas off a server whose
// lease expired, bumping the leader epoch of every bucket that loses its
// leader, and pushes each change to the servers with its epoch.
func TestAssignmentFollowsServers(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c1 := newClient(t)
	e.register(c1, "ts-1", time.Second)
	_, ft2 := e.register(newClient(t), "ts-2", time.Second)
	n := e.startNode("c-1", func(c *Config) { c.MaxMovesPerRound = 1 })
	term := e.awaitLeader(n)

	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}, Schema: ordersSchema(4), ReplicationFactor: 2}))
	if err != nil {
		t.Fatal(err)
	}
	tgt := meta.Target{TableID: ct.Msg.GetTable().GetTableId()}
	read := func() meta.Assignment {
		t.Helper()
		a, err := e.store.GetAssignment(ctx, tgt)
		if err != nil {
			t.Fatal(err)
		}
		return a.Value
	}
	loads := func(a meta.Assignment) map[string]int {
		l := make(map[string]int)
		for _, b := range a.Buckets {
			for _, r := range b.Replicas {
				l[r]++
			}
		}
		return l
	}
	first := read()
	for i, b := range first.Buckets {
		if !slices.Equal(sorted(b.Replicas), []string{"ts-1", "ts-2"}) || b.LeaderEpoch != 0 {
			t.Fatalf("bucket %d placed %+v", i, b)
		}
	}

	// A server joins: replicas move to it, one per round, until the
	// spread is within one (8 replicas over 3 servers: 3, 3, 2). Only
	// followers move, so no leader epoch changes.
	e.register(newClient(t), "ts-3", time.Second)
	eventually(t, 10*time.Second, "rebalance onto ts-3", func() bool {
		l := loads(read())
		return l["ts-3"] >= 2 && l["ts-1"] <= 3 && l["ts-2"] <= 3
	})
	joined := read()
	for i, b := range joined.Buckets {
		if b.Leader != first.Buckets[i].Leader || b.LeaderEpoch != first.Buckets[i].LeaderEpoch {
			t.Errorf("bucket %d: leader %s@%d became %s@%d on a join", i, first.Buckets[i].Leader, first.Buckets[i].LeaderEpoch, b.Leader, b.LeaderEpoch)
		}
	}
	eventually(t, 5*time.Second, "moves counted", func() bool {
		return metricValue(t, n.reg, "thaw_coordinator_replica_moves_total", nil) >= 2
	})

	// ts-1 dies: its client goes, its lease expires after the TTL, and its
	// replicas move to the others; buckets it led get a new leader with the
	// next epoch.
	c1.Close()
	eventually(t, 15*time.Second, "replicas leave ts-1", func() bool {
		a := read()
		for _, b := range a.Buckets {
			if slices.Contains(b.Replicas, "ts-1") || len(b.Replicas) != 2 {
				return false
			}
		}
		return true
	})
	after := read()
	led := 0
	for i, b := range after.Buckets {
		was := joined.Buckets[i]
		switch {
		case was.Leader == "ts-1":
			led++
			if b.Leader == "ts-1" || b.LeaderEpoch != was.LeaderEpoch+1 || !slices.Contains(was.Replicas, b.Leader) {
				t.Errorf("bucket %d: leader %s@%d after ts-1 (%v@%d) died", i, b.Leader, b.LeaderEpoch, was.Replicas, was.LeaderEpoch)
			}
		case b.Leader != was.Leader || b.LeaderEpoch != was.LeaderEpoch:
			t.Errorf("bucket %d: leader %s@%d changed to %s@%d though it lived", i, was.Leader, was.LeaderEpoch, b.Leader, b.LeaderEpoch)
		}
	}
	if led == 0 {
		t.Fatalf("ts-1 led no bucket: %+v", joined.Buckets)
	}
	eventually(t, 5*time.Second, "no under-replication", func() bool {
		return metricValue(t, n.reg, "thaw_coordinator_under_replicated_buckets", nil) == 0
	})

	// Every change reached ts-2 with the coordinator's epoch; the last one
	// it heard is the current assignment.
	eventually(t, 5*time.Second, "ts-2 hears the last assignment", func() bool {
		ns := ft2.noticeList()
		if len(ns) == 0 {
			return false
		}
		last := ns[len(ns)-1]
		want := 0
		for _, b := range after.Buckets {
			if slices.Contains(b.Replicas, "ts-2") {
				want++
			}
		}
		return len(last.GetBuckets()) == want && last.GetSchema().GetBuckets() == 4 && last.GetRemoteDataDir() == e.remote
	})
	for _, no := range ft2.noticeList() {
		if no.GetCoordinatorEpoch() != int64(term.epoch()) {
			t.Fatalf("notice with coordinator epoch %d, want %d", no.GetCoordinatorEpoch(), term.epoch())
		}
	}
}

// TestPlacesWhenServersArrive creates a table while no tablet server is
// live: DDL succeeds with leaderless, under-replicated buckets, which are
// placed as soon as a server registers.
func TestPlacesWhenServersArrive(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	n := e.startNode("c-1", nil)
	e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}, Schema: ordersSchema(3)})); err != nil {
		t.Fatal(err)
	}
	target := &tierv1.TargetPath{Database: "d", Table: "t"}
	loc, err := n.client.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: target}))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range loc.Msg.GetBuckets() {
		if b.GetLeaderId() != "" || len(b.GetReplicas()) != 0 {
			t.Fatalf("bucket placed without servers: %v", b)
		}
	}
	eventually(t, 5*time.Second, "under-replication reported", func() bool {
		return metricValue(t, n.reg, "thaw_coordinator_under_replicated_buckets", nil) == 3
	})

	e.register(e.cli, "ts-1", 10*time.Second)
	eventually(t, 10*time.Second, "buckets placed on ts-1", func() bool {
		loc, err := n.client.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: target}))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range loc.Msg.GetBuckets() {
			if b.GetLeaderId() != "ts-1" || b.GetLeaderAddress() == "" || b.GetLeaderEpoch() != 0 || !slices.Equal(b.GetReplicas(), []string{"ts-1"}) {
				return false
			}
		}
		return true
	})
	// RF 3 (the default) over one server: still under-replicated.
	eventually(t, 5*time.Second, "under-replication still reported", func() bool {
		return metricValue(t, n.reg, "thaw_coordinator_under_replicated_buckets", nil) == 3
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestAssignmentRecordsChangelogs: while a tablet server of an older
// release (no changelog identity) is registered, assignments are written
// without the buckets' changelog, which that server could not read; once
// it is gone, the next round records the changelog of every bucket.
func TestAssignmentRecordsChangelogs(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	old := newClient(t)
	e.registerOn(old, "ts-1", "", time.Second)
	e.registerOn(newClient(t), "ts-2", "local:0123456789abcdef0123456789abcdef", time.Second)
	n := e.startNode("c-1", nil)
	e.awaitLeader(n)
	if _, err := n.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	ct, err := n.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}, Schema: ordersSchema(4), ReplicationFactor: 2}))
	if err != nil {
		t.Fatal(err)
	}
	key := e.prefix + "/assignment/" + strconv.FormatInt(ct.Msg.GetTable().GetTableId(), 10)
	raw := func() string {
		t.Helper()
		v, ok := e.dump()[key]
		if !ok {
			t.Fatalf("no %s in %v", key, e.dump())
		}
		return v
	}
	if v := raw(); strings.Contains(v, `"changelog"`) || strings.Count(v, `"ts-1"`) < 4 {
		t.Fatalf("assignment with an older server registered: %s", v)
	}
	const id = "local:0123456789abcdef0123456789abcdef"
	ls, err := n.client.ListServers(ctx, req(&tierv1.ListServersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := ls.Msg.GetServers(); len(got) != 2 || got[0].GetChangelog() != "" || got[1].GetChangelog() != id {
		t.Fatalf("servers %v: want ts-1 without a changelog, ts-2 on %s", got, id)
	}
	old.Close()
	eventually(t, 15*time.Second, "changelogs recorded once ts-1 is gone", func() bool {
		return strings.Count(raw(), `"changelog":"`+id+`"`) == 4
	})
	loc, err := n.client.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "d", Table: "t"}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range loc.Msg.GetBuckets() {
		if b.GetChangelog() != id {
			t.Fatalf("bucket %d located with changelog %q, want %s", b.GetBucket(), b.GetChangelog(), id)
		}
	}
}
