package kafkalog

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/thawdb/thaw/tier/changelog"
)

// whileWriting runs during the first write that starts after it is
// called, between the record reaching Kafka and its writer checking it:
// as though other hosts acted in that moment.
func whileWriting(t *testing.T, f func()) {
	t.Helper()
	var once atomic.Bool
	produced = func() {
		if once.CompareAndSwap(false, true) {
			f()
		}
	}
	t.Cleanup(func() { produced = nil })
}

// lateWrite sets a log up so that a's next append lands one Kafka offset
// past the end a knows (c, a writer with an older view, wrote a record
// that does not continue the chain there): a checks its own record by
// syncing. It returns a's handle, the records so far and c's stale record.
func lateWrite(t *testing.T, addrs []string, id changelog.BucketLogID) (changelog.Log, [][]byte, []byte) {
	t.Helper()
	a, c := open(t, provider(t, addrs), id), open(t, provider(t, addrs), id)
	want := appendN(t, a, 0, 1)
	offsets(t, c, 0, 1)
	want = append(want, appendN(t, a, 1, 1)...)
	stale := []byte("stale write")
	if _, err := c.Append(t.Context(), [][]byte{stale}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale append: %v", err)
	}
	return a, want, stale
}

// TestWriteVerdictSurvivesThinning: a valid append whose record other
// writers' records pushed out of the thinned index before its writer
// checked it is reported as written. It was reported ErrConflict (the
// tablet then answered "nothing written", and the client's retry wrote
// the batch twice).
func TestWriteVerdictSurvivesThinning(t *testing.T) {
	defer func(n int) { maxIdx = n }(maxIdx)
	maxIdx = 8
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 21}
	a, want, stale := lateWrite(t, addrs, id)
	b := open(t, provider(t, addrs), id)
	own := [][]byte{rec(2, 40)}
	var more [][]byte
	whileWriting(t, func() { more = appendN(t, b, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1) })
	first, err := a.Append(t.Context(), own)
	if err != nil || first != 2 {
		t.Fatalf("append: %d, %v; want 2, nil", first, err)
	}
	want = append(append(want, own...), more...)
	reader := open(t, provider(t, addrs), id)
	offsets(t, reader, 0, int64(len(want)))
	readAll(t, reader, 0, 1<<20, want)
	for _, r := range want {
		if string(r) == string(stale) {
			t.Fatal("the stale record is in the log")
		}
	}
}

// TestWriteVerdictTruncatedAway: when another handle truncates past a
// record before its writer checked it, the writer cannot tell whether it
// continued the log: the error says the outcome is unknown and is not
// ErrConflict (which promises nothing was written; here it was).
func TestWriteVerdictTruncatedAway(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 22}
	a, _, _ := lateWrite(t, addrs, id)
	b := open(t, provider(t, addrs), id)
	whileWriting(t, func() {
		appendN(t, b, 3, 2)
		if err := b.TruncateBefore(t.Context(), 5); err != nil {
			t.Fatal(err)
		}
	})
	_, err := a.Append(t.Context(), [][]byte{rec(2, 40)})
	if err == nil || errors.Is(err, changelog.ErrConflict) || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Fatalf("append: %v; want an unknown outcome, not a conflict", err)
	}
	// The record did continue the log: b counted it.
	offsets(t, open(t, provider(t, addrs), id), 5, 5)
	// a knows the log's end now: its next append continues it.
	appendN(t, a, 5, 1)
}
