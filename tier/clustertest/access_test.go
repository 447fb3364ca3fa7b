package clustertest

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestCLIDataAccess: with coordinator.authorize_data the tablet servers
// serve reads and writes only to callers whose patterns cover the table,
// with the token of THAW_TOKEN; every tablet server refuses a call without
// one; the coordinator shows a table's metadata only to callers with a
// grant on it, and lists only to callers; a refused write writes nothing
// and no output quotes a token.
func TestCLIDataAccess(t *testing.T) {
	const adminTok, appTok, biTok, loaderTok = "admin-token-3f9c0e1d", "app-token-8b2a4c6d", "bi-token-5e7f9a1b", "loader-token-7c3e5a9d"
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
		c.Coordinator.AuthorizeDDL, c.Coordinator.AuthorizeData = true, true
		c.Coordinator.Callers = []daemon.CallerOptions{
			{Name: "admin", TokenSHA256: access.TokenSHA256(adminTok), DDL: []string{"*"}, Read: []string{"*"}, Write: []string{"*"}},
			{Name: "app", TokenSHA256: access.TokenSHA256(appTok), Read: []string{"shop.*"}, Write: []string{"shop.items"}},
			{Name: "bi", TokenSHA256: access.TokenSHA256(biTok), Read: []string{"shop.items"}},
			{Name: "loader", TokenSHA256: access.TokenSHA256(loaderTok), Write: []string{"shop.costs"}},
		}
	})
	ctx := t.Context()
	server := "--server=" + cl.e.HostPort()
	run := func(tok string, args ...string) (int, string, string) {
		t.Helper()
		t.Setenv(daemon.EnvToken, tok)
		code, out, errOut := thaw(t, ctx, append(args, server)...)
		for _, secret := range []string{adminTok, appTok, biTok, loaderTok} {
			if strings.Contains(out+errOut, secret) {
				t.Fatalf("thaw %s printed a token", strings.Join(args, " "))
			}
		}
		return code, out, errOut
	}
	ok := func(tok, want string, args ...string) string {
		t.Helper()
		code, out, errOut := run(tok, args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("thaw %s: code %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), code, out, errOut, want)
		}
		return out
	}
	fails := func(tok, want string, args ...string) {
		t.Helper()
		code, out, errOut := run(tok, args...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Fatalf("thaw %s: code %d, stdout %q, stderr %q; want a failure saying %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}

	ok(adminTok, "created table shop.items", "table", "create", "shop.items",
		"--column", "id BIGINT", "--column", "name STRING", "--primary-key", "id", "--buckets", "4", "--replication", "3")
	ok(adminTok, "created table shop.costs", "table", "create", "shop.costs",
		"--column", "id BIGINT", "--column", "cost INT", "--primary-key", "id", "--buckets", "2", "--replication", "3")

	fails("", "THAW_TOKEN", "put", "shop.items", `{"id":1,"name":"anonymous"}`)
	fails("not-a-caller-token-0", "not a caller", "put", "shop.items", `{"id":1,"name":"unknown"}`)
	fails(biTok, "caller bi may not write shop.items", "put", "shop.items", `{"id":1,"name":"bi"}`)
	fails(appTok, "caller app may not write shop.costs", "put", "shop.costs", `{"id":1,"cost":3}`)
	ok(appTok, "wrote 2 rows to shop.items", "put", "shop.items", `{"id":1,"name":"apple"}`, `{"id":2,"name":"pear"}`)
	ok(adminTok, "wrote 1 row to shop.costs", "put", "shop.costs", `{"id":1,"cost":3}`)

	fails(biTok, "caller bi may not write shop.items", "delete", "shop.items", `{"id":1}`)
	ok(biTok, "apple", "get", "shop.items", `{"id":1}`)
	fails("", "THAW_TOKEN", "get", "shop.items", `{"id":1}`)
	// A caller without a grant on a table does not even see its schema;
	// one that may write it but not read it is refused by the tablets.
	fails(biTok, "caller bi has no grant on shop.costs", "get", "shop.costs", `{"id":1}`)
	fails(biTok, "caller bi has no grant on shop.costs", "table", "describe", "shop.costs")
	fails(loaderTok, "caller loader may not read shop.costs", "get", "shop.costs", `{"id":1}`)
	fails(loaderTok, "caller loader may not read shop.costs", "scan", "shop.costs")
	fails("", "THAW_TOKEN", "table", "list")
	ok(biTok, "shop.items", "table", "list")
	ok(appTok, `"cost":3`, "scan", "shop.costs", "--output", "json")
	// Only the allowed write landed.
	if out := ok(biTok, "pear", "scan", "shop.items", "--output", "json"); strings.Count(out, `"id"`) != 2 || strings.Contains(out, "anonymous") || strings.Contains(out, `"bi"`) {
		t.Fatalf("shop.items after the refused writes: %s", out)
	}

	// The SDK: tierclient.WithBearerToken.
	newClient := func(tok string) (*tierclient.Client, error) {
		return tierclient.New(ctx, cl.e.Address(), tierclient.WithBearerToken(tok),
			tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 10 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
	}
	if _, err := newClient("short"); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("a malformed token: %v", err)
	}
	app, err := newClient(appTok)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	items := tierclient.Target{Database: "shop", Table: "items"}
	if err := app.Upsert(ctx, items, []kv.Row{{int64(3), "fig"}}); err != nil {
		t.Fatalf("the SDK writes as the app: %v", err)
	}
	bi, err := newClient(biTok)
	if err != nil {
		t.Fatal(err)
	}
	defer bi.Close()
	if err := bi.Delete(ctx, items, []kv.Row{{int64(3), nil}}); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied || tierclient.IsRetriable(err) {
		t.Fatalf("the SDK deletes as bi: %v", err)
	}
	if rows, err := bi.Get(ctx, items, []kv.Row{{int64(3), nil}}); err != nil || len(rows) != 1 || rows[0] == nil || rows[0][1] != "fig" {
		t.Fatalf("the SDK reads as bi: %v, %v", rows, err)
	}

	// Every tablet server follows the policy, leaders and followers alike.
	locReq := func(tok string) *connect.Request[tierv1.GetTargetLocationsRequest] {
		r := connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "items"}})
		r.Header().Set("Authorization", "Bearer "+tok)
		return r
	}
	if _, err := cl.coord.GetTargetLocations(ctx, locReq("not-a-caller-token-0")); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("locations with an unknown token: %v", err)
	}
	if _, err := cl.coord.GetTargetLocations(ctx, locReq(loaderTok)); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
		t.Fatalf("locations of shop.items for the loader of shop.costs: %v", err)
	}
	loc, err := cl.coord.GetTargetLocations(ctx, locReq(biTok))
	if err != nil {
		t.Fatal(err)
	}
	snap := func(tok string) error {
		r := connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "items"}})
		if tok != "" {
			r.Header().Set("Authorization", "Bearer "+tok)
		}
		_, err := cl.coord.TriggerSnapshot(ctx, r)
		return err
	}
	if err := snap(""); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("a snapshot ordered without a token: %v", err)
	}
	if err := snap(biTok); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
		t.Fatalf("a snapshot ordered by a reader: %v", err)
	}
	if err := snap(appTok); err != nil {
		t.Fatalf("a snapshot ordered by the writer: %v", err)
	}
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		_, err := cl.tablet(id).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: loc.Msg.GetTargetId(), Bucket: 0, Keys: [][]byte{{1}}}))
		if tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
			t.Errorf("a lookup without a token at %s: %v", id, err)
		}
	}
}
