package coordinator

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// ordersSchema is a non-partitioned table of n buckets.
func ordersSchema(n int32) *tierv1.TableSchema {
	return &tierv1.TableSchema{
		Columns: []*tierv1.Column{
			{Name: "id", Type: "BIGINT"},
			{Name: "amount", Type: "decimal(10, 2)", Nullable: true},
			{Name: "note", Type: "STRING", Nullable: true},
		},
		PrimaryKey: []string{"id"},
		Buckets:    n,
	}
}

// eventsSchema is a table partitioned by (dt, region).
func eventsSchema(n int32) *tierv1.TableSchema {
	return &tierv1.TableSchema{
		Columns: []*tierv1.Column{
			{Name: "dt", Type: "STRING"},
			{Name: "region", Type: "INT"},
			{Name: "id", Type: "BIGINT"},
			{Name: "payload", Type: "BYTES", Nullable: true},
		},
		PrimaryKey:    []string{"dt", "region", "id"},
		PartitionKeys: []string{"dt", "region"},
		Buckets:       n,
		Bucketing:     "paimon",
	}
}

func TestDDL(t *testing.T) {
	e := newEnv(t)
	var servers []string
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		e.register(e.cli, id, 10*time.Second)
		servers = append(servers, id)
	}
	n := e.startNode("c-1", nil)
	e.awaitLeader(n)
	ctx := t.Context()
	cl := n.client

	if _, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop", IgnoreIfExists: true})); err != nil {
		t.Fatalf("create existing database with ignore_if_exists: %v", err)
	}
	if _, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "other"})); err != nil {
		t.Fatal(err)
	}
	dbs, err := cl.ListDatabases(ctx, req(&tierv1.ListDatabasesRequest{}))
	if err != nil || !slices.Equal(dbs.Msg.GetDatabases(), []string{"other", "shop"}) {
		t.Fatalf("list databases: %v, %v", dbs.Msg.GetDatabases(), err)
	}

	// A non-partitioned table: created with its assignment, RF 2 over 3
	// servers, spread evenly.
	ct, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(6), ReplicationFactor: 2,
	}))
	if err != nil {
		t.Fatal(err)
	}
	info := ct.Msg.GetTable()
	if info.GetTableId() < 1 || info.GetReplicationFactor() != 2 || info.GetRemoteDataDir() != e.remote ||
		info.GetDataState() != tierv1.DataState_DATA_STATE_ACTIVE || info.GetSchema().GetBuckets() != 6 ||
		info.GetSchema().GetBucketing() != "fluss" || info.GetSchema().GetColumns()[1].GetType() != "DECIMAL(10,2)" ||
		!slices.Equal(info.GetSchema().GetBucketKey(), []string{"id"}) {
		t.Fatalf("created table: %v", info)
	}
	gt, err := cl.GetTable(ctx, req(&tierv1.GetTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}}))
	if err != nil || !proto.Equal(gt.Msg.GetTable(), info) {
		t.Fatalf("get table: %v, %v; want %v", gt.Msg.GetTable(), err, info)
	}
	again, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(1), IgnoreIfExists: true,
	}))
	if err != nil || !proto.Equal(again.Msg.GetTable(), info) {
		t.Fatalf("create existing table with ignore_if_exists: %v, %v", again.Msg.GetTable(), err)
	}

	loc, err := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	if loc.Msg.GetTargetId().GetTableId() != info.GetTableId() || loc.Msg.GetTargetId().GetPartitionId() != 0 ||
		loc.Msg.GetDataState() != tierv1.DataState_DATA_STATE_ACTIVE || len(loc.Msg.GetBuckets()) != 6 ||
		!proto.Equal(loc.Msg.GetSchema(), info.GetSchema()) {
		t.Fatalf("locations: %v", loc.Msg)
	}
	addrs := make(map[string]string)
	e.mu.Lock()
	for addr, ft := range e.tablets {
		addrs[ft.id] = addr
	}
	e.mu.Unlock()
	load := make(map[string]int)
	for i, b := range loc.Msg.GetBuckets() {
		if int(b.GetBucket()) != i || len(b.GetReplicas()) != 2 || !slices.Contains(b.GetReplicas(), b.GetLeaderId()) ||
			b.GetLeaderAddress() != addrs[b.GetLeaderId()] || b.GetLeaderEpoch() != 0 {
			t.Fatalf("bucket %d: %v", i, b)
		}
		for _, r := range b.GetReplicas() {
			load[r]++
		}
	}
	for _, s := range servers {
		if load[s] != 4 {
			t.Fatalf("replicas per server %v, want 4 each", load)
		}
	}

	// A partitioned table and partitions by name and by values.
	if _, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Schema: eventsSchema(2),
	})); err != nil {
		t.Fatal(err)
	}
	p1, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2026-11-29$7"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"},
		Partition: &tierv1.CreatePartitionRequest_PartitionSpec{PartitionSpec: &tierv1.PartitionSpec{
			Values: map[string]string{"dt": "2026-11-30", "region": "-3"},
		}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if p2.Msg.GetPartition().GetPartitionName() != "2026-11-30$-3" || p2.Msg.GetPartition().GetPartitionId() == p1.Msg.GetPartition().GetPartitionId() {
		t.Fatalf("partitions %v, %v", p1.Msg.GetPartition(), p2.Msg.GetPartition())
	}
	if _, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "2026-11-29$7"}, IgnoreIfExists: true,
	})); err != nil {
		t.Fatalf("create existing partition with ignore_if_exists: %v", err)
	}
	lp, err := cl.ListPartitions(ctx, req(&tierv1.ListPartitionsRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}}))
	if err != nil || len(lp.Msg.GetPartitions()) != 2 || lp.Msg.GetPartitions()[0].GetPartitionName() != "2026-11-29$7" {
		t.Fatalf("list partitions: %v, %v", lp.Msg.GetPartitions(), err)
	}
	part := "2026-11-30$-3"
	ploc, err := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: &part}}))
	if err != nil || ploc.Msg.GetTargetId().GetPartitionId() != p2.Msg.GetPartition().GetPartitionId() || len(ploc.Msg.GetBuckets()) != 2 {
		t.Fatalf("partition locations: %v, %v", ploc.Msg, err)
	}
	lt, err := cl.ListTables(ctx, req(&tierv1.ListTablesRequest{Database: "shop"}))
	if err != nil || !slices.Equal(lt.Msg.GetTables(), []string{"events", "orders"}) {
		t.Fatalf("list tables: %v, %v", lt.Msg.GetTables(), err)
	}
	ls, err := cl.ListServers(ctx, req(&tierv1.ListServersRequest{}))
	if err != nil || len(ls.Msg.GetServers()) != 3 || ls.Msg.GetServers()[0].GetServerId() != "ts-1" || ls.Msg.GetServers()[0].GetAddress() != addrs["ts-1"] {
		t.Fatalf("list servers: %v, %v", ls.Msg.GetServers(), err)
	}

	// Drops.
	if _, err := cl.DropPartition(ctx, req(&tierv1.DropPartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: "2026-11-29$7"},
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DropPartition(ctx, req(&tierv1.DropPartitionRequest{
		Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: "2026-11-29$7"}, IgnoreIfNotExists: true,
	})); err != nil {
		t.Fatalf("drop missing partition with ignore_if_not_exists: %v", err)
	}
	lp, err = cl.ListPartitions(ctx, req(&tierv1.ListPartitionsRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}}))
	if err != nil || len(lp.Msg.GetPartitions()) != 1 {
		t.Fatalf("partitions after drop: %v, %v", lp.Msg.GetPartitions(), err)
	}
	if _, err := cl.DropTable(ctx, req(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.GetTable(ctx, req(&tierv1.GetTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}})); tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
		t.Fatalf("get dropped table: %v", err)
	}
	if _, err := cl.DropDatabase(ctx, req(&tierv1.DropDatabaseRequest{Database: "shop", Cascade: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DropDatabase(ctx, req(&tierv1.DropDatabaseRequest{Database: "shop", IgnoreIfNotExists: true})); err != nil {
		t.Fatal(err)
	}
	// Nothing is left of shop: no table, partition, assignment or sequence
	// of a table.
	for k := range e.dump() {
		for _, p := range []string{"/tables/", "/partitions/", "/assignment/", "/snapshots/", "/databases/shop"} {
			if strings.Contains(strings.TrimPrefix(k, e.prefix), p) {
				t.Errorf("left after drop: %s", k)
			}
		}
	}

	// The drops were pushed to the servers that held the replicas: each got
	// an empty assignment of the dropped table, with the coordinator epoch.
	epoch, _ := n.c.IsLeader()
	eventually(t, 5*time.Second, "drop notifications", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, ft := range e.tablets {
			ok := false
			for _, no := range ft.noticeList() {
				if no.GetCoordinatorEpoch() != int64(epoch) {
					t.Errorf("notice with epoch %d, the leader's is %d", no.GetCoordinatorEpoch(), epoch)
				}
				if no.GetTarget().GetTableId() == info.GetTableId() && len(no.GetBuckets()) == 0 {
					ok = true
				}
			}
			if !ok {
				return false
			}
		}
		return true
	})
	if got := counterValue(t, n.reg, "thaw_coordinator_ddl_total", map[string]string{"op": "create_table", "result": "OK"}); got != 3 {
		t.Errorf("ddl metric create_table OK = %v, want 3", got)
	}
}

func TestDDLRejectsBadInput(t *testing.T) {
	e := newEnv(t)
	e.register(e.cli, "ts-1", 10*time.Second)
	n := e.startNode("c-1", nil)
	e.awaitLeader(n)
	ctx := t.Context()
	cl := n.client
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"})))
	must(cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "orders"}, Schema: ordersSchema(2)})))
	must(cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Schema: eventsSchema(2)})))
	must(cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: &tierv1.TablePath{Database: "shop", Table: "events"}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: "a$1"}})))

	path := func(db, table string) *tierv1.TablePath { return &tierv1.TablePath{Database: db, Table: table} }
	byName := func(name string) *tierv1.CreatePartitionRequest_PartitionName {
		return &tierv1.CreatePartitionRequest_PartitionName{PartitionName: name}
	}
	noPK := ordersSchema(2)
	noPK.PrimaryKey = nil
	badType := ordersSchema(2)
	badType.Columns[0].Type = "ARRAY<INT>"
	nullablePK := ordersSchema(2)
	nullablePK.Columns[0].Nullable = true
	tooMany := ordersSchema(5000)
	badBucketing := ordersSchema(2)
	badBucketing.Bucketing = "modulo"
	str := func(s string) *string { return &s }

	tests := []struct {
		name string
		call func() error
		want tierpb.Reason
	}{
		{"bad database name", func() error {
			_, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "sh.op"}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"empty database name", func() error {
			_, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"duplicate database", func() error {
			_, err := cl.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "shop"}))
			return err
		}, tierpb.ReasonAlreadyExists},
		{"drop unknown database", func() error {
			_, err := cl.DropDatabase(ctx, req(&tierv1.DropDatabaseRequest{Database: "nope"}))
			return err
		}, tierpb.ReasonNotFound},
		{"drop non-empty database", func() error {
			_, err := cl.DropDatabase(ctx, req(&tierv1.DropDatabaseRequest{Database: "shop"}))
			return err
		}, tierpb.ReasonNotEmpty},
		{"table in unknown database", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("nope", "t"), Schema: ordersSchema(1)}))
			return err
		}, tierpb.ReasonNotFound},
		{"duplicate table", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "orders"), Schema: ordersSchema(1)}))
			return err
		}, tierpb.ReasonAlreadyExists},
		{"bad table name", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "or ders"), Schema: ordersSchema(1)}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"no schema", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"schema without primary key", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: noPK}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"nested type", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: badType}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"nullable primary key", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: nullablePK}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"too many buckets", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: tooMany}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"unknown bucketing", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: badBucketing}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"negative replication factor", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: ordersSchema(1), ReplicationFactor: -1}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"huge replication factor", func() error {
			_, err := cl.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: path("shop", "t"), Schema: ordersSchema(1), ReplicationFactor: 17}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"drop unknown table", func() error {
			_, err := cl.DropTable(ctx, req(&tierv1.DropTableRequest{Path: path("shop", "nope")}))
			return err
		}, tierpb.ReasonNotFound},
		{"get unknown table", func() error {
			_, err := cl.GetTable(ctx, req(&tierv1.GetTableRequest{Path: path("shop", "nope")}))
			return err
		}, tierpb.ReasonNotFound},
		{"list tables of unknown database", func() error {
			_, err := cl.ListTables(ctx, req(&tierv1.ListTablesRequest{Database: "nope"}))
			return err
		}, tierpb.ReasonNotFound},
		{"bad partition name", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"), Partition: byName("a/b$1")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"partition name with too few values", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"), Partition: byName("a")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"non-canonical partition value", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"), Partition: byName("a$01")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"partition spec missing a key", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"),
				Partition: &tierv1.CreatePartitionRequest_PartitionSpec{PartitionSpec: &tierv1.PartitionSpec{Values: map[string]string{"dt": "a"}}}}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"partition spec with another column", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"),
				Partition: &tierv1.CreatePartitionRequest_PartitionSpec{PartitionSpec: &tierv1.PartitionSpec{Values: map[string]string{"dt": "a", "region": "1", "id": "2"}}}}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"no partition", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"partition of a non-partitioned table", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "orders"), Partition: byName("a$1")}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"duplicate partition", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "events"), Partition: byName("a$1")}))
			return err
		}, tierpb.ReasonAlreadyExists},
		{"partition of unknown table", func() error {
			_, err := cl.CreatePartition(ctx, req(&tierv1.CreatePartitionRequest{Path: path("shop", "nope"), Partition: byName("a$1")}))
			return err
		}, tierpb.ReasonNotFound},
		{"drop unknown partition", func() error {
			_, err := cl.DropPartition(ctx, req(&tierv1.DropPartitionRequest{Path: path("shop", "events"), Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: "b$2"}}))
			return err
		}, tierpb.ReasonNotFound},
		{"locations of unknown partition", func() error {
			_, err := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: str("b$2")}}))
			return err
		}, tierpb.ReasonNotFound},
		{"locations of partitioned table without partition", func() error {
			_, err := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "events"}}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"locations of non-partitioned table with partition", func() error {
			_, err := cl.GetTargetLocations(ctx, req(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "orders", Partition: str("a$1")}}))
			return err
		}, tierpb.ReasonInvalidArgument},
		{"snapshot of unknown bucket", func() error {
			_, err := cl.TriggerSnapshot(ctx, req(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "shop", Table: "orders"}, Bucket: proto.Int32(9)}))
			return err
		}, tierpb.ReasonInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.dump()
			wantReason(t, tt.call(), tt.want)
			sameDump(t, before, e.dump())
		})
	}
	if got := counterValue(t, n.reg, "thaw_coordinator_ddl_total", map[string]string{"op": "create_table", "result": "INVALID_ARGUMENT"}); got != 9 {
		t.Errorf("ddl metric create_table INVALID_ARGUMENT = %v, want 9", got)
	}
}

