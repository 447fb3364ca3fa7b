package promoter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/snapshotbuild"
)

// rejectCommit never sends a Commit: every attempt is aborted (BEGUN
// after the failed commit), so the tier remembers each attempt's token as
// aborted.
type rejectCommit struct{ promoter.BulkLoader }

func (rejectCommit) Commit(context.Context, *bulkloadclient.BuildContext, []snapshotbuild.BucketResult, time.Duration) (bulkload.Status, error) {
	return bulkload.Status{}, errors.New("injected: commit rejected")
}

// TestPrunedRecordsTokensSkipped: a record pruned while the tier still
// keeps its aborted transactions (ledger_retention below the tier's
// result_retention) resets its promotion's attempt count: the next record
// starts at attempt 1, whose caller token the tier remembers as aborted.
// Every attempt failed with ErrTokenAborted, as a retry, and the promotion
// ended failed without reaching the tier; such tokens are skipped now.
func TestPrunedRecordsTokensSkipped(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-02")

	bad := cfg
	bad.BulkLoad = rejectCommit{cfg.BulkLoad}
	p1 := e.promoter(bad)
	id := request(ctx, t, p1, pol, part)
	if err := p1.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := p1.Promotion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the failing promoter: attempt=%d phase=%s retriable=%t err=%q", r1.Attempt, r1.Phase, r1.Retriable, r1.Error)

	// Later: the record is older than the retention and gets pruned.
	cfg.LedgerRetention = time.Hour
	e.setNow(e.clock().Add(2 * time.Hour))
	p2 := e.promoter(cfg)
	if n, err := p2.PruneLedger(ctx); n != 1 || err != nil {
		t.Fatalf("pruned %d: %v", n, err)
	}

	items, err := p2.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
	if err != nil || len(items) != 1 {
		t.Fatalf("request: %+v %v", items, err)
	}
	t.Logf("request answered: id=%s action=%s attempt=%d", items[0].PromotionID, items[0].Action, items[0].Attempt)
	if err := p2.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	r2, err := p2.Promotion(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Phase != promoter.PhaseCommitted || r2.Attempt <= r1.Attempt {
		t.Fatalf("healthy promoter after prune: %s at attempt %d (token %s), err=%q; want committed above attempt %d", r2.Phase, r2.Attempt, r2.CallerToken, r2.Error, r1.Attempt)
	}
}
