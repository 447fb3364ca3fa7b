package policies_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/thawdb/thaw/policies"
)

// head is a valid document's first seven lines; a spec body appended to it
// starts at line 8 with two-space indentation.
const head = `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: p
spec:
  source:
    table: lake.events
`

func doc(body string) string { return head + body }

func TestParseBad(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name, yaml string
		pos        string // "line:col" of the first error
		msg        string // substring of the first error
	}{
		{"unknown top key", head + "extra: 1\n", "8:1", `extra: unknown field "extra"`},
		{"unknown nested key", doc("  target:\n    bucket: 8\n"), "9:5", `spec.target.bucket: unknown field "bucket"`},
		{"unknown key deep", doc("  selection:\n    partitions:\n      window: {field: d, last: 1d, anchr: now}\n"), "10:36", `unknown field "anchr"`},
		{"bad apiVersion", strings.Replace(head, "thaw.dev/v1", "thaw.dev/v2", 1), "1:13", `unsupported apiVersion "thaw.dev/v2"`},
		{"bad kind", strings.Replace(head, "PromotionPolicy", "Policy", 1), "2:7", `unsupported kind "Policy"`},
		{"missing name", "apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {}\nspec:\n  source: {table: a.b}\n", "3:11", `missing field "name"`},
		{"invalid name", strings.Replace(head, "name: p", "name: Events_1", 1), "4:9", `invalid name "Events_1"`},
		{"name ends with dash", strings.Replace(head, "name: p", "name: p-", 1), "4:9", `invalid name "p-"`},
		{"name too long", strings.Replace(head, "name: p", "name: "+long, 1), "4:9", "at most 63 characters"},
		{"missing spec", "apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {name: p}\n", "1:1", `missing field "spec"`},
		{"missing source table", "apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {name: p}\nspec:\n  source: {catalog: c}\n", "5:11", `missing field "table"`},
		{"duplicate policy names", head + "---\n" + head, "12:9", `duplicate policy name "p" (first defined at line 4)`},
		{"table without namespace", strings.Replace(head, "lake.events", "events", 1), "7:12", `invalid table "events"`},
		{"table with empty part", strings.Replace(head, "lake.events", "lake..events", 1), "7:12", "want namespace.table"},
		{"default table name not a tier name", strings.Replace(head, "lake.events", "lake.ev$nts", 1), "7:5", `default table name "ev$nts"`},
		{"bad database", doc("  target:\n    database: my db\n"), "9:15", `invalid database name "my db"`},
		{"negative buckets", doc("  target:\n    buckets: -1\n"), "9:14", "must be between 0 and 4096, got -1"},
		{"too many buckets", doc("  target:\n    buckets: 5000\n"), "9:14", "must be between 0 and 4096, got 5000"},
		{"quoted buckets", doc("  target:\n    buckets: \"8\"\n"), "9:14", "want an integer, got a string"},
		{"float buckets", doc("  target:\n    buckets: 8.5\n"), "9:14", "want an integer, got a number"},
		// yaml.v3 reads these as integers in other bases; 010 was 8 buckets.
		{"octal buckets", doc("  target:\n    buckets: 010\n"), "9:14", "integer 010: write it in decimal digits"},
		{"hex buckets", doc("  target:\n    buckets: 0x10\n"), "9:14", "integer 0x10: write it in decimal digits"},
		{"0o buckets", doc("  target:\n    buckets: 0o10\n"), "9:14", "integer 0o10: write it in decimal digits"},
		{"binary buckets", doc("  target:\n    buckets: 0b1000\n"), "9:14", "integer 0b1000: write it in decimal digits"},
		{"underscored buckets", doc("  target:\n    buckets: 1_6\n"), "9:14", "integer 1_6: write it in decimal digits"},
		{"tagged quoted buckets", doc("  target:\n    buckets: !!int \"8\"\n"), "9:14", "want an integer, got a quoted string"},
		{"bad bucketing", doc("  target:\n    bucketing: murmur\n"), "9:16", `unknown bucketing "murmur"`},
		{"primaryKey is a string", doc("  target:\n    primaryKey: id\n"), "9:17", "want a list of column names, got a string"},
		{"primaryKey duplicate", doc("  target:\n    primaryKey: [id, ts, id]\n"), "9:26", `duplicate entry "id" (also at index 0)`},
		{"primaryKey empty entry", doc("  target:\n    primaryKey: [id, \"\"]\n"), "9:22", "spec.target.primaryKey[1]: empty column name"},
		{"primaryKey empty list", doc("  target:\n    primaryKey: []\n"), "9:17", "empty list"},
		{"createIfMissing yes", doc("  target:\n    createIfMissing: yes\n"), "9:22", "want true or false, got a string"},
		{"replicationFactor negative", doc("  target:\n    replicationFactor: -1\n"), "9:24", "must be between 0 and 16"},
		// The tier takes 1..16: 17 loaded, and every promotion failed.
		{"replicationFactor above the tier's", doc("  target:\n    replicationFactor: 17\n"), "9:24", "must be between 0 and 16, got 17"},
		{"unknown op", doc("  selection:\n    partitions:\n      where:\n        region: {like: eu}\n"), "11:18", `unknown field "like" (want one of eq, ne, in, notIn, gt, gte, lt, lte)`},
		{"in not a list", doc("  selection:\n    partitions:\n      where:\n        region: {in: eu}\n"), "11:22", "spec.selection.partitions.where.region.in: want a list of values, got a string"},
		{"in empty list", doc("  selection:\n    partitions:\n      where:\n        region: {notIn: []}\n"), "11:25", "empty list"},
		// A repeated entry is a typo ([eu, eu] for [eu, us]); 007 is 7.
		{"in repeated entry", doc("  selection:\n    partitions:\n      where:\n        region: {in: [eu, eu]}\n"), "11:27", `where.region.in[1]: duplicate entry "eu" (also at index 0)`},
		{"notIn repeated int", doc("  selection:\n    partitions:\n      where:\n        shard: {notIn: [7, 007]}\n"), "11:28", `duplicate entry "007" (also at index 0)`},
		// It compared as the text "null": lt: null selected every date.
		{"ordering against null", doc("  selection:\n    partitions:\n      where:\n        event_day: {lt: null}\n"), "11:25", "null has no order (use eq, ne, in or notIn)"},
		// yaml.v3 reads these as integers, which compared as text.
		{"where underscored int", doc("  selection:\n    partitions:\n      where:\n        shard: {gte: 1_000}\n"), "11:22", "integer 1_000: write it in decimal digits (or quote it"},
		{"where hex int", doc("  selection:\n    partitions:\n      where:\n        shard: {in: [1, 0x10]}\n"), "11:25", "where.shard.in[1]: integer 0x10: write it in decimal digits"},
		{"where 0o int", doc("  selection:\n    partitions:\n      where:\n        shard: {eq: 0o17}\n"), "11:21", "integer 0o17"},
		{"where op value is a list", doc("  selection:\n    partitions:\n      where:\n        region: {eq: [eu]}\n"), "11:22", "want a partition value, got a list"},
		{"where field without ops", doc("  selection:\n    partitions:\n      where:\n        region: {}\n"), "11:17", "no condition"},
		{"where field is a scalar", doc("  selection:\n    partitions:\n      where:\n        region: eu\n"), "11:17", "want a mapping, got a string"},
		{"empty partitions", doc("  selection:\n    partitions: {}\n"), "9:17", "leave partitions out to select the whole table"},
		{"window last zero", doc("  selection:\n    partitions:\n      window: {field: d, last: 0d}\n"), "10:32", "must be greater than zero"},
		{"window last negative", doc("  selection:\n    partitions:\n      window: {field: d, last: -2d}\n"), "10:32", "must be greater than zero"},
		{"window bad unit", doc("  selection:\n    partitions:\n      window: {field: d, last: 7m}\n"), "10:32", "unit must be h (hours), d (days) or w (weeks)"},
		{"window no number", doc("  selection:\n    partitions:\n      window: {field: d, last: d}\n"), "10:32", "want an integer followed by h, d or w"},
		{"window missing field", doc("  selection:\n    partitions:\n      window: {last: 7d}\n"), "10:15", `missing field "field"`},
		{"window bad anchor", doc("  selection:\n    partitions:\n      window: {field: d, last: 7d, anchor: today}\n"), "10:44", `unknown anchor "today"`},
		{"names duplicate", doc("  selection:\n    partitions:\n      names: [a, b, a]\n"), "10:21", `duplicate entry "a"`},
		{"names not a list", doc("  selection:\n    partitions:\n      names: a\n"), "10:14", "want a list of partition names"},
		{"minRows greater than maxRows", doc("  selection:\n    minRows: 10\n    maxRows: 5\n"), "9:14", "minRows 10 is greater than maxRows 5"},
		{"minBytes greater than maxBytes", doc("  selection:\n    minBytes: 2GiB\n    maxBytes: 1GiB\n"), "9:15", "minBytes 2GiB is greater than maxBytes 1GiB"},
		{"maxRows zero", doc("  selection:\n    maxRows: 0\n"), "9:14", "must be at least 1"},
		{"negative minRows", doc("  selection:\n    minRows: -1\n"), "9:14", "must be at least 0, got -1"},
		{"bad size unit", doc("  selection:\n    maxBytes: 10XB\n"), "9:15", `size "10XB": want an integer with an optional unit`},
		{"fractional size", doc("  limits:\n    memory: 1.5GiB\n"), "9:13", `size "1.5GiB"`},
		{"size overflow", doc("  limits:\n    memory: 9000000TiB\n"), "9:13", "too large"},
		{"size as list", doc("  limits:\n    memory: [1]\n"), "9:13", "want a size such as 1MiB or 10GiB, got a list"},
		{"cron field count", doc("  triggers:\n    schedule: {cron: \"0 2 * *\"}\n"), "9:22", "want 5 fields (minute hour day-of-month month day-of-week), got 4"},
		{"cron six fields", doc("  triggers:\n    schedule: {cron: \"0 0 2 * * *\"}\n"), "9:22", "got 6"},
		{"cron hour out of range", doc("  triggers:\n    schedule: {cron: \"0 24 * * *\"}\n"), "9:22", `hour field "24": 24 is above the maximum 23`},
		{"cron dom zero", doc("  triggers:\n    schedule: {cron: \"0 0 0 * *\"}\n"), "9:22", "0 is below the minimum 1"},
		{"cron bad step", doc("  triggers:\n    schedule: {cron: \"*/0 * * * *\"}\n"), "9:22", "the step must be a positive integer"},
		{"cron reversed range", doc("  triggers:\n    schedule: {cron: \"0 5-3 * * *\"}\n"), "9:22", "the range starts after it ends"},
		{"cron bad month name", doc("  triggers:\n    schedule: {cron: \"0 0 1 JANUARY *\"}\n"), "9:22", `"JANUARY" is not a number or a month name`},
		{"cron never fires", doc("  triggers:\n    schedule: {cron: \"0 0 30 2 *\"}\n"), "9:22", "never fires: no day of the month it names (30) occurs in a month it names (2)"},
		{"cron unknown descriptor", doc("  triggers:\n    schedule: {cron: \"@fortnightly\"}\n"), "9:22", "unknown descriptor"},
		{"cron TZ prefix", doc("  triggers:\n    schedule: {cron: \"CRON_TZ=UTC 0 2 * * *\"}\n"), "9:22", "set the zone with timeZone"},
		{"cron missing", doc("  triggers:\n    schedule: {timeZone: UTC}\n"), "9:15", `missing field "cron"`},
		{"unknown time zone", doc("  triggers:\n    schedule: {cron: \"@daily\", timeZone: Mars/Olympus}\n"), "9:42", `unknown time zone "Mars/Olympus"`},
		{"Local time zone", doc("  triggers:\n    schedule: {cron: \"@daily\", timeZone: Local}\n"), "9:42", "want an IANA zone name"},
		{"machine's zone file", doc("  triggers:\n    schedule: {cron: \"@daily\", timeZone: localtime}\n"), "9:42", `time zone "localtime": want an IANA zone name`},
		{"leap-second zone", doc("  triggers:\n    schedule: {cron: \"@daily\", timeZone: right/UTC}\n"), "9:42", "want an IANA zone name"},
		{"onLakeCommit string", doc("  triggers:\n    onLakeCommit: \"true\"\n"), "9:19", "want true or false, got a string"},
		{"negative buildWorkers", doc("  limits:\n    buildWorkers: -2\n"), "9:19", "must be between 0 and 1024, got -2"},
		{"concurrentPromotions zero", doc("  limits:\n    concurrentPromotions: 0\n"), "9:27", "must be between 1 and 1024, got 0"},
		{"negative uploadMBps", doc("  limits:\n    uploadMBps: -1\n"), "9:17", "got -1"},
		{"bad duplicateKeys", doc("  duplicateKeys: first\n"), "8:18", `unknown duplicateKeys "first" (want last or error)`},
		{"duplicate mapping key", doc("  target:\n    buckets: 4\n    buckets: 8\n"), "10:5", `duplicate key "buckets" (first at line 9)`},
		{"duplicate top key", head + "kind: PromotionPolicy\n", "8:1", `duplicate key "kind" (first at line 2)`},
		{"spec is a list", "apiVersion: thaw.dev/v1\nkind: PromotionPolicy\nmetadata: {name: p}\nspec: [a]\n", "4:7", "spec: want a mapping, got a list"},
		{"document is a scalar", "hello\n", "1:1", "want a mapping, got a string"},
		{"empty document between", head + "---\n---\n" + strings.Replace(head, "name: p", "name: q", 1), "8:1", "empty document"},
		{"trailing empty document", head + "---\n", "8:1", "empty document"},
		{"empty file", "", "1:1", "no policy documents"},
		{"comments only", "# nothing here\n", "1:1", "no policy documents"},
		{"tab indentation", doc("  target:\n\tbuckets: 8\n"), "9:1", "tab in indentation"},
		{"garbage", "{{{ :\n", "1:1", "malformed YAML"},
		{"unclosed flow list", doc("  target:\n    primaryKey: [id\n"), "9:5", "malformed YAML: did not find expected ',' or ']'"},
		{"unknown alias", doc("  target: *nope\n"), "1:1", "unknown anchor"},
		{"merge key", doc("  target:\n    <<: {buckets: 8}\n"), "9:5", `unknown field "<<"`},
		{"non-string key", doc("  target:\n    [a]: 8\n"), "9:5", "a key must be a string, got a list"},
		{"invalid UTF-8", doc("  target:\n    table: \"\xff\"\n"), "9:13", "not valid UTF-8"},
		{"control character", doc("  target:\n    table: \"a\\u0001\"\n"), "9:12", "control character"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pols, err := policies.Parse([]byte(c.yaml), "p.yaml")
			if err == nil {
				t.Fatalf("parsed %d policies, want an error", len(pols))
			}
			if pols != nil {
				t.Errorf("got policies with an error")
			}
			var es policies.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not policies.Errors", err, err)
			}
			if !errors.Is(err, policies.ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid) = false")
			}
			first := es[0]
			if got := fmt.Sprintf("%d:%d", first.Line, first.Column); got != c.pos {
				t.Errorf("position %s, want %s (error: %v)", got, c.pos, err)
			}
			if !strings.Contains(first.Error(), c.msg) {
				t.Errorf("error %q does not contain %q", first.Error(), c.msg)
			}
			if !strings.HasPrefix(first.Error(), "p.yaml:"+c.pos+": ") {
				t.Errorf("error %q does not start with file:line:col", first.Error())
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	y := doc(`  target:
    buckets: -1
    bucketing: nope
  selection:
    partitions:
      window: {field: d, last: 0d}
  limits:
    memory: lots
  extra: 1
`)
	_, err := policies.Parse([]byte(y), "multi.yaml")
	var es policies.Errors
	if !errors.As(err, &es) {
		t.Fatalf("got %v, want Errors", err)
	}
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%d:%d %s", e.Line, e.Column, e.Field))
	}
	want := []string{
		"9:14 spec.target.buckets",
		"10:16 spec.target.bucketing",
		"13:32 spec.selection.partitions.window.last",
		"15:13 spec.limits.memory",
		"16:3 spec.extra",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := strings.Count(err.Error(), "\n"); n != len(want)-1 {
		t.Errorf("Error() has %d newlines, want %d:\n%s", n, len(want)-1, err)
	}
}

