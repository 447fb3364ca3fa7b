package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

func hashOf(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func TestCallersValidate(t *testing.T) {
	good := Caller{Name: "etl", TokenSHA256: hashOf("t1"), Tables: []string{"shop.items", "lake.*", "*"}}
	if err := ValidateCallers([]Caller{good}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		callers []Caller
		want    string
	}{
		{"bad name", []Caller{{Name: "ETL", TokenSHA256: hashOf("t"), Tables: []string{"*"}}}, "name"},
		{"twice", []Caller{good, {Name: "etl", TokenSHA256: hashOf("t2"), Tables: []string{"*"}}}, "named twice"},
		{"same token", []Caller{good, {Name: "other", TokenSHA256: hashOf("t1"), Tables: []string{"*"}}}, "also of caller etl"},
		{"upper hex", []Caller{{Name: "a", TokenSHA256: strings.ToUpper(hashOf("t")), Tables: []string{"*"}}}, "lowercase hex"},
		{"no tables", []Caller{{Name: "a", TokenSHA256: hashOf("t")}}, "no tables, ddl, read or write"},
		{"bad ddl pattern", []Caller{{Name: "a", TokenSHA256: hashOf("t"), DDL: []string{"shop"}}}, "table pattern"},
		{"partial wildcard", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"shop.it*"}}}, "table pattern"},
		{"database wildcard", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"*.items"}}}, "table pattern"},
		{"no table", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"shop"}}}, "table pattern"},
		{"three parts", []Caller{{Name: "a", TokenSHA256: hashOf("t"), Tables: []string{"a.b.c"}}}, "table pattern"},
	} {
		if err := ValidateCallers(tc.callers); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}

