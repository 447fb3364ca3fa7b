package tablet

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
)

// TestClosingForgetsExitedEntries: every bucket ever hosted here and then
// unassigned left an entry in loop.closing for the server's life, long
// after its worker exited; the next reconcile forgets those.
func TestClosingForgetsExitedEntries(t *testing.T) {
	s := &Server{cfg: Config{ID: "a"}, log: slog.New(slog.DiscardHandler)}
	s.mu.targets = map[meta.Target]*targetView{}
	s.mu.replicas = map[bucketKey]*replicaEntry{}
	l := newLoop(s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.ctx = ctx
	l.registered = true
	table, err := kv.NewTable(kv.TableSchema{
		Columns:    []kv.Column{{Name: "k", Type: kv.Type{Kind: kv.KindString}}},
		PrimaryKey: []string{"k"}, Buckets: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		tg := meta.Target{TableID: int64(i + 1)}
		l.pushed[tg] = pushedInfo{snap: snapshot.Target{RemoteDir: "file:///x", Database: "db", Table: "t", TableID: tg.TableID}, table: table}
		l.putAssignment(tg, &assignRec{rev: 1, routes: map[int32]bucketRoute{0: {replicas: []string{"a"}, leader: "a", epoch: 1}}})
		l.reconcile()
		// moved away from this server
		l.putAssignment(tg, &assignRec{rev: 2, routes: map[int32]bucketRoute{0: {replicas: []string{"b"}, leader: "b", epoch: 2}}})
		l.reconcile()
	}
	deadline := time.Now().Add(30 * time.Second)
	for k, d := range l.closing { // every worker exits
		select {
		case <-d:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%v still closing", k)
		}
	}
	l.reconcile()
	if len(l.entries) != 0 {
		t.Fatalf("entries %d", len(l.entries))
	}
	if len(l.closing) != 0 {
		t.Fatalf("loop.closing holds %d closed channels for buckets no longer hosted (grows by one per bucket ever unassigned)", len(l.closing))
	}
}
