package bulkloadclient

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type badDoc struct {
	name, doc, want string
}

// replaced returns goldenContext with old replaced by new, failing loudly
// if old is not there (a case that changes nothing tests nothing).
func replaced(doc, old, new string) string {
	if !strings.Contains(doc, old) {
		panic("test case: " + old + " not in the document")
	}
	return strings.Replace(doc, old, new, 1)
}

func badContexts() []badDoc {
	g := goldenContext
	return []badDoc{
		{"empty", ``, "unexpected end of JSON input"},
		{"null", `null`, "not a JSON object"},
		{"array", `[1]`, "not a JSON object"},
		{"truncated", g[:len(g)-1], "unexpected end of JSON input"},
		{"trailing object", g + `{}`, "trailing data"},
		{"trailing brace", g + `}`, "trailing data"},
		{"trailing bracket", g + `]`, "trailing data"},
		{"trailing garbage", g + ` x`, "trailing data"},
		{"invalid utf-8", replaced(g, `"shop"`, "\"sh\xffp\""), "invalid utf-8"},
		{"unknown member", replaced(g, `"version":1,`, `"version":1,"token":"secret",`), `unknown member "token"`},
		{"member in another case", replaced(g, `"buckets":4,"bucketing":"fluss","remote`, `"Buckets":4,"bucketing":"fluss","remote`), `unknown member "Buckets"`},
		{"version in another case", replaced(g, `"version":1`, `"VERSION":1`), `unknown member "VERSION"`},
		{"duplicate member", replaced(g, `"table_id":7,`, `"table_id":7,"table_id":8,`), `duplicate member "table_id"`},
		{"duplicate schema member", replaced(g, `"primary_key":["id"]`, `"primary_key":["id"],"primary_key":["name"]`), `duplicate member "primary_key"`},
		{"unknown schema member", replaced(g, `"primary_key":["id"]`, `"primary_key":["id"],"ttl":5`), `unknown field "ttl"`},
		{"schema member in another case", replaced(g, `"primary_key":["id"]`, `"Primary_Key":["id"]`), `unknown member "Primary_Key"`},
		{"no version", replaced(g, `"version":1,`, ``), "no version"},
		{"wrong version", replaced(g, `"version":1`, `"version":2`), "version 2, want 1"},
		{"version not an integer", replaced(g, `"version":1`, `"version":"1"`), "version \"1\" is not an integer"},
		{"version null", replaced(g, `"version":1`, `"version":null`), `member "version" is null`},
		{"version fraction", replaced(g, `"version":1`, `"version":1.0`), "version 1.0 is not an integer"},
		{"missing build deadline", replaced(g, `,"build_deadline_ms":1780000000123`, ``), `missing member "build_deadline_ms"`},
		{"missing partition", replaced(g, `"partition":"",`, ``), `missing member "partition"`},
		{"null member", replaced(g, `"snapshot_ids":[3,0,5,1]`, `"snapshot_ids":null`), `member "snapshot_ids" is null`},
		{"zero build deadline", replaced(g, `1780000000123`, `0`), "build_deadline_ms 0 not positive"},
		{"negative build deadline", replaced(g, `1780000000123`, `-5`), "build_deadline_ms -5 not positive"},
		{"wrong type", replaced(g, `"buckets":4,"bucketing":"fluss","remote`, `"buckets":"4","bucketing":"fluss","remote`), "wireContext.buckets"},
		{"schema id out of range", replaced(g, `"schema_id":0,"schema"`, `"schema_id":40000,"schema"`), "wireContext.schema_id"},
		{"bucket count zero", replaced(replaced(g, `"buckets":4,"bucketing":"fluss","remote`, `"buckets":0,"bucketing":"fluss","remote`), `[3,0,5,1]`, `[]`), "bucket count 0"},
		{"negative table id", replaced(g, `"table_id":7`, `"table_id":-7`), "table id -7 not positive"},
		{"negative snapshot id", replaced(g, `[3,0,5,1]`, `[3,0,-5,1]`), "negative snapshot id -5 of bucket 2"},
		// Nulls and missing members below the top read as zero values: a
		// NOT NULL column, snapshot id 0, the default bucket key.
		{"null snapshot id", replaced(g, `[3,0,5,1]`, `[3,null,5,1]`), "snapshot id of bucket 1 is null"},
		{"null schema member", replaced(g, `"type":"STRING","nullable":false`, `"type":"STRING","nullable":null`), `member "nullable" is null`},
		{"null bucket key", replaced(g, `"primary_key":["id"]`, `"primary_key":["id"],"bucket_key":null`), `member "bucket_key" is null`},
		{"column without nullable", replaced(g, `"type":"STRING","nullable":false`, `"type":"STRING"`), `schema: column 1: no member "nullable"`},
		{"schema without buckets", replaced(g, `,"buckets":4,"bucketing":"fluss"}`, `,"bucketing":"fluss"}`), `schema: no member "buckets"`},
		{"too few snapshot ids", replaced(g, `[3,0,5,1]`, `[3,0,5]`), "3 snapshot ids for 4 buckets"},
		{"bad txn id", replaced(g, `"txn_id":"0f1e`, `"txn_id":"XX1e`), "XX1e"},
		{"database escapes the layout", replaced(g, `"database":"shop"`, `"database":"../shop"`), `database name "../shop"`},
		{"table escapes the layout", replaced(g, `"table":"items"`, `"table":"it/ems"`), `table name "it/ems"`},
		{"remote dir not a uri", replaced(g, `"remote_data_dir":"file:///data/remote"`, `"remote_data_dir":"/data/remote"`), `remote dir "/data/remote"`},
		{"partition of an unpartitioned table", replaced(replaced(g, `"partition":""`, `"partition":"us"`), `"partition_id":0`, `"partition_id":3`), `partitioned table false but partition "us"`},
		{"bucketing mismatch", replaced(g, `"bucketing":"fluss","remote`, `"bucketing":"paimon","remote`), "schema bucketing fluss, context paimon"},
		{"schema not an object", replaced(g, testSchema, `[]`), "schema: json: cannot unmarshal array"},
		{"deep nesting", replaced(g, testSchema, strings.Repeat(`[`, 20)+strings.Repeat(`]`, 20)), "nested deeper than 16"},
	}
}