func TestParseErrorsAcrossDocuments(t *testing.T) {
	y := doc("  target: {buckets: -1}\n") + "---\n" + strings.Replace(doc("  duplicateKeys: x\n"), "name: p", "name: q", 1)
	_, err := policies.Parse([]byte(y), "f")
	var es policies.Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("got %v, want two errors", err)
	}
	if es[0].Line != 8 || es[1].Line != 17 {
		t.Errorf("lines %d and %d, want 8 and 17", es[0].Line, es[1].Line)
	}
	var one *policies.Error
	if !errors.As(err, &one) || one != es[0] {
		t.Errorf("errors.As(*Error) did not find the first error")
	}
}

func TestParseDefaults(t *testing.T) {
	pols, err := policies.Parse([]byte(head), "min.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != 1 {
		t.Fatalf("%d policies, want 1", len(pols))
	}
	p := pols[0]
	if p.Name() != "p" {
		t.Errorf("name %q", p.Name())
	}
	if got, want := p.Source(), (policies.Source{Catalog: "default", Table: "lake.events"}); got != want {
		t.Errorf("source %+v, want %+v", got, want)
	}
	wantT := policies.Target{Database: "lake", Table: "events", Buckets: 0, Bucketing: "fluss", CreateIfMissing: true}
	if got := p.Target(); !reflect.DeepEqual(got, wantT) {
		t.Errorf("target %+v, want %+v", got, wantT)
	}
	if got, want := p.Triggers(), (policies.Triggers{OnRequest: true}); !reflect.DeepEqual(got, want) {
		t.Errorf("triggers %+v, want %+v", got, want)
	}
	if got, want := p.Limits(), (policies.Limits{ConcurrentPromotions: 1}); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	if p.DuplicateKeys() != "last" {
		t.Errorf("duplicateKeys %q", p.DuplicateKeys())
	}
	if !p.WholeTable() {
		t.Errorf("WholeTable false")
	}
	if got := p.Selection(); !reflect.DeepEqual(got, policies.Selection{}) {
		t.Errorf("selection %+v, want zero", got)
	}
	// A schedule without a zone is in UTC; a window without an anchor is
	// anchored at now; null sections are defaults.
	y := doc(`  target:
  selection:
    partitions:
      window: {field: d, last: 36h}
  triggers:
    schedule: {cron: "*/15   * * * *"}
  limits:
`)
	pols, err = policies.Parse([]byte(y), "d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p = pols[0]
	if s := p.Triggers().Schedule; s == nil || *s != (policies.Schedule{Cron: "*/15 * * * *", TimeZone: "UTC"}) {
		t.Errorf("schedule %+v, want */15 in UTC with the spaces normalized", s)
	}
	if w := p.Selection().Window; w == nil || *w != (policies.Window{Field: "d", Last: "36h", Duration: 36 * 60 * 60e9, Anchor: "now"}) {
		t.Errorf("window %+v", w)
	}
	if p.WholeTable() {
		t.Errorf("WholeTable true with a window")
	}
	if p.Target().Database != "lake" || p.Limits().ConcurrentPromotions != 1 {
		t.Errorf("null sections did not take defaults: %+v %+v", p.Target(), p.Limits())
	}
}

func TestParseDefaultDatabaseIsLastNamespacePart(t *testing.T) {
	pols, err := policies.Parse([]byte(strings.Replace(head, "lake.events", "prod.lake.clicks", 1)), "f")
	if err != nil {
		t.Fatal(err)
	}
	tg := pols[0].Target()
	if tg.Database != "lake" || tg.Table != "clicks" {
		t.Errorf("target %s.%s, want lake.clicks", tg.Database, tg.Table)
	}
	if ns, tb := pols[0].Source().Split(); ns != "prod.lake" || tb != "clicks" {
		t.Errorf("Split = %q, %q", ns, tb)
	}
}

const full = `apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: events-recent
spec:
  source:
    catalog: other
    table: lake.events
  target:
    database: analytics
    table: ev
    buckets: 8
    bucketing: paimon
    primaryKey: [id, ts]
    createIfMissing: false
    replicationFactor: 3
  selection:
    partitions:
      where:
        region: {in: [eu, us]}
        event_day: {gte: 2024-01-02, lt: "2024-02-01"}
        shard: {ne: 3, notIn: [null, 7]}
      window: {field: event_day, last: 2w, anchor: latest}
      names: ["2024-01-03", "2024-01-04"]
    minRows: 1
    maxRows: 100000000
    minBytes: 1MiB
    maxBytes: 10 GB
  triggers:
    schedule: {cron: "0 2 * * *", timeZone: Europe/Berlin}
    onLakeCommit: true
    onRequest: false
  limits:
    concurrentPromotions: 2
    buildWorkers: 3
    uploadMBps: 100
    memory: 256MiB
  duplicateKeys: error
`

func TestParseFull(t *testing.T) {
	pols, err := policies.Parse([]byte(full), "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := pols[0]
	if got, want := p.Source(), (policies.Source{Catalog: "other", Table: "lake.events"}); got != want {
		t.Errorf("source %+v", got)
	}
	wantT := policies.Target{Database: "analytics", Table: "ev", Buckets: 8, Bucketing: "paimon", PrimaryKey: []string{"id", "ts"}, CreateIfMissing: false, ReplicationFactor: 3}
	if got := p.Target(); !reflect.DeepEqual(got, wantT) {
		t.Errorf("target %+v, want %+v", got, wantT)
	}
	wantTr := policies.Triggers{Schedule: &policies.Schedule{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}, OnLakeCommit: true, OnRequest: false}
	if got := p.Triggers(); !reflect.DeepEqual(got, wantTr) {
		t.Errorf("triggers %+v, want %+v", got, wantTr)
	}
	wantL := policies.Limits{ConcurrentPromotions: 2, BuildWorkers: 3, UploadBytesPerSecond: 100_000_000, MemoryBytes: 256 << 20}
	if got := p.Limits(); got != wantL {
		t.Errorf("limits %+v, want %+v", got, wantL)
	}
	if p.DuplicateKeys() != "error" {
		t.Errorf("duplicateKeys %q", p.DuplicateKeys())
	}
	wantS := policies.Selection{
		Where: []policies.Condition{
			{Field: "event_day", Op: "gte", Values: []string{"2024-01-02"}},
			{Field: "event_day", Op: "lt", Values: []string{"2024-02-01"}},
			{Field: "region", Op: "in", Values: []string{"eu", "us"}},
			{Field: "shard", Op: "ne", Values: []string{"3"}},
			{Field: "shard", Op: "notIn", Values: []string{"null", "7"}},
		},
		Window:   &policies.Window{Field: "event_day", Last: "2w", Duration: 14 * 24 * 3600e9, Anchor: "latest"},
		Names:    []string{"2024-01-03", "2024-01-04"},
		MinRows:  1,
		MaxRows:  100000000,
		MinBytes: 1 << 20,
		MaxBytes: 10_000_000_000,
	}
	if got := p.Selection(); !reflect.DeepEqual(got, wantS) {
		t.Errorf("selection\n%+v\nwant\n%+v", got, wantS)
	}
	// Accessors return copies.
	p.Target().PrimaryKey[0] = "x"
	p.Triggers().Schedule.Cron = "x"
	p.Selection().Where[0].Values[0] = "x"
	p.Selection().Window.Field = "x"
	p.Doc()[0] = 'x'
	if p.Target().PrimaryKey[0] != "id" || p.Triggers().Schedule.Cron != "0 2 * * *" ||
		p.Selection().Where[0].Values[0] != "2024-01-02" || p.Selection().Window.Field != "event_day" || p.Doc()[0] != 'a' {
		t.Errorf("an accessor exposed internal state")
	}
	checkRoundTrip(t, p)
}

// view is everything a policy exposes, for comparisons.
type view struct {
	Name      string
	Source    policies.Source
	Target    policies.Target
	Selection policies.Selection
	Triggers  policies.Triggers
	Limits    policies.Limits
	DupKeys   string
	Whole     bool
}

func viewOf(p *policies.Policy) view {
	return view{p.Name(), p.Source(), p.Target(), p.Selection(), p.Triggers(), p.Limits(), p.DuplicateKeys(), p.WholeTable()}
}

func checkRoundTrip(t testing.TB, p *policies.Policy) {
	t.Helper()
	again, err := policies.Parse(p.Doc(), "doc.yaml")
	if err != nil {
		t.Fatalf("Doc() does not parse: %v\n%s", err, p.Doc())
	}
	if len(again) != 1 {
		t.Fatalf("Doc() holds %d policies", len(again))
	}
	if a, b := viewOf(p), viewOf(again[0]); !reflect.DeepEqual(a, b) {
		t.Fatalf("Doc() parses to a different policy:\n%+v\n%+v\n%s", a, b, p.Doc())
	}
	if string(again[0].Doc()) != string(p.Doc()) {
		t.Fatalf("Doc() is not canonical:\n%s\n---\n%s", p.Doc(), again[0].Doc())
	}
}

func TestParseMultipleDocuments(t *testing.T) {
	y := "---\n" + head + "---\n" + strings.Replace(head, "name: p", "name: q", 1)
	pols, err := policies.Parse([]byte(y), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != 2 || pols[0].Name() != "p" || pols[1].Name() != "q" {
		t.Fatalf("got %d policies", len(pols))
	}
	if f, l, c := pols[1].Position(); f != "f" || l != 13 || c != 9 {
		t.Errorf("position of q: %s:%d:%d, want f:13:9", f, l, c)
	}
}

func TestParseAliases(t *testing.T) {
	y := doc(`  target:
    primaryKey: &pk [id]
  selection:
    partitions:
      names: *pk
`)
	pols, err := policies.Parse([]byte(y), "f")
	if err != nil {
		t.Fatal(err)
	}
	if got := pols[0].Selection().Names; !reflect.DeepEqual(got, []string{"id"}) {
		t.Errorf("names %v", got)
	}
}

// TestParseAliasExpansionBounded: aliases are expanded at every use, so a
// 50 KB file could stand for a million where values (1.8 GB to parse); a
// document that expands past the bound is refused, wherever the aliases are.
func TestParseAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("  selection:\n    partitions:\n      where:\n        f0: &a {in: [")
	for i := range 10000 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, i)
	}
	b.WriteString("]}\n")
	for i := 1; i < 100; i++ {
		fmt.Fprintf(&b, "        f%d: *a\n", i)
	}
	_, err := policies.Parse([]byte(doc(b.String())), "f")
	if err == nil || !strings.Contains(err.Error(), "expands to more than 100000 values") {
		t.Fatalf("a document of 100 aliases of 10,000 values: %v", err)
	}
	// Ten of them are fine.
	var small strings.Builder
	small.WriteString("  selection:\n    partitions:\n      where:\n        f0: &a {in: [1, 2, 3]}\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&small, "        f%d: *a\n", i)
	}
	if _, err := policies.Parse([]byte(doc(small.String())), "f"); err != nil {
		t.Fatal(err)
	}
}

