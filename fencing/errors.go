package fencing

import (
	"errors"
	"fmt"
)

var (
	// ErrStaleEpoch is returned where a request lands (a Gate) when the
	// request carries a lower epoch than the highest one already admitted.
	// The concrete error is a *StaleEpochError.
	ErrStaleEpoch = errors.New("fencing: stale epoch")

	// ErrNotLeader is returned by a guarded transaction whose guard failed in
	// etcd: the leader key no longer has the caller's epoch as its create
	// revision (deleted, or deleted and created again by a later leader).
	// Nothing in the transaction was applied.
	ErrNotLeader = errors.New("fencing: not leader")

	// ErrPreconditionFailed is returned by a guarded transaction whose guard
	// held but whose own comparisons did not: the else branch ran. The caller
	// is still the leader and may re-read and retry.
	ErrPreconditionFailed = errors.New("fencing: precondition failed")

	// ErrLeadershipLost is the cause of a Leadership's context once it is
	// cancelled, and what (*Leadership).Txn returns afterwards. The wrapping
	// error says why (resigned, lease lost, leader key deleted, etcd
	// unreachable).
	ErrLeadershipLost = errors.New("fencing: leadership lost")
)

// StaleEpochError is the ErrStaleEpoch returned by Gate.Admit and
// Gates.Admit. A receiver can hand Highest back to the sender, which then
// knows it has been deposed.
type StaleEpochError struct {
	Scope   string // the Gates scope; empty for a lone Gate
	Epoch   Epoch  // the epoch the request carried
	Highest Epoch  // the highest epoch admitted so far
}

func (e *StaleEpochError) Error() string {
	scope := ""
	if e.Scope != "" {
		scope = fmt.Sprintf(" in scope %q", e.Scope)
	}
	if e.Epoch <= 0 {
		return fmt.Sprintf("fencing: stale epoch%s: %d is not a valid epoch, highest seen %d", scope, e.Epoch, e.Highest)
	}
	return fmt.Sprintf("fencing: stale epoch%s: %d is lower than %d", scope, e.Epoch, e.Highest)
}

// Is makes errors.Is(err, ErrStaleEpoch) hold.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// IsFenced reports whether err says the caller is no longer (or never was)
// the leader whose epoch it carries: ErrNotLeader, ErrLeadershipLost or
// ErrStaleEpoch. Retrying such an operation cannot succeed; the caller must
// stop the work of that term.
func IsFenced(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeadershipLost) || errors.Is(err, ErrStaleEpoch)
}
