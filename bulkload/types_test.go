package bulkload

import (
	"errors"
	"fmt"
	"testing"
)

func TestStateText(t *testing.T) {
	for s := Begun; s <= Aborted; s++ {
		b, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back State
		if err := back.UnmarshalText(b); err != nil || back != s || string(b) != s.String() {
			t.Fatalf("%v: text %q, back %v, err %v", s, b, back, err)
		}
	}
	if got := []string{Begun.String(), Committing.String(), Committed.String(), Aborted.String()}; fmt.Sprint(got) != "[BEGUN COMMITTING COMMITTED ABORTED]" {
		t.Fatalf("names %v", got)
	}
	if _, err := State(4).MarshalText(); err == nil {
		t.Fatal("State(4) marshalled")
	}
	var s State
	if err := s.UnmarshalText([]byte("begun")); err == nil {
		t.Fatal("lowercase state name accepted")
	}
	if State(9).String() != "State(9)" || !Committed.Terminal() || !Aborted.Terminal() || Committing.Terminal() {
		t.Fatal("String/Terminal")
	}
}

func TestAbortReasonText(t *testing.T) {
	want := map[AbortReason]string{
		TargetNotEmpty: "TARGET_NOT_EMPTY", BuildDeadlineExceeded: "BUILD_DEADLINE_EXCEEDED",
		CommitDecisionDeadlineExceeded: "COMMIT_DECISION_DEADLINE_EXCEEDED", AbortedByCaller: "ABORTED_BY_CALLER",
	}
	for r, name := range want {
		b, err := r.MarshalText()
		var back AbortReason
		if err != nil || string(b) != name || back.UnmarshalText(b) != nil || back != r {
			t.Fatalf("%d: %q %v %v", r, b, err, back)
		}
	}
	if TargetNotEmpty != 0 || BuildDeadlineExceeded != 1 || CommitDecisionDeadlineExceeded != 2 || AbortedByCaller != 3 {
		t.Fatal("abort reason codes are Fluss's")
	}
	if _, err := AbortReason(4).MarshalText(); err == nil {
		t.Fatal("AbortReason(4) marshalled")
	}
}

func TestTxnID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id, err := NewTxnID()
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateTxnID(id); err != nil {
			t.Fatal(err)
		}
		if id[14] != '4' || !('8' <= id[19] && id[19] <= '9' || 'a' <= id[19] && id[19] <= 'b') {
			t.Fatalf("%s: not a version 4 uuid", id)
		}
		if seen[id] {
			t.Fatalf("%s twice", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "3f1c2b7e8a4d4c1e9b2a5d6e7f8a9b0c", "3F1C2B7E-8A4D-4C1E-9B2A-5D6E7F8A9B0C",
		"3f1c2b7e-8a4d-4c1e-9b2a-5d6e7f8a9b0", "3f1c2b7e-8a4d-4c1e-9b2a_5d6e7f8a9b0c", "{3f1c2b7e-8a4d-4c1e-9b2a-5d6e7f8a9b0}",
		"3f1c2b7e-8a4d-4c1e-9b2a-5d6e7f8a9b0g"} {
		if err := ValidateTxnID(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("ValidateTxnID(%q) = %v", bad, err)
		}
	}
}

func TestValidateCallerToken(t *testing.T) {
	for _, ok := range []string{"a", "job-42/attempt_1", string(make([]byte, 0)) + "x"} {
		if err := ValidateCallerToken(ok); err != nil {
			t.Fatalf("%q: %v", ok, err)
		}
	}
	long := make([]byte, MaxCallerTokenLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, bad := range []string{"", "a b", "tab\t", "é", string(long)} {
		if err := ValidateCallerToken(bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestManifestRefValidate(t *testing.T) {
	if err := (ManifestRef{"p", 1, sha}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []ManifestRef{{"", 1, sha}, {"p", 0, sha}, {"p", 1, sha[:63]}, {"p", 1, "A" + sha[1:]}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

func TestIsRetriable(t *testing.T) {
	for err, want := range map[error]bool{
		ErrUnavailable: true, fmt.Errorf("x: %w", ErrTooManyTransactions): true,
		ErrTargetOccupied: false, ErrInvalidState: false, ErrTokenAborted: false, ErrManifestConflict: false,
		ErrInvalidRequest: false, ErrDeadlineExceeded: false, ErrNotFound: false, ErrTargetNotFound: false, ErrTargetNotEmpty: false,
		ErrNotPrimaryKeyTable: false, nil: false,
	} {
		if IsRetriable(err) != want {
			t.Fatalf("IsRetriable(%v) != %v", err, want)
		}
	}
}
