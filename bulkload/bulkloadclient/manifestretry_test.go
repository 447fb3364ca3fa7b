package bulkloadclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/testfs"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/tierclient"
)

// errStore503 is what a transient object-store failure looks like to
// Commit: an error that objstore classified as transient.
var errStore503 = fmt.Errorf("injected: s3: PutObject: https response error StatusCode: 503, SlowDown: %w", objstore.ErrTransient)

// TestCommitManifestWriteRetries writes the manifest through an
// objstore.Faults wrapper of the tier's own store. A manifest write that
// fails once with a transient error is repeated within Commit's budget,
// and the transaction commits once; one that fails every time leaves a
// retriable error, no manifest and a BEGUN transaction that a later Commit
// finishes; a different manifest already at the path, a store error of a
// permanent class or one objstore cannot classify, or a store that refuses
// the write for real (a read-only directory), ends Commit at once with an
// error naming the manifest path that is not retriable.
func TestCommitManifestWriteRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a", "b", "c", "d")

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
		// Errors of the store that repeating cannot cure, and errors that
		// objstore cannot classify, end Commit at once.
		errUnclassified := errors.New("injected: no class")
		for _, final := range []error{
			objstore.ErrIntegrity, objstore.ErrInvalidKey, objstore.ErrPermission, objstore.ErrBucketNotFound,
			objstore.ErrNoSpace, objstore.ErrInvalidRequest, fs.ErrPermission, errUnclassified,
		} {
			faults.Reset()
			injected := final
			if final != errUnclassified {
				injected = fmt.Errorf("injected: %w", final)
			}
			faults.FailNth(objstore.OpPut, 1, injected)
			_, err := c.Commit(ctx, bc, res, time.Minute)
			if !errors.Is(err, final) || bulkloadclient.IsRetriable(err) || errors.Is(err, bulkload.ErrUnavailable) {
				t.Fatalf("commit with the store failing with %v: %v, want that error, not retriable", final, err)
			}
			if !strings.Contains(err.Error(), bc.ManifestPath()) {
				t.Fatalf("commit with the store failing with %v: %v does not name the manifest path %s", final, err, bc.ManifestPath())
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

	t.Run("read-only-store", func(t *testing.T) {
		faults.Reset()
		target := bulkload.Target{Database: "shop", Table: "events", Partition: "d"}
		bc, err := begin(ctx, c, target, "manifest-d")
		if err != nil {
			t.Fatal(err)
		}
		rows := regionRows("d", 150)
		res := build(ctx, t, bc, rows)
		key := manifestKey(t, bc)
		// The directory the manifest goes to refuses new entries.
		dir, ok := strings.CutPrefix(inner.URI(key), "file://")
		if !ok {
			t.Fatalf("the tier's store is %s, want file://", inner.Base())
		}
		dir = filepath.Dir(filepath.FromSlash(dir))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		undo := testfs.MakeReadOnly(t, dir)
		before := ft.reached("Commit")

		// A budget that would hold many repeats: the write is made once.
		_, err = c.Commit(ctx, bc, res, 10*time.Minute)
		if !errors.Is(err, objstore.ErrPermission) || !errors.Is(err, fs.ErrPermission) ||
			objstore.IsTransient(err) || bulkloadclient.IsRetriable(err) {
			t.Fatalf("commit into a read-only store: %v, want objstore.ErrPermission, not retriable", err)
		}
		if !strings.Contains(err.Error(), bc.ManifestPath()) {
			t.Fatalf("commit into a read-only store: %v does not name the manifest path %s", err, bc.ManifestPath())
		}
		if n := faults.Calls(objstore.OpPut); n != 1 {
			t.Fatalf("%d manifest puts into a read-only store, want 1", n)
		}
		if _, err := inner.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("manifest after a refused write: %v, want ErrNotFound", err)
		}
		if n := ft.reached("Commit") - before; n != 0 {
			t.Fatalf("%d commits reached the server", n)
		}
		if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Begun {
			t.Fatalf("status: %+v, %v", st, err)
		}
		if n, err := tr.count(ctx, target); !tierclient.IsTargetLoading(err) {
			t.Fatalf("scan of the target of a BEGUN load: %d rows, %v; want TARGET_LOADING", n, err)
		}

		// The store fixed, the same Commit finishes the load.
		undo()
		st, err := c.Commit(ctx, bc, res, time.Minute)
		if err != nil || st.State != bulkload.Committed {
			t.Fatalf("commit after the store was fixed: %+v, %v", st, err)
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
