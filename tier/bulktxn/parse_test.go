package bulktxn

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
)

type badRecord struct {
	name string
	doc  []byte
	want string
}

// badRecords are stored values of the fence-ready record of seedRecords,
// each broken in one way.
func badRecords(tb testing.TB) []badRecord {
	tb.Helper()
	g, err := bulkload.EncodeRecord(seedRecords(tb)[1])
	if err != nil {
		tb.Fatal(err)
	}
	edit := func(old, new string) []byte {
		if !bytes.Contains(g, []byte(old)) {
			tb.Fatalf("test case: %s not in %s", old, g)
		}
		return bytes.Replace(g, []byte(old), []byte(new), 1)
	}
	return []badRecord{
		{"empty", nil, "unexpected end of json"},
		{"null", []byte(`null`), "not a json object"},
		{"trailing object", append(bytes.Clone(g), `{}`...), "trailing data"},
		{"trailing brace", append(bytes.Clone(g), `}`...), "trailing data"},
		{"invalid utf-8", edit(`"orders"`, "\"ord\xffers\""), "invalid utf-8"},
		{"unknown member", edit(`"version":1,`, `"version":1,"token":"x",`), `unknown member "token"`},
		{"member in another case", edit(`"version":1,`, `"Version":1,`), `unknown member "Version"`},
		{"duplicate member", edit(`"version":1,`, `"version":1,"version":1,`), `duplicate key "version"`},
		{"duplicate schema member", edit(`"buckets":3`, `"buckets":3,"buckets":3`), `duplicate key "buckets"`},
		{"missing member", edit(`"version":1,`, ``), `missing member "version"`},
		{"wrong version", edit(`"version":1,`, `"version":2,`), "unsupported version 2"},
		{"null member", edit(`"table_id":7`, `"table_id":null`), "null member value"},
		{"negative table id", edit(`"table_id":7`, `"table_id":-7`), "table_id -7 not positive"},
		{"too many buckets", edit(`"bucket_count":3`, `"bucket_count":5000`), "bucket_count 5000 not in 1..4096"},
		{"schema not an object", edit(testSchemaJSON(3), `[]`), "table_schema is not a json object"},
	}
}

func testSchemaJSON(n int) string { return string(testSchema(n, false)) }

func TestDecodeRecordRejects(t *testing.T) {
	for _, tc := range badRecords(t) {
		t.Run(tc.name, func(t *testing.T) {
			r, err := bulkload.DecodeRecord(tc.doc)
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.doc, r)
			}
			if !errors.Is(err, bulkload.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestRecoverRejectsSchema: a record whose table schema does not decode
// strictly, or disagrees with the record, is refused by Recover (the
// record decoder treats the schema as opaque JSON).
func TestRecoverRejectsSchema(t *testing.T) {
	good := seedRecords(t)[1]
	schema := testSchemaJSON(3)
	obs := Observed{RecordRev: 5, Registration: RegLoading, RegistrationRev: 4, Holders: placement(3, []string{"ts-1"}, 1), Now: base}
	if _, _, err := Recover(DefaultConfig(), good, obs); err != nil {
		t.Fatalf("the good record: %v", err)
	}
	edit := func(s, old, new string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("test case: %s not in %s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
	reordered := edit(edit(schema, `"schema_id":1,`, ``), `"primary_key"`, `"schema_id":1,"primary_key"`)
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"unknown member", edit(schema, `"buckets":3`, `"buckets":3,"ttl":5`), `unknown field "ttl"`},
		{"member in another case", edit(schema, `"buckets":3`, `"Buckets":3`), "not in its canonical form"},
		{"members reordered", reordered, "not in its canonical form"},
		{"empty partition keys spelt out", edit(schema, `"buckets":3`, `"partition_keys":[],"buckets":3`), "not in its canonical form"},
		{"trailing data", schema + ` {}`, "table_schema is not a json object"},
		{"invalid schema", edit(schema, `"primary_key":["id"]`, `"primary_key":["nope"]`), "nope"},
		{"bucket count differs", edit(schema, `"buckets":3`, `"buckets":4`), "table_schema has 4 buckets, the record 3"},
		{"schema id differs", edit(schema, `"schema_id":1`, `"schema_id":2`), "table_schema has schema id 2, the record 1"},
		{"bucketing differs", edit(schema, `"bucketing":"fluss"`, `"bucketing":"iceberg"`), "table_schema has iceberg bucketing, the record fluss"},
		{"partitioned schema of a table", string(testSchema(3, true)), "table_schema partitioned true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good.Clone()
			r.Schema = []byte(tc.schema)
			_, _, err := Recover(DefaultConfig(), r, obs)
			if !errors.Is(err, bulkload.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("recover: %v, want ErrInvalidRecord saying %q", err, tc.want)
			}
		})
	}
	// Whitespace is not a spelling: a schema with spaces is the same schema.
	r := good.Clone()
	r.Schema = []byte(strings.ReplaceAll(schema, ",", ", "))
	if _, _, err := Recover(DefaultConfig(), r, obs); err != nil {
		t.Fatalf("a schema with spaces: %v", err)
	}
}

// TestRecordCompatible: every record a machine persists encodes, decodes
// and has a schema that agrees with it.
func TestRecordCompatible(t *testing.T) {
	for _, r := range seedRecords(t) {
		b, err := bulkload.EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bulkload.DecodeRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if err := checkRecordSchema(&got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
}
