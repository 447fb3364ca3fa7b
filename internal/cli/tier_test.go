package cli

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

func testTable(t *testing.T) *kv.Table {
	t.Helper()
	col := func(name, typ string, nullable bool) kv.Column {
		ty, err := kv.ParseType(typ)
		if err != nil {
			t.Fatal(err)
		}
		return kv.Column{Name: name, Type: ty, Nullable: nullable}
	}
	tbl, err := kv.NewTable(kv.TableSchema{
		Columns: []kv.Column{
			col("dt", "STRING", false),
			col("id", "BIGINT", false),
			col("ok", "BOOLEAN", true),
			col("tiny", "TINYINT", true),
			col("small", "SMALLINT", true),
			col("n", "INT", true),
			col("f", "FLOAT", true),
			col("d", "DOUBLE", true),
			col("amount", "DECIMAL(10,2)", true),
			col("big", "DECIMAL(38,0)", true),
			col("c", "CHAR(3)", true),
			col("b", "BYTES", true),
			col("day", "DATE", true),
			col("t", "TIME(3)", true),
			col("ts", "TIMESTAMP(6)", true),
			col("ltz", "TIMESTAMP_LTZ(9)", true),
			col("must", "STRING", false),
		},
		PrimaryKey:    []string{"dt", "id"},
		PartitionKeys: []string{"dt"},
		Buckets:       4,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func TestRowJSONRoundTrip(t *testing.T) {
	tbl := testTable(t)
	in := `{"dt":"2024-01-31","id":9007199254740993,"ok":true,"tiny":-128,"small":32767,"n":-2147483648,"f":1.5,"d":-2.25,` +
		`"amount":"12.30","big":"12345678901234567890123456789012345678","c":"abc","b":"AAEC/w==","day":"2024-02-29",` +
		`"t":"13:45:00.123","ts":"2024-01-31T13:45:00.123456","ltz":"2024-01-31T13:45:00.123456789Z","must":"x"}`
	row, err := rowFromJSON(tbl, []byte(in), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if row[1] != int64(9007199254740993) {
		t.Errorf("BIGINT lost precision: %v", row[1])
	}
	if d := row[12].(kv.Date); d != 19782 {
		t.Errorf("DATE 2024-02-29 = %d days, want 19782", d)
	}
	if tm := row[13].(kv.Time); tm != 13*3_600_000+45*60_000+123 {
		t.Errorf("TIME = %d", tm)
	}
	if ts := row[15].(kv.Timestamp); ts.NanoOfMilli != 456789 {
		t.Errorf("TIMESTAMP_LTZ nanos = %d", ts.NanoOfMilli)
	}
	if _, _, _, err := tbl.NewEncoder().Encode(kv.RowFields(row)); err != nil {
		t.Fatalf("encode: %v", err)
	}
	out, err := rowJSON(tbl, row)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip:\n got %s\nwant %s", out, in)
	}
	// Alternative forms: numbers for DECIMAL, integers for DATE, TIME and
	// timestamps, nulls and missing nullable columns.
	row, err = rowFromJSON(tbl, []byte(`{"id":1,"dt":"x","must":"y","amount":12.3,"day":1,"t":1000,"ts":-1,"ok":null,"ltz":"1969-12-31T23:59:59.999999001Z"}`), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	out, _ = rowJSON(tbl, row)
	if ts := row[15].(kv.Timestamp); ts.Millis != -1 || ts.NanoOfMilli != 999001 {
		t.Errorf("TIMESTAMP_LTZ before 1970: %+v", ts)
	}
	for _, want := range []string{`"amount":"12.30"`, `"day":"1970-01-02"`, `"t":"00:00:01.000"`, `"ts":"1969-12-31T23:59:59.999"`, `"ok":null`, `"b":null`,
		`"ltz":"1969-12-31T23:59:59.999999001Z"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s misses %s", out, want)
		}
	}
}

// TestRowJSONFloats: FLOAT and DOUBLE values JSON numbers cannot hold
// (NaN, the infinities, which Parquet files carry) go in and come out as
// "NaN", "Infinity" and "-Infinity" (a row holding one failed the whole
// JSON output); a FLOAT is read at float32 precision, rounding once (as
// other clients do: the bits are key bytes and route rows), and prints as
// the shortest text that reads back the same.
func TestRowJSONFloats(t *testing.T) {
	tbl := testTable(t)
	row, err := rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","f":"NaN","d":"-Infinity"}`), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if f, d := row[6].(float32), row[7].(float64); !math.IsNaN(float64(f)) || !math.IsInf(d, -1) {
		t.Fatalf("FLOAT %v, DOUBLE %v: want NaN and -Inf", f, d)
	}
	out, err := rowJSON(tbl, row)
	if err != nil {
		t.Fatalf("JSON of a row holding NaN: %v", err)
	}
	if !strings.Contains(string(out), `"f":"NaN","d":"-Infinity"`) {
		t.Errorf("JSON %s, want NaN and -Infinity as strings", out)
	}
	row[6], row[7] = float32(math.Inf(1)), math.NaN()
	if out, err = rowJSON(tbl, row); err != nil || !strings.Contains(string(out), `"f":"Infinity","d":"NaN"`) {
		t.Errorf("JSON %s, %v", out, err)
	}
	if got := cellText(tbl.Column(7).Type, math.Inf(1)); got != "Infinity" {
		t.Errorf("cell text of +Inf: %q", got)
	}
	// 1 + 2^-24 + a little: correctly rounded to float32 it is 1 + 2^-23;
	// through float64 first it rounds to 1 + 2^-24 and then, a tie, to 1.
	row, err = rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","f":1.00000005960464477539062501}`), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := math.Float32bits(row[6].(float32)); got != 0x3f800001 {
		t.Errorf("FLOAT bits %#x, want 0x3f800001", got)
	}
	row[6] = float32(0.1)
	if out, _ := rowJSON(tbl, row); !strings.Contains(string(out), `"f":0.1,`) {
		t.Errorf("FLOAT 0.1 printed as %s", out)
	}
	for _, bad := range []string{`"nan"`, `"Inf"`, `"1.5"`, `true`} {
		if _, err := rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","d":`+bad+`}`), 1, false); err == nil ||
			!strings.Contains(err.Error(), `want a number, "NaN", "Infinity" or "-Infinity"`) {
			t.Errorf("DOUBLE %s: %v", bad, err)
		}
	}
}

func TestRowJSONErrors(t *testing.T) {
	tbl := testTable(t)
	for _, tc := range []struct {
		in   string
		want string
	}{
		{`{"dt":"a","id":1,"must":"x","nope":1}`, `row 7: unknown column "nope" (columns: dt, id, ok`},
		{`{"dt":"a","must":"x"}`, `row 7: missing primary-key column "id"`},
		{`{"dt":"a","id":1}`, `row 7: column "must" is NOT NULL and has no value`},
		{`{"dt":"a","id":"1","must":"x"}`, `row 7: column "id" (BIGINT): want an integer, got a string "1"`},
		{`{"dt":"a","id":1.5,"must":"x"}`, `column "id" (BIGINT): 1.5 is not an integer`},
		{`{"dt":"a","id":1,"must":"x","tiny":128}`, `column "tiny" (TINYINT): 128 is not an integer in [-128, 127]`},
		{`{"dt":"a","id":1,"must":"x","ok":"yes"}`, `column "ok" (BOOLEAN): want true or false`},
		{`{"dt":"a","id":1,"must":"x","amount":"1.234"}`, `column "amount" (DECIMAL(10,2))`},
		{`{"dt":"a","id":1,"must":"x","b":"***"}`, `column "b" (BYTES): not base64`},
		{`{"dt":"a","id":1,"must":"x","day":"31/01/2024"}`, `is not a date like 2024-01-31`},
		{`{"dt":"a","id":1,"must":"x","t":"25:00:00"}`, `is not a time like`},
		{`{"dt":"a","id":1,"must":"x","ltz":"2024-01-31T13:45:00"}`, `is not an RFC 3339 instant`},
		{`{"dt":"a","id":1,"must":"x","ts":"2024-01-31T13:45:00Z"}`, `(no zone)`},
		{`{"dt":"a","id":1,"must":"x","dt":"b"}`, `duplicate key "dt"`},
		{`{"dt":"a","id":1,"must":"x"} {}`, `trailing data`},
		{`[1,2]`, `want a JSON object`},
		{`{"dt":"a",`, `bad JSON`},
		{`not json`, `not JSON`},
		{`{"dt":"a","id":null,"must":"x"}`, `row 7: primary-key column "id" is null`},
		// What encoding/json would store as U+FFFD is refused instead.
		{"{\"dt\":\"a\",\"id\":1,\"must\":\"caf\xe9\"}", `row 7: invalid utf-8 at byte 28`},
		{"{\"dt\":\"a\",\"id\":1,\"must\xff\":\"x\"}", `row 7: invalid utf-8 at byte 22`},
		{`{"dt":"a","id":1,"must":"x\ud800"}`, `row 7: unpaired surrogate \ud800 at byte 26`},
		{`{"dt":"a","id":1,"must":"\udc00x"}`, `row 7: unpaired surrogate \udc00 at byte 25`},
		{`{"dt":"a","id":1,"must":"x","b":"AQJ="}`, `column "b" (BYTES): not base64`}, // unused bits set: AQI= is the one encoding
		{`{"dt":"a","id":1,"must":"x","d":1e400}`, `column "d" (DOUBLE): 1e400 is out of DOUBLE range`},
		{`{"dt":"a","id":1,"must":"x","f":-1e39}`, `column "f" (FLOAT): -1e39 is out of FLOAT range`},
	} {
		_, err := rowFromJSON(tbl, []byte(tc.in), 7, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rowFromJSON(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// A surrogate pair and an escaped backslash are text like any other.
	row, err := rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"\ud83d\ude00 \\ud800","b":"AQI="}`), 1, false)
	if err != nil || row[16] != "\U0001F600 \\ud800" || string(row[11].([]byte)) != "\x01\x02" {
		t.Errorf("pair and escaped backslash: %q, %v", row, err)
	}
	// Encoder checks come on top: CHAR(3) holds three characters.
	row, err = rowFromJSON(tbl, []byte(`{"dt":"a","id":1,"must":"x","c":"abcd"}`), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := tbl.NewEncoder().Encode(kv.RowFields(row)); !errors.Is(err, kv.ErrInvalidRow) {
		t.Errorf("CHAR(3) with 4 characters: %v", err)
	}
}

func TestKeyRowFromJSON(t *testing.T) {
	tbl := testTable(t)
	for _, in := range []string{`{"dt":"a","id":5}`, `["a",5]`, ` ["a", 5] `} {
		row, err := keyRowFromJSON(tbl, []byte(in), 1)
		if err != nil || row[0] != "a" || row[1] != int64(5) {
			t.Errorf("keyRowFromJSON(%s) = %v, %v", in, row, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`{"dt":"a","id":5,"must":"x"}`, `column "must" is not part of the primary key (dt, id)`},
		{`{"dt":"a"}`, `missing primary-key column "id"`},
		{`["a"]`, `1 key values for the primary key (dt, id)`},
		{`["a",null]`, `primary-key column "id" is null`},
		{`["a","b"]`, `column "id" (BIGINT): want an integer`},
		{`["a",5] x`, `row 1: trailing data after the key`},
		{`["a",5] ["b",6]`, `row 1: trailing data after the key`},
		{`5`, `row 1: want a JSON object of the primary-key columns or an array of their 2 values (dt, id), not a number`},
		{`"a"`, `not a string`},
		{`["a\udfff",5]`, `row 1: unpaired surrogate \udfff at byte 3`},
		{"[\"\xc3\",5]", `row 1: invalid utf-8 at byte 2`},
		{`{"dt":"a","id":null}`, `primary-key column "id" is null`},
	} {
		_, err := keyRowFromJSON(tbl, []byte(tc.in), 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keyRowFromJSON(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}

	// A one-column key may be given as its value alone.
	bigint, err := kv.ParseType("BIGINT")
	if err != nil {
		t.Fatal(err)
	}
	one, err := kv.NewTable(kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: bigint}, {Name: "v", Type: bigint, Nullable: true}},
		PrimaryKey: []string{"id"}, Buckets: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{`42`, ` 42 `, `[42]`, `{"id":42}`} {
		row, err := keyRowFromJSON(one, []byte(in), 1)
		if err != nil || row[0] != int64(42) || row[1] != nil {
			t.Errorf("one-column key %s = %v, %v", in, row, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`42 43`, `row 1: trailing data after the key`},
		{`"x"`, `row 1: column "id" (BIGINT): want an integer`},
		{`null`, `row 1: primary-key column "id" is null`},
		{`4x`, `row 1: trailing data after the key`},
		{`"abc`, `row 1: bad JSON value`},
		{`ada`, `row 1: bad JSON value: invalid character 'a' looking for beginning of value (text, dates, times, decimals and bytes are JSON strings: "ada")`},
		{`2024-01-31`, `row 1: trailing data after the key (text, dates, times, decimals and bytes are JSON strings: "2024-01-31")`},
		{`"\udfff"`, `row 1: unpaired surrogate`},
	} {
		_, err := keyRowFromJSON(one, []byte(tc.in), 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("one-column key %s = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestReadSchemaFile: a kv.TableSchema document or a describe document,
// strictly.
func TestReadSchemaFile(t *testing.T) {
	want := testTable(t).Schema()
	doc, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	described, err := json.MarshalIndent(tableJSON{Database: "db", Table: "t", TableID: 7, Schema: want, ReplicationFactor: 3,
		DataState: "ACTIVE", Partitions: []partJSON{{Name: "a", PartitionID: 1, DataState: "ACTIVE"}},
		Buckets: []bucketJSON{{Bucket: 0, Leader: "ts-1", Replicas: []string{"ts-1"}}}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, text)
		return p
	}
	for name, text := range map[string]string{"schema": string(doc), "described": string(described)} {
		got, err := readSchemaFile(file(name+".json", text))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, want)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{strings.Replace(string(doc), `"columns"`, `"Columns"`, 1), `unknown member "Columns"`},
		{string(doc) + "}", "trailing data after the document"},
		{strings.Replace(string(doc), `"buckets":4`, `"buckets":4,"buckets":8`, 1), `duplicate member "buckets"`},
		{strings.Replace(string(doc), `"buckets":4`, `"buckets":4,"replication":3`, 1), `unknown field "replication"`},
		{strings.Replace(string(described), `"table_id": 7`, `"table_id": 7, "owner": "x"`, 1), `unknown field "owner"`},
		{`[]`, "want a JSON object"},
		{"", "unexpected end of JSON input"},
		// A null would read as its zero value: NOT NULL, 0 buckets.
		{strings.Replace(string(doc), `"nullable":true`, `"nullable":null`, 1), `member "nullable" is null`},
		{strings.Replace(string(doc), `"buckets":4`, `"buckets":null`, 1), `member "buckets" is null`},
		{strings.Replace(string(described), `"replication_factor": 3`, `"replication_factor": null`, 1), `member "replication_factor" is null`},
	} {
		if !strings.Contains(tc.text, "null") && strings.Contains(tc.want, "null") {
			t.Fatalf("case %q: the replacement missed", tc.want)
		}
		_, err := readSchemaFile(file("bad.json", tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readSchemaFile(%s) = %v, want %q", tc.text, err, tc.want)
		}
	}
}

func TestParseColumn(t *testing.T) {
	for _, tc := range []struct {
		in       string
		name     string
		typ      string
		nullable bool
	}{
		{"id BIGINT NOT NULL", "id", "BIGINT", false},
		{"amount decimal(10, 2)", "amount", "DECIMAL(10,2)", true},
		{"note STRING NULL", "note", "STRING", true},
		{"  ts  TIMESTAMP_LTZ(6)  not null ", "ts", "TIMESTAMP_LTZ(6)", false},
	} {
		c, err := parseColumn(tc.in)
		if err != nil || c.Name != tc.name || c.Type.String() != tc.typ || c.Nullable != tc.nullable {
			t.Errorf("parseColumn(%q) = %+v (%s), %v", tc.in, c, c.Type, err)
		}
	}
	for _, bad := range []string{"id", "id MAP<INT,INT>", "", "id NOT NULL"} {
		if _, err := parseColumn(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("parseColumn(%q) = %v, want a usage error", bad, err)
		}
	}
}

func TestTierUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"server"}, "thaw server needs --data-dir"},
		{[]string{"coordinator"}, "thaw coordinator needs --config"},
		{[]string{"tablet"}, "thaw tablet needs --config"},
		{[]string{"table"}, "thaw table needs a command"},
		{[]string{"table", "create", "nodot"}, `table "nodot": want DATABASE.TABLE`},
		{[]string{"table", "create", "a.b"}, "needs --schema FILE or --column"},
		{[]string{"table", "create", "a.b", "--column", "id"}, `--column "id": want "NAME TYPE [NOT NULL]"`},
		{[]string{"table", "create", "a.b", "--column", "id BIGINT"}, "primary key"},
		{[]string{"table", "describe", "a.b", "--output", "yaml"}, `--output "yaml": want table or json`},
		{[]string{"partition", "create", "a.b"}, "takes DATABASE.TABLE PARTITION"},
		{[]string{"partition", "create", "a.b", "bad/name"}, `partition "bad/name"`},
		{[]string{"put"}, "thaw put needs DATABASE.TABLE"},
		{[]string{"get", "a.b", "--limit", "3"}, "flag provided but not defined: -limit"},
		{[]string{"scan", "a.b", "--limit", "-1"}, "--limit must not be negative"},
		{[]string{"database", "create"}, "takes one DATABASE"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: code=%d stderr=%q, want code 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestTierConfigErrors(t *testing.T) {
	// A config error is not a usage error: exit status 1, naming the line.
	p := t.TempDir() + "/bad.yaml"
	if err := writeTestFile(p, "data_dir: /tmp/x\ntablet:\n  cahce_size: 1MiB\n"); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "server", "--config", p)
	if code != 1 || !strings.Contains(errOut, "line 3") || !strings.Contains(errOut, "cahce_size") {
		t.Errorf("code=%d stderr=%q", code, errOut)
	}
}

func writeTestFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

func TestBucketLeaderText(t *testing.T) {
	for _, tc := range []struct {
		b    bucketJSON
		want string
	}{
		{bucketJSON{}, "-"},
		{bucketJSON{Leader: "ts-1", Address: "http://h:7070/t/ts-1"}, "ts-1"},
		{bucketJSON{Leader: "ts-9"}, "ts-9 (not live)"},
	} {
		if got := tc.b.leaderText(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
}

// TestTierErrorNamesTheBulkLoad: a TARGET_LOADING error that names its
// bulk load tells how to follow or give it up; one that does not, does not.
func TestTierErrorNamesTheBulkLoad(t *testing.T) {
	err := wrapTier("drop table e.q", tierpb.NewTargetLoadingError("coordinator: drop table e.q: loading", tierv1.DataState_DATA_STATE_LOADING, "bl-1"))
	if got := err.Error(); !strings.HasPrefix(got, "drop table e.q: TARGET_LOADING: coordinator: drop table e.q: loading\n") ||
		!strings.Contains(got, "`thaw bulkload status bl-1`") || !strings.Contains(got, "`thaw bulkload abort bl-1`") {
		t.Errorf("with a bulk load id: %q", got)
	}
	err = wrapTier("drop table e.q", tierpb.NewError(tierpb.ReasonTargetLoading, "loading", nil))
	if got := err.Error(); got != "drop table e.q: TARGET_LOADING: loading" {
		t.Errorf("without: %q", got)
	}
}

// TestBeginHint: Begin refusals a person can act on say how.
func TestBeginHint(t *testing.T) {
	table := bulkload.Target{Database: "d", Table: "t"}
	part := bulkload.Target{Database: "d", Table: "t", Partition: "p1"}
	occupied := errors.Join(bulkload.ErrTargetOccupied, tierpb.NewError(tierpb.ReasonTargetOccupied, "held", map[string]string{tierpb.KeyTxnID: "t-1"}))
	if got := beginHint(occupied, "thaw load --create-partition", part); !errors.Is(got, bulkload.ErrTargetOccupied) || !strings.Contains(got.Error(), "`thaw bulkload abort t-1`") {
		t.Errorf("occupied: %v", got)
	}
	if got := beginHint(bulkload.ErrTargetOccupied, "thaw load --create-partition", part); got != bulkload.ErrTargetOccupied { // no id: nothing to name
		t.Errorf("occupied without an id: %v", got)
	}
	if got := beginHint(bulkload.ErrTargetNotEmpty, "thaw load --create-partition", part); !errors.Is(got, bulkload.ErrTargetNotEmpty) || !strings.Contains(got.Error(), "load into a new partition") {
		t.Errorf("not empty: %v", got)
	}
	// A missing target: the table, or the partition (thaw load can create
	// it; thaw bulkload begin cannot).
	for _, c := range []struct {
		createFlag string
		target     bulkload.Target
		want       string
	}{
		{"", table, "(a bulk load fills an existing empty table or partition: create the table with `thaw table create`)"},
		{"", part, "(a bulk load fills an existing empty table or partition: create the partition with `thaw partition create d.t p1`)"},
		{"thaw load --create-partition", part, "(a bulk load fills an existing empty table or partition: create the partition with `thaw partition create d.t p1`, or give thaw load --create-partition)"},
	} {
		got := beginHint(bulkload.ErrTargetNotFound, c.createFlag, c.target)
		if !errors.Is(got, bulkload.ErrTargetNotFound) || !strings.HasSuffix(got.Error(), "\n"+c.want) {
			t.Errorf("%q %v: %v, want the hint %q", c.createFlag, c.target, got, c.want)
		}
	}
	if other := errors.New("x"); beginHint(other, "thaw load --create-partition", part) != other || beginHint(nil, "thaw load --create-partition", part) != nil {
		t.Error("other errors changed")
	}
}

// TestReadRowArgs: rows from arguments or lines, each numbered as the user
// sees it (a line's number, blank lines included), a byte-order mark
// before the first line left out.
func TestReadRowArgs(t *testing.T) {
	in, err := readRowArgs([]string{`{"a":1}`, `{"a":2}`}, "")
	if err != nil || len(in.text) != 2 || !slices.Equal(in.num, []int{1, 2}) {
		t.Fatalf("arguments: %q %v %v", in.text, in.num, err)
	}
	if _, err := readRowArgs([]string{`{}`}, "rows.json"); !errors.Is(err, ErrUsage) {
		t.Fatalf("arguments and --input: %v", err)
	}
	file := filepath.Join(t.TempDir(), "rows.json")
	writeFile(t, file, "\uFEFF{\"a\":1}\r\n\n   \n{\"a\":2}\r\n\t{\"a\":3}")
	in, err = readRowArgs(nil, file)
	if err != nil || !slices.Equal(in.num, []int{1, 4, 5}) || string(in.text[0]) != `{"a":1}` || string(in.text[2]) != `{"a":3}` {
		t.Fatalf("file: %q %v %v", in.text, in.num, err)
	}
	// A row the tier refuses is named by its line too.
	err = in.wrapRows("put db.t", &tierclient.RowError{Index: 1, Err: errors.New("refused")})
	if err == nil || !strings.Contains(err.Error(), "put db.t: row 4: ") {
		t.Fatalf("wrapRows: %v", err)
	}
}