func TestCallerAuthorization(t *testing.T) {
	a, err := newAuthn([]Caller{
		{Name: "one", TokenSHA256: hashOf("token-one"), Tables: []string{"shop.items"}},
		{Name: "db", TokenSHA256: hashOf("token-db"), Tables: []string{"lake.*"}},
		{Name: "all", TokenSHA256: hashOf("token-all"), Tables: []string{"*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{m: newMetrics(prometheus.NewRegistry())}
	c.auth.Store(a)
	for _, tc := range []struct {
		tok    string
		target bulkload.Target
		ok     bool
	}{
		{"token-one", bulkload.Target{Database: "shop", Table: "items"}, true},
		{"token-one", bulkload.Target{Database: "shop", Table: "items", Partition: "2024-01-01"}, true},
		{"token-one", bulkload.Target{Database: "shop", Table: "itemsx"}, false},
		{"token-one", bulkload.Target{Database: "lake", Table: "items"}, false},
		{"token-db", bulkload.Target{Database: "lake", Table: "events"}, true},
		{"token-db", bulkload.Target{Database: "lakes", Table: "events"}, false},
		{"token-all", bulkload.Target{Database: "x", Table: "y"}, true},
	} {
		caller, err := a.authenticate([]string{"Bearer " + tc.tok})
		if err != nil {
			t.Fatal(err)
		}
		err = c.allowed(withCaller(t.Context(), caller), tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("%s on %s: %v", tc.tok, tc.target, err)
		}
		if err != nil && tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
			t.Errorf("%s on %s: reason %s", tc.tok, tc.target, tierpb.ReasonOf(err))
		}
	}
	if n := testutil.ToFloat64(c.m.refused.WithLabelValues("permission_denied")); n != 3 {
		t.Errorf("thaw_coordinator_refused_calls_total{reason=permission_denied} = %v, want 3", n)
	}
	for name, h := range map[string][]string{
		"none": nil, "two": {"Bearer token-one", "Bearer token-all"}, "basic": {"Basic dG9rZW4tb25l"},
		"unknown": {"Bearer token-two"}, "lowercase scheme": {"bearer token-one"},
	} {
		_, err := a.authenticate(h)
		var ce *connect.Error
		if !errors.As(err, &ce) || tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated || strings.Contains(err.Error(), "token-") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Authentication off: everyone may.
	if err := (&Coordinator{}).allowed(t.Context(), bulkload.Target{Database: "x", Table: "y"}); err != nil {
		t.Fatal(err)
	}
}

// TestAuthorizeDDL: with AuthorizeDDL, creating and dropping databases,
// tables and partitions needs a caller whose ddl patterns cover the
// target; a caller allowed only to bulk load, a missing token and an
// unknown one are refused and change nothing; reads stay open.
func TestAuthorizeDDL(t *testing.T) {
	e := newEnv(t)
	e.register(e.cli, "ts-1", 10*time.Second)
	const adminTok, ownerTok, loaderTok = "admin-tok-1", "owner-tok-2", "loader-tok-3"
	n := e.startNode("c-1", func(c *Config) {
		c.DefaultReplicationFactor = 1
		c.AuthorizeDDL = true
		c.Callers = []Caller{
			{Name: "admin", TokenSHA256: hashOf(adminTok), DDL: []string{"*"}},
			{Name: "owner", TokenSHA256: hashOf(ownerTok), DDL: []string{"shop.events"}, Tables: []string{"shop.*"}},
			{Name: "loader", TokenSHA256: hashOf(loaderTok), Tables: []string{"*"}},
		}
	})
	e.awaitLeader(n)
	ctx := t.Context()
	cl := n.client
	as := func(tok string, r connect.AnyRequest) {
		if tok != "" {
			r.Header().Set("Authorization", "Bearer "+tok)
		}
	}
	createDB := func(tok, db string) error {
		r := req(&tierv1.CreateDatabaseRequest{Database: db})
		as(tok, r)
		_, err := cl.CreateDatabase(ctx, r)
		return err
	}
	createTable := func(tok, table string) error {
		r := req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: table}, Schema: eventsSchema(1)})
		as(tok, r)
		_, err := cl.CreateTable(ctx, r)
		return err
	}
	dropTable := func(tok, table string) error {
		r := req(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: table}})
		as(tok, r)
		_, err := cl.DropTable(ctx, r)
		return err
	}
	createPartition := func(tok string) error {
		r := req(&tierv1.CreatePartitionRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"},
			Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2026-11-29$7"}})
		as(tok, r)
		_, err := cl.CreatePartition(ctx, r)
		return err
	}
	before := e.dump()
	for _, tc := range []struct {
		what string
		err  error
		want tierpb.Reason
	}{
		{"create a database without a token", createDB("", "shop"), tierpb.ReasonUnauthenticated},
		{"create a database with an unknown token", createDB("not-a-token", "shop"), tierpb.ReasonUnauthenticated},
		{"create a database as a loader", createDB(loaderTok, "shop"), tierpb.ReasonPermissionDenied},
		{"create a database as the owner of one table", createDB(ownerTok, "shop"), tierpb.ReasonPermissionDenied},
	} {
		if got := tierpb.ReasonOf(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %s", tc.what, tc.err, tc.want)
		}
	}
	sameDump(t, before, e.dump())
	if err := createDB(adminTok, "shop"); err != nil {
		t.Fatal(err)
	}
	if err := createTable(ownerTok, "other"); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied || !strings.Contains(err.Error(), "caller owner may not create or drop shop.other") {
		t.Fatalf("the owner of shop.events creates shop.other: %v", err)
	}
	if err := createTable(ownerTok, "events"); err != nil {
		t.Fatal(err)
	}
	if err := createPartition(loaderTok); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
		t.Fatalf("a loader creates a partition: %v", err)
	}
	if err := createPartition(ownerTok); err != nil {
		t.Fatal(err)
	}
	if err := createTable(adminTok, "other"); err != nil {
		t.Fatal(err)
	}
	if err := dropTable("", "other"); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("a drop without a token: %v", err)
	}
	if err := dropTable(ownerTok, "other"); tierpb.ReasonOf(err) != tierpb.ReasonPermissionDenied {
		t.Fatalf("the owner of shop.events drops shop.other: %v", err)
	}
	// Reads need no token.
	tables, err := cl.ListTables(ctx, req(&tierv1.ListTablesRequest{Database: "shop"}))
	if err != nil || len(tables.Msg.GetTables()) != 2 {
		t.Fatalf("list tables without a token: %v, %v", tables, err)
	}
	if err := dropTable(adminTok, "other"); err != nil {
		t.Fatal(err)
	}
	// Two calls without a token and one with an unknown token; five
	// refused by the patterns.
	for reason, want := range map[string]float64{"unauthenticated": 3, "permission_denied": 5} {
		if got, _, err := metricvalue.Value(n.reg, "thaw_coordinator_refused_calls_total", map[string]string{"reason": reason}); err != nil || got != want {
			t.Errorf("refused calls (%s): %v, %v; want %v", reason, got, err, want)
		}
	}
}

