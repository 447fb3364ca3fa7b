package promoter_test

import (
	"context"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// pruneDuringPut starts the promoter's PruneLedger while a Request stores
// its requests (the hourly prune landing in the etcd round trip between
// the request's plan and its queueing), and gives it time to run.
type pruneDuringPut struct {
	promoter.Ledger
	p      *promoter.Promoter
	pruned chan int
}

func (l *pruneDuringPut) PutRequests(ctx context.Context, rs []promoter.StoredRequest) ([]int64, error) {
	if p := l.p; p != nil {
		l.p = nil
		go func() {
			n, _ := p.PruneLedger(ctx)
			l.pruned <- n
		}()
		time.Sleep(300 * time.Millisecond)
	}
	return l.Ledger.PutRequests(ctx, rs)
}

// TestPruneBetweenRequestPlanAndQueue: a Request plans against an old
// aborted record (answering attempt 2), and the hourly prune runs before
// the request is queued: it deleted that record, the run became attempt 1
// again, and the request's waiter (thaw promote --wait, waiting for
// attempt 2) waited for ever. A prune now waits for Requests between plan
// and queue, and then leaves the queued key's record alone.
func TestPruneBetweenRequestPlanAndQueue(t *testing.T) {
	e := newEnvWith(t, 500, func(c *daemon.EmbeddedConfig) {
		c.Coordinator.BulkLoad.ResultRetention = time.Second // the tier forgets a finished transaction (24h by default; the ledger keeps records 30 days)
	})
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	pol := windowPolicy(t, "events-window", "events", "3d", "")
	cfg := e.config([]*policies.Policy{pol})
	cfg.ReconcileInterval, cfg.LakePollInterval, cfg.LedgerRetention = -1, -1, -1
	ctx := t.Context()
	part := e.partitionOf("2024-01-03")
	first, id := interruptedRequest(t, e, pol, &cfg, part)
	old, err := first.Promotion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	e.waitForgotten(old)
	cfg.Hooks.AfterPhase = nil
	e.setNow(e.clock().Add(2 * time.Hour))
	cfg.LedgerRetention = time.Hour
	l := &pruneDuringPut{Ledger: cfg.Ledger, pruned: make(chan int, 1)}
	cfg.Ledger = l
	p := e.promoter(cfg)
	l.p = p
	items, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
	if err != nil || len(items) != 1 || items[0].PromotionID != id || items[0].Attempt != 2 {
		t.Fatalf("request after the aborted attempt: %+v %v", items, err)
	}
	<-l.pruned
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := p.Promotion(ctx, id)
	if err != nil || r.Attempt < items[0].Attempt {
		t.Fatalf("request answered with attempt %d; the promotion ran as %+v (attempt %d) %v: its waiter (thaw promote --wait) waits for attempt %d for ever",
			items[0].Attempt, r.Phase, r.Attempt, err, items[0].Attempt)
	}
}
