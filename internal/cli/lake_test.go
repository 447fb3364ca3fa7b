package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/lake"
)

func lakeCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runLake(t.Context(), &out, args)
	return out.String(), err
}

func TestLakeCommands(t *testing.T) {
	dir := t.TempDir()
	out, err := lakeCmd(t, "sample", "--dir", dir, "--rows", "600", "--days", "3", "--seed", "9")
	if err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	for _, want := range []string{"created lake.events", "6. ", "position delete", "thaw lake partitions lake.events --uri "} {
		if !strings.Contains(out, want) {
			t.Errorf("sample output misses %q:\n%s", want, out)
		}
	}
	uri := filepath.Join(dir, "catalog.db")

	out, err = lakeCmd(t, "tables", "--uri", uri)
	if err != nil || out != "lake.events\n" {
		t.Fatalf("tables: %q %v", out, err)
	}
	out, err = lakeCmd(t, "tables", "lake", "--uri", uri, "--json")
	var tables []string
	if err != nil || json.Unmarshal([]byte(out), &tables) != nil || len(tables) != 1 {
		t.Fatalf("tables --json: %q %v", out, err)
	}

	out, err = lakeCmd(t, "describe", "lake.events", "--uri", uri, "--tier", "--buckets", "4")
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	for _, want := range []string{"identifier fields: id", "event_day\tday(event_ts)", "write.delete.mode", "merge-on-read", "tier schema", "partition key event_day", "= day(event_ts)"} {
		if !strings.Contains(strings.ReplaceAll(out, "  ", "\t"), want) && !strings.Contains(out, want) {
			t.Errorf("describe output misses %q:\n%s", want, out)
		}
	}
	// --primary-key takes a list as people write it.
	out, err = lakeCmd(t, "describe", "lake.events", "--uri", uri, "--tier", "--buckets", "4", "--primary-key", "id, event_ts")
	if err != nil || !regexp.MustCompile(`primary key\s+id, event_ts, event_day\n`).MatchString(out) {
		t.Errorf("describe --primary-key \"id, event_ts\": %v\n%s", err, out)
	}
	out, err = lakeCmd(t, "describe", "--uri", uri, "--json", "lake.events")
	var info struct {
		Name      string `json:"name"`
		Snapshots []any  `json:"snapshots"`
	}
	if err != nil || json.Unmarshal([]byte(out), &info) != nil || info.Name != "lake.events" || len(info.Snapshots) != 6 {
		t.Fatalf("describe --json: %v %+v", err, info)
	}

	out, err = lakeCmd(t, "partitions", "lake.events", "--uri", uri, "--json", "--tier", "--buckets", "4")
	var parts []struct {
		Path          string `json:"path"`
		RecordCount   int64  `json:"record_count"`
		TierPartition string `json:"tier_partition"`
	}
	if err != nil || json.Unmarshal([]byte(out), &parts) != nil || len(parts) != 3 {
		t.Fatalf("partitions --json: %v\n%s", err, out)
	}
	if parts[0].Path != "event_day=2024-01-01" || parts[0].TierPartition != "2024-01-01" || parts[0].RecordCount == 0 {
		t.Errorf("partition 0: %+v", parts[0])
	}
	out, err = lakeCmd(t, "partitions", "lake.events", "--uri", uri)
	if err != nil || !strings.Contains(out, "RECORDS (UPPER BOUND)") || !strings.Contains(out, "event_day=2024-01-03") {
		t.Errorf("partitions table: %v\n%s", err, out)
	}

	out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--partition", "event_day=2024-01-02", "--columns", "id,event_ts", "--limit", "0", "--json")
	if err != nil {
		t.Fatalf("scan --json: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 150 {
		t.Fatalf("scan of one partition printed %d rows", len(lines))
	}
	for _, line := range lines {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil || len(row) != 2 || !strings.HasPrefix(row["event_ts"].(string), "2024-01-02") {
			t.Fatalf("scan row %q (%v)", line, err)
		}
	}
	// Spaces around names are dropped; a name that is not a column
	// gets the list of those there are.
	out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--columns", "version, id", "--limit", "1")
	if err != nil || !regexp.MustCompile(`^id\s+version\n\d+\s+\d+\n\(first 1 row\)\n$`).MatchString(out) {
		t.Errorf("scan --columns \"version, id\": %v\n%s", err, out)
	}
	if _, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--columns", "id,Version"); !errors.Is(err, lake.ErrNotFound) ||
		!strings.Contains(err.Error(), `no column "Version" (its columns: id, event_ts, user_name, region, amount, score, active, updated_at, version)`) {
		t.Errorf("scan --columns id,Version: %v", err)
	}
	// A partition that is not there reads nothing, and says so: after the
	// table, or on stderr with --json.
	out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--columns", "id", "--partition", "event_day=2024-13-01", "--partition", "0:event_day=2024-01-02")
	if err != nil || !strings.HasSuffix(out, " rows)\n(lake.events has no partition event_day=2024-13-01 in spec 0: thaw lake partitions lake.events lists them)\n") ||
		strings.Contains(out, "2024-01-02 in spec") {
		t.Errorf("scan of a partition that is not there: %v\n%s", err, out)
	}
	var notes bytes.Buffer
	progressOutput = &notes
	t.Cleanup(func() { progressOutput = os.Stderr })
	out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--json", "--partition", "event_day=1999-01-01")
	if err != nil || out != "" || notes.String() != "(lake.events has no partition event_day=1999-01-01 in spec 0: thaw lake partitions lake.events lists them)\n" {
		t.Errorf("scan --json of a partition that is not there: %v\nstdout %q\nstderr %q", err, out, notes.String())
	}
	// A path that no partition of the spec can have is a usage error,
	// before anything is read.
	for _, tc := range []struct{ partition, want string }{
		{"day=2024-01-01", `--partition "day=2024-01-01": not a partition path of spec 0 of lake.events: its paths read event_day=VALUE (thaw lake partitions lake.events lists them)`},
		{"event_day=2024-01-01/region=eu", "not a partition path of spec 0 of lake.events"},
		{"", "not a partition path of spec 0 of lake.events"},
		{"3:event_day=2024-01-01", `--partition "3:event_day=2024-01-01": lake.events has no partition spec 3 (its specs: 0)`},
	} {
		out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--partition", tc.partition)
		if !errors.Is(err, flagutil.ErrUsage) || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("scan --partition %q: %v\n%s\nwant a usage error: %s", tc.partition, err, out, tc.want)
		}
	}
	out, err = lakeCmd(t, "scan", "lake.events", "--uri", uri, "--limit", "3")
	if err != nil || !strings.HasPrefix(out, "id") || !strings.Contains(out, "(first 3 rows)") || strings.Count(out, "\n") != 5 {
		t.Errorf("scan table: %v\n%s", err, out)
	}
	// Flags on both sides of the table, as the tier commands take them.
	if again, err := lakeCmd(t, "scan", "--uri", uri, "lake.events", "--limit", "3"); err != nil || again != out {
		t.Errorf("scan with flags before and after the table: %v\n%s", err, again)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"describe", "--uri", uri}, "needs a table"},
		{[]string{"scan", "--uri", uri, "lake.events", "--limit", "1", "lake.x"}, "thaw lake scan: unexpected arguments: lake.x"},
		{[]string{"tables", "--uri", uri, "lake", "--json", "other"}, "takes at most one namespace"},
		{[]string{"tables"}, "no catalog"},
		{[]string{"scan", "lake.events", "--uri", uri, "--snapshot", "x"}, "not a snapshot id"},
		{[]string{"scan", "lake.events", "--uri", uri, "--columns", "id,,version"}, "an empty column name"},
		{[]string{"describe", "lake.events", "--uri", uri, "--buckets", "4"}, "shape the tier mapping: add --tier"},
		{[]string{"partitions", "lake.events", "--uri", uri, "--primary-key", "id"}, "shape the tier mapping: add --tier"},
		{[]string{"describe", "lake.events", "--uri", uri, "--tier", "--bucketing", "hash"}, `--bucketing: kv: invalid schema: unknown bucketing "hash"`},
		{[]string{"describe", "lake.events", "--uri", uri, "--tier", "--buckets", "-2"}, "--buckets must not be negative"},
		{[]string{"describe", "lake.events", "--uri", uri, "--tier", "--primary-key", "id,"}, "an empty column name"},
		{[]string{"scan", "lake.events", "--uri", uri, "--columns", "id, version,id"}, "id given twice"},
		{[]string{"sample"}, "needs --dir"},
		{[]string{"nope"}, "unknown command"},
		{[]string{"tables", "--uri", uri, "--type", "oracle"}, "unknown catalog type"},
	} {
		_, err := lakeCmd(t, tc.args...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	// --config also takes a promoter config, whose catalog --catalog names.
	promoterCfg := filepath.Join(dir, "promoter.yaml")
	writeFile(t, promoterCfg, "data_dir: "+dir+"\ncatalogs:\n  other: {uri: /nonexistent.db}\n  default: {uri: \""+uri+"\"}\n")
	if out, err = lakeCmd(t, "tables", "--config", promoterCfg); err != nil || out != "lake.events\n" {
		t.Errorf("tables of a promoter config's default catalog: %q %v", out, err)
	}
	oneCatalog := filepath.Join(dir, "one.yaml")
	writeFile(t, oneCatalog, "data_dir: "+dir+"\ncatalogs:\n  lakehouse: {uri: \""+uri+"\"}\n")
	if out, err = lakeCmd(t, "partitions", "lake.events", "--config", oneCatalog); err != nil || !strings.Contains(out, "event_day=2024-01-03") {
		t.Errorf("partitions of a promoter config's only catalog: %q %v", out, err)
	}
	if _, err = lakeCmd(t, "tables", "--config", promoterCfg, "--catalog", "other"); err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "nonexistent.db") {
		t.Errorf("--catalog other: %v, want the catalog's own error", err)
	}
	jsonCfg := filepath.Join(dir, "lake.json")
	writeFile(t, jsonCfg, `  {"uri":"`+uri+`"}`)
	if out, err = lakeCmd(t, "tables", "--config", jsonCfg); err != nil || out != "lake.events\n" {
		t.Errorf("tables of a JSON lake config: %q %v", out, err)
	}
	emptyCfg := filepath.Join(dir, "empty.yaml")
	writeFile(t, emptyCfg, "# nothing yet\n")
	notPromoter := filepath.Join(dir, "lake.yaml")
	writeFile(t, notPromoter, "uri: "+uri+"\n")
	for _, tc := range []struct {
		args  []string
		want  string
		usage bool
	}{
		{[]string{"tables", "--config", promoterCfg, "--catalog", "nope"}, `promoter config ` + promoterCfg + ` has no catalog "nope" (catalogs: default, other)`, true},
		{[]string{"tables", "--config", jsonCfg, "--catalog", "default"}, "is a lake config (JSON)", true},
		{[]string{"tables", "--config", emptyCfg}, "promoter config " + emptyCfg + " has no catalogs", true},
		{[]string{"tables", "--uri", uri, "--catalog", "default"}, "--catalog names a catalog of a promoter --config", true},
		{[]string{"tables", "--config", notPromoter}, "unknown key \"uri\" (--config takes a lake config as JSON or a promoter config)", false},
	} {
		_, err := lakeCmd(t, tc.args...)
		if err == nil || errors.Is(err, ErrUsage) != tc.usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error (usage %v) with %q", tc.args, err, tc.usage, tc.want)
		}
	}
	if _, err := lakeCmd(t, "describe", "lake.nope", "--uri", uri); err == nil || errors.Is(err, ErrUsage) {
		t.Errorf("missing table: %v", err)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPrintRowsNonFinite: thaw lake scan --json prints a row holding NaN
// or an infinity (Parquet files carry them; JSON numbers cannot) with
// them as strings, as thaw get does, instead of failing the scan.
func TestPrintRowsNonFinite(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "d", Type: arrow.PrimitiveTypes.Float64}, {Name: "f", Type: arrow.PrimitiveTypes.Float32}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Float64Builder).AppendValues([]float64{math.NaN(), 1.5}, nil)
	b.Field(1).(*array.Float32Builder).AppendValues([]float32{float32(math.Inf(-1)), 2}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var out bytes.Buffer
	if n, err := printRows(nil, json.NewEncoder(&out), rec, 0, 0); err != nil || n != 2 {
		t.Fatalf("printRows: %d, %v", n, err)
	}
	if want := "{\"d\":\"NaN\",\"f\":\"-Infinity\"}\n{\"d\":1.5,\"f\":2}\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}

// TestLakeScanPrintsPlainDecimals: thaw lake scan printed small decimals
// in Arrow's exponent form ("1e-10"), which put refuses for a DECIMAL;
// they print with their scale's digits, in the table and as JSON.
func TestLakeScanPrintsPlainDecimals(t *testing.T) {
	typ := &arrow.Decimal128Type{Precision: 38, Scale: 10}
	b := array.NewDecimal128Builder(memory.DefaultAllocator, typ)
	defer b.Release()
	n, _ := new(big.Int).SetString("-123456789012345678901234567891", 10)
	b.Append(decimal128.FromBigInt(n))
	b.Append(decimal128.FromI64(1)) // 0.0000000001
	b.AppendNull()
	arr := b.NewArray()
	defer arr.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "amount", Type: typ, Nullable: true}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{arr}, 3)
	defer rec.Release()
	var out bytes.Buffer
	if _, err := printRows(nil, json.NewEncoder(&out), rec, 0, 0); err != nil {
		t.Fatal(err)
	}
	want := `{"amount":"-12345678901234567890.1234567891"}` + "\n" + `{"amount":"0.0000000001"}` + "\n" + `{"amount":null}` + "\n"
	if out.String() != want {
		t.Errorf("JSON:\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	w := newAlignedTable(&out, []string{"amount"})
	if _, err := printRows(w, nil, rec, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "0.0000000001") || strings.Contains(got, "e-") {
		t.Errorf("table:\n%s", got)
	}
}
