package lake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/thawdb/thaw/kv"
)

// MappingOptions adjust how MapSchema maps an Iceberg table to a tier schema.
type MappingOptions struct {
	// PrimaryKey names the tier primary key; empty means the schema's
	// identifier fields. Either way every tier partition key not named is
	// appended, since the tier requires partition keys to be part of the key.
	PrimaryKey []string `json:"primary_key,omitempty" yaml:"primary_key,omitempty"`
	// Buckets is the tier bucket count. With an Iceberg bucket(col, N)
	// partition field it may be 0 (N is taken) and must otherwise equal N;
	// without one it is required.
	Buckets int `json:"buckets,omitempty" yaml:"buckets,omitempty"`
	// Bucketing is "fluss" (the default), "paimon" or "iceberg". With an
	// Iceberg bucket field it may only be "" or "iceberg".
	Bucketing string `json:"bucketing,omitempty" yaml:"bucketing,omitempty"`
	// SchemaID is the tier schema id written into every value.
	SchemaID int16 `json:"schema_id,omitempty" yaml:"schema_id,omitempty"`
	// SnapshotID selects the snapshot whose schema is mapped, which is the
	// schema Scan reads that snapshot with. Nil means the current snapshot
	// (the current schema for a table without snapshots).
	SnapshotID *int64 `json:"snapshot_id,omitempty" yaml:"snapshot_id,omitempty"`
}

// PartitionMapping tells how each tier partition key is derived from an
// Iceberg row and from an Iceberg partition tuple. It comes from the table's
// default partition spec.
type PartitionMapping struct {
	// SpecID is the Iceberg partition spec the mapping was made from.
	SpecID int `json:"spec_id"`
	// Keys are the tier partition keys in order; empty for a non-partitioned
	// tier table.
	Keys []PartitionKeyMapping `json:"keys"`
	// BucketSource is the column of the spec's bucket(col, N) field, mapped to
	// the tier's Iceberg bucketing with Buckets buckets; "" when there is none.
	BucketSource string `json:"bucket_source,omitempty"`
	Buckets      int    `json:"buckets,omitempty"`
}

// PartitionKeyMapping is one tier partition key.
type PartitionKeyMapping struct {
	// Column is the tier column: the source column itself for identity, or a
	// derived column named after the Iceberg partition field for the time
	// transforms.
	Column string  `json:"column"`
	Type   kv.Type `json:"type"`
	// Source and SourceID name the Iceberg source column; Transform is
	// identity, year, month, day or hour.
	Source    string `json:"source"`
	SourceID  int    `json:"source_id"`
	Transform string `json:"transform"`
	// FieldID is the Iceberg partition field id.
	FieldID int `json:"field_id"`
	// Derived is true when Column is added to the tier schema (it is not an
	// Iceberg column); Scan with this mapping computes it for every row.
	Derived bool `json:"derived"`
}

// Types of the derived partition key columns, per time transform. Each
// value's partition-name string equals Iceberg's human-readable partition
// value: year 2024 -> "2024", month "2024-01", day 2024-01-15 ->
// "2024-01-15", hour "2024-01-15-13" (UTC).
var derivedTypes = map[string]kv.Type{
	"year":  {Kind: kv.KindInt},
	"month": {Kind: kv.KindString},
	"day":   {Kind: kv.KindDate},
	"hour":  {Kind: kv.KindString},
}

