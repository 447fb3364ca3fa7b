package replica

import "errors"

// Sentinel errors. Errors from the changelog, the object store and Pebble
// are wrapped, so errors.Is also finds their sentinels (for example
// objstore.ErrIntegrity for a snapshot file whose size or SHA-256 is wrong,
// changelog.ErrCorrupt for a damaged log).
var (
	// ErrClosed: the replica or the host is closed.
	ErrClosed = errors.New("replica: closed")
	// ErrAlreadyOpen: the host already holds a replica of this bucket.
	ErrAlreadyOpen = errors.New("replica: already open")
	// ErrEmptyKey: a mutation, lookup or prefix has an empty key. The empty
	// key is reserved for the replica's own state (see doc.go).
	ErrEmptyKey = errors.New("replica: empty key")
	// ErrTooLarge: a request exceeds the host's request limits; nothing was
	// written.
	ErrTooLarge = errors.New("replica: request too large")
	// ErrInvalidRequest: a malformed request (empty batch, unknown op, a
	// delete with a value, a non-positive limit, a bad id).
	ErrInvalidRequest = errors.New("replica: invalid request")
	// ErrBadSnapshot: snapshot metadata that this replica cannot restore:
	// another bucket, a missing digest, an unsafe or duplicate local path,
	// or a database whose recorded state contradicts the metadata.
	ErrBadSnapshot = errors.New("replica: unusable snapshot")
	// ErrLogGap: the changelog no longer (or not yet) holds the records
	// between the snapshot's log_offset and its end.
	ErrLogGap = errors.New("replica: changelog does not cover the snapshot")
	// ErrCorruptRecord: a changelog record is not a valid mutation.
	ErrCorruptRecord = errors.New("replica: corrupt changelog record")
)
