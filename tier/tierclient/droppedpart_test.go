package tierclient_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestPartitionDroppedByAnotherClient: a client that has a partition
// cached, which another client drops, reads no row from it and deletes
// nothing in it, as from a partition that never existed (doc.go); the
// Get failed with the coordinator's NOT_FOUND, and so did the Delete,
// taking the other partition's rows of the call with them.
func TestPartitionDroppedByAnotherClient(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	retry := tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 5 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	a := newClient(t, e.HostPort(), retry)
	b := newClient(t, e.HostPort(), retry)
	ctx := t.Context()
	target, info := createTable(t, a, "p", recreatedSchema("a"), 1)
	for _, p := range []string{"x", "w"} {
		if err := a.CreatePartition(ctx, "db", "p", p); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Upsert(ctx, target, []kv.Row{{"x", "y", int64(1), "gone"}, {"w", "y", int64(2), "kept"}, {"w", "y", int64(3), "deleted"}}); err != nil {
		t.Fatal(err)
	}
	kx, _ := info.KeyRow("x", "y", int64(1))
	kw, _ := info.KeyRow("w", "y", int64(2))
	if got, err := a.Get(ctx, target, []kv.Row{kx, kw}); err != nil || got[0] == nil || got[1] == nil {
		t.Fatalf("get before the drop: %v %v", got, err)
	}
	if err := b.DropPartition(ctx, "db", "p", "x"); err != nil {
		t.Fatal(err)
	}
	// Until the tablet server removes the replica it may still answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := a.Get(ctx, target, []kv.Row{kx, kw})
		if err != nil {
			t.Fatalf("Get of a key in a partition another client dropped: %v", err)
		}
		if got[1] == nil {
			t.Fatal("the row of partition w is missing")
		}
		if got[0] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("partition x still answers 30 s after its drop")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A Writer's deletes in a partition dropped meanwhile delete nothing
	// and succeed; the rest of the call applies.
	kd, _ := info.KeyRow("w", "y", int64(3))
	if err := a.Upsert(ctx, target, []kv.Row{{"x", "y", int64(1), "back"}}); err == nil {
		// Upserting recreated nothing: the partition is gone (no
		// WithCreatePartitions), so this must fail.
		t.Fatal("upsert into a dropped partition succeeded")
	}
	// Clients that each cached partition z delete a key of it one after
	// the other while the tablet server removes its replica: every delete
	// succeeds, before the removal (the row goes with the partition) and
	// after it.
	if err := b.CreatePartition(ctx, "db", "p", "z"); err != nil {
		t.Fatal(err)
	}
	kz, _ := info.KeyRow("z", "y", int64(9))
	clients := make([]*tierclient.Client, 30)
	for i := range clients {
		clients[i] = newClient(t, e.HostPort(), retry)
		if _, err := clients[i].Get(ctx, target, []kv.Row{kz}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DropPartition(ctx, "db", "p", "z"); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		if err := c.Delete(ctx, target, []kv.Row{kz}); err != nil {
			t.Fatalf("delete %d (%v after the drop) of a key in a partition another client dropped: %v", i, time.Duration(i)*100*time.Millisecond, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := clients[len(clients)-1]
	if err := c.Delete(ctx, target, []kv.Row{kz, kd}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, target, []kv.Row{kd}); err != nil || got[0] != nil {
		t.Fatalf("the delete beside it: %v %v", got, err)
	}
}

// TestMissingTargetsNotCached: a call naming a partition or table that
// does not exist leaves no entry behind; each added one for good, and a
// reader of keys in arbitrary partitions grew without bound.
func TestMissingTargetsNotCached(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	c := newClient(t, e.HostPort())
	target, info := createTable(t, c, "p", recreatedSchema("a"), 1)
	before := tierclient.CachedTargets(c)
	for i := range 50 {
		k, _ := info.KeyRow(fmt.Sprintf("none-%d", i), "y", int64(1))
		if got, err := c.Get(t.Context(), target, []kv.Row{k}); err != nil || got[0] != nil {
			t.Fatalf("get %d: %v %v", i, got, err)
		}
		if _, err := c.Get(t.Context(), tierclient.Target{Database: "db", Table: fmt.Sprintf("none%d", i)}, []kv.Row{{int64(1)}}); err == nil {
			t.Fatal("a get from a table that does not exist succeeded")
		}
	}
	if n := tierclient.CachedTargets(c); n > before+2 {
		t.Fatalf("after 100 calls naming targets that do not exist the client keeps %d entries (%d before)", n, before)
	}
}
