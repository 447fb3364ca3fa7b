package bulkloadclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestEndToEnd runs the whole workflow against a real embedded tier:
// create a table, Begin, ship the context through Marshal/Unmarshal,
// build with two sessions of disjoint buckets, Commit, read back.
func TestEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	e, tc := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{DataDir: t.TempDir(), EtcdUnsafeNoFsync: true})
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	const buckets = 4
	info, err := tc.CreateTable(ctx, "shop", "items", kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: mustType(t, "BIGINT")},
			{Name: "name", Type: mustType(t, "STRING")},
			{Name: "qty", Type: mustType(t, "INT"), Nullable: true},
		},
		PrimaryKey: []string{"id"}, Buckets: buckets,
	}, 3)
	if err != nil {
		t.Fatal(err)
	}

	c, err := bulkloadclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "items"}
	var bc *bulkloadclient.BuildContext
	// Begin answers UNAVAILABLE until the new table's replicas are ready.
	for {
		bc, err = c.Begin(ctx, target, "e2e-token-1", bulkloadclient.BeginOptions{BuildTimeout: time.Minute})
		if err == nil {
			break
		}
		if !bulkloadclient.IsRetriable(err) || ctx.Err() != nil {
			t.Fatalf("begin: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if bc.Buckets() != buckets || bc.Handle().Target != target || bc.Handle().TableID != info.ID {
		t.Fatalf("context: handle %+v, %d buckets", bc.Handle(), bc.Buckets())
	}
	st, inProgress, err := c.GetInProgress(ctx, target)
	if err != nil || st.State != bulkload.Begun || inProgress == nil || inProgress.Handle() != bc.Handle() {
		t.Fatalf("get in progress: %+v %v %v", st, inProgress, err)
	}

	blob, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := bulkloadclient.UnmarshalBuildContext(blob)
	if err != nil {
		t.Fatal(err)
	}

	// 1000 distinct ids, then 50 of them again with new values (last wins).
	const n = 1000
	want := map[int64]kv.Row{}
	var rows []kv.Row
	for i := range int64(n) {
		rows = append(rows, kv.Row{i, fmt.Sprintf("item-%d", i), int32(i)})
	}
	for i := int64(0); i < n; i += 20 {
		rows = append(rows, kv.Row{i, fmt.Sprintf("item-%d-v2", i), nil})
	}
	for _, r := range rows {
		want[r[0].(int64)] = r
	}

	// Two workers, each owning two buckets.
	tb := shipped.Table()
	var results []snapshotbuild.BucketResult
	for _, owned := range [][]int{{0, 2}, {1, 3}} {
		s, err := bulkloadclient.OpenBuildSession(ctx, shipped, bulkloadclient.SessionOptions{
			Buckets: owned, TempDir: t.TempDir(), MemoryBudget: 8 << 20, Workers: 2,
		})
		if err != nil {
			t.Fatal(err)
		}
		rejected := false
		for _, r := range rows {
			b, err := tb.Bucket(r)
			if err != nil {
				t.Fatal(err)
			}
			if b != owned[0] && b != owned[1] {
				if !rejected {
					if err := s.AddRow(ctx, r); err == nil {
						t.Fatalf("a row of bucket %d was accepted by a session of %v", b, owned)
					}
					rejected = true
				}
				continue
			}
			if err := s.AddRow(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		res, err := s.Finish(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		results = append(results, res...)
	}

	// A partial result set is refused before anything is written.
	if _, err := c.Commit(ctx, bc, results[:3], time.Second); !errors.Is(err, bulkload.ErrInvalidRequest) {
		t.Fatalf("commit of 3 buckets: %v", err)
	}
	st, err = c.Commit(ctx, bc, results, 30*time.Second)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if st.State != bulkload.Committed {
		t.Fatalf("commit: %+v", st)
	}
	// Committing again is idempotent.
	if st, err := c.Commit(ctx, shipped, results, 5*time.Second); err != nil || st.State != bulkload.Committed {
		t.Fatalf("second commit: %+v %v", st, err)
	}
	if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Committed {
		t.Fatalf("status: %+v %v", st, err)
	}

	keys := make([]kv.Row, 0, n)
	for i := range int64(n) {
		k, err := info.KeyRow(i)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	tt := tierclient.Target{Database: "shop", Table: "items"}
	var got []kv.Row
	for {
		got, err = tc.Get(ctx, tt, keys)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for i, r := range got {
		w := want[int64(i)]
		if r == nil || fmt.Sprint(r) != fmt.Sprint(w) {
			t.Fatalf("row %d: got %v, want %v", i, r, w)
		}
	}

	// Abort after the commit is refused.
	if _, err := c.Abort(ctx, bc.Handle()); !errors.Is(err, bulkload.ErrInvalidState) {
		t.Fatalf("abort after commit: %v", err)
	}
}
