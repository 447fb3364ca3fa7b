package fencing_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

func get(t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func TestGuardedTxnFencesDeposedLeader(t *testing.T) {
	cliA, cliB := newClient(t), newClient(t)
	prefix := "/" + t.Name()
	data := prefix + "-data"
	a := mustElect(t, cliA, prefix, "a")
	if _, err := a.Txn(t.Context(), nil, []clientv3.Op{clientv3.OpPut(data, "a")}, nil); err != nil {
		t.Fatal(err)
	}

	b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
	waitCandidates(t, cliB, prefix, 2)
	cliA.Close() // a crashes; b takes over when a's lease expires
	rb := wait(t, b, ttl+3*time.Second, "b takes over")
	if rb.err != nil {
		t.Fatal(rb.err)
	}

	// a's epoch, checked by etcd: fenced, whatever the caller's own compare.
	resp, err := fencing.GuardedTxn(t.Context(), cliB, a.Key(), a.Epoch(), nil,
		[]clientv3.Op{clientv3.OpPut(data, "stale")}, []clientv3.Op{clientv3.OpPut(data, "stale-else")})
	if !errors.Is(err, fencing.ErrNotLeader) || !fencing.IsFenced(err) || errors.Is(err, fencing.ErrPreconditionFailed) || resp != nil {
		t.Fatalf("stale guarded txn: %v, %v; want ErrNotLeader", resp, err)
	}
	t.Logf("stale guarded txn: %v", err)
	// a itself knows its term is over and does not even ask.
	if _, err := a.Txn(t.Context(), nil, []clientv3.Op{clientv3.OpPut(data, "stale")}, nil); !errors.Is(err, fencing.ErrLeadershipLost) || !fencing.IsFenced(err) {
		t.Fatalf("deposed leader's txn: %v; want ErrLeadershipLost", err)
	}
	if got := get(t, cliB, data); got != "a" {
		t.Fatalf("data %q after fenced writes; want %q", got, "a")
	}

	if _, err := rb.l.Txn(t.Context(), nil, []clientv3.Op{clientv3.OpPut(data, "b")}, nil); err != nil {
		t.Fatal(err)
	}
	if got := get(t, cliB, data); got != "b" {
		t.Fatalf("data %q; want %q", got, "b")
	}
}

func TestGuardedTxnPreconditionFailed(t *testing.T) {
	cli := newClient(t)
	prefix := "/" + t.Name()
	data := prefix + "-data"
	l := mustElect(t, cli, prefix, "a")
	if _, err := l.Txn(t.Context(), nil, []clientv3.Op{clientv3.OpPut(data, "v1")}, nil); err != nil {
		t.Fatal(err)
	}

	resp, err := l.Txn(t.Context(),
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(data), "=", "v0")},
		[]clientv3.Op{clientv3.OpPut(data, "v2")},
		[]clientv3.Op{clientv3.OpGet(data)})
	if !errors.Is(err, fencing.ErrPreconditionFailed) || fencing.IsFenced(err) {
		t.Fatalf("got %v; want ErrPreconditionFailed only", err)
	}
	if resp == nil || resp.Succeeded || resp.Header.GetRevision() == 0 {
		t.Fatalf("response %v; want the caller's failed txn with a header", resp)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) != 1 || string(kvs[0].Value) != "v1" {
		t.Fatalf("else branch read %v; want v1", kvs)
	}
	if got := get(t, cli, data); got != "v1" {
		t.Fatalf("data %q; want unchanged v1", got)
	}

	resp, err = l.Txn(t.Context(),
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(data), "=", "v1")},
		[]clientv3.Op{clientv3.OpPut(data, "v2")},
		[]clientv3.Op{clientv3.OpGet(data)})
	if err != nil || !resp.Succeeded || resp.Responses[0].GetResponsePut() == nil {
		t.Fatalf("got %v, %v; want the then branch", resp, err)
	}
	if got := get(t, cli, data); got != "v2" {
		t.Fatalf("data %q; want v2", got)
	}
}

// Epoch 0 names no term: etcd reports an absent leader key's create
// revision as 0, so without a check a caller that never won an election
// (an epoch left zero) would write while no one leads.
func TestGuardedTxnNoTerm(t *testing.T) {
	cli := newClient(t)
	prefix := "/" + t.Name()
	key := prefix + "/data"
	for _, leaderKey := range []string{prefix + "/election/none", ""} {
		_, err := fencing.GuardedTxn(t.Context(), cli, leaderKey, 0, nil,
			[]clientv3.Op{clientv3.OpPut(key, "written without leadership")}, nil)
		if !errors.Is(err, fencing.ErrNotLeader) {
			t.Fatalf("GuardedTxn on %q at epoch 0: %v, want ErrNotLeader", leaderKey, err)
		}
	}
	if v := get(t, cli, key); v != "" {
		t.Fatalf("GuardedTxn at epoch 0 wrote %q", v)
	}
}