// MapType maps an Iceberg type, in Iceberg's spelling, to a tier type:
//
//	boolean -> BOOLEAN           int -> INT                 long -> BIGINT
//	float -> FLOAT               double -> DOUBLE           decimal(P,S) -> DECIMAL(P,S)
//	date -> DATE                 time -> TIME(3)            string -> STRING
//	timestamp -> TIMESTAMP(6)    timestamptz -> TIMESTAMP_LTZ(6)
//	timestamp_ns -> TIMESTAMP(9) timestamptz_ns -> TIMESTAMP_LTZ(9)
//	uuid -> BINARY(16)           fixed[L] -> BINARY(L)      binary -> BYTES
//
// The tier's TIME holds milliseconds, so a time value with sub-millisecond
// digits fails when the row is encoded. Nested types (struct, list, map),
// variant, unknown, geometry and geography are an error wrapping
// ErrUnmappable.
func MapType(icebergType string) (kv.Type, error) {
	t := strings.TrimSpace(icebergType)
	switch t {
	case "boolean":
		return kv.Type{Kind: kv.KindBoolean}, nil
	case "int":
		return kv.Type{Kind: kv.KindInt}, nil
	case "long":
		return kv.Type{Kind: kv.KindBigInt}, nil
	case "float":
		return kv.Type{Kind: kv.KindFloat}, nil
	case "double":
		return kv.Type{Kind: kv.KindDouble}, nil
	case "date":
		return kv.Type{Kind: kv.KindDate}, nil
	case "time":
		return kv.Type{Kind: kv.KindTime, Precision: 3}, nil
	case "timestamp":
		return kv.Type{Kind: kv.KindTimestamp, Precision: 6}, nil
	case "timestamptz":
		return kv.Type{Kind: kv.KindTimestampLTZ, Precision: 6}, nil
	case "timestamp_ns":
		return kv.Type{Kind: kv.KindTimestamp, Precision: 9}, nil
	case "timestamptz_ns":
		return kv.Type{Kind: kv.KindTimestampLTZ, Precision: 9}, nil
	case "string":
		return kv.Type{Kind: kv.KindString}, nil
	case "uuid":
		return kv.Type{Kind: kv.KindBinary, Length: 16}, nil
	case "binary":
		return kv.Type{Kind: kv.KindBytes}, nil
	}
	if inner, ok := cutWrapped(t, "decimal(", ")"); ok {
		ps, ss, ok := strings.Cut(inner, ",")
		p, err1 := strconv.Atoi(strings.TrimSpace(ps))
		s, err2 := strconv.Atoi(strings.TrimSpace(ss))
		if !ok || err1 != nil || err2 != nil {
			return kv.Type{}, fmt.Errorf("%w: malformed type %q", ErrUnmappable, t)
		}
		d := kv.Type{Kind: kv.KindDecimal, Precision: p, Scale: s}
		if err := d.Validate(); err != nil {
			return kv.Type{}, fmt.Errorf("%w: type %q: %v", ErrUnmappable, t, err)
		}
		return d, nil
	}
	if inner, ok := cutWrapped(t, "fixed[", "]"); ok {
		n, err := strconv.Atoi(inner)
		if err != nil || n < 1 {
			return kv.Type{}, fmt.Errorf("%w: malformed type %q", ErrUnmappable, t)
		}
		return kv.Type{Kind: kv.KindBinary, Length: n}, nil
	}
	for _, nested := range []string{"struct", "list", "map"} {
		if strings.HasPrefix(t, nested+"<") || t == nested {
			return kv.Type{}, fmt.Errorf("%w: nested type %s: the tier has no nested types", ErrUnmappable, t)
		}
	}
	return kv.Type{}, fmt.Errorf("%w: type %s has no tier equivalent", ErrUnmappable, t)
}

func cutWrapped(s, prefix, suffix string) (string, bool) {
	if !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, suffix) {
		return "", false
	}
	return s[len(prefix) : len(s)-len(suffix)], true
}

// parseTransform splits "bucket[16]" into ("bucket", 16).
func parseTransform(s string) (string, int) {
	if name, arg, ok := strings.Cut(s, "["); ok && strings.HasSuffix(arg, "]") {
		n, err := strconv.Atoi(strings.TrimSuffix(arg, "]"))
		if err == nil {
			return name, n
		}
	}
	return s, 0
}

