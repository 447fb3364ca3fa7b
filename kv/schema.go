package kv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Column is one column of a table schema.
type Column struct {
	Name     string `json:"name"`
	Type     Type   `json:"type"`
	Nullable bool   `json:"nullable"`
}

// Bucketing selects the function that maps bucket-key bytes to a bucket.
type Bucketing uint8

const (
	// BucketingFluss is Fluss's default: murmurHash(hashUnsafeBytes(compacted bucket key, 42)) % N.
	BucketingFluss Bucketing = iota
	// BucketingIceberg is the Iceberg spec's bucket(col, N) over one bucket-key column.
	BucketingIceberg
	// BucketingPaimon is Paimon's function, abs(hashUnsafeBytes(bucket key, 42) % N),
	// over the compacted bucket-key bytes; Fluss and Paimon hash Paimon's BinaryRow
	// encoding instead, so the buckets differ from theirs (see the package doc).
	BucketingPaimon
)

var bucketingNames = [...]string{
	BucketingFluss:   "fluss",
	BucketingIceberg: "iceberg",
	BucketingPaimon:  "paimon",
}

// String returns "fluss", "iceberg" or "paimon".
func (b Bucketing) String() string {
	if int(b) < len(bucketingNames) {
		return bucketingNames[b]
	}
	return "Bucketing(" + strconv.Itoa(int(b)) + ")"
}

