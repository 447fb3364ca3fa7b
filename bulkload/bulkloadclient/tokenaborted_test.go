package bulkloadclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestBeginNotEmptySpendsToken: a Begin whose transaction the fence round
// aborts because the target holds rows written online wraps both
// ErrTargetNotEmpty and ErrTokenAborted (bulkload/errors.go), from the
// reply's reason and its transaction metadata (state ABORTED). Only the
// reason crossed over: a caller could not tell that its token was spent,
// and a repeat of the same token kept answering "target not empty".
func TestBeginNotEmptySpendsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 2, 1, "a")
	if err := tr.tc.Upsert(ctx, tierclient.Target{Database: "shop", Table: "events", Partition: "a"}, regionRows("a", 4)); err != nil {
		t.Fatal(err)
	}
	c, err := bulkloadclient.New(ctx, tr.e.Address())
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
	_, err = begin(ctx, c, target, "job-ne")
	md := tierpb.MetadataOf(err)
	if !errors.Is(err, bulkload.ErrTargetNotEmpty) {
		t.Fatalf("begin on a non-empty target: %v, want ErrTargetNotEmpty", err)
	}
	if md[tierpb.KeyState] != "ABORTED" || md[tierpb.KeyAbortReason] != "TARGET_NOT_EMPTY" {
		t.Fatalf("begin on a non-empty target: metadata %v, want the transaction ABORTED for TARGET_NOT_EMPTY", md)
	}
	if !errors.Is(err, bulkload.ErrTokenAborted) {
		t.Errorf("the transaction of token job-ne is ABORTED (metadata %v) but the error does not wrap bulkload.ErrTokenAborted: %v", md, err)
	}
	// The same token again: spent.
	_, err = c.Begin(context.WithoutCancel(ctx), target, "job-ne", bulkloadclient.BeginOptions{})
	if !errors.Is(err, bulkload.ErrTokenAborted) {
		t.Errorf("repeat Begin with the aborted token: %v (reason %s), want ErrTokenAborted", err, tierpb.ReasonOf(err))
	}
}
