package bulkloadtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestExpiryKeepsRecordUntilOutputCleaned: an aborted transaction whose
// output cannot be deleted when its result expires (a transient
// object-store outage) keeps its record, which is what finds that output,
// and the expiry is retried: once deletes work again the output goes, and
// then the record. The record was deleted anyway, and the output stayed
// for good.
func TestExpiryKeepsRecordUntilOutputCleaned(t *testing.T) {
	h := newHarness(t, withFaults(), withBulkConfig(func(c *coordinator.BulkLoadConfig) {
		c.ResultRetention = time.Second
		c.OrphanCleanInterval = -1 // only the expiry cleans
	}))
	n := h.standard()
	ctx := t.Context()
	tp := h.createTable(n, "a", 2, "")
	info := h.mustBegin(n, tp, "a")
	h.load(info, makeRows(40, ""))
	dir := snapTarget(info).SnapshotDir(1, info.GetSnapshotIds()[1])
	if len(h.objectsUnder(dir)) == 0 {
		t.Fatal("nothing built")
	}
	dirKey := mustKey(t, h.objects, dir)
	h.faults.FailKey(objstore.OpDelete, func(k string) bool { return strings.HasPrefix(k, dirKey+"/") }, errors.New("injected: delete unavailable"))
	if _, err := abort(ctx, n, info.GetHandle()); err != nil {
		t.Fatal(err)
	}
	id := info.GetHandle().GetTxnId()
	time.Sleep(4 * time.Second) // the result's retention is long over
	if _, err := status(ctx, h.leader(), id); err != nil {
		t.Fatalf("the record went while its output could not be deleted: %v", err)
	}
	if len(h.objectsUnder(dir)) == 0 {
		t.Fatal("the output went while deletes failed")
	}
	h.faults.Reset()
	eventually(t, "the output and then the record gone", func() error {
		if left := h.objectsUnder(dir); len(left) > 0 {
			return fmt.Errorf("%d objects left", len(left))
		}
		if _, err := status(ctx, h.leader(), id); tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
			return fmt.Errorf("status: %v", err)
		}
		return nil
	})
}
