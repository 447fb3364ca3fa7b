package changelog

import (
	"errors"
	"fmt"
)

// Sentinel errors. Corruption is reported as a *CorruptError, which wraps
// ErrCorrupt.
var (
	// ErrOutOfRange: an offset lies outside [start, end] of the log (Read,
	// TruncateBefore, a Wait across a reset that moved the end back).
	ErrOutOfRange = errors.New("changelog: offset out of range")
	// ErrCorrupt: the log's files hold bytes that are not what was
	// appended, other than a torn tail.
	ErrCorrupt = errors.New("changelog: corrupt log")
	// ErrClosed: the log, the handle or the provider is closed.
	ErrClosed = errors.New("changelog: closed")
	// ErrTooLarge: a record or a batch exceeds the configured limit;
	// nothing was written.
	ErrTooLarge = errors.New("changelog: too large")
	// ErrNotEmpty: ResetTo on a log that holds records.
	ErrNotEmpty = errors.New("changelog: log not empty")
	// ErrInUse: Delete of a log that is open.
	ErrInUse = errors.New("changelog: log in use")
	// ErrConflict: another writer appended to the log first (two leaders
	// of a bucket for a moment); nothing of the refused append is part of
	// the log, and a retry appends after the other writer's records. Only
	// logs with conditional appends report it (kafkalog).
	ErrConflict = errors.New("changelog: another writer appended first")
)

// CorruptError names where a log is corrupt.
type CorruptError struct {
	Segment string // path of the segment file
	Pos     int64  // byte position in the file of the bad frame or header
	Offset  int64  // the log offset expected at Pos
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("changelog: corrupt segment %s at byte %d (offset %d): %s", e.Segment, e.Pos, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// errMovedBack is Wait's answer when a reset moved the end back.
func errMovedBack(offset, from, to int64) error {
	return fmt.Errorf("%w: waiting for offset %d, the log's end moved back from %d to %d (a reset)", ErrOutOfRange, offset, from, to)
}

func outOfRange(offset, start, end int64) error {
	return fmt.Errorf("%w: offset %d not in [%d, %d]", ErrOutOfRange, offset, start, end)
}
