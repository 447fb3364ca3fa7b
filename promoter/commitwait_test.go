package promoter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/snapshotbuild"
)

// slowDecision is a tier whose Commit's await budget runs out while the
// coordinator still validates: Commit answers retriable, and Status says
// BEGUN with the manifest frozen.
type slowDecision struct{ *abortRecorder }

func (slowDecision) Commit(context.Context, *bulkloadclient.BuildContext, []snapshotbuild.BucketResult, time.Duration) (bulkload.Status, error) {
	return bulkload.Status{}, fmt.Errorf("injected: %w: no answer within the await budget", bulkload.ErrUnavailable)
}

func (s slowDecision) Status(ctx context.Context, h bulkload.Handle) (bulkload.Status, error) {
	st, err := s.abortRecorder.Status(ctx, h)
	if err == nil && st.State == bulkload.Begun {
		st.ManifestFrozen = true
	}
	return st, err
}

// TestCommitStillBeingDecidedIsNotAborted: a promotion whose Commit ran
// out of budget while the coordinator still decides it (BEGUN, manifest
// frozen: validating a large load) is left committing for resume; the
// promoter aborted it, throwing away a load that would have committed.
func TestCommitStillBeingDecidedIsNotAborted(t *testing.T) {
	e := newEnv(t, 1000)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	const table, prefix = "slowdec", "/thaw-test/slowdec"
	part := e.partitionOf("2024-01-02")
	cfg := e.configAt([]*policies.Policy{oneDayPolicy(t, "slowdec", table)}, prefix)
	rec := &abortRecorder{BulkLoader: cfg.BulkLoad}
	cfg.BulkLoad = slowDecision{rec}
	cfg.CommitBudget = 300 * time.Millisecond
	p := e.promoter(cfg)
	_, err := p.Promote(ctx, promoter.Key{Policy: "slowdec", Partition: part})
	if err == nil {
		t.Fatal("promotion whose commit is undecided succeeded")
	}
	rec.mu.Lock()
	aborts := rec.aborts
	rec.mu.Unlock()
	if len(aborts) > 0 {
		t.Fatalf("the promoter aborted %v, a commit the coordinator was still deciding (%v)", aborts, err)
	}
	if r := recordsOf(t, p, table)[part]; r.Phase != promoter.PhaseCommitting {
		t.Fatalf("record %s (%q), want committing (resume settles it)", r.Phase, r.Error)
	}
}
