package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestApplyRowCount checks the row count and contents after batches that
// mix upserts of new and existing keys, deletes of existing and missing
// keys, and several mutations of one key in one batch, while the data
// sits in the memtable, in L0 files and in the last level (flushes and a
// manual compaction between batches), on a leader (Write) and a follower
// (Follow). After every batch the leader's RowCount must equal the model;
// at the end both replicas' contents must equal the model and a full
// count of the database must equal RowCount.
func TestApplyRowCount(t *testing.T) {
	e := newEnv(t)
	leader := open(t, e.hostOnly(t), e.id(0), nil)
	follower := open(t, e.hostOnly(t), e.id(0), nil)
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- follower.Follow(ctx) }()

	rng := rand.New(rand.NewPCG(7, 11))
	want := map[string]string{}
	const keySpace = 3000
	var last int64
	for round := range 40 {
		n := 1 + rng.IntN(400)
		ms := make([]Mutation, n)
		for i := range ms {
			k := key(rng.IntN(keySpace))
			if rng.IntN(3) == 0 {
				ms[i] = Mutation{Op: OpDelete, Key: k}
			} else {
				ms[i] = Mutation{Op: OpUpsert, Key: k, Value: fmt.Appendf(nil, "r%d-%d", round, i)}
			}
		}
		// Some keys several times in the batch, in both orders.
		if n > 3 {
			k := key(rng.IntN(keySpace))
			ms[0] = Mutation{Op: OpUpsert, Key: k, Value: []byte("first")}
			ms[n/2] = Mutation{Op: OpDelete, Key: k}
			ms[n-1] = Mutation{Op: OpUpsert, Key: k, Value: []byte("again")}
		}
		first := write(t, leader, ms)
		last = first + int64(n) - 1
		model(want, ms)
		if got := leader.RowCount(); got != int64(len(want)) {
			t.Fatalf("round %d: RowCount = %d, want %d", round, got, len(want))
		}
		switch round % 10 {
		case 3, 6:
			if err := leader.db.Flush(); err != nil {
				t.Fatal(err)
			}
		case 9:
			if err := leader.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff, 0xff}, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m := leader.db.Metrics(); m.Levels[6].TablesCount == 0 {
		t.Errorf("no table in L6: the test did not reach the last level")
	}
	sameContents(t, leader, want)
	waitApplied(t, follower, last)
	sameContents(t, follower, want)
	for _, r := range []*Replica{leader, follower} {
		n, err := r.countRows()
		if err != nil {
			t.Fatal(err)
		}
		if n != r.RowCount() {
			t.Errorf("replica %v: %d rows in the database, RowCount %d", r.ID(), n, r.RowCount())
		}
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("Follow returned nil after Close")
	}
}
