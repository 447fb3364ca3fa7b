package bulkloadtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/thawdb/thaw/objstore"
)

// TestFailedRebuildAfterCommit: building a committed transaction's buckets
// again from other rows fails on the first bucket whose snapshot differs,
// and leaves the committed snapshots as they were: the buckets it adopted
// before failing keep their _METADATA, so tablet servers that restart with
// empty disks restore every row from them.
func TestFailedRebuildAfterCommit(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	tp := h.createTable(n, "items", 4, "")
	info := h.mustBegin(n, tp, "job-1")
	tb := table(t, info)
	rows := makeRows(300, "")
	if _, err := commit(t.Context(), n, info.GetHandle(), h.load(info, rows)); err != nil {
		t.Fatal(err)
	}
	h.expectAll(tp, tb, rows)

	// The same rows but one of the last bucket's: the buckets before it
	// adopt their snapshots (one worker: in bucket order), the last one
	// conflicts.
	last := int(info.GetSchema().GetBuckets()) - 1
	other := slices.Clone(rows)
	for i := len(other) - 1; i >= 0; i-- {
		if b, err := tb.Bucket(other[i]); err != nil {
			t.Fatal(err)
		} else if b == last {
			r := slices.Clone(other[i])
			r[1] = "changed" // the name
			other[i] = r
			break
		}
	}
	before := map[string][]byte{}
	for b, id := range info.GetSnapshotIds() {
		uri := snapTarget(info).MetadataPath(b, id)
		before[uri] = h.get(uri)
	}
	if _, err := h.buildWith(info, other, 1); !errors.Is(err, objstore.ErrConflict) {
		t.Fatalf("rebuild from other rows: %v, want ErrConflict", err)
	}
	for uri, want := range before {
		if got := h.get(uri); !slices.Equal(got, want) {
			t.Errorf("%s changed by the failed rebuild", uri)
		}
	}

	// Every tablet server restarts with an empty disk: the replicas are
	// restored from the committed snapshots.
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.mu.Lock()
		ts := h.tablets[id]
		h.mu.Unlock()
		ts.stop()
	}
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	eventually(t, "every row on every replica after the restarts", func() error { return h.servesAll(tp, tb, rows) })
}
