package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestLoadingTargetRejects fences a target as a bulk load does (LOADING
// with a bulk-load id, written under the coordinator's guard) and checks
// that reads and writes fail with TARGET_LOADING naming the load, through
// the client and directly at the leader, and that lifting the fence
// restores service with the data unchanged.
func TestLoadingTargetRejects(t *testing.T) {
	cl := startCluster(t, nil)
	ctx := t.Context()
	cl.createOrders(ctx)
	rows := []kv.Row{order(dayOne, 1, "a", 1), order(dayOne, 2, "b", 2), order(dayTwo, 3, "c", 3)}
	if err := cl.c.Upsert(ctx, target(""), rows); err != nil {
		t.Fatal(err)
	}
	want := model{}
	want.upsert(rows...)

	// setState changes the partition's data state as the bulk-load Begin
	// and Commit do: in etcd under the coordinator's guard, then pushed to
	// every server hosting a replica, which answers once its replicas
	// enforce it.
	setState := func(state meta.DataState, id string) {
		t.Helper()
		g, err := cl.e.Guard(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := cl.e.Meta().GetTable(ctx, db, orders)
		if err != nil {
			t.Fatal(err)
		}
		p, err := cl.e.Meta().GetPartition(ctx, tbl.Value.ID, dayOne)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := cl.e.Meta().SetDataState(ctx, g, meta.DataStateChange{
			Target: meta.TargetName{Database: db, Table: orders, Partition: dayOne}, Rev: p.Rev, State: state, BulkLoadID: id,
		})
		if err != nil {
			t.Fatal(err)
		}
		loc, err := cl.locations(ctx, dayOne)
		if err != nil {
			t.Fatal(err)
		}
		ds := tierv1.DataState_DATA_STATE_ACTIVE
		if state == meta.Loading {
			ds = tierv1.DataState_DATA_STATE_LOADING
		}
		servers := map[string]bool{}
		for _, b := range loc.GetBuckets() {
			for _, r := range b.GetReplicas() {
				servers[r] = true
			}
		}
		for s := range servers {
			if _, err := cl.tablet(s).SetDataState(ctx, connect.NewRequest(&tierv1.SetDataStateRequest{
				CoordinatorEpoch: int64(g.Epoch), Target: loc.GetTargetId(), DataState: ds, BulkLoadId: id, StateRevision: rev,
			})); err != nil {
				t.Fatalf("set data state on %s: %v", s, err)
			}
		}
	}
	const loadID = "bl-test-1"
	setState(meta.Loading, loadID)
	isLoading := func(what string, err error) error {
		if !tierpb.IsTargetLoading(err) {
			return fmt.Errorf("%s: %v, want TARGET_LOADING", what, err)
		}
		if md := tierpb.MetadataOf(err); md[tierpb.KeyBulkLoadID] != loadID || md[tierpb.KeyDataState] != "LOADING" {
			return fmt.Errorf("%s: metadata %v", what, md)
		}
		return nil
	}
	loc, err := cl.locations(ctx, dayOne)
	if err != nil {
		t.Fatal(err)
	}
	b0 := loc.GetBuckets()[0]
	for _, b := range loc.GetBuckets() {
		_, err := cl.tablet(b.GetLeaderId()).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{
			Target: loc.GetTargetId(), Bucket: b.GetBucket(), Keys: [][]byte{{0}},
		}))
		if err := isLoading(fmt.Sprintf("lookup at the leader of bucket %d", b.GetBucket()), err); err != nil {
			t.Error(err)
		}
	}
	if err := isLoading("client get", getErr(ctx, cl, dayOne, 1)); err != nil {
		t.Error(err)
	}
	if err := isLoading("client upsert", cl.c.Upsert(ctx, target(dayOne), []kv.Row{order(dayOne, 9, "x", 9)})); err != nil {
		t.Error(err)
	}
	if err := isLoading("client scan", cl.c.Scan(ctx, target(dayOne), func(kv.Row) error { return nil })); err != nil {
		t.Error(err)
	}
	tbl, _ := kv.NewTable(ordersSchema())
	key, _ := tbl.EncodeKey(order(dayOne, 9, "x", 9))
	val, _ := tbl.EncodeValue(order(dayOne, 9, "x", 9))
	_, err = cl.tablet(b0.GetLeaderId()).Write(ctx, connect.NewRequest(&tierv1.WriteRequest{
		Target: loc.GetTargetId(), Bucket: 0, LeaderEpoch: b0.GetLeaderEpoch(),
		Mutations: []*tierv1.Mutation{{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: key, Value: val}},
	}))
	if err := isLoading("write at the leader", err); err != nil {
		t.Error(err)
	}
	// The other partition is not fenced.
	if err := cl.c.Upsert(ctx, target(dayTwo), []kv.Row{order(dayTwo, 4, "d", 4)}); err != nil {
		t.Fatalf("upsert into the other partition: %v", err)
	}
	want.upsert(order(dayTwo, 4, "d", 4))

	setState(meta.Active, "")
	eventually(t, "the fence lifted", func(ctx context.Context) error { return cl.expectRows(ctx, want) })
	if err := cl.c.Upsert(ctx, target(dayOne), []kv.Row{order(dayOne, 9, "x", 9)}); err != nil {
		t.Fatal(err)
	}
}