// MapSchema maps an Iceberg table (as Describe returns it) to a tier schema:
//
//   - columns: every top-level column of the mapped schema (see
//     MappingOptions.SnapshotID), in order, typed by MapType, nullable
//     unless required; then one derived column per time-transform
//     partition field;
//   - partition keys, from the default partition spec: identity(c) -> c;
//     year/month/day/hour(c) -> a derived column named after the partition
//     field (types in docs/lake.md); bucket(c, N) -> not a partition key but
//     Iceberg bucketing on c with N buckets; void -> ignored; truncate and
//     anything else -> an error;
//   - primary key: the identifier fields (or opts.PrimaryKey) followed by the
//     partition keys they lack; all primary-key columns become NOT NULL;
//   - bucket key: the Iceberg bucket source, else the default.
//
// Every failure names the field: a *MappingError for Iceberg fields with no
// tier equivalent or a missing primary key, and kv's schema error otherwise.
func MapSchema(info *TableInfo, opts MappingOptions) (kv.TableSchema, PartitionMapping, error) {
	var none kv.TableSchema
	schema, err := mappedSchema(info, opts.SnapshotID)
	if err != nil {
		return none, PartitionMapping{}, err
	}
	cols := make([]kv.Column, 0, len(schema.Fields))
	byID := map[int]int{} // Iceberg field id -> column index
	for _, f := range schema.Fields {
		t, err := MapType(f.Type)
		if err != nil {
			return none, PartitionMapping{}, mappingError(f.Name, "%v", strings.TrimPrefix(err.Error(), ErrUnmappable.Error()+": "))
		}
		byID[f.ID] = len(cols)
		cols = append(cols, kv.Column{Name: f.Name, Type: t, Nullable: !f.Required})
	}

	pm := PartitionMapping{SpecID: info.Spec.ID, Keys: []PartitionKeyMapping{}}
	var derived []kv.Column
	for _, pf := range info.Spec.Fields {
		name, arg := parseTransform(pf.Transform)
		ci, ok := byID[pf.SourceID]
		if !ok && name != "void" {
			return none, PartitionMapping{}, mappingError(pf.Name, "source column id %d of %s is not a top-level column of schema %d", pf.SourceID, pf.Transform, schema.ID)
		}
		switch name {
		case "identity":
			c := cols[ci]
			if c.Type.Kind == kv.KindDecimal {
				return none, PartitionMapping{}, mappingError(pf.Name, "identity partition on %s column %q: a tier partition key cannot be DECIMAL", c.Type, c.Name)
			}
			pm.Keys = append(pm.Keys, PartitionKeyMapping{Column: c.Name, Type: c.Type, Source: c.Name, SourceID: pf.SourceID, Transform: name, FieldID: pf.FieldID})
		case "year", "month", "day", "hour":
			if slices.ContainsFunc(cols, func(c kv.Column) bool { return c.Name == pf.Name }) {
				return none, PartitionMapping{}, mappingError(pf.Name, "derived partition column %q of %s(%s) collides with a column", pf.Name, name, cols[ci].Name)
			}
			t := derivedTypes[name]
			derived = append(derived, kv.Column{Name: pf.Name, Type: t})
			pm.Keys = append(pm.Keys, PartitionKeyMapping{Column: pf.Name, Type: t, Source: cols[ci].Name, SourceID: pf.SourceID, Transform: name, FieldID: pf.FieldID, Derived: true})
		case "bucket":
			if pm.BucketSource != "" {
				return none, PartitionMapping{}, mappingError(pf.Name, "a second bucket field (after bucket(%s)): the tier buckets by one column", pm.BucketSource)
			}
			pm.BucketSource, pm.Buckets = cols[ci].Name, arg
		case "void":
		default:
			return none, PartitionMapping{}, mappingError(pf.Name, "partition transform %s has no tier equivalent", pf.Transform)
		}
	}
	cols = append(cols, derived...)

	pk := opts.PrimaryKey
	if len(pk) == 0 {
		pk = schema.IdentifierFields
	}
	if len(pk) == 0 {
		return none, PartitionMapping{}, mappingError(info.Name, "no identifier fields and no primary key given: the tier needs a primary key")
	}
	pk = slices.Clone(pk)
	for _, k := range pm.Keys {
		if !slices.Contains(pk, k.Column) {
			pk = append(pk, k.Column)
		}
	}
	for _, name := range pk {
		i := slices.IndexFunc(cols, func(c kv.Column) bool { return c.Name == name })
		if i < 0 {
			return none, PartitionMapping{}, mappingError(name, "primary key column does not exist in schema %d", schema.ID)
		}
		cols[i].Nullable = false
	}

	ts := kv.TableSchema{SchemaID: opts.SchemaID, Columns: cols, PrimaryKey: pk, Buckets: opts.Buckets}
	for _, k := range pm.Keys {
		ts.PartitionKeys = append(ts.PartitionKeys, k.Column)
	}
	if pm.BucketSource != "" {
		if opts.Bucketing != "" && !strings.EqualFold(opts.Bucketing, "iceberg") {
			return none, PartitionMapping{}, mappingError(pm.BucketSource, "the spec buckets by bucket(%s, %d), which maps to iceberg bucketing, not %s", pm.BucketSource, pm.Buckets, opts.Bucketing)
		}
		if opts.Buckets != 0 && opts.Buckets != pm.Buckets {
			return none, PartitionMapping{}, mappingError(pm.BucketSource, "the spec has bucket(%s, %d) but %d buckets were asked for", pm.BucketSource, pm.Buckets, opts.Buckets)
		}
		if !slices.Contains(pk, pm.BucketSource) {
			return none, PartitionMapping{}, mappingError(pm.BucketSource, "bucket(%s, %d) source is not part of the primary key %v", pm.BucketSource, pm.Buckets, pk)
		}
		ts.Bucketing, ts.Buckets, ts.BucketKey = kv.BucketingIceberg, pm.Buckets, []string{pm.BucketSource}
	} else {
		if opts.Bucketing != "" {
			b, err := kv.ParseBucketing(opts.Bucketing)
			if err != nil {
				return none, PartitionMapping{}, fmt.Errorf("lake: map %s: %w", info.Name, err)
			}
			ts.Bucketing = b
		}
		if ts.Buckets == 0 {
			return none, PartitionMapping{}, fmt.Errorf("%w: map %s: buckets not set and the default spec has no bucket field to take them from", ErrConfig, info.Name)
		}
	}
	t, err := kv.NewTable(ts)
	if err != nil {
		return none, PartitionMapping{}, fmt.Errorf("lake: map %s: %w", info.Name, err)
	}
	return t.Schema(), pm, nil
}

