package bulkloadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"
)

var errCrash = errors.New("crashed here by the test")

// retry repeats a request on whichever coordinator leads while it fails
// with UNAVAILABLE or NOT_LEADER (an outcome the caller does not know),
// as a client does.
func (h *harness) retry(what string, call func(ctx context.Context, n *coordNode) error) error {
	ctx, cancel := context.WithTimeout(h.t.Context(), waitFor)
	defer cancel()
	for {
		err := call(ctx, h.leader())
		r := tierpb.ReasonOf(err)
		if err == nil || (r != tierpb.ReasonUnavailable && r != tierpb.ReasonNotLeader) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		h.t.Logf("%s: %v; retrying", what, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// crashPoint is an injection point: a step of the driver (see the
// coordinator's bulk-load hook) and the occurrence at which it fires, and
// whether the transaction then commits or is aborted.
type crashPoint struct {
	name  string
	step  string
	nth   int
	abort bool
}

var crashPoints = []crashPoint{
	{"after Begin's etcd write", "persisted:begin", 1, false},
	{"during the fence round", "send:fence", 2, false},
	{"after fence ready", "persisted:fence-ready", 1, false},
	{"after manifest freeze", "persisted:freeze", 1, false},
	{"during validation", "validate", 1, false},
	{"after COMMITTING", "persisted:decide", 1, false},
	{"after adopting some buckets", "persisted:adopt", 2, false},
	{"during replica restore", "send:restore", 2, false},
	{"after ACTIVE before COMMITTED", "persisted:activate", 1, false},
	{"during Abort, after the abort is decided", "persisted:begin-abort", 1, true},
	{"during Abort's unfence round", "send:unfence", 2, true},
}

// The crash matrix: at each injection point, (a) the coordinator leader
// stops (resigning, or crashing without resigning so that its lease must
// expire) and the standby takes over, or (b) a tablet server holding a
// replica stops and comes back with an empty disk. In every case the
// transaction reaches its terminal state, the target is fully published
// (every row on every replica) or fully released (ACTIVE and empty), no
// fence remains, and a committed transaction lost no row.
func TestCrashMatrix(t *testing.T) {
	for i, p := range crashPoints {
		crash := i%4 == 1 // some coordinators die without resigning
		t.Run("coordinator/"+p.name, func(t *testing.T) { runCrash(t, p, "coordinator", crash) })
		t.Run("tablet/"+p.name, func(t *testing.T) { runCrash(t, p, "tablet", false) })
	}
}

func runCrash(t *testing.T, p crashPoint, victim string, hard bool) {
	h := newHarness(t, withBulkConfig(func(c *coordinator.BulkLoadConfig) { c.AdoptBatch = 1 }))
	first := h.startCoordinator("c-1")
	if h.leader() != first {
		t.Fatal("c-1 does not lead")
	}
	h.startCoordinator("c-2")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	tp := h.createTable(first, "items", 4, "")
	rows := makeRows(120, "")

	var (
		count   atomic.Int32
		fired   atomic.Bool
		stopped = make(chan struct{})
		bg      sync.WaitGroup
	)
	t.Cleanup(bg.Wait)
	h.setHook(func(node, step string) error {
		if node != first.id {
			return nil
		}
		if victim == "coordinator" && fired.Load() {
			return errCrash // the dying leader does nothing more
		}
		if step != p.step || int(count.Add(1)) != p.nth || !fired.CompareAndSwap(false, true) {
			return nil
		}
		t.Logf("injecting: %s stops at %s", victim, step)
		if victim == "coordinator" {
			bg.Go(func() {
				if hard {
					first.crash()
				} else {
					first.stop()
				}
				close(stopped)
			})
			return errCrash
		}
		// A tablet server holding a replica of every bucket stops, and
		// comes back a little later with an empty disk.
		h.mu.Lock()
		ts := h.tablets["ts-2"]
		h.mu.Unlock()
		ts.stop()
		close(stopped)
		bg.Go(func() {
			time.Sleep(300 * time.Millisecond)
			h.launchTablet("ts-2")
		})
		return nil
	})

	var (
		info  *tierv1.BulkLoadTargetInfo
		tb    *kv.Table
		state = tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED
	)
	beginNow := func() {
		t.Helper()
		err := h.retry("begin", func(ctx context.Context, n *coordNode) error {
			resp, err := begin(ctx, n, tp, "job-1")
			if err == nil {
				info = resp.GetTargetInfo()
			}
			return err
		})
		if err != nil || info == nil {
			t.Fatalf("begin: %v (info %v)", err, info)
		}
		tb = table(t, info)
	}
	beginNow()
	if p.abort {
		state = tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED
		err := h.retry("abort", func(ctx context.Context, n *coordNode) error {
			_, err := abort(ctx, n, info.GetHandle())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	} else {
		m := h.load(info, rows)
		err := h.retry("commit", func(ctx context.Context, n *coordNode) error {
			_, err := commit(ctx, n, info.GetHandle(), m)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !fired.Load() {
		t.Fatalf("the injection point %s (occurrence %d) was never reached", p.step, p.nth)
	}
	<-stopped
	st := h.awaitState(info.GetHandle().GetTxnId(), state)
	h.setHook(nil)
	if victim == "coordinator" && h.leader() == first {
		t.Fatal("the stopped coordinator still leads")
	}
	h.noFence(tp)
	if st.GetPhase() != "committed" && st.GetPhase() != "aborted" {
		t.Fatalf("final status %v", st)
	}
	bg.Wait()
	h.waitReady(tp)
	if p.abort {
		h.expectEmpty(tp, tb, rows)
	} else {
		eventually(t, "every row on every replica", func() error {
			res, err := h.readAll(t.Context(), tp, tb, rows)
			if err != nil {
				return err
			}
			if res.found != 3*len(rows) || res.loading+res.missing+res.wrong+len(res.errs) > 0 {
				return fmt.Errorf("%+v", res)
			}
			return nil
		})
	}
}
