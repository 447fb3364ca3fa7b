package snapshotbuild

import (
	"encoding/hex"
	"errors"
	"fmt"
)

var (
	// ErrInvalidOptions reports an unusable Target or Options value.
	ErrInvalidOptions = errors.New("snapshotbuild: invalid options")
	// ErrDuplicateKey reports a primary key that occurs more than once under
	// DuplicatesError. The error is a *DuplicateKeyError.
	ErrDuplicateKey = errors.New("snapshotbuild: duplicate primary key")
	// ErrBucketNotOwned reports a row routed to a bucket this builder does not
	// own (see Target.Buckets and Options.OtherBuckets). From Add the error is
	// a *NotOwnedError.
	ErrBucketNotOwned = errors.New("snapshotbuild: row for a bucket this builder does not own")
	// ErrRecordTooLarge reports a key/value pair larger than half the memory
	// budget: it cannot be sorted in one chunk.
	ErrRecordTooLarge = errors.New("snapshotbuild: record larger than a sort chunk")
	// ErrInvalidRow reports an input row that cannot be converted or encoded.
	// The error is a *RowError.
	ErrInvalidRow = errors.New("snapshotbuild: invalid row")
	// ErrClosed reports a call on a builder after Finish or Close.
	ErrClosed = errors.New("snapshotbuild: builder closed")
	// ErrLocalIntegrity reports a local file whose bytes changed between
	// being written and being uploaded (its digest at upload differs from the
	// digest computed while writing); nothing is stored for it.
	ErrLocalIntegrity = errors.New("snapshotbuild: local file changed before upload")
)

// BucketError says which bucket a build step failed for.
type BucketError struct {
	Bucket int
	Err    error
}

func (e *BucketError) Error() string {
	return fmt.Sprintf("snapshotbuild: bucket %d: %v", e.Bucket, e.Err)
}

func (e *BucketError) Unwrap() error { return e.Err }

// NotOwnedError is the error of a row Add routed to a bucket the builder
// does not own, under OtherBucketsError: the batch (0-based index of the
// Add call), the row within it and the row's bucket. It is
// ErrBucketNotOwned.
type NotOwnedError struct {
	Batch  int64
	Row    int
	Bucket int
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%v: batch %d row %d routes to bucket %d", ErrBucketNotOwned, e.Batch, e.Row, e.Bucket)
}

func (e *NotOwnedError) Is(target error) bool { return target == ErrBucketNotOwned }

// DuplicateKeyError is the error of a duplicate primary key under
// DuplicatesError. Key is the encoded key; Values is its decoded form when the
// builder has a table ("" otherwise).
type DuplicateKeyError struct {
	Bucket int
	Key    []byte
	Values string
}

func (e *DuplicateKeyError) Error() string {
	if e.Values != "" {
		return fmt.Sprintf("snapshotbuild: duplicate primary key %s (key %s) in bucket %d",
			e.Values, hex.EncodeToString(e.Key), e.Bucket)
	}
	return fmt.Sprintf("snapshotbuild: duplicate primary key %s in bucket %d",
		hex.EncodeToString(e.Key), e.Bucket)
}

func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// RowError names the input row (0-based within the record batch given to
// Add, and within the whole input) and, when known, the column of an
// invalid row.
type RowError struct {
	Batch  int64  // 0-based index of the Add call
	Row    int    // 0-based row within the batch
	Column string // "" when not column-specific
	Err    error
}

func (e *RowError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("snapshotbuild: batch %d row %d column %q: %v", e.Batch, e.Row, e.Column, e.Err)
	}
	return fmt.Sprintf("snapshotbuild: batch %d row %d: %v", e.Batch, e.Row, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

func (e *RowError) Is(target error) bool { return target == ErrInvalidRow }