// mappedSchema picks the schema of snapshot id (nil: the current snapshot),
// or the current schema when there is no snapshot or it records none.
func mappedSchema(info *TableInfo, id *int64) (SchemaInfo, error) {
	if id == nil {
		id = info.CurrentSnapshotID
		if id == nil {
			return info.Schema, nil
		}
	}
	i := slices.IndexFunc(info.Snapshots, func(s SnapshotInfo) bool { return s.ID == *id })
	if i < 0 {
		return SchemaInfo{}, fmt.Errorf("%w: table %s has no snapshot %d", ErrNotFound, info.Name, *id)
	}
	sid := info.Snapshots[i].SchemaID
	if sid == nil {
		return info.Schema, nil
	}
	s, ok := info.schemaByID(*sid)
	if !ok {
		return SchemaInfo{}, fmt.Errorf("%w: table %s snapshot %d names unknown schema %d", ErrNotFound, info.Name, *id, *sid)
	}
	return s, nil
}

// PartitionName returns the tier partition name of a lake partition: each
// tier partition key's value, taken from the partition tuple field with the
// same source column and transform, converted with kv's partition-value
// rules and joined by "$". It is "" when the tier table is not partitioned.
// A partition whose tuple lacks such a field (an older spec, e.g. before the
// table was partitioned by day) or holds a null for it does not map to one
// tier partition, nor does one whose values make no valid tier partition
// name (a character outside [A-Za-z0-9_-], say "eu.west"): the error wraps
// ErrNoTierPartition.
func (m PartitionMapping) PartitionName(p PartitionStats) (string, error) {
	if len(m.Keys) == 0 {
		return "", nil
	}
	parts := make([]string, 0, len(m.Keys))
	for _, k := range m.Keys {
		i := slices.IndexFunc(p.Values, func(v PartitionValue) bool {
			name, _ := parseTransform(v.Transform)
			return v.SourceID == k.SourceID && name == k.Transform
		})
		if i < 0 {
			return "", fmt.Errorf("%w: partition %q of spec %d has no %s(%s) field for tier partition key %q",
				ErrNoTierPartition, p.Path, p.SpecID, k.Transform, k.Source, k.Column)
		}
		if p.Values[i].Value == nil {
			return "", fmt.Errorf("%w: partition %q of spec %d: field %q is null; tier partition key %q cannot be null",
				ErrNoTierPartition, p.Path, p.SpecID, p.Values[i].Name, k.Column)
		}
		v, err := tierPartitionValue(k, p.Values[i])
		if err != nil {
			return "", fmt.Errorf("%w: partition %q of spec %d: key %q: %v", ErrNoTierPartition, p.Path, p.SpecID, k.Column, err)
		}
		s, err := kv.PartitionValueString(k.Type, v)
		if err != nil {
			return "", fmt.Errorf("%w: partition %q of spec %d: key %q: %w", ErrNoTierPartition, p.Path, p.SpecID, k.Column, err)
		}
		parts = append(parts, s)
	}
	name := strings.Join(parts, "$")
	if err := kv.ValidatePartitionName(name); err != nil {
		return "", fmt.Errorf("%w: partition %q of spec %d: %w", ErrNoTierPartition, p.Path, p.SpecID, err)
	}
	return name, nil
}