// TestElectedButNotServing: while etcd names a coordinator as the leader
// and its term does not serve (it has just won and not started, or its
// term ended before its leader key went), it answers UNAVAILABLE, not a
// NOT_LEADER that names itself (the client would only come back). A
// coordinator that etcd does not name still answers NOT_LEADER naming
// the one it does.
func TestElectedButNotServing(t *testing.T) {
	e := newEnv(t)
	x, y := e.newNode("c-x", nil), e.newNode("c-y", nil)
	l, err := fencing.Elect(t.Context(), e.cli, e.store.ElectionPrefix(), "c-x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(context.WithoutCancel(t.Context()))
	_, err = x.client.ListDatabases(t.Context(), req(&tierv1.ListDatabasesRequest{}))
	wantReason(t, err, tierpb.ReasonUnavailable)
	if _, isHint := tierpb.IsNotLeader(err); isHint || !strings.Contains(err.Error(), "c-x is not the active coordinator; it is the elected coordinator") {
		t.Fatalf("elected, not serving: %v", err)
	}
	_, err = y.client.ListDatabases(t.Context(), req(&tierv1.ListDatabasesRequest{}))
	if hint, ok := tierpb.IsNotLeader(err); !ok || hint.ID != "c-x" {
		t.Fatalf("not elected: %v, hint %+v", err, hint)
	}
}

// TestFailover runs two coordinators: the standby refers callers to the
// leader; when the leader's etcd client dies the standby takes over from
// etcd alone, DDL works there, and the old term can change nothing.
func TestFailover(t *testing.T) {
	e := newEnv(t)
	e.register(e.cli, "ts-1", 10*time.Second)
	a := e.startNode("c-a", nil)
	ta := e.awaitLeader(a)
	b := e.startNode("c-b", nil)
	ctx := t.Context()

	if _, err := a.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "before"})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.client.CreateTable(ctx, req(&tierv1.CreateTableRequest{Path: &tierv1.TablePath{Database: "before", Table: "t"}, Schema: ordersSchema(2)})); err != nil {
		t.Fatal(err)
	}
	// The standby answers NOT_LEADER naming the leader, and GetLeader.
	eventually(t, 5*time.Second, "standby campaigning", func() bool { return b.c.current() == nil })
	_, err := b.client.ListDatabases(ctx, req(&tierv1.ListDatabasesRequest{}))
	hint, ok := tierpb.IsNotLeader(err)
	if !ok || hint.ID != "c-a" || hint.Address != a.url || hint.Epoch != int64(ta.epoch()) {
		t.Fatalf("standby: %v, hint %+v", err, hint)
	}
	if md := tierpb.MetadataOf(err); md[tierpb.KeyLeaderAddress] != a.url {
		t.Fatalf("standby error metadata %v", md)
	}
	gl, err := b.client.GetLeader(ctx, req(&tierv1.GetLeaderRequest{}))
	if err != nil || gl.Msg.GetCoordinatorId() != "c-a" || gl.Msg.GetAddress() != a.url || gl.Msg.GetEpoch() != int64(ta.epoch()) {
		t.Fatalf("get leader from standby: %v, %v", gl.Msg, err)
	}
	wantReason(t, func() error {
		_, err := b.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "x"}))
		return err
	}(), tierpb.ReasonNotLeader)

	// Kill the leader: its etcd client goes away, its lease with it.
	a.cli.Close()
	tb := e.awaitLeader(b)
	if tb.epoch() <= ta.epoch() {
		t.Fatalf("new epoch %d not above the old %d", tb.epoch(), ta.epoch())
	}
	select {
	case err := <-a.done:
		if err == nil {
			t.Fatal("the dead coordinator's Run returned nil")
		}
		a.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the dead coordinator's Run did not return")
	}
	// The new leader continues from etcd alone.
	if _, err := b.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "after"})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.DropTable(ctx, req(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: "before", Table: "t"}})); err != nil {
		t.Fatal(err)
	}
	// The old term can change nothing: a guarded write with its epoch fails
	// with ErrNotLeader, and etcd is as it was.
	before := e.dump()
	_, err = e.store.CreateDatabase(ctx, ta.guard, "zombie")
	if !isNotLeader(err) {
		t.Fatalf("write with the old epoch: %v", err)
	}
	_, err = e.store.PutAssignment(ctx, ta.guard, meta.Assignment{TableID: 1, Buckets: []meta.BucketAssignment{{Replicas: []string{}}}}, 1)
	if !isNotLeader(err) {
		t.Fatalf("assignment write with the old epoch: %v", err)
	}
	sameDump(t, before, e.dump())
	// The deposed coordinator's service refuses too.
	wantReason(t, func() error {
		_, err := a.client.CreateDatabase(ctx, req(&tierv1.CreateDatabaseRequest{Database: "zombie"}))
		return err
	}(), tierpb.ReasonNotLeader)
	if v := gaugeValue(t, b.reg, "thaw_coordinator_leader"); v != 1 {
		t.Errorf("leader gauge of the new leader = %v", v)
	}
	if v := gaugeValue(t, b.reg, "thaw_coordinator_epoch"); v != float64(tb.epoch()) {
		t.Errorf("epoch gauge = %v, want %d", v, tb.epoch())
	}
}
