package tablet_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

const (
	leader   = tierv1.ReplicaRole_REPLICA_ROLE_LEADER
	follower = tierv1.ReplicaRole_REPLICA_ROLE_FOLLOWER
)

// A server picks up its assignment and serves writes, lookups, prefix
// lookups and scans (paged, with a prefix, and consistent).
func TestServeWritesAndReads(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("orders", []string{"ts-1"}, []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	waitReady(t, ts, tb, 1, leader, 1)

	b := tb.bucketOf(t, "acme")
	want := model{}
	var rows []row
	for i := range 10 {
		rows = append(rows, row{"acme", int64(i), "v" + strconv.Itoa(i)})
	}
	muts := tb.upsert(t, rows...)
	resp := mustWrite(t, ts, tb, b, 1, muts...)
	if resp.FirstOffset != 0 || resp.Count != 10 {
		t.Fatalf("first write: %v", resp)
	}
	want.apply(muts)
	more := append(tb.upsert(t, row{"acme", 3, "three"}), tb.del(t, row{"acme", 4, ""}))
	if resp := mustWrite(t, ts, tb, b, 1, more...); resp.FirstOffset != 10 || resp.Count != 2 {
		t.Fatalf("second write: %v", resp)
	}
	want.apply(more)

	// Lookup: found, replaced, deleted, absent, in request order.
	k3, v3, _ := tb.encode(t, row{"acme", 3, "three"})
	k4, _, _ := tb.encode(t, row{"acme", 4, ""})
	k99, _, _ := tb.encode(t, row{"acme", 99, ""})
	lr, err := ts.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Bucket: b, Keys: [][]byte{k3, k4, k99, k3}}))
	if err != nil {
		t.Fatal(err)
	}
	if r := lr.Msg.Results; len(r) != 4 || !r[0].Found || !bytes.Equal(r[0].Value, v3) || r[1].Found || r[2].Found || !r[3].Found {
		t.Fatalf("lookup: %v", r)
	}

	// PrefixLookup by tenant, which is both the bucket key and a key prefix.
	pr, err := ts.client.PrefixLookup(t.Context(), connect.NewRequest(&tierv1.PrefixLookupRequest{Target: tb.id, Bucket: b, Prefixes: [][]byte{prefix("acme"), prefix("nobody")}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := pr.Msg.Results; len(got) != 2 || len(got[0].Rows) != 9 || len(got[1].Rows) != 0 {
		t.Fatalf("prefix lookup: %v", got)
	}
	for i := 1; i < 9; i++ {
		if bytes.Compare(pr.Msg.Results[0].Rows[i-1].Key, pr.Msg.Results[0].Rows[i].Key) >= 0 {
			t.Fatal("prefix lookup rows out of key order")
		}
	}

	// Scan in pages of 4: every row once, in order.
	got, err := scanAll(t, ts, tb, b, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRows(got, want); err != nil {
		t.Fatal(err)
	}

	// A consistent scan keeps reading its first page's state, and every
	// page reports the same log offset; a plain scan sees new rows.
	first, err := ts.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{Target: tb.id, Bucket: b, Limit: 3, Consistent: true}))
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, row{"acme", 100, "late"})...)
	seen, token, offset := len(first.Msg.Rows), first.Msg.NextPageToken, first.Msg.LogOffset
	if offset != 12 {
		t.Fatalf("consistent scan at log offset %d, want 12", offset)
	}
	for len(token) > 0 {
		page, err := ts.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{Target: tb.id, Bucket: b, Limit: 3, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		if page.Msg.LogOffset != offset {
			t.Fatalf("page at log offset %d, want %d", page.Msg.LogOffset, offset)
		}
		seen += len(page.Msg.Rows)
		token = page.Msg.NextPageToken
	}
	if seen != len(want) {
		t.Fatalf("consistent scan saw %d rows, want %d", seen, len(want))
	}
	plain, err := ts.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{Target: tb.id, Bucket: b, Prefix: prefix("acme"), Limit: 100}))
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Msg.Rows) != len(want)+1 || plain.Msg.LogOffset != 13 || len(plain.Msg.NextPageToken) != 0 {
		t.Fatalf("plain scan: %d rows at %d", len(plain.Msg.Rows), plain.Msg.LogOffset)
	}

	// A prefix lookup whose result exceeds the row limit (64) is refused.
	var big []row
	for i := range 60 {
		big = append(big, row{"acme", int64(200 + i), ""})
	}
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, big[:30]...)...)
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, big[30:]...)...)
	_, err = ts.client.PrefixLookup(t.Context(), connect.NewRequest(&tierv1.PrefixLookupRequest{Target: tb.id, Bucket: b, Prefixes: [][]byte{prefix("acme")}}))
	if md := wantReason(t, err, tierpb.ReasonBatchTooLarge); md[tierpb.KeyLimit] != "64" {
		t.Fatalf("metadata %v", md)
	}
}

