package tierpb

import (
	"errors"
	"fmt"
	"math"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
)

// MaxReplicationFactor bounds a table's replication factor (the
// coordinator refuses more; clients check it before they ask).
const MaxReplicationFactor = 16

// narrow is n as an int32, or -1 (which no schema accepts) when it does
// not fit: a truncation could turn an invalid count into a valid one.
func narrow(n int) int32 {
	if n < math.MinInt32 || n > math.MaxInt32 {
		return -1
	}
	return int32(n)
}

// SchemaToProto converts a kv table schema to its wire form.
func SchemaToProto(s kv.TableSchema) *tierv1.TableSchema {
	p := &tierv1.TableSchema{
		SchemaId:      int32(s.SchemaID),
		PrimaryKey:    s.PrimaryKey,
		PartitionKeys: s.PartitionKeys,
		BucketKey:     s.BucketKey,
		Buckets:       narrow(s.Buckets),
		Bucketing:     s.Bucketing.String(),
	}
	for _, c := range s.Columns {
		p.Columns = append(p.Columns, &tierv1.Column{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable})
	}
	return p
}

// SchemaFromProto converts a wire schema to kv's definition: it parses the
// column types, the bucketing (empty means fluss) and checks the schema id
// range. It does not validate the schema as a whole; compile the result
// with kv.NewTable for that.
func SchemaFromProto(p *tierv1.TableSchema) (kv.TableSchema, error) {
	if p == nil {
		return kv.TableSchema{}, errors.New("tierpb: no schema")
	}
	if p.GetSchemaId() < 0 || p.GetSchemaId() > math.MaxInt16 {
		return kv.TableSchema{}, fmt.Errorf("tierpb: schema id %d not in 0..%d", p.GetSchemaId(), math.MaxInt16)
	}
	if n := len(p.GetColumns()); n > kv.MaxColumns {
		return kv.TableSchema{}, fmt.Errorf("tierpb: %d columns, at most %d", n, kv.MaxColumns)
	}
	s := kv.TableSchema{
		SchemaID:      int16(p.GetSchemaId()),
		PrimaryKey:    p.GetPrimaryKey(),
		PartitionKeys: p.GetPartitionKeys(),
		BucketKey:     p.GetBucketKey(),
		Buckets:       int(p.GetBuckets()),
	}
	for _, c := range p.GetColumns() {
		t, err := kv.ParseType(c.GetType())
		if err != nil {
			return kv.TableSchema{}, fmt.Errorf("tierpb: column %q: %w", c.GetName(), err)
		}
		s.Columns = append(s.Columns, kv.Column{Name: c.GetName(), Type: t, Nullable: c.GetNullable()})
	}
	if p.GetBucketing() != "" {
		b, err := kv.ParseBucketing(p.GetBucketing())
		if err != nil {
			return kv.TableSchema{}, fmt.Errorf("tierpb: %w", err)
		}
		s.Bucketing = b
	}
	return s, nil
}
