package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestCloseDuringCommit: a bulk-load commit in flight when the embedded
// tier closes does not hold Close up. Its remaining rounds are RPCs from
// the coordinator to the tablet servers through the tier's own listener;
// Close drained that listener first, so the commit could not progress and
// Close waited the whole shutdown timeout. The coordinators resign first
// now: the commit is answered UNAVAILABLE at once (the transaction stays
// BEGUN, resumable).
func TestCloseDuringCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, EmbeddedConfig{
		DataDir: t.TempDir(), TabletServers: 3, EtcdUnsafeNoFsync: true,
		ShutdownTimeout: 12 * time.Second,
		Tablet:          TabletOptions{LeaseTTL: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = e.Close()
		}
	}()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := tierclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.CreateDatabase(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "d", "t", kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}, {Name: "v", Type: kv.Type{Kind: kv.KindString}}},
		PrimaryKey: []string{"id"}, Buckets: 1,
	}, 2); err != nil {
		t.Fatal(err)
	}
	c, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "d", Table: "t"}
	var bc *bulkloadclient.BuildContext
	for {
		bc, err = c.Begin(ctx, target, "close-load-1", bulkloadclient.BeginOptions{BuildTimeout: 10 * time.Minute})
		if err == nil {
			break
		}
		if !bulkloadclient.IsRetriable(err) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for id := range int64(100) {
		if err := s.AddRow(ctx, kv.Row{id, fmt.Sprint("v", id)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// One holder of the bucket crashes (its lease lapses after 2s): the
	// commit's restore round waits for the holders to change.
	as, err := e.Meta().ListAssignments(ctx)
	if err != nil || len(as) != 1 {
		t.Fatal(as, err)
	}
	leader := as[0].Value.Buckets[0].Leader
	t.Logf("assignment %+v; killing leader %s", as[0].Value.Buckets[0], leader)
	if err := e.KillTabletKeepLease(ctx, leader); err != nil {
		t.Fatal(err)
	}
	commitDone := make(chan error, 1)
	go func() {
		cs := time.Now()
		st, err := c.Commit(ctx, bc, res, 5*time.Second)
		t.Logf("commit after %v: %v %v", time.Since(cs), st.State, err)
		commitDone <- err
	}()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	err = e.Close()
	closed = true
	took := time.Since(start)
	t.Logf("Close took %v: %v", took, err)
	if took > 8*time.Second {
		t.Errorf("Close took %v (shutdown timeout 12s): the in-flight commit could not finish while the listener drained", took)
	}
	if err := <-commitDone; err != nil && !bulkloadclient.IsRetriable(err) {
		t.Errorf("the commit cut by Close: %v, want a retriable error", err)
	}
}