// Leader and follower on two servers sharing the host's changelog
// converge; after a leader change the new leader takes writes and the old
// one turns them away with NOT_LEADER and a hint.
func TestLeaderFollowerConverge(t *testing.T) {
	c := newCluster(t)
	ts1, ts2 := c.startServer("ts-1"), c.startServer("ts-2")
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)

	want := model{}
	for i := range 5 {
		muts := tb.upsert(t, row{"a", int64(i), "x"}, row{"b", int64(i), "y"})
		mustWrite(t, ts1, tb, 0, 1, muts...)
		want.apply(muts)
	}
	converged := func(s *server, epoch *int32) func() error {
		return func() error {
			got, err := scanAll(t, s, tb, 0, epoch, 7)
			if err != nil {
				return err
			}
			return sameRows(got, want)
		}
	}
	eventually(t, "follower converges", converged(ts2, nil))

	c.assign(tb, 0, []string{"ts-1", "ts-2"}, "ts-2", 2)
	waitReady(t, ts2, tb, 0, leader, 2)
	waitReady(t, ts1, tb, 0, follower, 2)
	epoch := int32(2)
	eventually(t, "new leader reads every acknowledged write", converged(ts2, &epoch))

	muts := append(tb.upsert(t, row{"a", 9, "new"}), tb.del(t, row{"b", 0, ""}))
	mustWrite(t, ts2, tb, 0, 2, muts...)
	want.apply(muts)
	// The new leader's address comes from the registrations watch, which
	// may lag the assignment (as in TestNotLeader).
	eventually(t, "a NOT_LEADER hint naming the new leader and its address", func() error {
		_, err := write(t.Context(), ts1, tb, 0, 2, tb.upsert(t, row{"a", 10, ""})...)
		md := wantReason(t, err, tierpb.ReasonNotLeader)
		if md[tierpb.KeyLeaderID] != "ts-2" || md[tierpb.KeyLeaderEpoch] != "2" {
			t.Fatalf("leader hint %v", md)
		}
		if md[tierpb.KeyLeaderAddress] != c.url+"/t/ts-2" {
			return fmt.Errorf("leader hint %v", md)
		}
		return nil
	})
	eventually(t, "old leader follows", converged(ts1, nil))
	eventually(t, "new leader", converged(ts2, &epoch))
}

