package bulkloadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestIsRetriableSentinels classifies every sentinel a caller can get.
func TestIsRetriableSentinels(t *testing.T) {
	cases := []struct {
		err       error
		retriable bool
	}{
		{bulkload.ErrUnavailable, true},
		{bulkload.ErrTooManyTransactions, true},
		{bulkload.ErrNotFound, false},
		{bulkload.ErrTargetNotFound, false},
		{bulkload.ErrTargetOccupied, false},
		{bulkload.ErrTokenAborted, false},
		{bulkload.ErrInvalidState, false},
		{bulkload.ErrManifestConflict, false},
		{bulkload.ErrInvalidRequest, false},
		{bulkload.ErrDeadlineExceeded, false},
		{bulkload.ErrNotPrimaryKeyTable, false},
		{bulkload.ErrTargetNotEmpty, false},
		{bulkload.ErrInvalidRecord, false},
		{snapshotbuild.ErrInvalidRow, false},
		{snapshotbuild.ErrWrongPartition, false},
		{snapshotbuild.ErrBucketNotOwned, false},
		{snapshotbuild.ErrSchemaMismatch, false},
		{snapshotbuild.ErrClosed, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{io.EOF, false},
		{errNoContext, false},
		{nil, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.err), func(t *testing.T) {
			if got := IsRetriable(tc.err); got != tc.retriable {
				t.Fatalf("IsRetriable(%v) = %v", tc.err, got)
			}
			if tc.err == nil {
				return
			}
			wrapped := fmt.Errorf("bulkloadclient: commit x: %w: detail", tc.err)
			if got := IsRetriable(wrapped); got != tc.retriable {
				t.Fatalf("IsRetriable(%v) = %v", wrapped, got)
			}
		})
	}
}

