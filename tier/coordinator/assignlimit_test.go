package coordinator

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
)

// TestAssignmentOutgrowingItsRecord: a 4096-bucket RF-3 table created
// while two tablet servers with 63-character ids are live fits its
// assignment record; repaired to three replicas once more servers join it
// would not (meta.ErrTooLarge). Every write of the target then failed, so
// when a server left, its 2048 leaderships were never moved. The
// reconciler now writes what fits: the departed server's replicas go and
// its buckets get new leaders, the buckets staying under-replicated.
func TestAssignmentOutgrowingItsRecord(t *testing.T) {
	e := newEnv(t)
	id := func(i int) string { return fmt.Sprintf("%s%d", strings.Repeat("s", 62), i) }
	r1, _ := e.register(e.cli, id(1), 10*time.Second)
	e.register(e.cli, id(2), 10*time.Second)
	n := e.startNode("c-1", func(c *Config) { c.ServerGrace = -1 })
	e.awaitLeader(n)
	ctx := t.Context()
	cl := n.client
	if _, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(4096), ReplicationFactor: 3,
	})); err != nil {
		t.Fatalf("create: %v", err)
	}
	e.register(e.cli, id(3), 10*time.Second)
	e.register(e.cli, id(4), 10*time.Second)
	time.Sleep(2 * time.Second)
	// The first server leaves: its leaderships must move.
	r1.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		tv, _ := e.store.GetTable(ctx, "shop", "orders")
		a, err := e.store.GetAssignment(ctx, tv.Value.Target())
		if err != nil {
			t.Fatal(err)
		}
		dead := 0
		for _, b := range a.Value.Buckets {
			if b.Leader == id(1) || slices.Contains(b.Replicas, id(1)) || b.Leader == "" {
				dead++
			}
		}
		if dead == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4096 buckets still name the departed server (or have no leader)", dead)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestWithoutGone(t *testing.T) {
	b := func(leader string, epoch int32, replicas ...string) meta.BucketAssignment {
		return meta.BucketAssignment{Replicas: replicas, Leader: leader, LeaderEpoch: epoch}
	}
	servers := []Server{{ID: "a"}, {ID: "b"}, {ID: "d", Awaited: true}}
	old := []meta.BucketAssignment{
		b("a", 3, "a", "b"),      // all live: unchanged, whatever next says
		b("c", 5, "c", "a", "b"), // leader gone, next's leader remains
		b("c", 5, "c", "b"),      // leader gone, next's leader added: first remaining, new epoch
		b("a", 2, "a", "c"),      // a follower gone: leader and epoch stay
		b("c", 7, "c"),           // no replica left: unchanged
		b("d", 1, "d", "c"),      // an awaited server counts as there
	}
	next := []meta.BucketAssignment{
		b("b", 4, "b", "e"),
		b("b", 6, "a", "b", "e"),
		b("e", 9, "b", "e"),
		b("a", 2, "a", "e"),
		b("e", 8, "e"),
		b("d", 1, "d", "e"),
		b("x", 1, "x"), // beyond old: as next has it
	}
	want := []meta.BucketAssignment{
		old[0],
		b("b", 6, "a", "b"),
		b("b", 10, "b"),
		b("a", 2, "a"),
		old[4],
		b("d", 1, "d"),
		next[6],
	}
	if got := withoutGone(old, next, servers); !reflect.DeepEqual(got, want) {
		t.Fatalf("withoutGone:\n got %+v\nwant %+v", got, want)
	}
}