// Writes (and reads that name a leader epoch) need the bucket leader at
// the request's epoch.
func TestNotLeader(t *testing.T) {
	c := newCluster(t)
	ts1, ts2 := c.startServer("ts-1"), c.startServer("ts-2")
	tb := c.createTable("t", []string{"ts-1", "ts-2"})
	waitReady(t, ts1, tb, 0, leader, 1)
	waitReady(t, ts2, tb, 0, follower, 1)
	muts := tb.upsert(t, row{"a", 1, "x"})
	_, end := c.logOffsets(tb, 0)

	// A follower: NOT_LEADER naming the leader. The leader's address comes
	// from the registrations watch, which may lag the assignment: a hint
	// without it is allowed until then.
	eventually(t, "a NOT_LEADER hint naming the leader and its address", func() error {
		_, err := write(t.Context(), ts2, tb, 0, 1, muts...)
		md := wantReason(t, err, tierpb.ReasonNotLeader)
		if md[tierpb.KeyLeaderID] != "ts-1" || md[tierpb.KeyLeaderEpoch] != "1" {
			t.Fatalf("leader hint %v", md)
		}
		if md[tierpb.KeyLeaderAddress] != c.url+"/t/ts-1" {
			return fmt.Errorf("leader hint %v", md)
		}
		return nil
	})
	// Whatever epoch it names.
	_, err := write(t.Context(), ts2, tb, 0, 7, muts...)
	wantReason(t, err, tierpb.ReasonNotLeader)
	one := int32(1)
	_, err = ts2.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, LeaderEpoch: &one, Keys: [][]byte{muts[0].Key}}))
	wantReason(t, err, tierpb.ReasonNotLeader)
	// Without an epoch the follower serves reads.
	if _, err := ts2.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Keys: [][]byte{muts[0].Key}})); err != nil {
		t.Fatal(err)
	}

	// The leader at a wrong epoch: older is STALE_EPOCH with the current
	// one and the leader, newer (not seen here yet) UNAVAILABLE.
	_, err = write(t.Context(), ts1, tb, 0, 0, muts...)
	if md := wantReason(t, err, tierpb.ReasonStaleEpoch); md[tierpb.KeyEpoch] != "1" || md[tierpb.KeyLeaderID] != "ts-1" {
		t.Fatalf("metadata %v", md)
	}
	_, err = write(t.Context(), ts1, tb, 0, 2, muts...)
	wantReason(t, err, tierpb.ReasonUnavailable)

	// A server that hosts no replica of the bucket: NOT_LEADER with a hint.
	ts3 := c.startServer("ts-3")
	tb2 := c.createTable("t2", []string{"ts-3"})
	waitReady(t, ts3, tb2, 0, leader, 1)
	eventually(t, "ts-3 knows table t", func() error {
		_, err := write(t.Context(), ts3, tb, 0, 1, muts...)
		if tierpb.ReasonOf(err) != tierpb.ReasonNotLeader {
			return fmt.Errorf("err %v", err)
		}
		return nil
	})
	if _, e := c.logOffsets(tb, 0); e != end {
		t.Fatalf("changelog end %d, want %d: a refused write was appended", e, end)
	}
	mustWrite(t, ts1, tb, 0, 1, muts...)
}

// A LOADING target refuses reads and writes with TARGET_LOADING carrying
// the bulk-load id, whether the state came from etcd or from SetDataState,
// which confirms every replica; ACTIVE lifts the fence.
func TestLoadingTarget(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	mustWrite(t, ts, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)

	c.setState(tb, "LOADING", "bulk-7")
	loading := func(err error) error {
		if tierpb.ReasonOf(err) != tierpb.ReasonTargetLoading {
			return fmt.Errorf("err %v", err)
		}
		if md := tierpb.MetadataOf(err); md[tierpb.KeyBulkLoadID] != "bulk-7" || md[tierpb.KeyDataState] != "LOADING" {
			return fmt.Errorf("metadata %v", md)
		}
		return nil
	}
	k, _, _ := tb.encode(t, row{"a", 1, ""})
	eventually(t, "lookup refused", func() error {
		_, err := ts.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Keys: [][]byte{k}}))
		return loading(err)
	})
	_, err := write(t.Context(), ts, tb, 0, 1, tb.upsert(t, row{"a", 2, "y"})...)
	if err := loading(err); err != nil {
		t.Fatal(err)
	}
	_, err = ts.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{Target: tb.id}))
	if err := loading(err); err != nil {
		t.Fatal(err)
	}
	_, err = ts.client.PrefixLookup(t.Context(), connect.NewRequest(&tierv1.PrefixLookupRequest{Target: tb.id, Prefixes: [][]byte{prefix("a")}}))
	if err := loading(err); err != nil {
		t.Fatal(err)
	}

	// Back to ACTIVE through etcd, then LOADING by a SetDataState push at
	// a newer revision, which confirms the replica: not empty (a row).
	rev := c.setState(tb, "ACTIVE", "")
	eventually(t, "write accepted", func() error {
		_, err := write(t.Context(), ts, tb, 0, 1, tb.upsert(t, row{"a", 2, "y"})...)
		return err
	})
	resp, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
		CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, DataState: tierv1.DataState_DATA_STATE_LOADING,
		BulkLoadId: "bulk-8", StateRevision: rev + 1,
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, end := c.logOffsets(tb, 0)
	if r := resp.Msg.Replicas; len(r) != 1 || r[0].DataState != tierv1.DataState_DATA_STATE_LOADING || r[0].BulkLoadId != "bulk-8" ||
		r[0].Empty || r[0].LogEndOffset != end || end != 2 || r[0].State != tierv1.ReplicaState_REPLICA_STATE_READY {
		t.Fatalf("confirmation %v", r)
	}
	_, err = write(t.Context(), ts, tb, 0, 1, tb.upsert(t, row{"a", 3, "z"})...)
	if md := wantReason(t, err, tierpb.ReasonTargetLoading); md[tierpb.KeyBulkLoadID] != "bulk-8" {
		t.Fatalf("metadata %v", md)
	}
	// An older revision changes nothing and confirms the newer state.
	resp, err = ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
		CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, DataState: tierv1.DataState_DATA_STATE_ACTIVE, StateRevision: rev,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Msg.Replicas; r[0].DataState != tierv1.DataState_DATA_STATE_LOADING {
		t.Fatalf("stale SetDataState applied: %v", r)
	}
}