// TestPublishDataAccess: each leader publishes the data-access policy of
// its own configuration (token hashes, never tokens; only the callers with
// read or write patterns) before it acts, and a later leader's replaces
// it.
func TestPublishDataAccess(t *testing.T) {
	e := newEnv(t)
	const appTok, loaderTok = "app-token-0123456789", "loader-token-0123456789"
	n1 := e.startNode("c-1", func(c *Config) {
		c.AuthorizeData = true
		c.Callers = []Caller{
			{Name: "loader", TokenSHA256: hashOf(loaderTok), Tables: []string{"*"}},
			{Name: "app", TokenSHA256: hashOf(appTok), Read: []string{"shop.*"}, Write: []string{"shop.items"}},
		}
	})
	e.awaitLeader(n1)
	got, err := e.store.GetDataAccess(t.Context())
	if err != nil {
		t.Fatalf("the policy when c-1 leads: %v", err)
	}
	want := meta.DataAccess{Version: 1, Enforce: true, Callers: []meta.DataCaller{
		{Name: "app", TokenSHA256: hashOf(appTok), Read: []string{"shop.*"}, Write: []string{"shop.items"}},
	}}
	if !reflect.DeepEqual(got.Value, want) {
		t.Fatalf("published %+v, want %+v", got.Value, want)
	}
	for k, v := range e.dump() {
		if strings.Contains(v, appTok) || strings.Contains(v, loaderTok) {
			t.Fatalf("a token in etcd under %s", k)
		}
	}

	n2 := e.startNode("c-2", nil)
	n1.cancel()
	<-n1.done
	n1.done <- nil
	e.awaitLeader(n2)
	if got, err := e.store.GetDataAccess(t.Context()); err != nil || got.Value.Enforce || len(got.Value.Callers) != 0 {
		t.Fatalf("the policy when c-2 (no callers) leads: %+v, %v", got, err)
	}
}