// TestMapErr pins the sentinel and the class of every reason the tier can
// answer, and of errors without a reason (transport failures, other
// servers). A reason added to tierpb without a row here fails the test.
func TestMapErr(t *testing.T) {
	byReason := map[tierpb.Reason]error{ // nil: no sentinel, not retriable
		tierpb.ReasonNotEmpty:            bulkload.ErrTargetNotEmpty,
		tierpb.ReasonTokenAborted:        bulkload.ErrTokenAborted,
		tierpb.ReasonTargetOccupied:      bulkload.ErrTargetOccupied,
		tierpb.ReasonInvalidState:        bulkload.ErrInvalidState,
		tierpb.ReasonManifestConflict:    bulkload.ErrManifestConflict,
		tierpb.ReasonInvalidManifest:     bulkload.ErrInvalidRequest,
		tierpb.ReasonInvalidArgument:     bulkload.ErrInvalidRequest,
		tierpb.ReasonBulkLoadDeadline:    bulkload.ErrDeadlineExceeded,
		tierpb.ReasonNotFound:            bulkload.ErrNotFound,
		tierpb.ReasonTargetNotFound:      bulkload.ErrTargetNotFound,
		tierpb.ReasonTooManyTransactions: bulkload.ErrTooManyTransactions,
		tierpb.ReasonNotPrimaryKey:       bulkload.ErrNotPrimaryKeyTable,
		tierpb.ReasonUnavailable:         bulkload.ErrUnavailable,
		tierpb.ReasonNotLeader:           bulkload.ErrUnavailable,
		tierpb.ReasonUnknown:             bulkload.ErrUnavailable,
		tierpb.ReasonStaleEpoch:          bulkload.ErrUnavailable, // CodeAborted: a coordinator change
		tierpb.ReasonAlreadyExists:       nil,
		tierpb.ReasonSchemaMismatch:      nil,
		tierpb.ReasonBatchTooLarge:       nil,
		tierpb.ReasonTargetLoading:       nil,
		tierpb.ReasonScanExpired:         nil,
		tierpb.ReasonUnauthenticated:     nil,
		tierpb.ReasonPermissionDenied:    nil,
		tierpb.ReasonInternal:            nil,
		tierpb.ReasonStorageFull:         nil,
	}
	sentinels := []error{
		bulkload.ErrUnavailable, bulkload.ErrTooManyTransactions, bulkload.ErrNotFound, bulkload.ErrTargetOccupied,
		bulkload.ErrTokenAborted, bulkload.ErrInvalidState, bulkload.ErrManifestConflict, bulkload.ErrInvalidRequest,
		bulkload.ErrDeadlineExceeded, bulkload.ErrNotPrimaryKeyTable, bulkload.ErrTargetNotEmpty, bulkload.ErrTargetNotFound,
	}
	check := func(t *testing.T, in, want error) {
		t.Helper()
		err := mapErr(t.Context(), "commit x", in)
		for _, s := range sentinels {
			if errors.Is(err, s) != (s == want) {
				t.Fatalf("mapErr(%v) = %v: errors.Is %v = %v", in, err, s, errors.Is(err, s))
			}
		}
		if got := IsRetriable(err); got != (want == bulkload.ErrUnavailable || want == bulkload.ErrTooManyTransactions) {
			t.Fatalf("IsRetriable(%v) = %v", err, got)
		}
		if !errors.Is(err, in) {
			t.Fatalf("mapErr(%v) = %v does not wrap the RPC error", in, err)
		}
	}
	for _, r := range tierpb.Reasons() {
		want, ok := byReason[r]
		if !ok {
			t.Errorf("reason %s is not classified here", r)
			continue
		}
		t.Run(string(r), func(t *testing.T) { check(t, tierpb.NewError(r, "coordinator: x", nil), want) })
	}
	// Errors without a reason: transport failures and other servers.
	codes := map[connect.Code]error{
		connect.CodeUnavailable:      bulkload.ErrUnavailable, // a refused or broken connection
		connect.CodeDeadlineExceeded: bulkload.ErrUnavailable, // an attempt's timeout, ctx alive
		connect.CodeCanceled:         bulkload.ErrUnavailable,
		connect.CodeUnknown:          bulkload.ErrUnavailable,
		connect.CodeAborted:          bulkload.ErrUnavailable,
		connect.CodeInternal:         nil,
		connect.CodeUnimplemented:    nil, // not a thaw coordinator
		connect.CodePermissionDenied: nil,
	}
	for code, want := range codes {
		t.Run(code.String(), func(t *testing.T) { check(t, connect.NewError(code, errors.New("transport")), want) })
	}

	// The text is the server's message, without the RPC code, naming the
	// sentinel once: not again when the message already does.
	for msg, want := range map[string]string{
		"coordinator: bulkload: target not empty: the target has registered snapshots": "bulkloadclient: commit x: coordinator: bulkload: target not empty: the target has registered snapshots",
		"coordinator: the target has registered snapshots":                             "bulkloadclient: commit x: coordinator: the target has registered snapshots (bulkload: target not empty)",
	} {
		err := mapErr(t.Context(), "commit x", tierpb.NewError(tierpb.ReasonNotEmpty, msg, nil))
		if err.Error() != want || !errors.Is(err, bulkload.ErrTargetNotEmpty) || tierpb.ReasonOf(err) != tierpb.ReasonNotEmpty {
			t.Errorf("mapErr of %q = %q (reason %s), want %q", msg, err, tierpb.ReasonOf(err), want)
		}
	}

	// Once the caller's context ended, the error is the context's and not
	// retriable, whatever the RPC said.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := mapErr(ctx, "commit x", tierpb.NewError(tierpb.ReasonUnavailable, "x", nil))
	if !errors.Is(err, context.Canceled) || IsRetriable(err) {
		t.Fatalf("after cancel: %v", err)
	}
}

// TestAbortedErr: a transaction found ABORTED while committing reports
// the deadline sentinel for deadline aborts, the state sentinel otherwise.
func TestAbortedErr(t *testing.T) {
	for r, want := range map[bulkload.AbortReason]error{
		bulkload.TargetNotEmpty:                 bulkload.ErrInvalidState,
		bulkload.BuildDeadlineExceeded:          bulkload.ErrDeadlineExceeded,
		bulkload.CommitDecisionDeadlineExceeded: bulkload.ErrDeadlineExceeded,
		bulkload.AbortedByCaller:                bulkload.ErrInvalidState,
	} {
		err := abortedErr(bulkload.Status{State: bulkload.Aborted, AbortReason: &r, AbortMessage: "m"})
		if !errors.Is(err, want) || IsRetriable(err) {
			t.Errorf("%s: %v", r, err)
		}
	}
}