// A target a bulk load holds answers TARGET_LOADING on a replica that is
// not ready too (here one whose restore failed), for reads and writes
// alike: the fence is the target's, and a client told UNAVAILABLE would
// look for another replica that cannot serve either. Routing still comes
// first: a write with a stale leader epoch is STALE_EPOCH.
func TestLoadingTargetReplicaNotReady(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	_, err := ts.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{
		CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, SnapshotId: 5, MetadataPath: c.objects.Base() + "/nowhere/_METADATA",
	}))
	if err != nil {
		t.Fatal(err)
	}
	k, _, _ := tb.encode(t, row{"a", 1, ""})
	lookup := func() error {
		_, err := ts.client.Lookup(t.Context(), connect.NewRequest(&tierv1.LookupRequest{Target: tb.id, Keys: [][]byte{k}}))
		return err
	}
	eventually(t, "the failed replica refuses reads", func() error {
		if err := lookup(); tierpb.ReasonOf(err) != tierpb.ReasonUnavailable {
			return fmt.Errorf("lookup: %v", err)
		}
		return nil
	})

	c.setState(tb, "LOADING", "bulk-9")
	eventually(t, "lookup fenced", func() error {
		if err := lookup(); tierpb.ReasonOf(err) != tierpb.ReasonTargetLoading {
			return fmt.Errorf("lookup: %v", err)
		}
		return nil
	})
	for what, call := range map[string]func() error{
		"write": func() error {
			_, err := write(t.Context(), ts, tb, 0, 1, tb.upsert(t, row{"a", 2, "y"})...)
			return err
		},
		"scan": func() error {
			_, err := ts.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{Target: tb.id}))
			return err
		},
		"prefix lookup": func() error {
			_, err := ts.client.PrefixLookup(t.Context(), connect.NewRequest(&tierv1.PrefixLookupRequest{Target: tb.id, Prefixes: [][]byte{prefix("a")}}))
			return err
		},
	} {
		if md := wantReason(t, call(), tierpb.ReasonTargetLoading); md[tierpb.KeyBulkLoadID] != "bulk-9" {
			t.Fatalf("%s: metadata %v", what, md)
		}
	}
	_, err = write(t.Context(), ts, tb, 0, 0, tb.upsert(t, row{"a", 3, "z"})...)
	wantReason(t, err, tierpb.ReasonStaleEpoch)
}

// An empty target confirms empty; a replica with a row or with changelog
// records does not.
func TestSetDataStateEmpty(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"}, []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	waitReady(t, ts, tb, 1, leader, 1)
	b := tb.bucketOf(t, "a")
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, row{"a", 1, "x"})...)
	mustWrite(t, ts, tb, b, 1, tb.del(t, row{"a", 1, ""}))
	resp, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
		CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, DataState: tierv1.DataState_DATA_STATE_LOADING,
		BulkLoadId: "bulk-1", StateRevision: 1 << 40,
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Msg.Replicas {
		wantEmpty := r.Bucket != b // the other bucket never had a record
		if r.Empty != wantEmpty || r.DataState != tierv1.DataState_DATA_STATE_LOADING {
			t.Fatalf("bucket %d: %v", r.Bucket, r)
		}
	}
}

