package tierpb

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
)

func TestSchemaRoundTrip(t *testing.T) {
	typ := func(s string) kv.Type {
		ty, err := kv.ParseType(s)
		if err != nil {
			t.Fatal(err)
		}
		return ty
	}
	in := kv.TableSchema{
		SchemaID: 3,
		Columns: []kv.Column{
			{Name: "dt", Type: typ("STRING")}, {Name: "id", Type: typ("BIGINT")},
			{Name: "amount", Type: typ("DECIMAL(10,2)"), Nullable: true},
		},
		PrimaryKey: []string{"dt", "id"}, PartitionKeys: []string{"dt"}, BucketKey: []string{"id"},
		Buckets: 4, Bucketing: kv.BucketingIceberg,
	}
	out, err := SchemaFromProto(SchemaToProto(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestSchemaFromProtoErrors(t *testing.T) {
	for _, tc := range []struct {
		p    *tierv1.TableSchema
		want string
	}{
		{nil, "no schema"},
		{&tierv1.TableSchema{SchemaId: -1}, "schema id -1"},
		{&tierv1.TableSchema{SchemaId: 1 << 15}, "schema id 32768"},
		{&tierv1.TableSchema{Columns: []*tierv1.Column{{Name: "x", Type: "ARRAY<INT>"}}}, `column "x"`},
		{&tierv1.TableSchema{Bucketing: "hudi"}, "hudi"},
	} {
		_, err := SchemaFromProto(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.p, err, tc.want)
		}
	}
	_, err := SchemaFromProto(&tierv1.TableSchema{Columns: []*tierv1.Column{{Name: "x", Type: "MAP<INT,INT>"}}})
	if !errors.Is(err, kv.ErrNestedType) {
		t.Errorf("nested type: %v, want kv.ErrNestedType", err)
	}
}

// TestSchemaToProtoNarrowsSafely: a bucket count beyond int32 goes out as
// -1, which no schema accepts; it was truncated (1<<32+8 became a valid 8).
func TestSchemaToProtoNarrowsSafely(t *testing.T) {
	for _, n := range []int{1<<32 + 8, -(1<<32 + 8), math.MaxInt64} {
		if got := SchemaToProto(kv.TableSchema{Buckets: n}).GetBuckets(); got != -1 {
			t.Errorf("buckets %d went out as %d, want -1", n, got)
		}
	}
	if got := SchemaToProto(kv.TableSchema{Buckets: 4096}).GetBuckets(); got != 4096 {
		t.Errorf("buckets 4096 went out as %d", got)
	}
}
