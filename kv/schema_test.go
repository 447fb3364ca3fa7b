package kv

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// baseSchema is a valid partitioned table; each case below breaks one rule.
func baseSchema(t testing.TB) TableSchema {
	return TableSchema{
		SchemaID: 1,
		Columns: []Column{
			col(t, "dt", "DATE", false),
			col(t, "id", "BIGINT", false),
			col(t, "name", "STRING", false),
			col(t, "amount", "DECIMAL(10,2)", false),
			col(t, "note", "STRING", true),
			col(t, "flag", "BOOLEAN", false),
		},
		PrimaryKey:    []string{"dt", "id", "name"},
		PartitionKeys: []string{"dt"},
		Buckets:       8,
	}
}

func TestSchemaValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(s *TableSchema)
		fragment string
	}{
		{"no columns", func(s *TableSchema) { s.Columns = nil }, "no columns"},
		{"negative schema id", func(s *TableSchema) { s.SchemaID = -1 }, "schema id -1 is negative"},
		{"empty name", func(s *TableSchema) { s.Columns[4].Name = "" }, "column 4 has an empty name"},
		{"reserved prefix", func(s *TableSchema) { s.Columns[4].Name = "__offset" }, `column "__offset" uses the reserved prefix "__"`},
		{"duplicate column", func(s *TableSchema) { s.Columns[4].Name = "id" }, `duplicate column "id"`},
		{"invalid type", func(s *TableSchema) { s.Columns[3].Type.Precision = 50 }, `column "amount" has invalid type DECIMAL(50,2): precision 50 is out of range 1..38`},
		{"missing type", func(s *TableSchema) { s.Columns[3].Type = Type{} }, `column "amount" has invalid type Kind(0): unknown kind`},
		{"empty primary key", func(s *TableSchema) { s.PrimaryKey, s.PartitionKeys = nil, nil }, "primary key is empty"},
		{"unknown primary key", func(s *TableSchema) { s.PrimaryKey = append(s.PrimaryKey, "nope") }, `primary key column "nope" does not exist`},
		{"repeated primary key", func(s *TableSchema) { s.PrimaryKey = append(s.PrimaryKey, "id") }, `primary key lists column "id" twice`},
		{"nullable primary key", func(s *TableSchema) { s.PrimaryKey = append(s.PrimaryKey, "note") }, `primary key column "note" is nullable`},
		{"unknown partition key", func(s *TableSchema) { s.PartitionKeys = []string{"day"} }, `partition key column "day" does not exist`},
		{"repeated partition key", func(s *TableSchema) { s.PartitionKeys = []string{"dt", "dt"} }, `partition key lists column "dt" twice`},
		{"partition key outside primary key", func(s *TableSchema) { s.PartitionKeys = []string{"dt", "flag"} }, `partition key "flag" is not part of the primary key [dt id name]`},
		{"decimal partition key", func(s *TableSchema) {
			s.PrimaryKey = append(s.PrimaryKey, "amount")
			s.PartitionKeys = []string{"amount"}
		}, `partition key "amount" has type DECIMAL(10,2), which cannot be a partition key`},
		{"physical key empty", func(s *TableSchema) { s.PrimaryKey = []string{"dt"} }, "primary key [dt] consists only of partition keys, so the physical primary key is empty"},
		{"unknown bucket key", func(s *TableSchema) { s.BucketKey = []string{"x"} }, `bucket key column "x" does not exist`},
		{"repeated bucket key", func(s *TableSchema) { s.BucketKey = []string{"id", "id"} }, `bucket key lists column "id" twice`},
		{"bucket key is partition key", func(s *TableSchema) { s.BucketKey = []string{"id", "dt"} }, `bucket key "dt" is a partition key`},
		{"bucket key outside primary key", func(s *TableSchema) { s.BucketKey = []string{"flag"} }, `bucket key "flag" is not part of the primary key [dt id name]`},
		{"zero buckets", func(s *TableSchema) { s.Buckets = 0 }, "buckets 0 is out of range 1..4096"},
		{"too many buckets", func(s *TableSchema) { s.Buckets = 4097 }, "buckets 4097 is out of range 1..4096"},
		{"unknown bucketing", func(s *TableSchema) { s.Bucketing = 7 }, "unknown bucketing 7"},
		{"iceberg with two bucket keys", func(s *TableSchema) { s.Bucketing = BucketingIceberg }, "iceberg bucketing needs exactly one bucket key column, got 2 [id name]"},
		{"iceberg with unsupported type", func(s *TableSchema) {
			s.Bucketing = BucketingIceberg
			s.PrimaryKey = append(s.PrimaryKey, "flag")
			s.BucketKey = []string{"flag"}
		}, `iceberg bucketing does not support bucket key column "flag" of type BOOLEAN`},
		{"iceberg with TIMESTAMP_LTZ", func(s *TableSchema) {
			s.Bucketing = BucketingIceberg
			s.Columns[1].Type = Type{Kind: KindTimestampLTZ, Precision: 6}
			s.BucketKey = []string{"id"}
		}, `iceberg bucketing does not support bucket key column "id" of type TIMESTAMP_LTZ(6)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSchema(t)
			if err := s.Validate(); err != nil {
				t.Fatalf("base schema: %v", err)
			}
			tc.edit(&s)
			err := s.Validate()
			wantErr(t, err, tc.fragment)
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("%v does not wrap ErrInvalidSchema", err)
			}
			if _, err := NewTable(s); err == nil {
				t.Fatal("NewTable accepted the schema")
			}
		})
	}
}

func TestTableLayout(t *testing.T) {
	tbl := mustTable(t, baseSchema(t))
	if got := tbl.PhysicalKey(); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("PhysicalKey = %v", got)
	}
	if got := tbl.PartitionKeys(); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("PartitionKeys = %v", got)
	}
	if got := tbl.BucketKey(); !reflect.DeepEqual(got, []int{1, 2}) {
		t.Errorf("default BucketKey = %v", got)
	}
	if s := tbl.Schema(); !reflect.DeepEqual(s.BucketKey, []string{"id", "name"}) {
		t.Errorf("Schema().BucketKey = %v", s.BucketKey)
	}
	if i, ok := tbl.ColumnIndex("note"); !ok || i != 4 || tbl.Column(i).Name != "note" {
		t.Errorf("ColumnIndex(note) = %d, %v", i, ok)
	}
	if _, ok := tbl.ColumnIndex("nope"); ok {
		t.Error("ColumnIndex(nope) found a column")
	}
	if tbl.NumColumns() != 6 || tbl.Buckets() != 8 || tbl.Bucketing() != BucketingFluss || tbl.SchemaID() != 1 {
		t.Error("accessors disagree with the schema")
	}

	// The table owns its schema: changing the input or a returned copy changes nothing.
	s := baseSchema(t)
	tbl = mustTable(t, s)
	s.Columns[0].Name = "changed"
	s.PrimaryKey[0] = "changed"
	got := tbl.Schema()
	got.Columns[1].Name = "changed"
	got.BucketKey[0] = "changed"
	tbl.PhysicalKey()[0] = 99
	if again := tbl.Schema(); again.Columns[0].Name != "dt" || again.Columns[1].Name != "id" ||
		again.PrimaryKey[0] != "dt" || again.BucketKey[0] != "id" || tbl.PhysicalKey()[0] != 1 {
		t.Fatalf("table state changed through a copy: %+v", again)
	}
}

func TestSchemaJSON(t *testing.T) {
	s := baseSchema(t)
	s.BucketKey = []string{"id"}
	s.Bucketing = BucketingPaimon
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"schema_id":1,"columns":[{"name":"dt","type":"DATE","nullable":false},` +
		`{"name":"id","type":"BIGINT","nullable":false},{"name":"name","type":"STRING","nullable":false},` +
		`{"name":"amount","type":"DECIMAL(10,2)","nullable":false},{"name":"note","type":"STRING","nullable":true},` +
		`{"name":"flag","type":"BOOLEAN","nullable":false}],"primary_key":["dt","id","name"],` +
		`"partition_keys":["dt"],"bucket_key":["id"],"buckets":8,"bucketing":"paimon"}`
	if string(b) != want {
		t.Fatalf("JSON\n got %s\nwant %s", b, want)
	}
	var back TableSchema
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
}

func TestCustomBucketKey(t *testing.T) {
	s := baseSchema(t)
	s.BucketKey = []string{"name"}
	tbl := mustTable(t, s)
	row := Row{Date(19000), int64(7), "abc", DecimalFromInt64(100), nil, true}
	key, _, bucket, err := tbl.NewEncoder().Encode(RowFields(row))
	if err != nil {
		t.Fatal(err)
	}
	// The bucket comes from the compacted encoding of "name" alone, not the key.
	if want := FlussBucket(unhex(t, "03 61 62 63"), 8); bucket != want {
		t.Fatalf("bucket = %d, want %d", bucket, want)
	}
	if b, err := tbl.Bucket(row); err != nil || b != bucket {
		t.Fatalf("Bucket = %d, %v; want %d", b, err, bucket)
	}
	_, err = tbl.BucketOfKey(key)
	wantErr(t, err, `bucket key [name] is not the physical primary key [id name]`)
	if !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("%v does not wrap ErrInvalidSchema", err)
	}
}