// TestStaleEpochRefusedFromTheStart: a server's first answered command
// already compares with the elected coordinator's epoch (the gate is
// seeded before the server serves): right after a restart a deposed
// coordinator's command does not pass.
func TestStaleEpochRefusedFromTheStart(t *testing.T) {
	c := newCluster(t)
	epoch := int64(c.lead.Epoch())
	ts := c.startServer("ts-1")
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for {
		_, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
			CoordinatorEpoch: epoch - 1, Target: &tierv1.TargetId{TableId: 1}, DataState: tierv1.DataState_DATA_STATE_LOADING,
			BulkLoadId: "bulk-1", StateRevision: 1 << 40,
		}))
		if tierpb.ReasonOf(err) == tierpb.ReasonUnavailable && strings.Contains(err.Error(), "not running") && time.Now().Before(deadline) {
			continue // not serving yet
		}
		if tierpb.ReasonOf(err) != tierpb.ReasonStaleEpoch {
			t.Fatalf("the first answered command of a stale epoch: %v", err)
		}
		return
	}
}

// Coordinator requests with an epoch below the current coordinator's are
// refused with STALE_EPOCH and change nothing.
func TestStaleCoordinatorEpoch(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	epoch := int64(c.lead.Epoch())
	// The gate is seeded before the server serves
	// (TestStaleEpochRefusedFromTheStart): the first try is refused.
	eventually(t, "stale epoch refused", func() error {
		_, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
			CoordinatorEpoch: epoch - 1, Target: tb.id, DataState: tierv1.DataState_DATA_STATE_LOADING,
			BulkLoadId: "bulk-1", StateRevision: 1 << 40,
		}))
		if tierpb.ReasonOf(err) != tierpb.ReasonStaleEpoch {
			return fmt.Errorf("err %v", err)
		}
		if md := tierpb.MetadataOf(err); md[tierpb.KeyEpoch] != strconv.FormatInt(epoch, 10) {
			return fmt.Errorf("metadata %v", md)
		}
		return nil
	})
	mustWrite(t, ts, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)
	for _, call := range []func() error{
		func() error {
			_, err := ts.client.NotifyAssignment(t.Context(), connect.NewRequest(&tierv1.NotifyAssignmentRequest{CoordinatorEpoch: epoch - 1, Target: tb.id, AssignmentRevision: 1 << 40}))
			return err
		},
		func() error {
			_, err := ts.client.TakeSnapshot(t.Context(), connect.NewRequest(&tierv1.TakeSnapshotRequest{CoordinatorEpoch: epoch - 1, Target: tb.id}))
			return err
		},
		func() error {
			_, err := ts.client.RestoreSnapshot(t.Context(), connect.NewRequest(&tierv1.RestoreSnapshotRequest{CoordinatorEpoch: epoch - 1, Target: tb.id, SnapshotId: 5, MetadataPath: "x"}))
			return err
		},
	} {
		wantReason(t, call(), tierpb.ReasonStaleEpoch)
	}
	// The stale NotifyAssignment (an empty list, which would stop the
	// replica) changed nothing.
	mustWrite(t, ts, tb, 0, 1, tb.upsert(t, row{"a", 2, "x"})...)
	// The current epoch passes.
	if _, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
		CoordinatorEpoch: epoch, Target: tb.id, DataState: tierv1.DataState_DATA_STATE_ACTIVE, StateRevision: 1,
	})); err != nil {
		t.Fatal(err)
	}
}

