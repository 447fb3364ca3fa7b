package bulkloadtest

import (
	"context"
	"sync"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/coordinator"
)

// TestCommittingFailoverWithLowerLimits: a commit decided under one
// coordinator's limits is finished by a successor configured with lower
// ones (a rolling configuration change): the decided manifest is not
// refused again. It was, for ever, with the target fenced (LOADING) and
// Abort refused (COMMITTING).
func TestCommittingFailoverWithLowerLimits(t *testing.T) {
	h := newHarness(t, withBulkConfig(func(c *coordinator.BulkLoadConfig) { c.AdoptBatch = 1 }))
	first := h.startCoordinator("c-1")
	if h.leader() != first {
		t.Fatal("c-1 does not lead")
	}
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	tp := h.createTable(first, "items", 4, "")
	rows := makeRows(120, "")
	var once sync.Once
	stopped := make(chan struct{})
	h.setHook(func(node, step string) error {
		if node != first.id {
			return nil
		}
		if step == "persisted:decide" {
			once.Do(func() {
				go func() { first.stop(); close(stopped) }()
			})
			return errCrash
		}
		select {
		case <-stopped:
			return errCrash
		default:
		}
		return nil
	})
	info := h.mustBegin(first, tp, "job-1")
	m := h.load(info, rows)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err := commit(ctx, first, info.GetHandle(), m)
	cancel()
	t.Logf("commit on c-1: %v", err)
	<-stopped
	// The successor is configured with a lower input limit.
	h.cfg.MaxInputBytes = 1024
	h.startCoordinator("c-2")
	n := h.leader()
	deadline := time.Now().Add(15 * time.Second) // a hang guard
	var st *tierv1.BulkLoadStatus
	for time.Now().Before(deadline) {
		st, err = status(t.Context(), n, info.GetHandle().GetTxnId())
		if err == nil && st.GetState() == tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	loc, _ := h.locations(tp)
	t.Fatalf("transaction stuck after failover with stricter limits: status %v err %v; locations %v", st, err, loc)
}
