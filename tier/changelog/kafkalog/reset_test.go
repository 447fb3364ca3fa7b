package kafkalog

import (
	"errors"
	"math"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestResetLosesToAConcurrentAppend: another writer's batch lands between
// ResetTo's check that the log is empty and its marker. The batch's Append
// succeeded, so the reset must lose: a plain marker skipped past the
// batch (valid: its offset was above the end) and the cut deleted the
// acknowledged batch.
func TestResetLosesToAConcurrentAppend(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 31}
	r := open(t, provider(t, addrs), id)
	w := open(t, provider(t, addrs), id)
	offsets(t, r, 0, 0)
	offsets(t, w, 0, 0)
	var armed atomic.Bool
	armed.Store(true)
	wFirst, wErr := int64(-1), error(nil)
	// The reset's produce waits while w appends.
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		c.SleepControl(func() {
			wFirst, wErr = w.Append(t.Context(), [][]byte{[]byte("acked row")})
		})
		return nil, nil, false
	})
	rerr := r.ResetTo(t.Context(), 10)
	if wErr != nil || wFirst != 0 {
		t.Fatalf("the other writer's append: %d, %v", wFirst, wErr)
	}
	if !errors.Is(rerr, changelog.ErrConflict) {
		t.Fatalf("reset with a batch appended under it: %v, want ErrConflict", rerr)
	}
	for name, l := range map[string]changelog.Log{"a fresh handle": open(t, provider(t, addrs), id), "the resetting handle": r, "the writer": w} {
		offsets(t, l, 0, 1)
		recs, err := l.Read(t.Context(), 0, 1<<20)
		if err != nil || len(recs) != 1 || string(recs[0].Data) != "acked row" {
			t.Fatalf("%s reads %v, %v; want the acknowledged batch", name, recs, err)
		}
	}
	// A reset of an empty log still works, and survives a reopen.
	id2 := changelog.BucketLogID{TableID: 32}
	l := open(t, provider(t, addrs), id2)
	if err := l.ResetTo(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 7, 2)
	offsets(t, open(t, provider(t, addrs), id2), 7, 9)
}

// TestAppendOffsetOverflow: an Append whose offsets would pass MaxInt64
// fails and writes nothing; it wrote a record every reader refused as
// corrupt, and the log could not be read again.
func TestAppendOffsetOverflow(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 41}
	l := open(t, provider(t, addrs), id)
	if err := l.ResetTo(t.Context(), math.MaxInt64-1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), [][]byte{[]byte("a"), []byte("b")}); !errors.Is(err, changelog.ErrTooLarge) {
		t.Fatalf("append past MaxInt64: %v", err)
	}
	appendN(t, l, math.MaxInt64-1, 1)
	offsets(t, open(t, provider(t, addrs), id), math.MaxInt64-1, math.MaxInt64)
}

// TestThinnedReadAfterForeignTruncate: a handle whose index was thinned
// reads a retained offset right after another handle truncated the log
// (no sync in between). Its walk started at an index entry the truncation
// deleted, and it answered ErrOutOfRange for records still in the log, on
// every read until something synced it.
func TestThinnedReadAfterForeignTruncate(t *testing.T) {
	old := maxIdx
	defer func() { maxIdx = old }()
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 7}
	w := open(t, provider(t, addrs), id)
	for i := range 40 {
		appendN(t, w, int64(i), 1)
	}
	maxIdx = 8
	r := open(t, provider(t, addrs), id)
	offsets(t, r, 0, 40)
	appendN(t, w, 40, 1)
	offsets(t, r, 0, 41) // the stash now holds the last record only
	maxIdx = old
	cutter := open(t, provider(t, addrs), id)
	if err := cutter.TruncateBefore(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	s, _, err := cutter.Offsets(t.Context())
	if err != nil || s > 3 {
		t.Fatalf("start %d, %v", s, err)
	}
	for from := s; from < 41; from++ {
		recs, err := r.Read(t.Context(), from, 1)
		if err != nil || len(recs) == 0 || recs[0].Offset != from {
			t.Fatalf("log starts at %d: read %d: %d records, %v", s, from, len(recs), err)
		}
	}
	if _, err := r.Read(t.Context(), s-1, 1); s > 0 && !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("read below the start: %v", err)
	}
}