// Bad input is refused with its documented reason, and nothing reaches
// the changelog.
func TestBadWrites(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"}, []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	waitReady(t, ts, tb, 1, leader, 1)
	b := tb.bucketOf(t, "a")
	good := tb.upsert(t, row{"a", 1, "x"})[0]
	otherBucket := tb.upsert(t, row{tb.tenantNotIn(t, b), 1, "x"})[0]
	k2, v2, _ := tb.encode(t, row{"a", 2, "y"})
	badSchema := bytes.Clone(good.Value)
	badSchema[0] = 9
	var many []*tierv1.Mutation
	for i := range 65 {
		many = append(many, tb.upsert(t, row{"a", int64(i), ""})...)
	}
	bigValue := tb.upsert(t, row{"a", 1, string(bytes.Repeat([]byte("x"), 3000))})

	tests := []struct {
		name   string
		target *tierv1.TargetId
		bucket int32
		muts   []*tierv1.Mutation
		reason tierpb.Reason
		index  string
	}{
		{"unknown table", &tierv1.TargetId{TableId: 999}, b, []*tierv1.Mutation{good}, tierpb.ReasonNotFound, ""},
		{"bucket out of range", tb.id, 2, []*tierv1.Mutation{good}, tierpb.ReasonInvalidArgument, ""},
		{"negative bucket", tb.id, -1, []*tierv1.Mutation{good}, tierpb.ReasonInvalidArgument, ""},
		{"empty batch", tb.id, b, nil, tierpb.ReasonInvalidArgument, ""},
		{"too many mutations", tb.id, b, many, tierpb.ReasonBatchTooLarge, ""},
		{"too many bytes", tb.id, b, bigValue, tierpb.ReasonBatchTooLarge, ""},
		{"undecodable value", tb.id, b, []*tierv1.Mutation{good, {Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: good.Key, Value: []byte{0, 0, 1, 2, 3}}}, tierpb.ReasonInvalidArgument, "1"},
		{"key does not match value", tb.id, b, []*tierv1.Mutation{good, {Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: k2, Value: good.Value}}, tierpb.ReasonInvalidArgument, "1"},
		{"key of another value", tb.id, b, []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: good.Key, Value: v2}}, tierpb.ReasonInvalidArgument, "0"},
		{"row of another bucket", tb.id, b, []*tierv1.Mutation{good, good, otherBucket}, tierpb.ReasonInvalidArgument, "2"},
		{"schema id", tb.id, b, []*tierv1.Mutation{good, {Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: good.Key, Value: badSchema}}, tierpb.ReasonSchemaMismatch, "1"},
		{"empty key", tb.id, b, []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_DELETE}}, tierpb.ReasonInvalidArgument, "0"},
		{"delete with value", tb.id, b, []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_DELETE, Key: good.Key, Value: good.Value}}, tierpb.ReasonInvalidArgument, "0"},
		{"undecodable delete key", tb.id, b, []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_DELETE, Key: []byte{0xff, 0xff}}}, tierpb.ReasonInvalidArgument, "0"},
		{"delete in another bucket", tb.id, b, []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_DELETE, Key: otherBucket.Key}}, tierpb.ReasonInvalidArgument, "0"},
		{"unknown op", tb.id, b, []*tierv1.Mutation{good, {Key: good.Key, Value: good.Value}}, tierpb.ReasonInvalidArgument, "1"},
	}
	_, end0 := c.logOffsets(tb, 0)
	_, end1 := c.logOffsets(tb, 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ts.client.Write(t.Context(), connect.NewRequest(&tierv1.WriteRequest{Target: tt.target, Bucket: tt.bucket, LeaderEpoch: 1, Mutations: tt.muts}))
			md := wantReason(t, err, tt.reason)
			if tt.index != "" && md[tierpb.KeyIndex] != tt.index {
				t.Fatalf("index %q, want %q (%v)", md[tierpb.KeyIndex], tt.index, err)
			}
			if tt.reason == tierpb.ReasonSchemaMismatch && md[tierpb.KeySchemaID] != "0" {
				t.Fatalf("schema id %q", md[tierpb.KeySchemaID])
			}
			if tt.reason == tierpb.ReasonBatchTooLarge && md[tierpb.KeyLimit] == "" {
				t.Fatalf("no limit: %v", md)
			}
		})
	}
	if _, e := c.logOffsets(tb, 0); e != end0 {
		t.Fatalf("bucket 0 changelog end %d, want %d", e, end0)
	}
	if _, e := c.logOffsets(tb, 1); e != end1 {
		t.Fatalf("bucket 1 changelog end %d, want %d", e, end1)
	}
	// The same batch without the bad mutations goes through.
	mustWrite(t, ts, tb, b, 1, good)
}