func TestUnmarshalBuildContextRejects(t *testing.T) {
	for _, tc := range badContexts() {
		t.Run(tc.name, func(t *testing.T) {
			bc, err := UnmarshalBuildContext([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.doc, bc)
			}
			checkParseError(t, err, "bulkloadclient: unmarshal build context: ")
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestBuildContextCompatible: whatever Marshal writes decodes, whitespace
// around it (a file read without trimming) included.
func TestBuildContextCompatible(t *testing.T) {
	for _, bc := range append(seedContexts(t), testContext(t)) {
		b, err := bc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range [][]byte{b, append(append([]byte(" \n"), b...), '\n')} {
			got, err := UnmarshalBuildContext(doc)
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			if d := diffContexts(bc, got); d != "" {
				t.Fatalf("%s: changed %s", b, d)
			}
		}
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(goldenContext), "", "  "); err != nil {
		t.Fatal(err)
	}
	if _, err := UnmarshalBuildContext(indented.Bytes()); err != nil {
		t.Fatalf("indented golden context: %v", err)
	}
}

const goodResult = `{"bucket":1,"snapshot_id":2,"metadata_path":"file:///r/kv/shop/events-7/us-p3/1/snap-2/_METADATA",` +
	`"metadata_length":700,"metadata_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",` +
	`"row_count":2,"duplicates":1,"bytes":1000,"files":5,"min_key":"0102","max_key":"0a","log_offset":0}`

func badResults() []badDoc {
	g := goodResult
	return []badDoc{
		{"empty", ``, "unexpected end of JSON input"},
		{"null", `null`, "not a JSON array of results or one result object"},
		{"string", `"x"`, "not a JSON array of results or one result object"},
		{"null element", `[null]`, "result 0: not a JSON object"},
		{"number element", `[` + g + `,1]`, "result 1: not a JSON object"},
		{"trailing object", `[` + g + `]{}`, "trailing data"},
		{"trailing bracket", `[` + g + `]]`, "trailing data"},
		{"trailing brace", g + `}`, "trailing data"},
		{"invalid utf-8", replaced(g, `_METADATA`, "_METADATA\xff"), "invalid utf-8"},
		{"unknown member", replaced(g, `"files":5,`, `"files":5,"token":"x",`), `result 0: unknown member "token"`},
		{"member in another case", replaced(g, `"files":5,`, `"Files":5,`), `unknown member "Files"`},
		{"duplicate member", replaced(g, `"bucket":1,`, `"bucket":1,"bucket":3,`), `duplicate member "bucket"`},
		{"missing member", replaced(g, `"row_count":2,`, ``), `result 0: missing member "row_count"`},
		{"null member", replaced(g, `"bytes":1000`, `"bytes":null`), `member "bytes" is null`},
		{"wrong type", replaced(g, `"files":5`, `"files":"5"`), "BucketResult.files"},
		{"fraction", replaced(g, `"row_count":2`, `"row_count":2.5`), "BucketResult.row_count"},
		{"negative bucket", replaced(g, `"bucket":1`, `"bucket":-1`), "bucket -1 not in [0,4096)"},
		{"bucket too large", replaced(g, `"bucket":1`, `"bucket":4096`), "bucket 4096 not in [0,4096)"},
		{"negative snapshot id", replaced(g, `"snapshot_id":2`, `"snapshot_id":-2`), "snapshot_id -2 negative"},
		{"empty metadata path", replaced(g, `"file:///r/kv/shop/events-7/us-p3/1/snap-2/_METADATA"`, `""`), "metadata_path empty"},
		{"zero metadata length", replaced(g, `"metadata_length":700`, `"metadata_length":0`), "metadata_length 0 not in 1.."},
		{"short digest", replaced(g, `"e3b0c442`, `"e3b0c4`), "metadata_sha256"},
		{"uppercase digest", replaced(g, `"e3b0c442`, `"E3B0C442`), "metadata_sha256"},
		{"negative rows", replaced(replaced(replaced(g, `"row_count":2`, `"row_count":-2`), `"min_key":"0102",`, ``), `"max_key":"0a",`, ``), "row_count -2 negative"},
		{"negative duplicates", replaced(g, `"duplicates":1`, `"duplicates":-1`), "duplicates -1 negative"},
		{"negative bytes", replaced(g, `"bytes":1000`, `"bytes":-1`), "bytes -1 negative"},
		{"negative files", replaced(g, `"files":5`, `"files":-5`), "files -5 negative"},
		{"negative log offset", replaced(g, `"log_offset":0`, `"log_offset":-1`), "log_offset -1 negative"},
		{"odd key", replaced(g, `"min_key":"0102"`, `"min_key":"010"`), `min_key "010" is not lowercase hex bytes`},
		{"key not hex", replaced(g, `"max_key":"0a"`, `"max_key":"0A"`), `max_key "0A" is not lowercase hex bytes`},
		{"keys out of order", replaced(g, `"min_key":"0102"`, `"min_key":"0b"`), "min_key 0b above max_key 0a"},
		{"keys of an empty bucket", replaced(g, `"row_count":2`, `"row_count":0`), "min_key or max_key of an empty bucket"},
	}
}

func TestUnmarshalBucketResultsRejects(t *testing.T) {
	if _, err := UnmarshalBucketResults([]byte(goodResult)); err != nil {
		t.Fatalf("the good result: %v", err)
	}
	for _, tc := range badResults() {
		t.Run(tc.name, func(t *testing.T) {
			res, err := UnmarshalBucketResults([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.doc, res)
			}
			checkParseError(t, err, "bulkloadclient: unmarshal bucket results: ")
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestBucketResultsCompatible: what builders write today (json.Marshal of
// Finish's results, the indented array thaw bulkload build prints, one
// result alone) decodes to the results.
func TestBucketResultsCompatible(t *testing.T) {
	res := realResults(t)
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	var rows int64
	empty := 0
	for _, r := range res {
		rows += r.RowCount
		if r.RowCount == 0 {
			empty++
		}
	}
	if rows != 1 || empty != 3 {
		t.Fatalf("want one row in one bucket: %+v", res)
	}
	encs := encodings(t, res)
	for i, b := range encs {
		got, err := UnmarshalBucketResults(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := res
		if i >= 2 {
			want = res[i-2 : i-1]
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", b, got, want)
		}
	}
}
