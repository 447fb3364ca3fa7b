package bulkload

import (
	"fmt"
	"strconv"
)

// State is the persisted state of a bulk-load transaction. The codes are
// Fluss's BulkLoadState codes and are what the transaction record stores.
type State uint8

// States. BEGUN → COMMITTING → COMMITTED, or BEGUN → ABORTED.
const (
	Begun      State = 0
	Committing State = 1
	Committed  State = 2
	Aborted    State = 3
)

var stateNames = [...]string{Begun: "BEGUN", Committing: "COMMITTING", Committed: "COMMITTED", Aborted: "ABORTED"}

// Valid reports whether s is one of the four states.
func (s State) Valid() bool { return int(s) < len(stateNames) }

// Terminal reports whether s is COMMITTED or ABORTED.
func (s State) Terminal() bool { return s == Committed || s == Aborted }

// String returns "BEGUN", "COMMITTING", "COMMITTED", "ABORTED" or "State(n)".
func (s State) String() string {
	if s.Valid() {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText returns the state's name; an unknown state is an error.
func (s State) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("bulkload: unknown state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText parses a state name as String returns it.
func (s *State) UnmarshalText(text []byte) error {
	for i, n := range stateNames {
		if n == string(text) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("bulkload: unknown state %q", text)
}

// AbortReason says why a transaction was aborted. The codes are Fluss's
// BulkLoadAbortReason codes and are what the transaction record stores.
type AbortReason uint8

// Abort reasons.
const (
	// TargetNotEmpty: the fence round or the emptiness proof found data.
	TargetNotEmpty AbortReason = 0
	// BuildDeadlineExceeded: no manifest was frozen before the build deadline.
	BuildDeadlineExceeded AbortReason = 1
	// CommitDecisionDeadlineExceeded: a manifest was frozen but the commit
	// was not decided before the commit-decision deadline.
	CommitDecisionDeadlineExceeded AbortReason = 2
	// AbortedByCaller: Abort was called.
	AbortedByCaller AbortReason = 3
)

var reasonNames = [...]string{
	TargetNotEmpty:                 "TARGET_NOT_EMPTY",
	BuildDeadlineExceeded:          "BUILD_DEADLINE_EXCEEDED",
	CommitDecisionDeadlineExceeded: "COMMIT_DECISION_DEADLINE_EXCEEDED",
	AbortedByCaller:                "ABORTED_BY_CALLER",
}

// Valid reports whether r is one of the four reasons.
func (r AbortReason) Valid() bool { return int(r) < len(reasonNames) }

// String returns the reason's UPPER_SNAKE_CASE name or "AbortReason(n)".
func (r AbortReason) String() string {
	if r.Valid() {
		return reasonNames[r]
	}
	return "AbortReason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText returns the reason's name; an unknown reason is an error.
func (r AbortReason) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("bulkload: unknown abort reason %d", uint8(r))
	}
	return []byte(reasonNames[r]), nil
}

// UnmarshalText parses a reason name as String returns it.
func (r *AbortReason) UnmarshalText(text []byte) error {
	for i, n := range reasonNames {
		if n == string(text) {
			*r = AbortReason(i)
			return nil
		}
	}
	return fmt.Errorf("bulkload: unknown abort reason %q", text)
}