// TestSetCallers: replaced callers take effect at once, for DDL and for
// the data-access policy the leader publishes again; a bad replacement
// changes nothing; a coordinator started without callers gets none.
func TestSetCallers(t *testing.T) {
	e := newEnv(t)
	const oldTok, newTok = "old-admin-token-0123", "new-admin-token-0123"
	n := e.startNode("c-1", func(c *Config) {
		c.AuthorizeDDL, c.AuthorizeData = true, true
		c.Callers = []Caller{{Name: "admin", TokenSHA256: hashOf(oldTok), DDL: []string{"*"}, Read: []string{"*"}}}
	})
	e.awaitLeader(n)
	createDB := func(tok, db string) error {
		r := req(&tierv1.CreateDatabaseRequest{Database: db})
		r.Header().Set("Authorization", "Bearer "+tok)
		_, err := n.client.CreateDatabase(t.Context(), r)
		return err
	}
	if err := createDB(oldTok, "a"); err != nil {
		t.Fatal(err)
	}
	published := func() meta.DataAccess {
		t.Helper()
		v, err := e.store.GetDataAccess(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return v.Value
	}
	before := published()

	for name, callers := range map[string][]Caller{
		"none":               nil,
		"a bad hash":         {{Name: "admin", TokenSHA256: "abc", DDL: []string{"*"}, Read: []string{"*"}}},
		"no data caller":     {{Name: "admin", TokenSHA256: hashOf(newTok), DDL: []string{"*"}}},
		"a bad pattern":      {{Name: "admin", TokenSHA256: hashOf(newTok), Read: []string{"shop"}}},
		"two of one name":    {{Name: "a", TokenSHA256: hashOf(newTok), Read: []string{"*"}}, {Name: "a", TokenSHA256: hashOf(oldTok), Read: []string{"*"}}},
		"two of one token":   {{Name: "a", TokenSHA256: hashOf(newTok), Read: []string{"*"}}, {Name: "b", TokenSHA256: hashOf(newTok), Read: []string{"*"}}},
		"no patterns at all": {{Name: "a", TokenSHA256: hashOf(newTok)}},
	} {
		if err := n.c.SetCallers(callers); err == nil {
			t.Errorf("SetCallers(%s) accepted", name)
		}
	}
	if err := createDB(oldTok, "b"); err != nil {
		t.Fatalf("the old token after refused replacements: %v", err)
	}
	if got := published(); !reflect.DeepEqual(got, before) {
		t.Fatalf("the policy after refused replacements: %+v, want %+v", got, before)
	}

	if err := n.c.SetCallers([]Caller{{Name: "admin", TokenSHA256: hashOf(newTok), DDL: []string{"*"}, Read: []string{"shop.*"}}}); err != nil {
		t.Fatal(err)
	}
	if err := createDB(oldTok, "c"); tierpb.ReasonOf(err) != tierpb.ReasonUnauthenticated {
		t.Fatalf("the replaced token: %v, want UNAUTHENTICATED", err)
	}
	if err := createDB(newTok, "c"); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	want := meta.DataAccess{Version: 1, Enforce: true, Callers: []meta.DataCaller{{Name: "admin", TokenSHA256: hashOf(newTok), Read: []string{"shop.*"}}}}
	eventually(t, 10*time.Second, "the new policy published", func() bool { return reflect.DeepEqual(published(), want) })

	open := e.startNode("c-2", nil)
	if err := open.c.SetCallers([]Caller{{Name: "admin", TokenSHA256: hashOf(newTok), DDL: []string{"*"}}}); err == nil {
		t.Fatal("a coordinator started without callers was given some")
	}
}

// TestDataCallersFit: callers whose data-access policy would not fit one
// etcd record are refused up front (config and SetCallers), not when a
// term tries to publish them.
func TestDataCallersFit(t *testing.T) {
	var many []Caller
	for i := range 12000 {
		many = append(many, Caller{Name: fmt.Sprintf("c%d", i), TokenSHA256: hashOf(fmt.Sprint(i)), Read: []string{"shop.*"}})
	}
	if err := CheckDataCallers(true, many); err == nil || !strings.Contains(err.Error(), "cannot be published") {
		t.Fatalf("12000 callers: %v", err)
	}
	if err := CheckDataCallers(true, many[:100]); err != nil {
		t.Fatalf("100 callers: %v", err)
	}
	if err := CheckDataCallers(false, many); err != nil {
		t.Fatalf("12000 callers without authorize data: %v", err)
	}
	e := newEnv(t)
	if _, err := (Config{ID: "c", AdvertiseAddress: "a", RemoteDataDir: e.remote, Callers: many, AuthorizeData: true}).withDefaults(e.store); err == nil || !strings.Contains(err.Error(), "cannot be published") {
		t.Fatalf("a config of 12000 data callers: %v", err)
	}
}