// ParseBucketing parses "fluss", "iceberg" or "paimon", ignoring case.
func ParseBucketing(s string) (Bucketing, error) {
	for b, name := range bucketingNames {
		if strings.EqualFold(s, name) {
			return Bucketing(b), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown bucketing %q (want fluss, iceberg or paimon)", ErrInvalidSchema, s)
}

// MarshalText returns the bucketing's name; an unknown value is an error.
func (b Bucketing) MarshalText() ([]byte, error) {
	if int(b) >= len(bucketingNames) {
		return nil, fmt.Errorf("%w: unknown bucketing %d", ErrInvalidSchema, b)
	}
	return []byte(b.String()), nil
}

// UnmarshalText parses text with ParseBucketing.
func (b *Bucketing) UnmarshalText(text []byte) error {
	v, err := ParseBucketing(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MaxBuckets is the largest bucket count, Fluss's default max.bucket.num.
const MaxBuckets = 4096

// MaxColumns bounds a table's columns, and MaxSchemaText the bytes of its
// column names and type names together, as JSON writes them (a control
// character takes 6, a quote or backslash 2): a schema within them fits in the
// table's metadata record beside a bulk load's record of 4096 buckets (it
// holds the schema again), both in one etcd request (1.5 MiB).
const (
	MaxColumns    = 4096
	MaxSchemaText = 256 << 10
)

// TableSchema defines a primary-key table. It is a plain definition; NewTable
// validates and compiles it.
type TableSchema struct {
	SchemaID      int16     `json:"schema_id"`
	Columns       []Column  `json:"columns"`
	PrimaryKey    []string  `json:"primary_key"`
	PartitionKeys []string  `json:"partition_keys,omitempty"`
	BucketKey     []string  `json:"bucket_key,omitempty"` // empty = default: primary key minus partition keys
	Buckets       int       `json:"buckets"`
	Bucketing     Bucketing `json:"bucketing"`
}

// Validate checks the schema against Fluss's rules and reports the first violation,
// naming the offending column or value, as an error wrapping ErrInvalidSchema:
//
//   - there is at least one column; names are non-empty, unique and do not start
//     with the reserved prefix "__"; every type is valid;
//   - schema_id is not negative;
//   - the primary key is non-empty, names existing columns once each, and its
//     columns are not nullable;
//   - partition keys name primary-key columns once each, of a type a partition
//     name can hold (every kind but DECIMAL);
//   - the physical primary key (primary key minus partition keys) is not empty;
//   - a bucket key names primary-key columns once each and no partition key, so it
//     is a subset of the physical primary key; empty means the physical primary key;
//   - buckets is within 1..4096 and bucketing is known;
//   - iceberg bucketing has exactly one bucket-key column, of a kind Fluss's Iceberg
//     key encoder supports (see AppendIcebergKey).
func (s TableSchema) Validate() error {
	_, err := compile(s)
	return err
}

// SchemaDiff describes the first difference between two schemas as "what
// have has, want what want has" ("4 buckets, want 8"), or "" when they
// define the same table. The schema id is ignored (the tier assigns its
// own) and defaults compare as what they stand for: an empty bucket key is
// the primary key minus the partition keys, bucketing 0 is fluss.
func SchemaDiff(have, want TableSchema) string {
	have, want = normalSchema(have), normalSchema(want)
	if len(have.Columns) != len(want.Columns) {
		return fmt.Sprintf("%d columns, want %d", len(have.Columns), len(want.Columns))
	}
	for i, h := range have.Columns {
		if w := want.Columns[i]; h != w {
			return fmt.Sprintf("column %d is %s, want %s", i, h, w)
		}
	}
	switch {
	case !slices.Equal(have.PrimaryKey, want.PrimaryKey):
		return fmt.Sprintf("primary key (%s), want (%s)", strings.Join(have.PrimaryKey, ", "), strings.Join(want.PrimaryKey, ", "))
	case !slices.Equal(have.PartitionKeys, want.PartitionKeys):
		return fmt.Sprintf("partition keys (%s), want (%s)", strings.Join(have.PartitionKeys, ", "), strings.Join(want.PartitionKeys, ", "))
	case !slices.Equal(have.BucketKey, want.BucketKey):
		return fmt.Sprintf("bucket key (%s), want (%s)", strings.Join(have.BucketKey, ", "), strings.Join(want.BucketKey, ", "))
	case have.Buckets != want.Buckets:
		return fmt.Sprintf("%d buckets, want %d", have.Buckets, want.Buckets)
	case have.Bucketing != want.Bucketing:
		return fmt.Sprintf("bucketing %s, want %s", have.Bucketing, want.Bucketing)
	}
	return ""
}

// normalSchema is s as compile fills in its defaults, or s itself when it
// does not compile.
func normalSchema(s TableSchema) TableSchema {
	if t, err := compile(s); err == nil {
		return t.Schema()
	}
	return s
}

// String is the column as a --column flag spells it: "name TYPE [NOT NULL]".
func (c Column) String() string {
	if c.Nullable {
		return c.Name + " " + c.Type.String()
	}
	return c.Name + " " + c.Type.String() + " NOT NULL"
}

func schemaError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSchema, fmt.Sprintf(format, args...))
}

// compile validates s and builds the table it defines.
func compile(s TableSchema) (*Table, error) {
	if len(s.Columns) == 0 {
		return nil, schemaError("no columns")
	}
	if s.SchemaID < 0 {
		return nil, schemaError("schema id %d is negative", s.SchemaID)
	}
	if len(s.Columns) > MaxColumns {
		return nil, schemaError("%d columns, at most %d", len(s.Columns), MaxColumns)
	}
	text := 0
	for _, c := range s.Columns {
		text += jsonLen(c.Name) + jsonLen(c.Type.String())
	}
	if text > MaxSchemaText {
		return nil, schemaError("the column names and types take %d bytes, at most %d", text, MaxSchemaText)
	}
	t := &Table{cols: slices.Clone(s.Columns), index: make(map[string]int, len(s.Columns))}
	for i, c := range s.Columns {
		switch {
		case c.Name == "":
			return nil, schemaError("column %d has an empty name", i)
		case strings.HasPrefix(c.Name, "__"):
			return nil, schemaError("column %q uses the reserved prefix \"__\"", c.Name)
		}
		if _, dup := t.index[c.Name]; dup {
			return nil, schemaError("duplicate column %q", c.Name)
		}
		if err := c.Type.check(); err != nil {
			return nil, schemaError("column %q has invalid type %s: %v", c.Name, c.Type, err)
		}
		t.index[c.Name] = i
	}

	pk, err := t.resolve("primary key", s.PrimaryKey)
	if err != nil {
		return nil, err
	}
	if len(pk) == 0 {
		return nil, schemaError("primary key is empty")
	}
	for _, i := range pk {
		if s.Columns[i].Nullable {
			return nil, schemaError("primary key column %q is nullable", s.Columns[i].Name)
		}
	}

	inPK := make([]bool, len(s.Columns))
	for _, i := range pk {
		inPK[i] = true
	}
	if t.partKeys, err = t.resolve("partition key", s.PartitionKeys); err != nil {
		return nil, err
	}
	inPart := make([]bool, len(s.Columns))
	for _, i := range t.partKeys {
		inPart[i] = true
		c := s.Columns[i]
		if !inPK[i] {
			return nil, schemaError("partition key %q is not part of the primary key %v", c.Name, s.PrimaryKey)
		}
		if c.Type.Kind == KindDecimal {
			return nil, schemaError("partition key %q has type %s, which cannot be a partition key", c.Name, c.Type)
		}
	}
	for _, i := range pk {
		if !inPart[i] {
			t.physKey = append(t.physKey, i)
		}
	}
	if len(t.physKey) == 0 {
		return nil, schemaError("primary key %v consists only of partition keys, so the physical primary key is empty", s.PrimaryKey)
	}

	if t.bucketKey, err = t.resolve("bucket key", s.BucketKey); err != nil {
		return nil, err
	}
	for _, i := range t.bucketKey {
		name := s.Columns[i].Name
		if inPart[i] {
			return nil, schemaError("bucket key %q is a partition key", name)
		}
		if !inPK[i] {
			return nil, schemaError("bucket key %q is not part of the primary key %v", name, s.PrimaryKey)
		}
	}
	if len(t.bucketKey) == 0 {
		t.bucketKey = slices.Clone(t.physKey)
	}

	if s.Buckets < 1 || s.Buckets > MaxBuckets {
		return nil, schemaError("buckets %d is out of range 1..%d", s.Buckets, MaxBuckets)
	}
	switch s.Bucketing {
	case BucketingFluss, BucketingPaimon:
	case BucketingIceberg:
		if len(t.bucketKey) != 1 {
			return nil, schemaError("iceberg bucketing needs exactly one bucket key column, got %d %v", len(t.bucketKey), t.names(t.bucketKey))
		}
		if c := s.Columns[t.bucketKey[0]]; !icebergKeyKind(c.Type.Kind) {
			return nil, schemaError("iceberg bucketing does not support bucket key column %q of type %s", c.Name, c.Type)
		}
	default:
		return nil, schemaError("unknown bucketing %d", s.Bucketing)
	}

	t.schema = TableSchema{
		SchemaID:      s.SchemaID,
		Columns:       t.cols,
		PrimaryKey:    slices.Clone(s.PrimaryKey),
		PartitionKeys: slices.Clone(s.PartitionKeys),
		BucketKey:     t.names(t.bucketKey),
		Buckets:       s.Buckets,
		Bucketing:     s.Bucketing,
	}
	t.all = make([]int, len(t.cols))
	for i := range t.all {
		t.all[i] = i
	}
	t.bucketIsKey = s.Bucketing != BucketingIceberg && slices.Equal(t.bucketKey, t.physKey)
	return t, nil
}

// jsonLen is the bytes s takes inside a JSON string as encoding/json
// writes it (HTML left unescaped): control characters as \u00XX (or \b,
// \f, \n, \r, \t), quotes and backslashes escaped, U+2028 and U+2029 as \u2028
// and \u2029, each invalid UTF-8 byte as \ufffd.
func jsonLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			n += 6 // \ufffd
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += w
		}
		i += w
	}
	return n
}

// resolve maps column names to indexes; each must exist and appear once.
func (t *Table) resolve(what string, names []string) ([]int, error) {
	var idx []int
	seen := make([]bool, len(t.cols))
	for _, name := range names {
		i, ok := t.index[name]
		if !ok {
			return nil, schemaError("%s column %q does not exist", what, name)
		}
		if seen[i] {
			return nil, schemaError("%s lists column %q twice", what, name)
		}
		seen[i] = true
		idx = append(idx, i)
	}
	return idx, nil
}

func (t *Table) names(idx []int) []string {
	names := make([]string, len(idx))
	for j, i := range idx {
		names[j] = t.cols[i].Name
	}
	return names
}
