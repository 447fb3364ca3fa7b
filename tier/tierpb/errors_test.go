package tierpb_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestReasonCodes pins every reason's string and code: both are API.
func TestReasonCodes(t *testing.T) {
	want := map[tierpb.Reason]connect.Code{
		"UNKNOWN":           connect.CodeUnknown,
		"NOT_FOUND":         connect.CodeNotFound,
		"ALREADY_EXISTS":    connect.CodeAlreadyExists,
		"INVALID_ARGUMENT":  connect.CodeInvalidArgument,
		"SCHEMA_MISMATCH":   connect.CodeFailedPrecondition,
		"BATCH_TOO_LARGE":   connect.CodeResourceExhausted,
		"TARGET_LOADING":    connect.CodeFailedPrecondition,
		"NOT_EMPTY":         connect.CodeFailedPrecondition,
		"STALE_EPOCH":       connect.CodeAborted,
		"NOT_LEADER":        connect.CodeFailedPrecondition,
		"SCAN_EXPIRED":      connect.CodeFailedPrecondition,
		"UNAVAILABLE":       connect.CodeUnavailable,
		"UNAUTHENTICATED":   connect.CodeUnauthenticated,
		"PERMISSION_DENIED": connect.CodePermissionDenied,
		"INTERNAL":          connect.CodeInternal,
		"STORAGE_FULL":      connect.CodeResourceExhausted,

		"TARGET_OCCUPIED":             connect.CodeFailedPrecondition,
		"TOKEN_ABORTED":               connect.CodeFailedPrecondition,
		"INVALID_STATE":               connect.CodeFailedPrecondition,
		"MANIFEST_CONFLICT":           connect.CodeFailedPrecondition,
		"INVALID_MANIFEST":            connect.CodeFailedPrecondition,
		"BULK_LOAD_DEADLINE_EXCEEDED": connect.CodeFailedPrecondition,
		"TOO_MANY_TRANSACTIONS":       connect.CodeFailedPrecondition,
		"NOT_PRIMARY_KEY":             connect.CodeFailedPrecondition,
		"TARGET_NOT_FOUND":            connect.CodeNotFound,
	}
	got := make(map[tierpb.Reason]connect.Code)
	for _, r := range tierpb.Reasons() {
		got[r] = r.Code()
	}
	if !maps.Equal(got, want) {
		t.Errorf("reasons = %v\nwant      %v", got, want)
	}
	if c := tierpb.Reason("NO_SUCH_REASON").Code(); c != connect.CodeUnknown {
		t.Errorf("undefined reason code = %v", c)
	}
}

func TestReasonOf(t *testing.T) {
	loading := tierpb.NewTargetLoadingError("loading", tierv1.DataState_DATA_STATE_LOADING, "bl-1")
	headerOnly := connect.NewError(connect.CodeFailedPrecondition, errors.New("x"))
	headerOnly.Meta().Set(tierpb.HeaderReason, "NOT_EMPTY")
	for _, tc := range []struct {
		name string
		err  error
		want tierpb.Reason
	}{
		{"nil", nil, ""},
		{"detail", loading, tierpb.ReasonTargetLoading},
		{"wrapped", fmt.Errorf("lookup: %w", loading), tierpb.ReasonTargetLoading},
		{"header only", headerOnly, tierpb.ReasonNotEmpty},
		{"unique code", connect.NewError(connect.CodeUnavailable, errors.New("dial")), tierpb.ReasonUnavailable},
		{"code of a refined reason", connect.NewError(connect.CodeNotFound, errors.New("x")), tierpb.ReasonNotFound},
		{"refined reason", tierpb.NewError(tierpb.ReasonTargetNotFound, "x", nil), tierpb.ReasonTargetNotFound},
		{"code of another refined reason", connect.NewError(connect.CodeResourceExhausted, errors.New("x")), tierpb.ReasonBatchTooLarge},
		{"another refined reason", tierpb.NewError(tierpb.ReasonStorageFull, "x", nil), tierpb.ReasonStorageFull},
		{"shared code", connect.NewError(connect.CodeFailedPrecondition, errors.New("x")), tierpb.ReasonUnknown},
		{"code without reason", connect.NewError(connect.CodeDataLoss, errors.New("x")), tierpb.ReasonUnknown},
		{"plain error", errors.New("x"), tierpb.ReasonUnknown},
		{"future reason", tierpb.NewError("SOMETHING_NEW", "x", nil), "SOMETHING_NEW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tierpb.ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewError(t *testing.T) {
	md := map[string]string{"table": "db.t", "bad": "\xff"}
	err := tierpb.NewError(tierpb.ReasonInvalidArgument, "bad key \xff", md)
	md["table"] = "changed"
	if err.Code() != connect.CodeInvalidArgument {
		t.Errorf("code = %v", err.Code())
	}
	d := tierpb.DetailOf(err)
	if d == nil {
		t.Fatal("no detail: invalid UTF-8 must not drop it")
	}
	if got := d.GetMetadata(); got["table"] != "db.t" || got["bad"] != "\uFFFD" {
		t.Errorf("metadata = %q (want a copy with valid UTF-8)", got)
	}
	if d.GetMessage() != "bad key \uFFFD" || d.GetReason() != "INVALID_ARGUMENT" {
		t.Errorf("detail = %v", d)
	}

	if tierpb.MetadataOf(errors.New("x")) != nil || tierpb.DetailOf(nil) != nil {
		t.Error("an error without detail has metadata")
	}
	stale := tierpb.NewStaleEpochError("stale", 12)
	if !tierpb.IsStaleEpoch(stale) || tierpb.MetadataOf(stale)[tierpb.KeyEpoch] != "12" {
		t.Errorf("stale epoch error = %v %v", stale, tierpb.MetadataOf(stale))
	}
	if hint, ok := tierpb.IsNotLeader(tierpb.NewNotLeaderError("no leader known", tierpb.LeaderHint{})); !ok || hint != (tierpb.LeaderHint{}) {
		t.Errorf("IsNotLeader without hint = %+v, %v", hint, ok)
	}
	if _, ok := tierpb.IsNotLeader(stale); ok {
		t.Error("IsNotLeader(STALE_EPOCH)")
	}
	if got := tierpb.DataStateName(tierv1.DataState_DATA_STATE_ACTIVE); got != "ACTIVE" {
		t.Errorf("DataStateName = %q", got)
	}
}

// TestDocsListEveryReason keeps docs/api.md's reason table complete: one row
// per reason, with its code.
func TestDocsListEveryReason(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := make(map[string]string)
	for line := range strings.Lines(string(doc)) {
		cells := strings.Split(line, "|")
		if len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
		}
	}
	for _, r := range tierpb.Reasons() {
		if got, want := rows[string(r)], r.Code().String(); got != want {
			t.Errorf("docs/api.md: reason %s has code %q, want %q", r, got, want)
		}
	}
}