// fullLogs is a changelog provider whose logs refuse appends with ENOSPC,
// as the local changelog does on a full disk, while full is set.
type fullLogs struct {
	changelog.Provider
	full *atomic.Bool
}

func (p fullLogs) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	l, err := p.Provider.Open(ctx, id)
	return fullLog{Log: l, full: p.full}, err
}

type fullLog struct {
	changelog.Log
	full *atomic.Bool
}

func (l fullLog) Append(ctx context.Context, records [][]byte) (int64, error) {
	if l.full.Load() {
		return 0, fmt.Errorf("changelog: write batch to /data/changelog/t1-b0/0.log: %w",
			&fs.PathError{Op: "write", Path: "/data/changelog/t1-b0/0.log", Err: syscall.ENOSPC})
	}
	return l.Log.Append(ctx, records)
}

// TestStorageFull: a write its changelog refuses for lack of disk space is
// STORAGE_FULL, not INTERNAL ("report it"), changes nothing, and is in the
// server's log (once for a burst of them); with room again the same write
// goes through.
func TestStorageFull(t *testing.T) {
	c := newCluster(t)
	var full atomic.Bool
	var logged testlog.Buffer
	c.deps = func(d *tablet.Deps) {
		d.Changelog = fullLogs{Provider: d.Changelog, full: &full}
		d.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	}
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"}, []string{"ts-1"})
	waitReady(t, ts, tb, 0, leader, 1)
	waitReady(t, ts, tb, 1, leader, 1)
	b := tb.bucketOf(t, "a")
	_, end := c.logOffsets(tb, int(b))
	full.Store(true)
	for range 3 {
		_, err := write(t.Context(), ts, tb, b, 1, tb.upsert(t, row{"a", 1, "x"})...)
		wantReason(t, err, tierpb.ReasonStorageFull)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "out of disk space") || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("error %v", err)
		}
	}
	if _, e := c.logOffsets(tb, int(b)); e != end {
		t.Fatalf("changelog end %d, want %d", e, end)
	}
	if got, err := scanAll(t, ts, tb, b, nil, 10); err != nil || len(got) != 0 {
		t.Fatalf("bucket holds %v (%v), want nothing", got, err)
	}
	out := logged.String()
	if n := strings.Count(out, "tablet write failed"); n != 1 ||
		!strings.Contains(out, "reason=STORAGE_FULL") || !strings.Contains(out, "no space left on device") || !strings.Contains(out, "not_logged_since_last=0") {
		t.Fatalf("%d log lines of the failed writes, want 1 naming the reason and the error:\n%s", n, out)
	}
	full.Store(false)
	mustWrite(t, ts, tb, b, 1, tb.upsert(t, row{"a", 1, "x"})...)
	if got, err := scanAll(t, ts, tb, b, nil, 10); err != nil || len(got) != 1 {
		t.Fatalf("after making room the bucket holds %v (%v), want the row", got, err)
	}
}

