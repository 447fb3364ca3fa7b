package meta

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors of this package wrap one of them, or an error of
// the fencing package (fencing.ErrNotLeader: the guard's term is over, stop;
// fencing.ErrPreconditionFailed: a revision the caller expected has moved,
// re-read and retry), or an etcd or context error, after which the outcome
// of a write is unknown and the caller must re-read.
var (
	// ErrInvalid: an argument or record breaks a rule; nothing was written.
	ErrInvalid = errors.New("meta: invalid argument")
	// ErrNotFound: the database, table, partition, assignment or snapshot
	// does not exist (or is being dropped, where the message says so).
	ErrNotFound = errors.New("meta: not found")
	// ErrExists: a create found the key taken.
	ErrExists = errors.New("meta: already exists")
	// ErrNotEmpty: a database still holds tables.
	ErrNotEmpty = errors.New("meta: not empty")
	// ErrLoading: the target is LOADING, or ACTIVE with a bulk-load id, and
	// cannot be dropped until that bulk load has finished.
	ErrLoading = errors.New("meta: target is loading")
	// ErrConflict: a create-only record exists with different bytes.
	ErrConflict = errors.New("meta: conflicting record")
	// ErrTooLarge: a record would exceed MaxRecordBytes.
	ErrTooLarge = errors.New("meta: record too large")
	// ErrCorrupt: a stored value is not a valid record (strict decoding).
	ErrCorrupt = errors.New("meta: corrupt record")
)

// LoadingError is the ErrLoading of a drop: which target a bulk load holds
// (the table itself, or the partition of a table being dropped), in which
// state and under which bulk load, so that callers can name the load.
type LoadingError struct {
	What       string // "table shop.orders", "table shop.orders partition 2024-01-01"
	State      DataState
	BulkLoadID string
}

func (e *LoadingError) Error() string {
	return fmt.Sprintf("%v: %s is %s with bulk load %q", ErrLoading, e.What, e.State, e.BulkLoadID)
}

// Is makes errors.Is(err, ErrLoading) hold.
func (e *LoadingError) Is(target error) bool { return target == ErrLoading }
