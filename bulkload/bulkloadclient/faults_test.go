package bulkloadclient_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

// build builds rows for every bucket of bc in one session.
func build(ctx context.Context, t *testing.T, bc *bulkloadclient.BuildContext, rows []kv.Row) []snapshotbuild.BucketResult {
	t.Helper()
	return buildBuckets(ctx, t, bc, rows, nil)
}

// buildBuckets builds the rows of buckets (nil: all) in one session that
// is given every row and skips the others.
func buildBuckets(ctx context.Context, t *testing.T, bc *bulkloadclient.BuildContext, rows []kv.Row, buckets []int) []snapshotbuild.BucketResult {
	t.Helper()
	return buildThrough(ctx, t, bc, rows, buckets, nil)
}

// buildThrough is buildBuckets writing through store (nil: the session's
// default).
func buildThrough(ctx context.Context, t *testing.T, bc *bulkloadclient.BuildContext, rows []kv.Row, buckets []int, store snapshotbuild.Store) []snapshotbuild.BucketResult {
	t.Helper()
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		Buckets: buckets, SkipOtherBuckets: true, TempDir: t.TempDir(), MemoryBudget: 8 << 20, Store: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range rows {
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
	return res
}

// expectRows checks that target holds exactly rows.
func (tr *testTier) expectRows(ctx context.Context, t *testing.T, target bulkload.Target, rows []kv.Row) {
	t.Helper()
	var want, got rowSum
	for _, r := range rows {
		want.add(r)
	}
	if err := tr.tc.Scan(ctx, tierclient.Target(target), func(r kv.Row) error { got.add(r); return nil }); err != nil {
		t.Fatalf("scan %s: %v", target, err)
	}
	if got != want {
		t.Fatalf("%s: %d rows with checksum %x, want %d rows with %x", target, got.n, got.sum, want.n, want.sum)
	}
}

func regionRows(region string, n int64) []kv.Row {
	rows := make([]kv.Row, 0, n)
	for i := range n {
		rows = append(rows, loadRow(region, i, 1))
	}
	return rows
}

// TestCommitThroughFaults commits through a transport in front of the real
// coordinator that answers UNAVAILABLE without passing the call on, and
// that loses the response of a Commit the server carried out. Commit
// returns COMMITTED and the target has exactly one transaction, committed.
func TestCommitThroughFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a", "b")

	ft := newFaultyTransport()
	c, err := bulkloadclient.New(ctx, tr.e.Address(), bulkloadclient.WithHTTPClient(&http.Client{Transport: ft}))
	if err != nil {
		t.Fatal(err)
	}

	// Two UNAVAILABLE answers, then the server commits and the answer is
	// lost; the Status after it is UNAVAILABLE too, so the client sends
	// Commit once more and gets COMMITTED from the finished transaction.
	t.Run("repeated", func(t *testing.T) {
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
		bc, err := begin(ctx, c, target, "faults-a")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("a", 500)
		res := build(ctx, t, bc, rows)
		ft.script("Commit", unavailable, unavailable, lostSuccess)
		ft.script("Status", pass, pass, unavailable)
		st, err := c.Commit(ctx, bc, res, time.Minute)
		if err != nil || st.State != bulkload.Committed || st.Handle != bc.Handle() {
			t.Fatalf("commit: %+v, %v", st, err)
		}
		if ft.left("Commit") != 0 || ft.left("Status") != 0 {
			t.Fatalf("faults not played: Commit %d, Status %d left", ft.left("Commit"), ft.left("Status"))
		}
		// Two Commits reached the server: the lost one and the repeat.
		if n := ft.reached("Commit"); n != 2 {
			t.Fatalf("%d commits reached the server, want 2", n)
		}
		expectLostCommitted(t, ft, 1)
		expectOneCommitted(ctx, t, tr, bc)
		tr.expectRows(ctx, t, target, rows)
	})

	// The answer of the first Commit is lost; Status resolves the outcome,
	// so no second Commit is sent.
	t.Run("resolved", func(t *testing.T) {
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "b"}
		bc, err := begin(ctx, c, target, "faults-b")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("b", 300)
		res := build(ctx, t, bc, rows)
		before := ft.reached("Commit")
		ft.script("Commit", lostSuccess)
		st, err := c.Commit(ctx, bc, res, time.Minute)
		if err != nil || st.State != bulkload.Committed || st.Handle != bc.Handle() {
			t.Fatalf("commit: %+v, %v", st, err)
		}
		if n := ft.reached("Commit") - before; n != 1 {
			t.Fatalf("%d commits reached the server, want 1", n)
		}
		expectLostCommitted(t, ft, 2)
		expectOneCommitted(ctx, t, tr, bc)
		tr.expectRows(ctx, t, target, rows)
	})

	// A budget spent on UNAVAILABLE answers returns a retriable error; the
	// transaction stays BEGUN and a later Commit finishes it.
	t.Run("budget", func(t *testing.T) {
		if err := tr.tc.CreatePartition(ctx, "shop", "events", "c"); err != nil {
			t.Fatal(err)
		}
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "c"}
		bc, err := begin(ctx, c, target, "faults-c")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("c", 100)
		res := build(ctx, t, bc, rows)
		before := ft.reached("Commit")
		ft.script("Commit", slices.Repeat([]fault{unavailable}, 100)...)
		_, err = c.Commit(ctx, bc, res, 500*time.Millisecond)
		if !errors.Is(err, bulkload.ErrUnavailable) || !bulkloadclient.IsRetriable(err) {
			t.Fatalf("commit with its budget spent: %v", err)
		}
		if ft.reached("Commit") != before {
			t.Fatal("a commit reached the server")
		}
		if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Begun {
			t.Fatalf("status: %+v, %v", st, err)
		}
		ft.clear("Commit")
		if st, err := c.Commit(ctx, bc, res, time.Minute); err != nil || st.State != bulkload.Committed {
			t.Fatalf("commit: %+v, %v", st, err)
		}
		expectOneCommitted(ctx, t, tr, bc)
		tr.expectRows(ctx, t, target, rows)
	})
}

