package lake

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors from this package wrap one of them where it applies,
// and wrap the underlying iceberg-go or I/O error as well.
var (
	// ErrConfig reports a Config that cannot be used.
	ErrConfig = errors.New("lake: invalid config")
	// ErrNotFound reports a namespace, table, snapshot, column or partition
	// that does not exist.
	ErrNotFound = errors.New("lake: not found")
	// ErrUnmappable reports an Iceberg schema or partition spec that has no
	// tier equivalent (nested or unsupported types, a missing primary key, a
	// partition transform with no tier rule). See *MappingError.
	ErrUnmappable = errors.New("lake: not mappable to a tier schema")
	// ErrNoTierPartition reports a lake partition whose values do not
	// determine one tier partition (a null value, or a partition of an older
	// spec that lacks a tier partition key's field).
	ErrNoTierPartition = errors.New("lake: no tier partition")
)

// MappingError reports the field that keeps an Iceberg table from mapping to a
// tier schema. It wraps ErrUnmappable.
type MappingError struct {
	Field  string // the Iceberg column or partition field
	Reason string
}

func (e *MappingError) Error() string {
	return fmt.Sprintf("%v: field %q: %s", ErrUnmappable, e.Field, e.Reason)
}

// Unwrap returns ErrUnmappable.
func (e *MappingError) Unwrap() error { return ErrUnmappable }

func mappingError(field, format string, args ...any) error {
	return &MappingError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
