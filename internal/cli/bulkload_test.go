package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/tier/tierclient"
)

func runBulk(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runBulkload(t.Context(), &out, args)
	return out.String(), err
}

func TestBulkloadUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "thaw bulkload needs a command"},
		{[]string{"nope"}, `unknown command "nope" for thaw bulkload`},
		{[]string{"status"}, "takes one TXN_ID (got 0 arguments)"},
		{[]string{"abort", "a", "b"}, "takes one TXN_ID (got 2 arguments)"},
		{[]string{"list", "--target", "nodot"}, `target "nodot": want DATABASE.TABLE`},
		{[]string{"list", "--target", "a.b/"}, "empty partition"},
		{[]string{"list", "extra"}, "unexpected arguments: extra"},
		{[]string{"status", "0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11", "--output", "yaml"}, `--output "yaml"`},
		{[]string{"abort", "x", "--context", "ctx.json"}, "takes TXN_ID or --context, not both"},
		{[]string{"abort", "shop.events"}, `thaw bulkload abort: "shop.events" is not a TXN_ID: a transaction id is a lowercase UUID, as thaw bulkload begin and thaw bulkload list print it`},
		{[]string{"status", "0B0D6F7E-52F1-4B8E-9A43-0B2A1E6C1D11"}, `"0B0D6F7E-52F1-4B8E-9A43-0B2A1E6C1D11" is not a TXN_ID`},
		{[]string{"begin"}, "takes one DATABASE.TABLE[/PARTITION] (got 0 arguments)"},
		{[]string{"begin", "a.b", "c.d"}, "(got 2 arguments)"},
		{[]string{"begin", "nodot"}, `target "nodot": want DATABASE.TABLE`},
		{[]string{"begin", "a.b", "--table", "a.b"}, "give the target as DATABASE.TABLE[/PARTITION] or with --table, not both"},
		{[]string{"begin", "--partition", "p"}, "--partition goes with a DATABASE.TABLE argument or --table"},
		{[]string{"begin", "a.b/p", "--partition", "p"}, "a.b/p names a partition already: give it once"},
		{[]string{"begin", "--table", "nodot"}, `target "nodot": want DATABASE.TABLE`},
		{[]string{"begin", "a.b", "--build-timeout", "-1s"}, "--build-timeout must not be negative"},
		{[]string{"begin", "a.b", "--server", ""}, "--server is empty"},
		{[]string{"list", "--server", "127.0.0.1:1,,127.0.0.1:2"}, "empty coordinator address"},
		{[]string{"build", "x.parquet"}, "needs --context FILE and --buckets LIST"},
		{[]string{"build", "--context", "c", "x.parquet"}, "needs --context FILE and --buckets LIST"},
		{[]string{"build", "--context", "c", "--buckets", "0"}, "needs Parquet files or directories"},
		{[]string{"build", "--context", "c", "--buckets", "0", "--route", "drop", "f"}, `--route "drop": want skip or error`},
		{[]string{"build", "--context", "c", "--buckets", "0", "--memory", "1 apple", "f"}, `invalid value "1 apple" for flag -memory`},
		{[]string{"commit", "r.json"}, "needs --context FILE"},
		{[]string{"commit", "--context", "c"}, "needs the result files of the builds"},
		{[]string{"commit", "--context", "c", "--budget", "0s", "r"}, "--budget must be positive"},
	} {
		_, err := runBulk(t, tc.args...)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// The commands against an embedded tier: list, status and abort of a real
// transaction, in both output formats.
func TestBulkloadCommands(t *testing.T) {
	e, err := daemon.StartEmbedded(t.Context(), daemon.EmbeddedConfig{
		DataDir: t.TempDir(), TabletServers: 3, EtcdUnsafeNoFsync: true,
		Coordinator: daemon.CoordinatorOptions{LeaseTTL: 2 * time.Second, RebalanceInterval: 100 * time.Millisecond, ResyncInterval: time.Second},
		Tablet:      daemon.TabletOptions{LeaseTTL: 2 * time.Second, SnapshotInterval: -1, CacheSize: 8 << 20, MemTableBudget: 8 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	server := "--server=" + e.HostPort()
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	bulk := tierv1connect.NewBulkLoadServiceClient(e.HTTPClient(), e.Address())
	if _, err := coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.CreateTable(ctx, connect.NewRequest(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "items"},
		Schema: &tierv1.TableSchema{
			Columns:    []*tierv1.Column{{Name: "id", Type: "BIGINT"}, {Name: "name", Type: "STRING", Nullable: true}},
			PrimaryKey: []string{"id"}, Buckets: 2,
		},
	})); err != nil {
		t.Fatal(err)
	}
	var begun *tierv1.BeginBulkLoadResponse
	for {
		resp, err := bulk.Begin(ctx, connect.NewRequest(&tierv1.BeginBulkLoadRequest{
			Target: &tierv1.TargetPath{Database: "shop", Table: "items"}, CallerToken: "cli-test",
		}))
		if err == nil {
			begun = resp.Msg
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	id := begun.GetStatus().GetHandle().GetTxnId()

	// DATABASE.TABLE --partition P names the partition, as thaw scan takes it.
	if _, err := runBulk(t, "begin", "shop.items", "--partition", "p0", server); err == nil || !strings.Contains(err.Error(), "begin shop.items/p0: ") {
		t.Fatalf("begin shop.items --partition p0 (a table without partitions): %v", err)
	}
	out, err := runBulk(t, "list", server)
	if err != nil || !strings.Contains(out, "TXN") || !strings.Contains(out, id) || !strings.Contains(out, "BEGUN") || !strings.Contains(out, "shop.items") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	// A list of coordinators whose first one is down: passed over.
	if out, err := runBulk(t, "list", "--server=127.0.0.1:1, "+e.HostPort()); err != nil || !strings.Contains(out, id) {
		t.Fatalf("list through a coordinator list starting with a dead one: %v\n%s", err, out)
	}
	out, err = runBulk(t, "list", "--target", "shop.items", "--output", "json", server)
	var list []bulkStatusJSON
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].TxnID != id || !list[0].FenceReady || list[0].Phase != "building" {
		t.Fatalf("list json: %v\n%s", err, out)
	}
	out, err = runBulk(t, "status", id, server)
	if err != nil || !strings.Contains(out, "registration") || !strings.Contains(out, "LOADING") || !strings.Contains(out, "cli-test") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, err = runBulk(t, "abort", id, server)
	if err != nil || !strings.Contains(out, "aborted bulk load "+id+" of shop.items") {
		t.Fatalf("abort: %v\n%s", err, out)
	}
	out, err = runBulk(t, "status", id, "--output", "json", server)
	var st bulkStatusJSON
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.State != "ABORTED" || st.AbortReason != "ABORTED_BY_CALLER" || st.Registration != "ACTIVE" {
		t.Fatalf("status json after abort: %v\n%s", err, out)
	}
	out, err = runBulk(t, "list", server)
	if err != nil || strings.Contains(out, id) || out != "no bulk load is in progress (--all also lists the finished ones the tier retains)\n" {
		t.Fatalf("list without --all shows the aborted transaction, or does not say there is none: %v\n%s", err, out)
	}
	out, err = runBulk(t, "list", "--all", server)
	if err != nil || !strings.Contains(out, "ABORTED_BY_CALLER") {
		t.Fatalf("list --all: %v\n%s", err, out)
	}
	_, err = runBulk(t, "status", "00000000-0000-4000-8000-000000000000", server)
	if err == nil || !strings.Contains(err.Error(), "NOT_FOUND") {
		t.Fatalf("status of an unknown transaction: %v", err)
	}
	out, err = runBulk(t, "abort", id, server)
	if err != nil || !strings.Contains(out, "bulk load "+id+" of shop.items was already aborted (ABORTED_BY_CALLER") {
		t.Fatalf("abort again (idempotent, and says so): %v\n%s", err, out)
	}
	out, err = runBulk(t, "abort", id, server, "--output", "json")
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.State != "ABORTED" || st.AbortReason != "ABORTED_BY_CALLER" {
		t.Fatalf("abort again, json: %v\n%s", err, out)
	}
	// An --out that cannot be written is refused before Begin: no
	// transaction fences the table (one nobody could build or commit,
	// until its build deadline).
	bad := filepath.Join(t.TempDir(), "missing", "ctx.json")
	if _, err := runBulk(t, "begin", "shop.items", "--out", bad, server); err == nil || !strings.Contains(err.Error(), "--out "+bad+" cannot be written") {
		t.Fatalf("begin --out into a missing directory: %v", err)
	}
	if _, err := runBulk(t, "build", "--context", bad, "--buckets", "all", "--out", bad, "x.parquet"); err == nil || !strings.Contains(err.Error(), "--out "+bad+" cannot be written") {
		t.Fatalf("build --out into a missing directory: %v", err)
	}
	out, err = runBulk(t, "list", server)
	if err != nil || out != "no bulk load is in progress (--all also lists the finished ones the tier retains)\n" {
		t.Fatalf("list after the refused begin: %v\n%s", err, out)
	}
}

// Files that are not what the commands expect: errors, not usage errors,
// naming the file.
func TestBulkloadFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.json"
	if err := writeTestFile(bad, `{"version":1,"nope":true}`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"build", "--context", bad, "--buckets", "0", "x.parquet"},
		{"commit", "--context", bad, "r.json"},
		{"abort", "--context", bad},
	} {
		_, err := runBulk(t, args...)
		if err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "build context "+bad) {
			t.Errorf("%v: %v", args, err)
		}
	}
	_, err := runBulk(t, "build", "--context", dir+"/missing.json", "--buckets", "0", "x.parquet")
	if err == nil || !strings.Contains(err.Error(), "read build context") {
		t.Errorf("missing context: %v", err)
	}
	if _, _, err := readResults([]string{bad}); err == nil || !strings.Contains(err.Error(), "results "+bad) {
		t.Errorf("results with an unknown field: %v", err)
	}
	two := dir + "/two.json"
	if err := writeTestFile(two, `[{"bucket":1}] [{"bucket":2}]`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readResults([]string{two}); err == nil || !strings.Contains(err.Error(), "trailing data") {
		t.Errorf("two documents: %v", err)
	}
	one := dir + "/one.json"
	// One result, not an array (a complete one: every member is required).
	if err := writeTestFile(one, `{"bucket":3,"snapshot_id":7,"metadata_path":"file:///r/db/t/3/snap-7/_METADATA",`+
		`"metadata_length":100,"metadata_sha256":"`+strings.Repeat("ab", 32)+`","row_count":2,"duplicates":0,`+
		`"bytes":4096,"files":4,"min_key":"01","max_key":"02","log_offset":2}`); err != nil {
		t.Fatal(err)
	}
	rs, from, err := readResults([]string{one, one})
	if err != nil || len(rs) != 2 || rs[0].Bucket != 3 || len(from[3]) != 2 {
		t.Errorf("one result twice: %v %v %v", rs, from, err)
	}
	partial := dir + "/partial.json"
	if err := writeTestFile(partial, `{"bucket":3,"snapshot_id":7}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readResults([]string{partial}); err == nil || !strings.Contains(err.Error(), "missing member") {
		t.Errorf("a partial result: %v", err)
	}
}

// TestBulkloadBearerToken: against a coordinator that authenticates its
// bulk-load callers, thaw bulkload sends the token of THAW_TOKEN, and
// without one says which variable to set.
func TestBulkloadBearerToken(t *testing.T) {
	const tok = "cli-token-8c1f4e07a2"
	sum := sha256.Sum256([]byte(tok))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := daemon.StartEmbedded(ctx, daemon.EmbeddedConfig{
		DataDir: t.TempDir(), TabletServers: 1, EtcdUnsafeNoFsync: true,
		Coordinator: daemon.CoordinatorOptions{Callers: []daemon.CallerOptions{{Name: "cli", TokenSHA256: hex.EncodeToString(sum[:]), Tables: []string{"shop.*"}}}},
		Tablet:      daemon.TabletOptions{SnapshotInterval: -1, CacheSize: 8 << 20, MemTableBudget: 8 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	server := "--server=" + e.HostPort()
	tc, err := tierclient.New(ctx, e.Address())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := tc.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateTable(ctx, "shop", "items", itemsTable(t, false), 1); err != nil {
		t.Fatal(err)
	}
	t.Setenv(daemon.EnvToken, "")
	code, _, errOut := run(t, "bulkload", "begin", server, "shop.items")
	if code == 0 || !strings.Contains(errOut, "THAW_TOKEN") {
		t.Fatalf("begin without a token: %d %s", code, errOut)
	}
	t.Setenv(daemon.EnvToken, tok)
	code, out, errOut := run(t, "bulkload", "begin", server, "shop.items", "--token", "cli-auth-1")
	if code != 0 || !strings.Contains(out, `"version"`) {
		t.Fatalf("begin with THAW_TOKEN: %d %s %s", code, out, errOut)
	}
	code, out, errOut = run(t, "bulkload", "list", server)
	if code != 0 || !strings.Contains(out, "shop.items") {
		t.Fatalf("list with THAW_TOKEN: %d %s %s", code, out, errOut)
	}
	if strings.Contains(out+errOut, tok) {
		t.Fatal("the CLI printed the token")
	}
}

// TestPrintBulkList: transactions of a table dropped and created again
// under its name name their table ids; others do not; times line up.
func TestPrintBulkList(t *testing.T) {
	txn := func(id string, table string, tableID int64, partition *string, createdMs int64) *tierv1.BulkLoadStatus {
		return &tierv1.BulkLoadStatus{
			Handle: &tierv1.BulkLoadHandle{TxnId: id, TableId: tableID,
				Target: &tierv1.TargetPath{Database: "shop", Table: table, Partition: partition}},
			State: tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED, Phase: "committed", BucketCount: 2, AdoptedBuckets: 2,
			CreatedMs: createdMs,
		}
	}
	day := "2024-01-01"
	var b bytes.Buffer
	err := printBulkList(&b, []*tierv1.BulkLoadStatus{
		txn("t1", "items", 1, nil, 1_700_000_000_000),
		txn("t2", "items", 4, nil, 1_700_000_000_290),
		txn("t3", "sales", 2, &day, 1_700_000_000_123),
		txn("t4", "sales", 2, nil, 1_700_000_000_120),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"t1   shop.items (table id 1)  ", "t2   shop.items (table id 4)  ", "t3   shop.sales/2024-01-01    COMMITTED",
		"2023-11-14T22:13:20.000Z", "2023-11-14T22:13:20.290Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "sales (table id") || strings.Contains(out, "sales/2024-01-01 (table id") {
		t.Errorf("a table listed under one id names it:\n%s", out)
	}
}