func TestParseValuesAsWritten(t *testing.T) {
	y := doc(`  selection:
    partitions:
      names: [2024-01-03, 007, 1e3, "x y"]
      where:
        shard: {eq: 007, in: ["0x1F", ~], notIn: ["null"]}
`)
	pols, err := policies.Parse([]byte(y), "f")
	if err != nil {
		t.Fatal(err)
	}
	sel := pols[0].Selection()
	if want := []string{"2024-01-03", "007", "1e3", "x y"}; !reflect.DeepEqual(sel.Names, want) {
		t.Errorf("names %q, want %q", sel.Names, want)
	}
	want := []policies.Condition{
		{Field: "shard", Op: "eq", Values: []string{"007"}},
		{Field: "shard", Op: "in", Values: []string{"0x1F", "null"}},
		{Field: "shard", Op: "notIn", Values: []string{"null"}},
	}
	if !reflect.DeepEqual(sel.Where, want) {
		t.Errorf("where %q, want %q", sel.Where, want)
	}
	checkRoundTrip(t, pols[0])
}

func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/policies/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d example policies, want at least 3", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pols, err := policies.Parse(data, f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, p := range pols {
			checkRoundTrip(t, p)
		}
	}
	pols, err := policies.Load("../examples/policies")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*policies.Policy{}
	for _, p := range pols {
		byName[p.Name()] = p
	}
	if p := byName["events-recent"]; p == nil || p.Selection().Window == nil || p.Selection().Window.Anchor != "latest" || p.Source().Table != "lake.events" {
		t.Errorf("events-recent is missing or not a latest-anchored window on lake.events")
	}
	if p := byName["events-eu-nightly"]; p == nil || p.Triggers().Schedule == nil {
		t.Errorf("the nightly example has no schedule")
	}
	if p := byName["events-all"]; p == nil || !p.WholeTable() {
		t.Errorf("the whole-table example is missing or not whole-table")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	named := func(n string) string { return strings.Replace(head, "name: p", "name: "+n, 1) }
	write("b.yaml", named("b"))
	write("a.yml", named("a")+"---\n"+named("a2"))
	write("notes.txt", "not a policy")
	write("sub/c.yaml", named("c"))
	extra := write("extra.policy", named("x"))

	pols, err := policies.Load(dir, extra)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name())
	}
	if want := []string{"a", "a2", "b", "x"}; !reflect.DeepEqual(names, want) {
		t.Errorf("loaded %v, want %v", names, want)
	}

	dup := write("z.yaml", named("b"))
	_, err = policies.Load(dir)
	var es policies.Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("got %v, want one duplicate error", err)
	}
	if es[0].File != dup || es[0].Line != 4 || !strings.Contains(es[0].Msg, `duplicate policy name "b" (first defined at `+filepath.Join(dir, "b.yaml")+":4:9)") {
		t.Errorf("duplicate error %v", es[0])
	}

	bad := write("bad/p.yaml", doc("  target: {buckets: -3}\n"))
	write("bad/q.yaml", doc("  duplicateKeys: x\n"))
	_, err = policies.Load(filepath.Dir(bad))
	if !errors.As(err, &es) || len(es) != 2 || es[0].File != bad {
		t.Errorf("got %v, want an error from each file", err)
	}

	if _, err := policies.Load(filepath.Join(dir, "missing")); err == nil || errors.Is(err, policies.ErrInvalid) {
		t.Errorf("a missing path gave %v, want an I/O error", err)
	}
}