// A partition is a target of its own: its replicas are assigned with the
// partition, and a write of a row of another partition is refused.
func TestPartitionedTarget(t *testing.T) {
	c := newCluster(t)
	ts := c.startServer("ts-1")
	schema := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "region", Type: kv.Type{Kind: kv.KindString}},
			{Name: "tenant", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey:    []string{"region", "tenant", "id"},
		PartitionKeys: []string{"region"},
		BucketKey:     []string{"tenant"},
		Buckets:       1,
	}
	tv, err := c.store.CreateTable(t.Context(), c.guard, meta.TableSpec{
		Database: c.db, Name: "p", Schema: schema, ReplicationFactor: 1, RemoteDataDir: c.objects.Base(),
	})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := c.store.CreatePartition(t.Context(), c.guard, c.db, "p", "eu",
		[]meta.BucketAssignment{{Replicas: []string{"ts-1"}, Leader: "ts-1", LeaderEpoch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	kt, err := kv.NewTable(tv.Value.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{rec: tv.Value, t: kt, id: &tierv1.TargetId{TableId: tv.Value.ID, PartitionId: pv.Value.ID}, mtgt: pv.Value.Target()}
	waitReady(t, ts, tb, 0, leader, 1)

	mut := func(region string, id int64) *tierv1.Mutation {
		r := kv.Row{region, "acme", id, "x"}
		k, err := kt.EncodeKey(r)
		if err != nil {
			t.Fatal(err)
		}
		v, err := kt.EncodeValue(r)
		if err != nil {
			t.Fatal(err)
		}
		return &tierv1.Mutation{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: k, Value: v}
	}
	mustWrite(t, ts, tb, 0, 1, mut("eu", 1), mut("eu", 2))
	_, err = write(t.Context(), ts, tb, 0, 1, mut("eu", 3), mut("us", 4))
	if md := wantReason(t, err, tierpb.ReasonInvalidArgument); md[tierpb.KeyIndex] != "1" {
		t.Fatalf("metadata %v", md)
	}
	got, err := scanAll(t, ts, tb, 0, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d rows, want 2", len(got))
	}
	// The table id alone names no target of a partitioned table.
	_, err = write(t.Context(), ts, &table{id: &tierv1.TargetId{TableId: tv.Value.ID}}, 0, 1, mut("eu", 5))
	wantReason(t, err, tierpb.ReasonNotFound)
}

// TestSetDataStateWaitsForOpening: a LOADING push that reaches replicas
// still opening (a bulk load's fence right after its partition was
// created) waits for them and confirms them in its answer, instead of
// leaving them to the coordinator's next resend.
func TestSetDataStateWaitsForOpening(t *testing.T) {
	c := newCluster(t)
	gate, opening := make(chan struct{}), make(chan struct{}, 8)
	c.deps = func(d *tablet.Deps) {
		d.Changelog = gatedLogs{Provider: d.Changelog, gate: gate, opening: opening}
	}
	ts := c.startServer("ts-1")
	tb := c.createTable("t", []string{"ts-1"}, []string{"ts-1"})
	for range 2 {
		select {
		case <-opening:
		case <-time.After(10 * time.Second):
			t.Fatal("the replicas never opened their changelogs")
		}
	}
	type answer struct {
		resp *connect.Response[tierv1.SetDataStateResponse]
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := ts.client.SetDataState(t.Context(), connect.NewRequest(&tierv1.SetDataStateRequest{
			CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id, DataState: tierv1.DataState_DATA_STATE_LOADING,
			BulkLoadId: "bulk-1", StateRevision: 1 << 40,
		}))
		done <- answer{resp, err}
	}()
	// The push has applied LOADING (what the server reports) while the
	// replicas are still held opening; then they may open.
	eventually(t, "LOADING applied", func() error {
		resp, err := ts.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
		if err != nil {
			return err
		}
		for _, r := range resp.Msg.Replicas {
			if r.DataState != tierv1.DataState_DATA_STATE_LOADING || r.State == tierv1.ReplicaState_REPLICA_STATE_READY {
				return fmt.Errorf("replica %v", r)
			}
		}
		return nil
	})
	close(gate)
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.resp.Msg.Replicas) != 2 {
		t.Fatalf("answer %v", a.resp.Msg.Replicas)
	}
	for _, r := range a.resp.Msg.Replicas {
		if r.State != tierv1.ReplicaState_REPLICA_STATE_READY || r.DataState != tierv1.DataState_DATA_STATE_LOADING || !r.Empty {
			t.Errorf("bucket %d in the answer: %v (want READY, LOADING, empty)", r.Bucket, r)
		}
	}
}

// gatedLogs is a changelog provider whose Open announces itself on opening
// and then waits for gate to close.
type gatedLogs struct {
	changelog.Provider
	gate    <-chan struct{}
	opening chan<- struct{}
}

func (p gatedLogs) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	select {
	case p.opening <- struct{}{}:
	default:
	}
	select {
	case <-p.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p.Provider.Open(ctx, id)
}