func getErr(ctx context.Context, cl *cluster, dt string, id int64) error {
	_, err := cl.c.Get(ctx, target(dt), []kv.Row{{dt, id, nil, nil}})
	return err
}

// TestBadInput sends bad requests through the client, as raw RPCs and as
// plain HTTP: each fails with a clear error and the stored rows, tables
// and partitions stay as they were.
func TestBadInput(t *testing.T) {
	cl := startCluster(t, nil)
	ctx := t.Context()
	cl.createOrders(ctx)
	rows := []kv.Row{order(dayOne, 1, "a", 1), order(dayTwo, 2, "b", 2)}
	if err := cl.c.Upsert(ctx, target(""), rows); err != nil {
		t.Fatal(err)
	}
	want := model{}
	want.upsert(rows...)
	before := cl.metadata(ctx)

	reason := func(what string, err error, r tierpb.Reason) {
		t.Helper()
		if got := tierpb.ReasonOf(err); got != r {
			t.Errorf("%s: reason %s (%v), want %s", what, got, err, r)
		}
	}

	t.Run("unknown table and partition", func(t *testing.T) {
		missing := tierclient.Target{Database: db, Table: "nope"}
		reason("upsert into an unknown table", cl.c.Upsert(ctx, missing, []kv.Row{{int64(1)}}), tierpb.ReasonNotFound)
		_, err := cl.c.Get(ctx, missing, []kv.Row{{int64(1)}})
		reason("get from an unknown table", err, tierpb.ReasonNotFound)
		_, err = cl.c.Table(ctx, "nodb", orders)
		reason("describe a table of an unknown database", err, tierpb.ReasonNotFound)
		reason("upsert into an unknown partition", cl.c.Upsert(ctx, target("2099-01-01"), []kv.Row{order("2099-01-01", 1, "x", 1)}), tierpb.ReasonNotFound)
		reason("a row routed to an unknown partition", cl.c.Upsert(ctx, target(""), []kv.Row{order("2099-01-01", 1, "x", 1)}), tierpb.ReasonNotFound)
		_, err = cl.c.Get(ctx, target("2099-01-01"), []kv.Row{{"2099-01-01", int64(1), nil, nil}})
		reason("get from an unknown partition", err, tierpb.ReasonNotFound)
		_, err = cl.coord.GetTargetLocations(ctx, connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: db, Table: orders}}))
		reason("locate a partitioned table without a partition", err, tierpb.ReasonInvalidArgument)
		_, err = cl.tablet("ts-1").Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: &tierv1.TargetId{TableId: 999}, Keys: [][]byte{{1}}}))
		reason("lookup of an unknown target id", err, tierpb.ReasonNotFound)
	})

	t.Run("rows not matching the schema", func(t *testing.T) {
		// Encoded before anything is sent: the good row is not written
		// either.
		bad := []kv.Row{order(dayOne, 100, "good", 1), {dayOne, "not-a-bigint", "x", int32(1)}}
		if err := cl.c.Upsert(ctx, target(dayOne), bad); !errors.Is(err, kv.ErrInvalidRow) {
			t.Errorf("upsert of a row with a string id: %v, want kv.ErrInvalidRow", err)
		}
		if err := cl.c.Upsert(ctx, target(dayOne), []kv.Row{{dayOne, int64(101)}}); err == nil {
			t.Error("upsert of a row with two of four columns succeeded")
		}
		if err := cl.c.Upsert(ctx, target(dayOne), []kv.Row{{dayOne, nil, "x", int32(1)}}); !errors.Is(err, kv.ErrInvalidRow) {
			t.Errorf("upsert of a row with a NULL key column: %v, want kv.ErrInvalidRow", err)
		}
		// Raw writes with bytes that do not decode for the schema.
		tbl, _ := kv.NewTable(ordersSchema())
		r := order(dayOne, 7, "x", 7)
		// The raw writes go to the bucket's leader once, without the
		// client's retries: first wait until that leader has opened its
		// replica (the client's Get retries until it serves).
		eventually(t, "the bucket's leader serves", func(ctx context.Context) error {
			_, err := cl.c.Get(ctx, target(dayOne), []kv.Row{r})
			return err
		})
		loc, err := cl.locations(ctx, dayOne)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := tbl.EncodeKey(r)
		val, _ := tbl.EncodeValue(r)
		bucket, _ := tbl.Bucket(r)
		b := loc.GetBuckets()[bucket]
		write := func(muts ...*tierv1.Mutation) error {
			_, err := cl.tablet(b.GetLeaderId()).Write(ctx, connect.NewRequest(&tierv1.WriteRequest{
				Target: loc.GetTargetId(), Bucket: int32(bucket), LeaderEpoch: b.GetLeaderEpoch(), Mutations: muts,
			}))
			return err
		}
		up := func(k, v []byte) *tierv1.Mutation {
			return &tierv1.Mutation{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: k, Value: v}
		}
		err = write(up(key, val), up(key, []byte{0, 0, 0xff, 0xff, 0xff}))
		reason("raw write of a garbage value", err, tierpb.ReasonInvalidArgument)
		if idx := tierpb.MetadataOf(err)[tierpb.KeyIndex]; idx != "1" {
			t.Errorf("garbage value: index %q, want 1", idx)
		}
		wrongSchema := append([]byte{7, 0}, val[2:]...)
		err = write(up(key, wrongSchema))
		reason("raw write with schema id 7", err, tierpb.ReasonSchemaMismatch)
		reason("raw write without an op", write(&tierv1.Mutation{Key: key, Value: val}), tierpb.ReasonInvalidArgument)
		reason("raw write of an empty key", write(up(nil, val)), tierpb.ReasonInvalidArgument)
		reason("raw write with a stale leader epoch", func() error {
			_, err := cl.tablet(b.GetLeaderId()).Write(ctx, connect.NewRequest(&tierv1.WriteRequest{
				Target: loc.GetTargetId(), Bucket: int32(bucket), LeaderEpoch: b.GetLeaderEpoch() - 1, Mutations: []*tierv1.Mutation{up(key, val)},
			}))
			return err
		}(), tierpb.ReasonStaleEpoch)
	})

	t.Run("oversize batches", func(t *testing.T) {
		tbl, _ := kv.NewTable(ordersSchema())
		loc, err := cl.locations(ctx, dayOne)
		if err != nil {
			t.Fatal(err)
		}
		b := loc.GetBuckets()[0]
		var muts []*tierv1.Mutation
		var keys [][]byte
		for i := int64(0); len(muts) < 501; i++ {
			r := order(dayOne, 1000+i, "big", 1)
			if bk, _ := tbl.Bucket(r); bk != 0 {
				continue
			}
			key, _ := tbl.EncodeKey(r)
			val, _ := tbl.EncodeValue(r)
			muts = append(muts, &tierv1.Mutation{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: key, Value: val})
			keys = append(keys, key)
		}
		_, err = cl.tablet(b.GetLeaderId()).Write(ctx, connect.NewRequest(&tierv1.WriteRequest{
			Target: loc.GetTargetId(), Bucket: 0, LeaderEpoch: b.GetLeaderEpoch(), Mutations: muts,
		}))
		reason("write of 501 mutations (limit 500)", err, tierpb.ReasonBatchTooLarge)
		if lim := tierpb.MetadataOf(err)[tierpb.KeyLimit]; lim != "500" {
			t.Errorf("limit metadata %q, want 500", lim)
		}
		_, err = cl.tablet(b.GetLeaderId()).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{
			Target: loc.GetTargetId(), Bucket: 0, Keys: keys,
		}))
		reason("lookup of 501 keys (limit 500)", err, tierpb.ReasonBatchTooLarge)
		huge := order(dayOne, 5000, strings.Repeat("x", 5<<20), 1)
		reason("upsert of a 5 MiB row (limit 4 MiB per write)", cl.c.Upsert(ctx, target(dayOne), []kv.Row{huge}), tierpb.ReasonBatchTooLarge)
	})

	t.Run("malformed requests over HTTP", func(t *testing.T) {
		post := func(url, contentType, body string) (int, string, string) {
			t.Helper()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", contentType)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get(tierpb.HeaderReason), string(b)
		}
		code := func(body string) string {
			var e struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			return e.Code
		}
		coordURL := cl.e.Address() + "/thaw.tier.v1.CoordinatorService/"
		tabletURL := cl.e.TabletAddress("ts-1") + "/thaw.tier.v1.TabletService/"
		for _, tc := range []struct {
			name, url, ctype, body string
			status                 int
			code                   string
			reason                 tierpb.Reason
		}{
			{"truncated JSON", coordURL + "CreateTable", "application/json", `{"path": {"database": "shop", "table": "t"`, 400, "invalid_argument", ""},
			{"wrong JSON type", coordURL + "CreateTable", "application/json", `{"path": {"database": "shop", "table": 5}}`, 400, "invalid_argument", ""},
			// An unknown member is refused by the codec (tierpb.StrictJSON),
			// like other undecodable bodies: no reason header.
			{"misspelt field", coordURL + "CreateTable", "application/json", `{"path": {"database": "shop", "table": "t"}, "schemma": {}}`, 400, "invalid_argument", ""},
			{"invalid schema", coordURL + "CreateTable", "application/json",
				`{"path": {"database": "shop", "table": "t"}, "schema": {"columns": [{"name": "id", "type": "BIGNUM"}], "primaryKey": ["id"], "buckets": 1}}`,
				400, "invalid_argument", tierpb.ReasonInvalidArgument},
			{"no such table", coordURL + "GetTable", "application/json", `{"path": {"database": "shop", "table": "nope"}}`, 404, "not_found", tierpb.ReasonNotFound},
			{"bad table name", coordURL + "CreateDatabase", "application/json", `{"database": "no/slash"}`, 400, "invalid_argument", tierpb.ReasonInvalidArgument},
			{"bytes not base64", tabletURL + "Lookup", "application/json", `{"target": {"tableId": "1", "partitionId": "1"}, "keys": ["***"]}`, 400, "invalid_argument", ""},
			{"not JSON at all", tabletURL + "Write", "application/json", `hello`, 400, "invalid_argument", ""},
			{"unsupported content type", coordURL + "ListDatabases", "text/plain", `{}`, 415, "", ""},
			{"no such method", coordURL + "Frobnicate", "application/json", `{}`, 404, "", ""},
		} {
			status, hdr, body := post(tc.url, tc.ctype, tc.body)
			if status != tc.status || (tc.code != "" && code(body) != tc.code) || tierpb.Reason(hdr) != tc.reason {
				t.Errorf("%s: status %d, reason %q, body %s; want %d, code %q, reason %q", tc.name, status, hdr, body, tc.status, tc.code, tc.reason)
			}
			if tc.name == "misspelt field" && !strings.Contains(body, `unknown field \"schemma\"`) {
				t.Errorf("%s: the body does not name the member: %s", tc.name, body)
			}
		}
	})

	t.Run("a large upsert is split", func(t *testing.T) {
		// 1200 rows of one bucket exceed the server's 500 per write: the
		// client halves what the server refuses.
		tbl, _ := kv.NewTable(ordersSchema())
		var big []kv.Row
		for i := int64(0); len(big) < 1200; i++ {
			r := order(dayTwo, 20_000+i, "bulk", int32(i))
			if bk, _ := tbl.Bucket(r); bk == 1 {
				big = append(big, r)
			}
		}
		if err := cl.c.Upsert(ctx, target(dayTwo), big); err != nil {
			t.Fatal(err)
		}
		if err := cl.c.Delete(ctx, target(dayTwo), big); err != nil {
			t.Fatal(err)
		}
	})

	if err := cl.expectRows(ctx, want); err != nil {
		t.Errorf("rows changed: %v", err)
	}
	if after := cl.metadata(ctx); after != before {
		t.Errorf("metadata changed:\nbefore %s\nafter  %s", before, after)
	}
}

