package kafkalog

import (
	"testing"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestThinnedIndexAfterForeignTruncate: a handle whose index was thinned
// reads every retained record after another handle truncated the log at
// an offset it never indexed. It answered "offset 3 below the index" (not
// even ErrOutOfRange) for records still in the log, and its follower
// restored from a snapshot for nothing.
func TestThinnedIndexAfterForeignTruncate(t *testing.T) {
	old := maxIdx
	defer func() { maxIdx = old }()
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 7, Bucket: 0}
	w := open(t, provider(t, addrs), id)
	for i := range 40 {
		appendN(t, w, int64(i), 1)
	}
	maxIdx = 8
	r := open(t, provider(t, addrs), id)
	if _, _, err := r.Offsets(t.Context()); err != nil { // walks 40 entries: thinned
		t.Fatal(err)
	}
	maxIdx = old
	cutter := open(t, provider(t, addrs), id) // another host's leader, full index
	if err := cutter.TruncateBefore(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	s, e, err := r.Offsets(t.Context())
	if err != nil || s != 3 || e != 40 {
		t.Fatalf("offsets after the truncation: [%d, %d), %v", s, e, err)
	}
	for from := s; from < e; from++ {
		recs, err := r.Read(t.Context(), from, 1)
		if err != nil || len(recs) == 0 || recs[0].Offset != from {
			t.Fatalf("log [%d,%d): read %d: %d records, %v", s, e, from, len(recs), err)
		}
	}
}