func TestSchemaDiff(t *testing.T) {
	base := TableSchema{
		Columns: []Column{
			col(t, "id", "BIGINT", false), col(t, "k", "STRING", false),
			col(t, "day", "DATE", false), col(t, "v", "STRING", true),
		},
		PrimaryKey: []string{"id", "k", "day"}, PartitionKeys: []string{"day"}, Buckets: 4,
	}
	same := base
	same.SchemaID = 3
	same.BucketKey = []string{"id", "k"} // the default, spelled out
	same.Bucketing = BucketingFluss
	if d := SchemaDiff(base, same); d != "" {
		t.Errorf("equal schemas differ: %s", d)
	}
	for name, tc := range map[string]struct {
		edit func(*TableSchema)
		want string
	}{
		"column type": {func(s *TableSchema) {
			s.Columns = []Column{s.Columns[0], s.Columns[1], s.Columns[2], col(t, "v", "INT", true)}
		}, "column 3 is v STRING, want v INT"},
		"nullability": {func(s *TableSchema) {
			s.Columns = []Column{s.Columns[0], s.Columns[1], s.Columns[2], col(t, "v", "STRING", false)}
		}, "column 3 is v STRING, want v STRING NOT NULL"},
		"columns": {func(s *TableSchema) {
			s.Columns = append(s.Columns[:4:4], col(t, "w", "INT", true))
		}, "4 columns, want 5"},
		"primary key":       {func(s *TableSchema) { s.PrimaryKey = []string{"id", "day"} }, "primary key (id, k, day), want (id, day)"},
		"primary key order": {func(s *TableSchema) { s.PrimaryKey = []string{"k", "id", "day"} }, "primary key (id, k, day), want (k, id, day)"},
		"partition keys":    {func(s *TableSchema) { s.PartitionKeys = nil }, "partition keys (day), want ()"},
		"bucket key":        {func(s *TableSchema) { s.BucketKey = []string{"id"} }, "bucket key (id, k), want (id)"},
		"buckets":           {func(s *TableSchema) { s.Buckets = 8 }, "4 buckets, want 8"},
		"bucketing":         {func(s *TableSchema) { s.Bucketing = BucketingPaimon }, "bucketing fluss, want paimon"},
	} {
		other := base
		tc.edit(&other)
		if err := other.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := SchemaDiff(base, other); d != tc.want {
			t.Errorf("%s: diff %q, want %q", name, d, tc.want)
		}
	}
}