// metadata renders the databases, tables and partitions.
func (cl *cluster) metadata(ctx context.Context) string {
	cl.t.Helper()
	var b bytes.Buffer
	dbs, err := cl.coord.ListDatabases(ctx, connect.NewRequest(&tierv1.ListDatabasesRequest{}))
	if err != nil {
		cl.t.Fatal(err)
	}
	for _, d := range dbs.Msg.GetDatabases() {
		tables, err := cl.coord.ListTables(ctx, connect.NewRequest(&tierv1.ListTablesRequest{Database: d}))
		if err != nil {
			cl.t.Fatal(err)
		}
		for _, tn := range tables.Msg.GetTables() {
			fmt.Fprintf(&b, "%s.%s", d, tn)
			parts, err := cl.coord.ListPartitions(ctx, connect.NewRequest(&tierv1.ListPartitionsRequest{Path: &tierv1.TablePath{Database: d, Table: tn}}))
			if err == nil {
				var names []string
				for _, p := range parts.Msg.GetPartitions() {
					names = append(names, p.GetPartitionName()+"="+strconv.FormatInt(p.GetPartitionId(), 10))
				}
				slices.Sort(names)
				fmt.Fprintf(&b, "%v", names)
			}
			b.WriteString(" ")
		}
	}
	return b.String()
}
