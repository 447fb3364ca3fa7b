package bulkload

import "errors"

// Errors callers branch on. The server wraps them with detail; test with
// errors.Is. A reply may wrap more than one (for example ErrTokenAborted
// and ErrTargetNotEmpty for a Begin whose transaction found data).
var (
	// ErrNotFound: no such transaction (never existed, or its result was
	// garbage-collected after the retention period).
	ErrNotFound = errors.New("bulkload: transaction not found")
	// ErrTargetNotFound: the table or partition Begin (or GetInProgress)
	// names does not exist, or is being dropped. Create it first.
	ErrTargetNotFound = errors.New("bulkload: target table or partition not found")
	// ErrTargetOccupied: another transaction (another caller token or
	// principal) holds the target, or the target is not ACTIVE.
	ErrTargetOccupied = errors.New("bulkload: target is occupied by another transaction")
	// ErrTokenAborted: the transaction of this caller token was aborted;
	// Begin again with a new token.
	ErrTokenAborted = errors.New("bulkload: the transaction of this caller token was aborted, use a new token")
	// ErrInvalidState: the request is not allowed in the transaction's
	// state (abort after COMMITTING, commit after an abort, commit before
	// Begin completed).
	ErrInvalidState = errors.New("bulkload: invalid transaction state")
	// ErrManifestConflict: Commit names a manifest other than the one the
	// transaction froze.
	ErrManifestConflict = errors.New("bulkload: manifest conflicts with the frozen manifest")
	// ErrInvalidRequest: the request or the manifest it names is invalid;
	// for a manifest, the error wraps every validation violation.
	ErrInvalidRequest = errors.New("bulkload: invalid request")
	// ErrDeadlineExceeded: the build or commit-decision deadline passed;
	// the transaction is (being) aborted.
	ErrDeadlineExceeded = errors.New("bulkload: deadline exceeded")
	// ErrTooManyTransactions: the cluster's limit of active transactions,
	// or the target's limit of retained transactions, is reached.
	ErrTooManyTransactions = errors.New("bulkload: too many transactions")
	// ErrNotPrimaryKeyTable: the target's table has no primary key.
	ErrNotPrimaryKeyTable = errors.New("bulkload: not a primary-key table")
	// ErrTargetNotEmpty: the target holds data; the transaction is (being)
	// aborted with TARGET_NOT_EMPTY.
	ErrTargetNotEmpty = errors.New("bulkload: target not empty")
	// ErrPermissionDenied: the coordinator requires callers to
	// authenticate and this one did not (no or an unknown bearer token),
	// or may not bulk load the target. Not retriable.
	ErrPermissionDenied = errors.New("bulkload: permission denied")
	// ErrUnavailable: the server cannot answer now (its coordinator lost
	// leadership or is recovering the transaction, or the target is not
	// ready for a bulk load yet). The outcome of the request is unknown:
	// repeat the same request, or resolve it through Status.
	ErrUnavailable = errors.New("bulkload: unavailable")
)

// IsRetriable reports whether repeating the same request may succeed
// without the caller changing anything: ErrUnavailable, and
// ErrTooManyTransactions (after a back-off, once other transactions end).
// Begin and Commit are idempotent, so repeating them is safe; Abort is too.
func IsRetriable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTooManyTransactions)
}
