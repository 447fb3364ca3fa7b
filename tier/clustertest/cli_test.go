package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/cli"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testtls"
)

// thaw runs the CLI in-process.
func thaw(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCLI runs the client commands against an embedded tier: DDL, put,
// get and scan in both output formats, and the errors of bad input, which
// leave the data as it was.
func TestCLI(t *testing.T) {
	cl := startCluster(t, nil)
	ctx := t.Context()
	server := "--server=" + cl.e.HostPort()
	ok := func(want string, args ...string) string {
		t.Helper()
		code, out, errOut := thaw(t, ctx, append(args, server)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("thaw %s: code %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), code, out, errOut, want)
		}
		return out
	}
	fails := func(wantCode int, want string, args ...string) {
		t.Helper()
		code, out, errOut := thaw(t, ctx, append(args, server)...)
		if code != wantCode || !strings.Contains(errOut, want) {
			t.Errorf("thaw %s: code %d, stdout %q, stderr %q; want code %d and %q", strings.Join(args, " "), code, out, errOut, wantCode, want)
		}
	}

	ok("created database shop", "database", "create", "shop")
	ok("created table shop.orders", "table", "create", "shop.orders",
		"--column", "dt STRING", "--column", "id BIGINT", "--column", "item STRING", "--column", "qty INT NOT NULL",
		"--primary-key", "dt,id", "--partition-key", "dt", "--buckets", "4", "--replication", "3")
	schema := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(schema, []byte(`{"columns":[{"name":"id","type":"BIGINT"},{"name":"name","type":"STRING","nullable":true},
		{"name":"born","type":"DATE","nullable":true},{"name":"balance","type":"DECIMAL(12,2)","nullable":true}],
		"primary_key":["id"],"buckets":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The database is created implicitly.
	ok("created table crm.users (id 2, 2 buckets, replication 3)", "table", "create", "crm.users", "--schema", schema)
	if out := ok("crm.users", "table", "list"); out != "crm.users\nshop.orders\n" {
		t.Errorf("table list: %q", out)
	}
	if out := ok("shop", "database", "list", "--output", "json"); strings.Join(strings.Fields(out), "") != `["crm","shop"]` {
		t.Errorf("database list: %q", out)
	}
	var desc struct {
		Schema struct {
			PrimaryKey []string `json:"primary_key"`
			Columns    []struct {
				Name, Type string
				Nullable   bool
			} `json:"columns"`
		} `json:"schema"`
		ReplicationFactor int `json:"replication_factor"`
		Buckets           []struct {
			Leader    string   `json:"leader"`
			Replicas  []string `json:"replicas"`
			Changelog string   `json:"changelog"`
		} `json:"buckets"`
	}
	described := ok("crm", "table", "describe", "crm.users", "--output", "json")
	if err := json.Unmarshal([]byte(described), &desc); err != nil {
		t.Fatal(err)
	}
	// What describe prints creates a table of the same schema.
	copied := filepath.Join(t.TempDir(), "described.json")
	if err := os.WriteFile(copied, []byte(described), 0o644); err != nil {
		t.Fatal(err)
	}
	ok("created table crm.copy", "table", "create", "crm.copy", "--schema", copied)
	schemaOf := func(doc string) string {
		var d struct{ Schema json.RawMessage }
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		return string(d.Schema)
	}
	if got, want := schemaOf(ok(`"table": "copy"`, "table", "describe", "crm.copy", "--output", "json")), schemaOf(described); got != want {
		t.Errorf("schema of the copy:\n%s\nwant\n%s", got, want)
	}
	ok("dropped table crm.copy", "table", "drop", "crm.copy")
	if desc.ReplicationFactor != 3 || len(desc.Buckets) != 2 || desc.Buckets[0].Leader == "" || len(desc.Buckets[0].Replicas) != 3 ||
		desc.Schema.Columns[3].Type != "DECIMAL(12,2)" || desc.Schema.Columns[0].Nullable {
		t.Errorf("describe: %+v", desc)
	}
	// thaw servers: the three tablet servers, sharing the one local
	// changelog every bucket records.
	var servers []struct{ Server, Address, Changelog string }
	if err := json.Unmarshal([]byte(ok("ts-1", "servers", "--output", "json")), &servers); err != nil {
		t.Fatal(err)
	}
	if len(servers) != 3 || servers[0].Server != "ts-1" || servers[2].Server != "ts-3" || servers[0].Address == "" ||
		!strings.HasPrefix(servers[0].Changelog, "local:") || servers[1].Changelog != servers[0].Changelog || servers[2].Changelog != servers[0].Changelog {
		t.Errorf("servers: %+v", servers)
	}
	for i, b := range desc.Buckets {
		if len(servers) > 0 && b.Changelog != servers[0].Changelog {
			t.Errorf("bucket %d of crm.users on changelog %q, servers on %q", i, b.Changelog, servers[0].Changelog)
		}
	}
	if out := ok("ts-3", "servers"); !regexp.MustCompile(`(?m)^server\s+address\s+changelog\s+registered\nts-1\s+\S+\s+local:[0-9a-f]{32}\s+\d{4}-`).MatchString(out) {
		t.Errorf("servers:\n%s", out)
	}
	fails(2, "takes no arguments", "servers", "ts-1")
	// More replicas than tablet servers: describe says so.
	ok("created table crm.wide", "table", "create", "crm.wide", "--column", "id BIGINT", "--primary-key", "id", "--buckets", "2", "--replication", "5")
	if out := ok("bucket", "table", "describe", "crm.wide"); !regexp.MustCompile(`under-replicated\s+2 of 2 buckets have fewer replicas than 5`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^bucket\s+leader\s+epoch\s+replicas\s+changelog\n\s+0\s+ts-\d\s+\d+\s+ts-\d,ts-\d,ts-\d\s+local:[0-9a-f]{32}\n`).MatchString(out) {
		t.Errorf("describe crm.wide does not say it is under-replicated, or on which changelog:\n%s", out)
	}
	ok("dropped table crm.wide", "table", "drop", "crm.wide")
	out := ok("primary key", "table", "describe", "shop.orders")
	for _, want := range []string{`qty\s+INT\s+NOT NULL`, `partition keys\s+dt\n`, `buckets\s+4 \(fluss bucketing\)`, `replication\s+3\n`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("describe shop.orders misses %q:\n%s", want, out)
		}
	}

	ok("created partition 2024-01-01 of shop.orders", "partition", "create", "shop.orders", "2024-01-01")
	ok("created partition 2024-01-02", "partition", "create", "shop.orders", "2024-01-02")
	if out := ok("2024-01-02", "partition", "list", "shop.orders"); !regexp.MustCompile(`2024-01-01\s+\d+\s+ACTIVE`).MatchString(out) {
		t.Errorf("partition list: %q", out)
	}

	ok("wrote 2 rows to shop.orders", "put", "shop.orders",
		`{"dt":"2024-01-01","id":1,"item":"apple","qty":3}`, `{"dt":"2024-01-02","id":2,"item":null,"qty":5}`)
	rows := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(rows, []byte(`{"dt":"2024-01-01","id":3,"item":"pear","qty":1}

{"dt":"2024-01-01","id":1,"item":"apple","qty":4}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ok("wrote 2 rows to shop.orders/2024-01-01", "put", "shop.orders", "--input", rows, "--partition", "2024-01-01")
	ok("wrote 1 row to shop.orders", "put", "shop.orders", `{"dt":"2024-01-02","id":4,"item":"fig","qty":2}`)
	ok("wrote 2 rows to crm.users", "put", "crm.users",
		`{"id":1,"name":"ann","born":"1990-05-17","balance":"10.50"}`, `{"id":2,"balance":7}`)
	// Two partition keys: partitions named "dt$region", served by the
	// tablets like any other.
	ok("created table shop.events", "table", "create", "shop.events", "--column", "dt STRING", "--column", "region INT",
		"--column", "id BIGINT", "--column", "v STRING", "--primary-key", "dt,region,id", "--partition-key", "dt,region", "--buckets", "2")
	ok("wrote 2 rows to shop.events", "put", "shop.events", "--create-partitions",
		`{"dt":"2024-01-01","region":3,"id":1,"v":"a"}`, `{"dt":"2024-01-01","region":4,"id":1,"v":"b"}`)
	if out := ok("2024-01-01$4", "partition", "list", "shop.events"); !strings.Contains(out, "2024-01-01$3") {
		t.Errorf("partitions of shop.events: %q", out)
	}
	if out := ok(`"b"`, "get", "shop.events", `["2024-01-01",4,1]`, "--output", "json"); strings.Contains(out, `"a"`) {
		t.Errorf("get of one row of shop.events: %q", out)
	}
	ok("(2 rows)", "scan", "shop.events")

	if out := ok(`"apple"`, "get", "shop.orders", `{"dt":"2024-01-01","id":1}`, `["2024-01-01",99]`, "--output", "json"); out !=
		`{"dt":"2024-01-01","id":1,"item":"apple","qty":4}`+"\nnull\n" {
		t.Errorf("get json: %q", out)
	}
	if out := ok("(1 of 2 keys found)", "get", "crm.users", "[1]", "[3]"); !regexp.MustCompile(`1\s+ann\s+1990-05-17\s+10.50`).MatchString(out) {
		t.Errorf("get table: %q", out)
	}
	// A one-column key may be given as its value alone.
	if out := ok("(1 of 1 key found)", "get", "crm.users", "1"); !regexp.MustCompile(`1\s+ann\s+1990-05-17\s+10.50`).MatchString(out) {
		t.Errorf("get by a lone key value: %q", out)
	}
	scanJSON := ok(`"fig"`, "scan", "shop.orders", "--output", "json")
	if n := strings.Count(scanJSON, "\n"); n != 4 {
		t.Errorf("scan json: %d rows:\n%s", n, scanJSON)
	}
	if out := ok("(first 1 row)", "scan", "shop.orders", "--partition", "2024-01-02", "--limit", "1"); !strings.HasPrefix(out, "dt") {
		t.Errorf("scan table: %q", out)
	}
	ok("(2 rows)", "scan", "crm.users")

	// Bad input: clear errors, nothing changes.
	fails(1, `row 1: unknown column "colour"`, "put", "shop.orders", `{"dt":"2024-01-01","id":5,"qty":1,"colour":"red"}`)
	fails(1, `row 2: column "qty" (INT): want an integer, got a string "many"`, "put", "shop.orders",
		`{"dt":"2024-01-01","id":6,"qty":1}`, `{"dt":"2024-01-01","id":7,"qty":"many"}`)
	fails(1, `row 1: missing primary-key column "id"`, "put", "shop.orders", `{"dt":"2024-01-01","qty":1}`)
	fails(1, `row 1: column "qty" is NOT NULL and has no value`, "put", "shop.orders", `{"dt":"2024-01-01","id":8}`)
	fails(1, `row 1: duplicate key "id"`, "put", "shop.orders", `{"dt":"2024-01-01","id":8,"id":9,"qty":1}`)
	fails(1, `row 1: not JSON`, "put", "shop.orders", `dt=2024-01-01`)
	fails(1, `the row belongs to partition "2024-01-02"`, "put", "shop.orders", "--partition", "2024-01-01", `{"dt":"2024-01-02","id":9,"qty":1}`)
	// The tier's message, not tierclient's wrapping of it again.
	fails(1, "thaw: table shop.nope: NOT_FOUND: coordinator: table shop.nope does not exist\n", "put", "shop.nope", `{"id":1}`)
	fails(1, "thaw: table nodb.t: NOT_FOUND: coordinator: database nodb does not exist\n", "get", "nodb.t", `[1]`)
	fails(1, "NOT_FOUND", "put", "shop.orders", "--partition", "2030-01-01", `{"dt":"2030-01-01","id":1,"qty":1}`)
	fails(1, "put shop.orders: row 2: NOT_FOUND: ", "put", "shop.orders", `{"dt":"2024-01-01","id":10,"qty":1}`, `{"dt":"2030-01-01","id":1,"qty":1}`)
	fails(1, "thaw put --create-partitions", "put", "shop.orders", `{"dt":"2030-01-01","id":1,"qty":1}`)
	fails(1, "thaw: scan shop.orders/2030-01-01: NOT_FOUND: coordinator: partition 2030-01-01 of table shop.orders does not exist\n", "scan", "shop.orders", "--partition", "2030-01-01")
	fails(1, "ALREADY_EXISTS", "table", "create", "crm.users", "--schema", schema)
	fails(1, "ALREADY_EXISTS", "partition", "create", "shop.orders", "2024-01-01")
	fails(1, "ALREADY_EXISTS", "database", "create", "crm")
	// --if-not-exists says that nothing was created, and a table that
	// exists with another schema (or replication) is an error.
	ok("database crm already exists", "database", "create", "crm", "--if-not-exists")
	if out := ok(`"created": false`, "database", "create", "crm", "--if-not-exists", "--output", "json"); strings.Contains(out, "true") {
		t.Errorf("database create --if-not-exists --output json: %s", out)
	}
	ok("created database crm2", "database", "create", "crm2", "--if-not-exists")
	ok("table already exists: crm.users (id 2, 2 buckets, replication 3)", "table", "create", "crm.users", "--schema", schema, "--if-not-exists")
	ok("table already exists: crm.users", "table", "create", "crm.users", "--schema", schema, "--if-not-exists", "--replication", "3")
	fails(1, "table crm.users already exists (id 2) and differs from the one given: 2 buckets, want 4",
		"table", "create", "crm.users", "--schema", schema, "--buckets", "4", "--if-not-exists")
	fails(1, "differs from the one given: replication 3, want 2", "table", "create", "crm.users", "--schema", schema, "--replication", "2", "--if-not-exists")
	fails(1, "differs from the one given: 4 columns, want 1",
		"table", "create", "crm.users", "--column", "id BIGINT", "--primary-key", "id", "--buckets", "2", "--if-not-exists")
	ok("partition already exists: 2024-01-01 of shop.orders", "partition", "create", "shop.orders", "2024-01-01", "--if-not-exists")
	ok("created partition 2024-01-03 of shop.orders", "partition", "create", "shop.orders", "2024-01-03", "--if-not-exists")
	ok("dropped partition 2024-01-03", "partition", "drop", "shop.orders", "2024-01-03")
	fails(1, "NOT_FOUND: coordinator: table shop.nope does not exist\n", "table", "describe", "shop.nope")
	fails(1, "NOT_FOUND: coordinator: database nodb does not exist\n", "table", "list", "nodb")
	fails(1, "NOT_FOUND: coordinator: partition 2030-01-01 of table shop.orders does not exist\n", "partition", "drop", "shop.orders", "2030-01-01")
	fails(2, `--column "id": want "NAME TYPE [NOT NULL]"`, "table", "create", "shop.t2", "--column", "id", "--primary-key", "id")
	fails(2, "primary key", "table", "create", "shop.t2", "--column", "id BIGINT")
	fails(2, "buckets 0 is out of range 1..4096", "table", "create", "shop.t2", "--column", "id BIGINT", "--primary-key", "id", "--buckets", "0")
	fails(1, `delete shop.orders: key row 2: missing primary-key column "id"`, "delete", "shop.orders", `{"dt":"2024-01-01","id":1}`, `{"dt":"2024-01-01"}`)
	fails(2, "thaw delete: no keys", "delete", "shop.orders", "--input", os.DevNull)
	if again := ok(`"fig"`, "scan", "shop.orders", "--output", "json"); again != scanJSON {
		t.Errorf("rows changed by bad input:\nbefore %s\nafter  %s", scanJSON, again)
	}
	if code, _, errOut := thaw(t, ctx, "database", "list", "--server=127.0.0.1:1", "--timeout=1s"); code != 1 ||
		!strings.Contains(errOut, "list databases: UNAVAILABLE: no coordinator answered at http://127.0.0.1:1") {
		t.Errorf("no server: code %d, stderr %q", code, errOut)
	}

	// Delete by primary key; a missing key is no error, nor is a key of a
	// partition that does not exist (which the delete does not create).
	// It says which keys' partitions do not exist (a mistyped value shows).
	ok("deleted 2 keys from shop.orders; keys in partitions that do not exist (no row): 2030-01-01 (1)\n",
		"delete", "shop.orders", `{"dt":"2024-01-01","id":3}`, `["2024-01-01",99]`, `["2030-01-01",1]`)
	ok("nothing deleted from shop.orders; keys in partitions that do not exist (no row): 2030-01-01 (1), 2031-01-01 (2)\n",
		"delete", "shop.orders", `["2030-01-01",1]`, `["2031-01-01",1]`, `["2031-01-01",2]`)
	fails(1, "NOT_FOUND", "scan", "shop.orders", "--partition", "2030-01-01")
	ok("(1 of 3 keys found; keys in partitions that do not exist (no row): 2030-01-01 (1))\n",
		"get", "shop.orders", `["2024-01-01",1]`, `["2024-01-01",99]`, `["2030-01-01",1]`)
	if out := ok("(1 of 2 keys found)", "get", "shop.orders", `["2024-01-01",3]`, `["2024-01-01",1]`); !strings.Contains(out, "apple") {
		t.Errorf("get after the delete: %q", out)
	}
	ok(`"keys": 1`, "delete", "shop.orders", "--partition", "2024-01-02", `["2024-01-02",4]`, "--output", "json")
	if n := strings.Count(ok("", "scan", "shop.orders", "--output", "json"), "\n"); n != 2 {
		t.Errorf("after deleting two rows: %d rows", n)
	}

	ok("dropped partition 2024-01-02 of shop.orders", "partition", "drop", "shop.orders", "2024-01-02")
	if n := strings.Count(ok("", "scan", "shop.orders", "--output", "json"), "\n"); n != 1 {
		t.Errorf("after dropping a partition: %d rows", n)
	}
	ok("dropped table crm.users", "table", "drop", "crm.users")
	// --if-exists says that nothing was dropped (it said "dropped").
	ok("table crm.users does not exist", "table", "drop", "crm.users", "--if-exists")
	if out := ok(`"dropped": false`, "table", "drop", "crm.users", "--if-exists", "--output", "json"); strings.Contains(out, "true") {
		t.Errorf("table drop --if-exists --output json: %s", out)
	}
	ok("partition 2024-01-02 of shop.orders does not exist", "partition", "drop", "shop.orders", "2024-01-02", "--if-exists")
	fails(1, "NOT_FOUND: coordinator: table shop.nope does not exist\n", "partition", "drop", "shop.nope", "2024-01-02", "--if-exists")
	fails(1, "NOT_EMPTY", "database", "drop", "shop")
	fails(1, "(thaw database drop shop --cascade drops its tables too)", "database", "drop", "shop")
	ok("dropped database shop", "database", "drop", "shop", "--cascade")
	ok("database shop does not exist", "database", "drop", "shop", "--if-exists")
	fails(1, "NOT_FOUND: coordinator: database shop does not exist\n", "database", "drop", "shop")
	fails(1, "NOT_FOUND: coordinator: database shop does not exist\n", "table", "drop", "shop.orders")
	ok("dropped database crm", "database", "drop", "crm", "--if-exists")
	ok("dropped database crm2", "database", "drop", "crm2")
	if out := ok("", "table", "list"); out != "" {
		t.Errorf("tables left: %q", out)
	}
}

// TestServerCommand runs `thaw server` in-process: it serves, answers
// /readyz and client commands, and shuts down gracefully when its context
// is cancelled, keeping its data for the next start.
func TestServerCommand(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "thaw.yaml")
	if err := os.WriteFile(config, []byte("tablets: 1\nlog:\n  level: error\ncoordinator:\n  lease_ttl: 2s\ntablet:\n  lease_ttl: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() (addr string, stop func() int) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		var out, errOut testlog.Buffer
		done := make(chan int, 1)
		go func() {
			done <- cli.Main(ctx, []string{"server", "--config", config, "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0"}, &out, &errOut)
		}()
		re := regexp.MustCompile(`serving on http://(\S+) `)
		eventually(t, "thaw server serving", func(context.Context) error {
			select {
			case code := <-done:
				t.Fatalf("thaw server exited with %d: %s %s", code, out.String(), errOut.String())
			default:
			}
			if m := re.FindStringSubmatch(out.String()); m != nil {
				addr = m[1]
				return nil
			}
			return context.DeadlineExceeded
		})
		eventually(t, "thaw server ready", func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return context.DeadlineExceeded
			}
			return nil
		})
		return addr, func() int {
			cancel()
			select {
			case code := <-done:
				return code
			case <-time.After(waitFor):
				t.Fatal("thaw server did not stop")
				return -1
			}
		}
	}
	addr, stop := start()
	if code, out, errOut := thaw(t, t.Context(), "table", "create", "app.kv", "--column", "k STRING", "--column", "v STRING", "--primary-key", "k", "--server", addr); code != 0 {
		t.Fatalf("table create: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := thaw(t, t.Context(), "put", "app.kv", `{"k":"a","v":"1"}`, "--server", addr); code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errOut)
	}
	if code := stop(); code != 0 {
		t.Fatalf("thaw server exited with %d after cancel", code)
	}
	// Everything survives a restart on the same directory.
	addr, stop = start()
	code, out, errOut := thaw(t, t.Context(), "get", "app.kv", `["a"]`, "--output", "json", "--server", addr)
	if code != 0 || out != `{"k":"a","v":"1"}`+"\n" {
		t.Errorf("get after restart: %d %q %q", code, out, errOut)
	}
	if code := stop(); code != 0 {
		t.Fatalf("thaw server exited with %d after cancel", code)
	}
}

// slowWriter takes pause for every write, as a consumer reading a pipe
// slowly does.
type slowWriter struct {
	bytes.Buffer
	pause time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.pause)
	return w.Buffer.Write(p)
}

// TestCLIScanOutlastsTimeout: `thaw scan` runs as long as rows keep
// arriving — its --timeout bounds the wait for the next one, not the
// whole scan (a big table takes minutes to print).
func TestCLIScanOutlastsTimeout(t *testing.T) {
	cl := startCluster(t, nil)
	ctx := t.Context()
	server := "--server=" + cl.e.HostPort()
	if code, out, errOut := thaw(t, ctx, "table", "create", "shop.items", "--column", "id BIGINT", "--primary-key", "id", "--buckets", "2", server); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	const rows = 60
	var args []string
	for i := range rows {
		args = append(args, `{"id":`+strconv.Itoa(i)+`}`)
	}
	if code, out, errOut := thaw(t, ctx, append([]string{"put", "shop.items", server}, args...)...); code != 0 {
		t.Fatalf("put: %d %s %s", code, out, errOut)
	}
	// 60 rows at 10 ms each: 0.6 s, three times the timeout.
	out := &slowWriter{pause: 10 * time.Millisecond}
	var errOut bytes.Buffer
	start := time.Now()
	code := cli.Main(ctx, []string{"scan", "shop.items", "--output", "json", "--timeout", "200ms", server}, out, &errOut)
	if code != 0 || strings.Count(out.String(), "\n") != rows {
		t.Fatalf("scan: code %d after %v, %d lines, stderr %q", code, time.Since(start), strings.Count(out.String(), "\n"), errOut.String())
	}
}

// TestCLITLS: against a tier that serves HTTPS only, the client commands
// work with THAW_TLS_CA naming its CA bundle and an https:// --server, and
// fail at once, naming the certificate, without it.
func TestCLITLS(t *testing.T) {
	cert, key := testtls.Files(t)
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
		c.TLS = &daemon.ListenerTLS{CertFile: cert, KeyFile: key, CAFile: cert}
	})
	ctx := t.Context()
	server := "--server=" + cl.e.Address()
	if !strings.HasPrefix(cl.e.Address(), "https://") {
		t.Fatalf("address %s, want https://", cl.e.Address())
	}
	start := time.Now()
	code, out, errOut := thaw(t, ctx, "database", "create", "shop", server)
	if code == 0 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("without %s: code %d, stdout %q, stderr %q; want a certificate error", daemon.EnvTLSCA, code, out, errOut)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the untrusted command took %v (retried until its timeout?)", d)
	}
	t.Setenv(daemon.EnvTLSCA, filepath.Join(t.TempDir(), "missing.pem"))
	if code, _, errOut := thaw(t, ctx, "database", "create", "shop", server); code == 0 || !strings.Contains(errOut, daemon.EnvTLSCA) {
		t.Fatalf("a missing CA bundle: code %d, stderr %q", code, errOut)
	}
	t.Setenv(daemon.EnvTLSCA, cert)
	for _, args := range [][]string{
		{"database", "create", "shop"},
		{"table", "create", "shop.users", "--column", "id BIGINT", "--column", "name STRING", "--primary-key", "id", "--buckets", "2"},
		{"put", "shop.users", `{"id":1,"name":"ada"}`},
	} {
		if code, out, errOut := thaw(t, ctx, append(args, server)...); code != 0 {
			t.Fatalf("thaw %s: code %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, out, errOut := thaw(t, ctx, "get", "shop.users", `{"id":1}`, "--output", "json", server); code != 0 || !strings.Contains(out, `"ada"`) {
		t.Fatalf("thaw get: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCLIMutualTLS: against a tier that requires client certificates
// (tls.client_ca_file), the client commands need THAW_TLS_CERT and
// THAW_TLS_KEY besides THAW_TLS_CA; without them they are refused as
// unauthenticated, and the tier's own parts still reach each other.
func TestCLIMutualTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	testtls.Write(t, cert, key)
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
		c.TLS = &daemon.ListenerTLS{CertFile: cert, KeyFile: key, CAFile: cert, ClientCAFile: cert}
	})
	ctx := t.Context()
	server := "--server=" + cl.e.Address()
	t.Setenv(daemon.EnvTLSCA, cert)
	if code, out, errOut := thaw(t, ctx, "database", "create", "shop", server); code == 0 || !strings.Contains(strings.ToLower(errOut), "unauthenticated") {
		t.Fatalf("without a client certificate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv(daemon.EnvTLSCert, cert)
	if code, _, errOut := thaw(t, ctx, "database", "create", "shop", server); code == 0 || !strings.Contains(errOut, daemon.EnvTLSKey) {
		t.Fatalf("a client certificate without its key: code %d, stderr %q", code, errOut)
	}
	t.Setenv(daemon.EnvTLSKey, key)
	for _, args := range [][]string{
		{"database", "create", "shop"},
		{"table", "create", "shop.users", "--column", "id BIGINT", "--column", "name STRING", "--primary-key", "id", "--buckets", "2", "--replication", "3"},
		{"put", "shop.users", `{"id":1,"name":"ada"}`},
	} {
		if code, out, errOut := thaw(t, ctx, append(args, server)...); code != 0 {
			t.Fatalf("thaw %s: code %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
	eventually(t, "replicated on three tablet servers over mutual TLS", func(ctx context.Context) error {
		code, out, errOut := thaw(t, ctx, "get", "shop.users", `{"id":1}`, "--output", "json", server)
		if code != 0 || !strings.Contains(out, `"ada"`) {
			return fmt.Errorf("thaw get: code %d, stdout %q, stderr %q", code, out, errOut)
		}
		return nil
	})
}
