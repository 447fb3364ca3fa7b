package kafkalog

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestResetLosesToBatchSyncedPastWhileProduced: H resets an empty log
// while another writer W appends a batch that lands before H's reset
// marker, and another call on H (Offsets here; a replica's Follow loop or
// a LogOffsets RPC in a server) syncs past W's batch while H's produce is
// out, so that H's marker lands exactly at H's chain end. The chain rule
// still makes the reset lose (it moves up from 0; the log ends at 1):
// ResetTo fails with ErrConflict and W's acknowledged batch stays.
func TestResetLosesToBatchSyncedPastWhileProduced(t *testing.T) {
	c := faultCluster(t)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 43}
	h := open(t, provider(t, addrs), id)
	w := open(t, provider(t, addrs), id)
	ctx := t.Context()
	offsets(t, h, 0, 0)
	offsets(t, w, 0, 0)

	var once atomic.Bool
	var wFirst atomic.Int64
	wFirst.Store(-1)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.CompareAndSwap(false, true) {
			// H's reset marker is at the broker: W appends, then H's
			// follower goroutine syncs.
			c.KeepControl()
			c.SleepControl(func() {
				first, err := w.Append(ctx, [][]byte{[]byte("acknowledged")})
				if err != nil {
					t.Errorf("W append: %v", err)
				}
				wFirst.Store(first)
				if _, _, err := h.Offsets(ctx); err != nil {
					t.Errorf("H offsets: %v", err)
				}
			})
			return nil, nil, false
		}
		c.DropControl()
		return nil, nil, false
	})
	rerr := h.ResetTo(ctx, 1000)
	t.Logf("W's append was acknowledged at offset %d; H.ResetTo(1000): %v", wFirst.Load(), rerr)

	fresh := open(t, provider(t, addrs), id)
	s, e, err := fresh.Offsets(ctx)
	t.Logf("fresh handle: Offsets = [%d, %d), %v", s, e, err)
	recs, rerr2 := fresh.Read(ctx, 0, 1<<20)
	t.Logf("fresh handle: Read(0) = %d records, %v", len(recs), rerr2)
	if wFirst.Load() != 0 {
		t.Fatalf("W's append landed at %d, want 0: the interleaving this test builds did not happen", wFirst.Load())
	}
	if len(recs) != 1 || string(recs[0].Data) != "acknowledged" {
		t.Errorf("W's acknowledged record at offset 0 is gone (reset returned %v)", rerr)
	}
	if !errors.Is(rerr, changelog.ErrConflict) {
		t.Errorf("ResetTo after a concurrent append: %v; want ErrConflict", rerr)
	}
}

// TestStaleAppendSyncedPastWhileProducedConflicts: a deposed leader's
// handle H appends with a stale end; while its produce is out, another
// call on H syncs past the new leader's batch, so H's record lands
// exactly at H's chain end. The append is ErrConflict (retriable,
// nothing written), not an internal error.
func TestStaleAppendSyncedPastWhileProducedConflicts(t *testing.T) {
	c := faultCluster(t)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 42}
	h := open(t, provider(t, addrs), id)
	w := open(t, provider(t, addrs), id)
	ctx := t.Context()
	offsets(t, h, 0, 0) // H anchored: end 0
	appendN(t, w, 0, 1) // the new leader appends [0, 1)

	var once atomic.Bool
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.CompareAndSwap(false, true) {
			// H's produce is at the broker: H's follower goroutine syncs.
			c.SleepControl(func() {
				if _, _, err := h.Offsets(ctx); err != nil {
					t.Errorf("offsets: %v", err)
				}
			})
		}
		c.DropControl()
		return nil, nil, false // let the broker handle it
	})
	_, err := h.Append(ctx, [][]byte{[]byte("stale")})
	t.Logf("stale append: %v", err)
	if !errors.Is(err, changelog.ErrConflict) {
		t.Errorf("stale append: %v; want ErrConflict", err)
	}
	offsets(t, w, 0, 1) // the stale record is not part of the log
}