// expectLostCommitted checks that n Commit answers were lost and the last
// one said COMMITTED: the server had committed when the client saw an
// error.
func expectLostCommitted(t *testing.T, ft *faultyTransport, n int) {
	t.Helper()
	lost := ft.lostBodies("Commit")
	if len(lost) != n {
		t.Fatalf("%d lost Commit answers, want %d", len(lost), n)
	}
	var resp tierv1.CommitBulkLoadResponse
	if err := proto.Unmarshal(lost[n-1], &resp); err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
		t.Fatalf("the lost answer: %v", resp.GetStatus())
	}
}

func expectOneCommitted(ctx context.Context, t *testing.T, tr *testTier, bc *bulkloadclient.BuildContext) {
	t.Helper()
	recs := tr.transactions(ctx, t, bc.Handle())
	if len(recs) != 1 || recs[0].TxnID != bc.Handle().TxnID || recs[0].State != bulkload.Committed {
		t.Fatalf("transactions of %s: %+v", bc.Target(), recs)
	}
}

// TestBeginResumesAfterLostResponse loses the answer of a Begin the server
// carried out; Begin with the same token returns the same transaction
// (same id, same snapshot ids), and no second transaction exists.
func TestBeginResumesAfterLostResponse(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a")
	ft := newFaultyTransport()
	c, err := bulkloadclient.New(ctx, tr.e.Address(), bulkloadclient.WithHTTPClient(&http.Client{Transport: ft}))
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}

	ft.script("Begin", lostSuccess)
	var bc *bulkloadclient.BuildContext
	sawLost := false
	eventually(ctx, t, "begin", func() error {
		bc, err = c.Begin(ctx, target, "resume-1", bulkloadclient.BeginOptions{BuildTimeout: time.Minute})
		switch {
		case err == nil:
			return nil
		case !bulkloadclient.IsRetriable(err):
			t.Fatalf("begin: %v", err)
		case errors.Is(err, errConnReset):
			sawLost = true
		}
		return err
	})
	if !sawLost || ft.left("Begin") != 0 {
		t.Fatalf("the answer of a successful Begin was not lost (%d faults left)", ft.left("Begin"))
	}
	lost := ft.lostBodies("Begin")
	var first tierv1.BeginBulkLoadResponse
	if err := proto.Unmarshal(lost[0], &first); err != nil {
		t.Fatal(err)
	}
	ti := first.GetTargetInfo()
	if ti.GetHandle().GetTxnId() != bc.Handle().TxnID || !slices.Equal(ti.GetSnapshotIds(), bc.SnapshotIDs()) ||
		ti.GetManifestPath() != bc.ManifestPath() || ti.GetBuildDeadlineMs() != bc.BuildDeadline().UnixMilli() {
		t.Fatalf("resumed transaction differs from the lost one:\n lost    %v\n resumed %+v %v", ti, bc.Handle(), bc.SnapshotIDs())
	}
	// And again: Begin of the same token is idempotent.
	again, err := c.Begin(ctx, target, "resume-1", bulkloadclient.BeginOptions{BuildTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if again.Handle() != bc.Handle() || !slices.Equal(again.SnapshotIDs(), bc.SnapshotIDs()) {
		t.Fatalf("third begin: %+v %v", again.Handle(), again.SnapshotIDs())
	}
	// Another token finds the target occupied.
	if _, err := c.Begin(ctx, target, "resume-2", bulkloadclient.BeginOptions{}); !errors.Is(err, bulkload.ErrTargetOccupied) || bulkloadclient.IsRetriable(err) {
		t.Fatalf("begin with another token: %v", err)
	}
	if recs := tr.transactions(ctx, t, bc.Handle()); len(recs) != 1 || recs[0].TxnID != bc.Handle().TxnID {
		t.Fatalf("transactions: %+v", recs)
	}
	rows := regionRows("a", 200)
	if st, err := c.Commit(ctx, bc, build(ctx, t, bc, rows), time.Minute); err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v, %v", st, err)
	}
	tr.expectRows(ctx, t, target, rows)
	// Begin of a committed token reports the state, never a new
	// transaction.
	if _, err := c.Begin(ctx, target, "resume-1", bulkloadclient.BeginOptions{}); !errors.Is(err, bulkload.ErrInvalidState) {
		t.Fatalf("begin after commit: %v", err)
	}
	expectOneCommitted(ctx, t, tr, bc)
}
