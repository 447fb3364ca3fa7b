package tablet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kfake"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/changelog/kafkalog"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

// twoTerms sets up bucket 0 of a table on ts-1 and ts-2 over a Kafka
// changelog (kfake; each server its own client, with a slow poll so that
// followers do not tail in time): ts-2 leads at epoch 1 and writes
// ("a", 1) = "x"; then ts-1 leads at epoch 2, which ts-2 does not hear of
// (the push to it failed), and writes ("a", 1) = "y".
func twoTerms(t *testing.T) (c *cluster, tb *table, ts1, ts2 *server) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c = newCluster(t)
	c.deps = func(d *tablet.Deps) {
		p, err := kafkalog.New(kafkalog.Config{Brokers: kc.ListenAddrs(), PollInterval: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		d.Changelog = p
	}
	ts1, ts2 = c.startServer("ts-1"), c.startServer("ts-2")
	tb = c.createTable("t", []string{"ts-2", "ts-1"})
	waitReady(t, ts2, tb, 0, leader, 1)
	waitReady(t, ts1, tb, 0, follower, 1)
	mustWrite(t, ts2, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)
	time.Sleep(2 * time.Second) // the followers' polls idle

	cur, err := c.store.GetAssignment(t.Context(), tb.mtgt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts1.client.NotifyAssignment(t.Context(), connect.NewRequest(&tierv1.NotifyAssignmentRequest{
		CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id,
		Path:   &tierv1.TargetPath{Database: c.db, Table: "t"},
		Schema: tierpb.SchemaToProto(testSchema(1)), RemoteDataDir: c.objects.Base(),
		AssignmentRevision: cur.Rev + 1000,
		Buckets:            []*tierv1.BucketLocation{{Bucket: 0, Replicas: []string{"ts-2", "ts-1"}, LeaderId: "ts-1", LeaderEpoch: 2}},
		DataState:          tierv1.DataState_DATA_STATE_ACTIVE, StateRevision: 1,
	})); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ts1, tb, 0, leader, 2)
	mustWrite(t, ts1, tb, 0, 2, tb.upsert(t, row{"a", 1, "y"})...)
	return c, tb, ts1, ts2
}

// A server that led at epoch 1 and leads again at epoch 3 without having
// seen epoch 2 catches up with the changelog before its first leader read,
// which sees the write the epoch-2 leader acknowledged (only the catch-up,
// not the follower's slow tailing, can bring it in time).
func TestLeaderAgainAtLaterEpochCatchesUp(t *testing.T) {
	c, tb, _, ts2 := twoTerms(t)
	k, _, _ := tb.encode(t, row{"a", 1, "x"})
	_, want, _ := tb.encode(t, row{"a", 1, "y"})
	c.assign(tb, 0, []string{"ts-2", "ts-1"}, "ts-2", 3)
	waitReady(t, ts2, tb, 0, leader, 3)
	epoch := int32(3)
	resp, err := ts2.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Bucket: 0, LeaderEpoch: &epoch, Keys: [][]byte{k}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.Results[0].Value; string(got) != string(want) {
		t.Fatalf("leader read at epoch 3: %q, want the write acknowledged at epoch 2 %q", got, want)
	}
}

// The deposed leader (ts-2, still at epoch 1) loses the changelog append
// to the epoch-2 leader's record: UNAVAILABLE, which clients retry (and
// then follow NOT_LEADER), saying nothing was written; not INTERNAL, which
// they give up on.
func TestDeposedLeaderConflictIsUnavailable(t *testing.T) {
	_, tb, _, ts2 := twoTerms(t)
	_, err := write(t.Context(), ts2, tb, 0, 1, tb.upsert(t, row{"a", 2, "z"})...)
	if tierpb.ReasonOf(err) != tierpb.ReasonUnavailable || !strings.Contains(err.Error(), "nothing of this batch was written") {
		t.Fatalf("write of the deposed leader: %v (%s), want UNAVAILABLE saying nothing was written", err, tierpb.ReasonOf(err))
	}
}
