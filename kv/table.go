package kv

import (
	"fmt"
	"slices"
)

// Table is a validated, compiled TableSchema. It is immutable and safe for
// concurrent use.
type Table struct {
	schema      TableSchema // normalized: BucketKey filled in
	cols        []Column    // schema.Columns
	index       map[string]int
	all         []int // 0..len(cols)-1
	physKey     []int
	partKeys    []int
	bucketKey   []int
	bucketIsKey bool // the bucket-key bytes are the key bytes (Fluss/Paimon, bucket key == physical key)
}

// NewTable validates s (see TableSchema.Validate) and compiles it.
func NewTable(s TableSchema) (*Table, error) { return compile(s) }

// Schema returns a deep copy of the schema with the effective bucket key filled in.
func (t *Table) Schema() TableSchema {
	s := t.schema
	s.Columns = slices.Clone(s.Columns)
	s.PrimaryKey = slices.Clone(s.PrimaryKey)
	s.PartitionKeys = slices.Clone(s.PartitionKeys)
	s.BucketKey = slices.Clone(s.BucketKey)
	return s
}

// NumColumns returns the number of columns.
func (t *Table) NumColumns() int { return len(t.cols) }

// Column returns column i.
func (t *Table) Column(i int) Column { return t.cols[i] }

// ColumnIndex returns the index of the named column.
func (t *Table) ColumnIndex(name string) (int, bool) {
	i, ok := t.index[name]
	return i, ok
}

// PhysicalKey returns the indexes of the primary-key columns minus the partition
// keys, in primary-key order: the columns of the key bytes.
func (t *Table) PhysicalKey() []int { return slices.Clone(t.physKey) }

// PartitionKeys returns the indexes of the partition-key columns, in order.
func (t *Table) PartitionKeys() []int { return slices.Clone(t.partKeys) }

// BucketKey returns the indexes of the effective bucket-key columns.
func (t *Table) BucketKey() []int { return slices.Clone(t.bucketKey) }

// Buckets returns the bucket count N.
func (t *Table) Buckets() int { return t.schema.Buckets }

// Bucketing returns the bucketing function.
func (t *Table) Bucketing() Bucketing { return t.schema.Bucketing }

// SchemaID returns the schema id written at the start of every value.
func (t *Table) SchemaID() int16 { return t.schema.SchemaID }

// bucketOf applies the table's bucketing function to bucket-key bytes.
func (t *Table) bucketOf(bucketKey []byte) int {
	switch t.schema.Bucketing {
	case BucketingIceberg:
		return IcebergBucket(bucketKey, t.schema.Buckets)
	case BucketingPaimon:
		return PaimonBucket(bucketKey, t.schema.Buckets)
	}
	return FlussBucket(bucketKey, t.schema.Buckets)
}

// EncodeKey returns the key bytes of r: the compacted encoding of the physical key
// columns. Only those columns of r are read and checked.
func (t *Table) EncodeKey(r Row) ([]byte, error) {
	e := t.NewEncoder()
	if err := e.encodeColumns(e.scratch, t.physKey, RowFields(r)); err != nil {
		return nil, err
	}
	return e.scratch.Bytes(), nil
}

// EncodeValue returns the value bytes of r: the int16 little-endian schema id and
// the compacted row. Every column is checked.
func (t *Table) EncodeValue(r Row) ([]byte, error) {
	e := t.NewEncoder()
	if err := e.encodeRow(RowFields(r)); err != nil {
		return nil, err
	}
	return e.value(), nil
}

// Bucket returns the bucket of r. Only the bucket-key columns of r are read and
// checked.
func (t *Table) Bucket(r Row) (int, error) { return t.NewEncoder().bucket(RowFields(r)) }

// BucketOfKey returns the bucket of a row from its key bytes. It works only when the
// bucket key is the physical key (the default); otherwise the key does not determine
// the bucket and it is an error wrapping ErrInvalidSchema. With Fluss or Paimon
// bucketing the key bytes are hashed as they are, without being decoded.
func (t *Table) BucketOfKey(key []byte) (int, error) {
	if !slices.Equal(t.bucketKey, t.physKey) {
		return 0, schemaError("bucket key %v is not the physical primary key %v, so a key does not determine its bucket",
			t.names(t.bucketKey), t.names(t.physKey))
	}
	if len(key) == 0 {
		return 0, fmt.Errorf("%w: empty key", ErrCorrupt)
	}
	if t.bucketIsKey {
		return t.bucketOf(key), nil
	}
	values, err := t.DecodeKey(key) // iceberg: one column, re-encoded the Iceberg way
	if err != nil {
		return 0, err
	}
	b, err := icebergBucketKey(nil, t.cols[t.physKey[0]], RowFields(values), 0, nil)
	if err != nil {
		return 0, err
	}
	return t.bucketOf(b), nil
}

// PartitionName returns the partition name of r, "" for a non-partitioned table.
// Only the partition-key columns of r are read and checked.
func (t *Table) PartitionName(r Row) (string, error) {
	return t.NewEncoder().PartitionName(RowFields(r))
}