// TestLoadFollowsSymlinks: a directory's policy files that are symlinks
// (every file of a Kubernetes ConfigMap volume is one) are loaded; they
// were skipped without a word. A link that leads nowhere is an error.
func TestLoadFollowsSymlinks(t *testing.T) {
	shared, dir := t.TempDir(), t.TempDir()
	named := func(n string) []byte { return []byte(strings.Replace(head, "name: p", "name: "+n, 1)) }
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), named("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "q.yaml"), named("q"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shared, "q.yaml"), filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shared, filepath.Join(dir, "sub.yaml")); err != nil { // a directory: not a file
		t.Fatal(err)
	}
	pols, err := policies.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name())
	}
	if want := []string{"a", "q"}; !reflect.DeepEqual(names, want) {
		t.Errorf("loaded %v, want %v", names, want)
	}
	if err := os.Symlink(filepath.Join(shared, "gone.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Load(dir); err == nil || !strings.Contains(err.Error(), "c.yaml") {
		t.Errorf("a dangling link: %v, want an error naming it", err)
	}
}

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"512", 512, true}, {"512B", 512, true}, {"1KiB", 1024, true},
		{"1MiB", 1 << 20, true}, {"10GiB", 10 << 30, true}, {"2TiB", 2 << 40, true},
		{"1KB", 1000, true}, {"1MB", 1e6, true}, {"3GB", 3e9, true}, {"1 MiB", 1 << 20, true},
		{"", 0, false}, {"MiB", 0, false}, {"-1MiB", 0, false}, {"1.5GiB", 0, false},
		{"1mib", 0, false}, {"1 PiB", 0, false}, {"8388608TiB", 0, false}, {"99999999999999999999", 0, false},
	} {
		got, err := policies.ParseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
		if c.ok {
			back, err := policies.ParseSize(policies.FormatSize(got))
			if err != nil || back != got {
				t.Errorf("FormatSize(%d) = %q does not parse back", got, policies.FormatSize(got))
			}
		}
	}
}

// The complete policy in docs/promoter.md parses, and the fields it shows
// at their default values do hold the defaults.
func TestReferenceExample(t *testing.T) {
	data, err := os.ReadFile("../docs/promoter.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "### A complete policy")
	if i < 0 {
		t.Fatal("docs/promoter.md has no complete policy section")
	}
	text = text[i:]
	start := strings.Index(text, "```yaml\n") + len("```yaml\n")
	end := strings.Index(text[start:], "```")
	pols, err := policies.Parse([]byte(text[start:start+end]), "docs/promoter.md")
	if err != nil {
		t.Fatalf("%v", err)
	}
	p := pols[0]
	if p.Triggers().OnRequest != true || p.Triggers().OnLakeCommit || p.Limits() != (policies.Limits{ConcurrentPromotions: 1}) ||
		p.DuplicateKeys() != "last" || p.Target().Bucketing != "fluss" || !p.Target().CreateIfMissing {
		t.Errorf("the reference example's default values are not the defaults:\n%s", p.Doc())
	}
	checkRoundTrip(t, p)
}
