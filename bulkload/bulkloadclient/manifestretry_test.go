package bulkloadclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/tierclient"
)

// errStore503 is what a transient object-store failure looks like to
// Commit: an error of no objstore sentinel.
var errStore503 = errors.New("injected: s3: PutObject: https response error StatusCode: 503, SlowDown")

// TestCommitManifestWriteRetries writes the manifest through an
// objstore.Faults wrapper of the tier's own store. A manifest write that
// fails once is repeated within Commit's budget, and the transaction
// commits once; one that fails every time leaves a retriable error, no
// manifest and a BEGUN transaction that a later Commit finishes; a
// different manifest already at the path, or a final store error, ends
// Commit at once and is not retriable.
func TestCommitManifestWriteRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a", "b", "c")

	inner := tr.e.Objects()
	faults := objstore.NewFaults(inner.Bucket())
	store := objstore.New(faults, inner.Base()) // not closed: Close would close the tier's bucket
	ft := newFaultyTransport()
	c, err := bulkloadclient.New(ctx, tr.e.Address(), bulkloadclient.WithObjectStore(store),
		bulkloadclient.WithHTTPClient(&http.Client{Transport: ft}))
	if err != nil {
		t.Fatal(err)
	}
	manifestKey := func(t *testing.T, bc *bulkloadclient.BuildContext) string {
		t.Helper()
		k, err := inner.Key(bc.ManifestPath())
		if err != nil {
			t.Fatal(err)
		}
		return k
	}

	t.Run("fails-once", func(t *testing.T) {
		faults.Reset()
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
		bc, err := begin(ctx, c, target, "manifest-a")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("a", 300)
		res := build(ctx, t, bc, rows)
		before := ft.reached("Commit")
		faults.FailNth(objstore.OpPut, 1, errStore503)
		st, err := c.Commit(ctx, bc, res, time.Minute)
		if err != nil || st.State != bulkload.Committed || st.Handle != bc.Handle() {
			t.Fatalf("commit: %+v, %v", st, err)
		}
		if n := faults.Calls(objstore.OpPut); n != 2 {
			t.Fatalf("%d manifest puts, want the failed one and its repeat", n)
		}
		if n := ft.reached("Commit") - before; n != 1 {
			t.Fatalf("%d commits reached the server, want 1", n)
		}
		want, err := bulkloadclient.EncodeManifest(bc, res)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := inner.Get(ctx, manifestKey(t, bc)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("manifest: %d bytes, %v; want the %d bytes of the results", len(got), err, len(want))
		}
		expectOneCommitted(ctx, t, tr, bc)
		tr.expectRows(ctx, t, target, rows)
	})

	t.Run("fails-always", func(t *testing.T) {
		faults.Reset()
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "b"}
		bc, err := begin(ctx, c, target, "manifest-b")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("b", 200)
		res := build(ctx, t, bc, rows)
		key := manifestKey(t, bc)
		isManifest := func(k string) bool { return k == key }
		before := ft.reached("Commit")
		faults.FailKey(objstore.OpPut, isManifest, errStore503)
		_, err = c.Commit(ctx, bc, res, 500*time.Millisecond)
		if !bulkloadclient.IsRetriable(err) || !errors.Is(err, bulkload.ErrUnavailable) || !errors.Is(err, errStore503) {
			t.Fatalf("commit with the store failing: %v, want a retriable error wrapping the store's", err)
		}
		if n := faults.Calls(objstore.OpPut); n < 2 {
			t.Fatalf("%d manifest puts within the budget, want repeats", n)
		}
		// An interrupted upload is repeated too, and the context ends the
		// repeats with its own error, which is not retriable.
		faults.Reset()
		faults.TruncateWrite(isManifest, 3)
		short, cancelShort := context.WithTimeout(ctx, 700*time.Millisecond)
		_, err = c.Commit(short, bc, res, time.Minute)
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) || bulkloadclient.IsRetriable(err) {
			t.Fatalf("commit with interrupted uploads until the context ended: %v", err)
		}
		if n := faults.Calls(objstore.OpPut); n < 2 {
			t.Fatalf("%d manifest puts before the context ended, want repeats", n)
		}
		// Errors of the store that repeating cannot cure end Commit at
		// once.
		for _, final := range []error{objstore.ErrIntegrity, objstore.ErrInvalidKey, fs.ErrPermission} {
			faults.Reset()
			faults.FailNth(objstore.OpPut, 1, fmt.Errorf("injected: %w", final))
			_, err := c.Commit(ctx, bc, res, time.Minute)
			if !errors.Is(err, final) || bulkloadclient.IsRetriable(err) {
				t.Fatalf("commit with the store failing with %v: %v, want that error, not retriable", final, err)
			}
			if n := faults.Calls(objstore.OpPut); n != 1 {
				t.Fatalf("%d manifest puts after %v, want 1", n, final)
			}
		}

		// Nothing happened: no manifest, no Commit sent, the load BEGUN
		// and the target still fenced.
		if _, err := inner.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("manifest after failed writes: %v, want ErrNotFound", err)
		}
		if n := ft.reached("Commit") - before; n != 0 {
			t.Fatalf("%d commits reached the server", n)
		}
		if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Begun {
			t.Fatalf("status: %+v, %v", st, err)
		}
		if st, got, err := c.GetInProgress(ctx, target); err != nil || st.State != bulkload.Begun || got == nil {
			t.Fatalf("get in progress: %+v, %v, %v", st, got, err)
		}
		if n, err := tr.count(ctx, target); !tierclient.IsTargetLoading(err) {
			t.Fatalf("scan of the target of a BEGUN load: %d rows, %v; want TARGET_LOADING", n, err)
		}

		// A healthy store: a later Commit finishes the load.
		faults.Reset()
		st, err := c.Commit(ctx, bc, res, time.Minute)
		if err != nil || st.State != bulkload.Committed {
			t.Fatalf("commit with a healthy store: %+v, %v", st, err)
		}
		if n := ft.reached("Commit") - before; n != 1 {
			t.Fatalf("%d commits reached the server, want 1", n)
		}
		expectOneCommitted(ctx, t, tr, bc)
		tr.expectRows(ctx, t, target, rows)
	})

	t.Run("conflict", func(t *testing.T) {
		faults.Reset()
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "c"}
		bc, err := begin(ctx, c, target, "manifest-c")
		if err != nil {
			t.Fatal(err)
		}
		res := build(ctx, t, bc, regionRows("c", 100))
		if _, err := inner.PutIfAbsent(ctx, manifestKey(t, bc), objstore.BytesSource([]byte(`{"other":"manifest"}`))); err != nil {
			t.Fatal(err)
		}
		before := ft.reached("Commit")
		_, err = c.Commit(ctx, bc, res, time.Minute)
		if !errors.Is(err, bulkload.ErrManifestConflict) || !errors.Is(err, objstore.ErrConflict) || bulkloadclient.IsRetriable(err) {
			t.Fatalf("commit over another manifest: %v, want ErrManifestConflict, not retriable", err)
		}
		if n := faults.Calls(objstore.OpStat); n != 1 {
			t.Fatalf("%d manifest checks, want 1: a conflict is not repeated", n)
		}
		if n := ft.reached("Commit") - before; n != 0 {
			t.Fatalf("%d commits reached the server", n)
		}
		if st, err := c.Abort(ctx, bc.Handle()); err != nil || st.State != bulkload.Aborted {
			t.Fatalf("abort: %+v, %v", st, err)
		}
		tr.expectActiveEmpty(ctx, t, target)
	})
}
