package kv

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of them.
var (
	// ErrInvalidType reports a malformed or out-of-range type.
	ErrInvalidType = errors.New("kv: invalid type")
	// ErrNestedType reports ARRAY, MAP, ROW or MULTISET, which thaw does not support.
	ErrNestedType = errors.New("kv: nested types are not supported")
	// ErrInvalidSchema reports a table schema that breaks a rule of TableSchema.Validate.
	ErrInvalidSchema = errors.New("kv: invalid schema")
	// ErrInvalidRow reports a row value that cannot be encoded.
	ErrInvalidRow = errors.New("kv: invalid row")
	// ErrCorrupt reports bytes that are not a valid encoding for the table.
	ErrCorrupt = errors.New("kv: corrupt data")
	// ErrInvalidPartition reports a partition name or value that breaks the naming rules.
	ErrInvalidPartition = errors.New("kv: invalid partition")
)

// RowError reports a value of one column that cannot be encoded or named.
// It wraps ErrInvalidRow, or ErrInvalidPartition for partition values, and Err.
type RowError struct {
	Column string // the column's name
	Err    error  // what is wrong with the value

	class error // ErrInvalidRow when nil
}

func (e *RowError) sentinel() error {
	if e.class == nil {
		return ErrInvalidRow
	}
	return e.class
}

func (e *RowError) Error() string {
	return fmt.Sprintf("%v: column %q: %v", e.sentinel(), e.Column, e.Err)
}

// Unwrap returns the sentinel and Err.
func (e *RowError) Unwrap() []error { return []error{e.sentinel(), e.Err} }

func rowError(column string, err error) *RowError {
	return &RowError{Column: column, Err: err}
}

func partitionError(column string, err error) *RowError {
	return &RowError{Column: column, Err: err, class: ErrInvalidPartition}
}
