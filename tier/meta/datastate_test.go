package meta_test

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/meta"
)

func TestDataState(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	tbl := e.createTable("d", "t", 2, false)
	name := meta.TargetName{Database: "d", Table: "t"}
	set := func(rev int64, state meta.DataState, id string) (int64, error) {
		return e.s.SetDataState(ctx, e.g, meta.DataStateChange{Target: name, Rev: rev, State: state, BulkLoadID: id})
	}

	before := e.dump()
	for _, bad := range []struct {
		state meta.DataState
		id    string
	}{{meta.Loading, ""}, {"FROZEN", "x"}, {meta.Loading, "a/b"}} {
		if _, err := set(tbl.Rev, bad.state, bad.id); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("set %s %q: %v; want ErrInvalid", bad.state, bad.id, err)
		}
	}
	e.unchanged(before, "invalid data states")

	// ACTIVE -> LOADING(txn-1) -> ACTIVE(txn-1) -> ACTIVE, as a bulk load does.
	rev := tbl.Rev
	for _, step := range []struct {
		state meta.DataState
		id    string
	}{{meta.Loading, "txn-1"}, {meta.Active, "txn-1"}, {meta.Active, ""}} {
		next, err := set(rev, step.state, step.id)
		if err != nil {
			t.Fatalf("set %s %q: %v", step.state, step.id, err)
		}
		got, err := e.s.GetTable(ctx, "d", "t")
		if err != nil || got.Rev != next || got.Value.DataState != step.state || got.Value.BulkLoadID != step.id {
			t.Fatalf("after %s %q: %+v, %v", step.state, step.id, got, err)
		}
		if _, err := set(rev, meta.Loading, "txn-9"); !errors.Is(err, fencing.ErrPreconditionFailed) {
			t.Fatalf("set at the replaced revision %d: %v", rev, err)
		}
		rev = next
	}

	// A bulk-load id is never replaced by another.
	rev, err := set(rev, meta.Loading, "txn-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set(rev, meta.Loading, "txn-3"); !errors.Is(err, meta.ErrInvalid) {
		t.Fatalf("replace the bulk load id: %v", err)
	}

	// The caller's own comparisons and writes go in the same transaction.
	txnKey := e.prefix + "/bulkload/txn-2"
	rev2, err := e.s.SetDataState(ctx, e.g, meta.DataStateChange{
		Target: name, Rev: rev, State: meta.Active, BulkLoadID: "txn-2",
		If:   []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(txnKey), "=", 0)},
		Then: []clientv3.Op{clientv3.OpPut(txnKey, "COMMITTED")},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.cli.Get(ctx, txnKey)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev2 {
		t.Fatalf("the caller's write: %v, %v; want it at %d", resp, err, rev2)
	}
	before = e.dump()
	_, err = e.s.SetDataState(ctx, e.g, meta.DataStateChange{
		Target: name, Rev: rev2, State: meta.Active,
		If:   []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(txnKey), "=", 0)}, // fails: it exists
		Then: []clientv3.Op{clientv3.OpDelete(txnKey)},
	})
	if !errors.Is(err, fencing.ErrPreconditionFailed) {
		t.Fatalf("failed caller comparison: %v", err)
	}
	e.unchanged(before, "a change whose caller comparison failed")
}

func TestPartitionDataState(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createDB("d")
	e.createTable("d", "plain", 2, false)
	e.createTable("d", "parted", 2, true)
	p := e.createPartition("d", "parted", "a", 2)
	before := e.dump()
	for _, tc := range []struct {
		name meta.TargetName
		want error
	}{
		{meta.TargetName{Database: "d", Table: "parted"}, meta.ErrInvalid},
		{meta.TargetName{Database: "d", Table: "plain", Partition: "a"}, meta.ErrInvalid},
		{meta.TargetName{Database: "d", Table: "parted", Partition: "b"}, meta.ErrNotFound},
		{meta.TargetName{Database: "d", Table: "nope"}, meta.ErrNotFound},
	} {
		if _, err := e.s.SetDataState(ctx, e.g, meta.DataStateChange{Target: tc.name, Rev: p.Rev, State: meta.Loading, BulkLoadID: "x"}); !errors.Is(err, tc.want) {
			t.Errorf("set data state of %s: %v; want %v", tc.name, err, tc.want)
		}
	}
	e.unchanged(before, "rejected data states")

	name := meta.TargetName{Database: "d", Table: "parted", Partition: "a"}
	rev, err := e.s.SetDataState(ctx, e.g, meta.DataStateChange{Target: name, Rev: p.Rev, State: meta.Loading, BulkLoadID: "txn-1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.s.GetPartition(ctx, p.Value.TableID, "a")
	if err != nil || got.Rev != rev || got.Value.DataState != meta.Loading || got.Value.BulkLoadID != "txn-1" {
		t.Fatalf("partition after LOADING: %+v, %v", got, err)
	}
	if _, err := e.s.SetDataState(ctx, e.g, meta.DataStateChange{Target: name, Rev: p.Rev, State: meta.Active}); !errors.Is(err, fencing.ErrPreconditionFailed) {
		t.Fatalf("set at a stale revision: %v", err)
	}
}
