package bulkloadtest

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// TestBeginRefusesBuildTimeoutsOutOfRange: a negative build timeout, one
// above the maximum (24 h) and one so large that milliseconds overflow a
// Duration (2^58 ms + 30 min was read as 30 minutes and begun) are
// INVALID_ARGUMENT and begin nothing: the target then takes another
// caller's Begin.
func TestBeginRefusesBuildTimeoutsOutOfRange(t *testing.T) {
	h := newHarness(t)
	n := h.startCoordinator("c-1")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	tp := h.createTable(n, "items", 1, "")
	for i, ms := range []int64{-1, (25 * time.Hour).Milliseconds(), 1<<58 + (30 * time.Minute).Milliseconds(), 1 << 62} {
		_, err := n.bulk.Begin(t.Context(), connect.NewRequest(&tierv1.BeginBulkLoadRequest{
			Target: tp, CallerToken: fmt.Sprintf("tok-%d", i), BuildTimeoutMs: ms}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Begin with a build timeout of %d ms: %v, want invalid_argument", ms, err)
		}
	}
	resp, err := n.bulk.Begin(t.Context(), connect.NewRequest(&tierv1.BeginBulkLoadRequest{
		Target: tp, CallerToken: "tok-good", BuildTimeoutMs: time.Hour.Milliseconds()}))
	if err != nil {
		t.Fatalf("Begin after the refused ones: %v", err)
	}
	if dl := time.Until(time.UnixMilli(resp.Msg.GetTargetInfo().GetBuildDeadlineMs())); dl < 50*time.Minute || dl > time.Hour {
		t.Errorf("build deadline in %v, want an hour", dl)
	}
}
