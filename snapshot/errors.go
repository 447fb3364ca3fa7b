package snapshot

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Decoding errors are *DecodeError values that wrap exactly
// one of the decoding sentinels; validation failures are *Violation values.
var (
	// ErrInvalidTarget: a Target, transaction id or local path is not valid.
	ErrInvalidTarget = errors.New("snapshot: invalid target")
	// ErrUnsafePath: a relative path is absolute, not normalized or escapes
	// its directory.
	ErrUnsafePath = errors.New("snapshot: unsafe path")

	// Decoding sentinels, one per kind of failure.
	ErrTooLarge           = errors.New("snapshot: document too large")
	ErrBOM                = errors.New("snapshot: utf-8 byte order mark")
	ErrSyntax             = errors.New("snapshot: malformed json")
	ErrTooDeep            = errors.New("snapshot: json nested too deeply")
	ErrTrailingData       = errors.New("snapshot: trailing data after json value")
	ErrDuplicateKey       = errors.New("snapshot: duplicate key")
	ErrUnknownField       = errors.New("snapshot: unknown field")
	ErrMissingField       = errors.New("snapshot: missing field")
	ErrNull               = errors.New("snapshot: null value")
	ErrWrongType          = errors.New("snapshot: wrong json type")
	ErrNotInteger         = errors.New("snapshot: number is not an integer")
	ErrOutOfRange         = errors.New("snapshot: number out of range")
	ErrInvalidValue       = errors.New("snapshot: invalid value")
	ErrMissingVersion     = errors.New("snapshot: missing version")
	ErrUnsupportedVersion = errors.New("snapshot: unsupported version")

	// ErrInvalidBulkLoad is wrapped by every *Violation.
	ErrInvalidBulkLoad = errors.New("snapshot: invalid bulk load")

	// Content verification (NewVerifyingReader).
	ErrSizeMismatch   = errors.New("snapshot: size mismatch")
	ErrDigestMismatch = errors.New("snapshot: sha256 mismatch")
)

// DecodeError reports why a _METADATA or manifest document was rejected.
type DecodeError struct {
	Doc    string // "metadata" or "manifest"
	Path   string // JSON location, e.g. "kv_snapshot_handle.private_file_handles[0].local_path"; "" is the whole document
	Offset int    // byte offset of the offending input
	Err    error  // one of the decoding sentinels
	Detail string
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString(": ")
	b.WriteString(e.Doc)
	if e.Path != "" {
		b.WriteString(" at ")
		b.WriteString(e.Path)
	}
	fmt.Fprintf(&b, " (offset %d)", e.Offset)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

func (e *DecodeError) Unwrap() error { return e.Err }