// tierPartitionValue converts a PartitionValue's Value into the Go value kv
// uses for the key's tier type. It takes the normalized values Partitions
// returns, and the same values after a JSON round trip (numbers as float64,
// bytes as base64 strings).
func tierPartitionValue(k PartitionKeyMapping, pv PartitionValue) (any, error) {
	raw := pv.Value
	n, isInt := intValue(raw)
	need := func() (any, error) { return nil, fmt.Errorf("value %v (%T) does not fit %s", raw, raw, k.Type) }
	switch k.Transform {
	case "year", "month", "day", "hour":
		if !isInt {
			return need()
		}
		switch k.Transform {
		case "year":
			return int32(1970 + n), nil
		case "month":
			return epoch.AddDate(0, int(n), 0).Format("2006-01"), nil
		case "day":
			return kv.Date(n), nil
		default:
			return time.Unix(n*3600, 0).UTC().Format("2006-01-02-15"), nil
		}
	}
	// identity: the source type's value.
	switch k.Type.Kind {
	case kv.KindBoolean:
		if b, ok := raw.(bool); ok {
			return b, nil
		}
	case kv.KindInt:
		if isInt {
			return int32(n), nil
		}
	case kv.KindBigInt:
		if isInt {
			return n, nil
		}
	case kv.KindFloat:
		switch f := raw.(type) {
		case float32:
			return f, nil
		case float64:
			return float32(f), nil
		}
	case kv.KindDouble:
		switch f := raw.(type) {
		case float64:
			return f, nil
		case float32:
			return float64(f), nil
		}
	case kv.KindString:
		if s, ok := raw.(string); ok {
			return s, nil
		}
	case kv.KindDate:
		if isInt {
			return kv.Date(n), nil
		}
	case kv.KindTime:
		if isInt {
			if n%1000 != 0 {
				return nil, fmt.Errorf("time %dus has sub-millisecond digits", n)
			}
			return kv.Time(n / 1000), nil
		}
	case kv.KindTimestamp, kv.KindTimestampLTZ:
		if isInt {
			if k.Type.Precision == 9 {
				return kv.Timestamp{Millis: floorDiv(n, 1e6), NanoOfMilli: int32(n - floorDiv(n, 1e6)*1e6)}, nil
			}
			return kv.Timestamp{Millis: floorDiv(n, 1e3), NanoOfMilli: int32(n-floorDiv(n, 1e3)*1e3) * 1000}, nil
		}
	case kv.KindBinary, kv.KindBytes:
		switch b := raw.(type) {
		case []byte:
			return b, nil
		case string:
			if pv.Type == "uuid" {
				u, err := uuid.Parse(b)
				if err != nil {
					return nil, err
				}
				return u[:], nil
			}
			return base64.StdEncoding.DecodeString(b)
		}
	}
	return need()
}

// intValue reads an integer from a normalized value or its JSON decoding.
func intValue(v any) (int64, bool) {
	if n, ok := asInt64(v); ok {
		return n, true
	}
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}
