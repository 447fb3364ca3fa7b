package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// service implements the CoordinatorService over a Coordinator. Every RPC
// but GetLeader first checks that this coordinator leads (else NOT_LEADER
// naming the leader); every write carries the term's guard, so a request
// that began in a term that has ended since changes nothing.
type service struct{ c *Coordinator }

var _ tierv1connect.CoordinatorServiceHandler = (*service)(nil)

// ddl counts a DDL operation's outcome and returns its error.
func (s *service) ddl(op string, err error) error {
	result := "OK"
	if err != nil {
		result = string(tierpb.ReasonOf(err))
	}
	s.c.m.ddl.WithLabelValues(op, result).Inc()
	return err
}

// checkName validates a database or table name (kv.CheckName).
func checkName(what, name string) error {
	if err := kv.CheckName(what, name); err != nil {
		return invalid("%v", err)
	}
	return nil
}

func checkTablePath(p *tierv1.TablePath) error {
	if p == nil {
		return invalid("no table path")
	}
	if err := checkName("database", p.GetDatabase()); err != nil {
		return err
	}
	return checkName("table", p.GetTable())
}

func (s *service) CreateDatabase(ctx context.Context, req *connect.Request[tierv1.CreateDatabaseRequest]) (*connect.Response[tierv1.CreateDatabaseResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetDatabase(), ""); err != nil {
		return nil, s.ddl("create_database", err)
	}
	return connect.NewResponse(&tierv1.CreateDatabaseResponse{}), s.ddl("create_database", s.createDatabase(ctx, req.Msg))
}

func (s *service) createDatabase(ctx context.Context, m *tierv1.CreateDatabaseRequest) error {
	t, err := s.c.leading(ctx)
	if err != nil {
		return err
	}
	if err := checkName("database", m.GetDatabase()); err != nil {
		return err
	}
	_, err = s.c.store.CreateDatabase(ctx, t.guard, m.GetDatabase())
	if errors.Is(err, meta.ErrExists) && m.GetIgnoreIfExists() {
		return nil
	}
	return s.c.rpcError(ctx, "create database "+m.GetDatabase(), err)
}

func (s *service) DropDatabase(ctx context.Context, req *connect.Request[tierv1.DropDatabaseRequest]) (*connect.Response[tierv1.DropDatabaseResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetDatabase(), ""); err != nil {
		return nil, s.ddl("drop_database", err)
	}
	return connect.NewResponse(&tierv1.DropDatabaseResponse{}), s.ddl("drop_database", s.dropDatabase(ctx, req.Msg))
}

func (s *service) dropDatabase(ctx context.Context, m *tierv1.DropDatabaseRequest) error {
	t, err := s.c.leading(ctx)
	if err != nil {
		return err
	}
	db := m.GetDatabase()
	if err := checkName("database", db); err != nil {
		return err
	}
	var gone map[meta.Target][]string
	if m.GetCascade() {
		tables, err := s.c.store.ListTables(ctx, db)
		if err != nil {
			return s.c.rpcError(ctx, "drop database "+db, err)
		}
		ids := make([]int64, 0, len(tables))
		for _, tv := range tables {
			ids = append(ids, tv.Value.ID)
		}
		if gone, err = s.c.assignedServers(ctx, ids, 0); err != nil {
			return s.c.rpcError(ctx, "drop database "+db, err)
		}
	}
	err = s.c.store.DropDatabase(ctx, t.guard, db, m.GetCascade())
	if err != nil && m.GetCascade() && !errors.Is(err, meta.ErrNotFound) {
		t.dropFailed() // a table's drop may have stopped between its steps
	}
	s.c.notifyDropped(t, gone) // whatever was dropped before an error, too
	if errors.Is(err, meta.ErrNotFound) {
		if m.GetIgnoreIfNotExists() {
			return nil
		}
		return notFound("database %s does not exist", db)
	}
	return s.c.rpcError(ctx, "drop database "+db, err)
}

func (s *service) ListDatabases(ctx context.Context, req *connect.Request[tierv1.ListDatabasesRequest]) (*connect.Response[tierv1.ListDatabasesResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "list databases", "", "", false); err != nil {
		return nil, err
	}
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	dbs, err := s.c.store.ListDatabases(ctx)
	if err != nil {
		return nil, s.c.rpcError(ctx, "list databases", err)
	}
	resp := &tierv1.ListDatabasesResponse{}
	for _, d := range dbs {
		resp.Databases = append(resp.Databases, d.Value.Name)
	}
	slices.Sort(resp.Databases)
	return connect.NewResponse(resp), nil
}

func (s *service) CreateTable(ctx context.Context, req *connect.Request[tierv1.CreateTableRequest]) (*connect.Response[tierv1.CreateTableResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable()); err != nil {
		return nil, s.ddl("create_table", err)
	}
	info, err := s.createTable(ctx, req.Msg)
	if err = s.ddl("create_table", err); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.CreateTableResponse{Table: info}), nil
}

func (s *service) createTable(ctx context.Context, m *tierv1.CreateTableRequest) (*tierv1.TableInfo, error) {
	t, err := s.c.leading(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTablePath(m.GetPath()); err != nil {
		return nil, err
	}
	db, name := m.GetPath().GetDatabase(), m.GetPath().GetTable()
	what := "create table " + db + "." + name
	schema, err := schemaFromProto(m.GetSchema())
	if err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	rf := int(m.GetReplicationFactor())
	switch {
	case rf == 0:
		rf = s.c.cfg.DefaultReplicationFactor
	case rf < 0 || rf > MaxReplicationFactor:
		return nil, invalid("%s: replication factor %d not in 1..%d", what, rf, MaxReplicationFactor)
	}
	spec := meta.TableSpec{Database: db, Name: name, Schema: schema, ReplicationFactor: rf, RemoteDataDir: s.c.cfg.RemoteDataDir}
	if len(schema.PartitionKeys) == 0 {
		cl, err := s.c.readCluster(ctx)
		if err != nil {
			return nil, s.c.rpcError(ctx, what, err)
		}
		spec.Buckets = cl.placeNew(rf, schema.Buckets)
	}
	v, err := s.c.store.CreateTable(ctx, t.guard, spec)
	if errors.Is(err, meta.ErrExists) {
		cur, gerr := s.c.store.GetTable(ctx, db, name)
		switch {
		case gerr == nil && cur.Value.Dropping:
			// Not there for every read, and here until the drop
			// finishes: retriable, not ALREADY_EXISTS (which a client
			// asking with ignore_if_exists took for its table).
			t.dropFailed()
			return nil, unavailable("%s: table %s.%s is being dropped; retry once the drop has finished", what, db, name)
		case gerr == nil && m.GetIgnoreIfExists():
			return tableInfo(cur), nil
		}
	}
	if err != nil {
		return nil, s.c.rpcError(ctx, what, err)
	}
	if !v.Value.Partitioned() {
		t.rec.notifyLater(v.Value.Target(), nil)
	}
	return tableInfo(v), nil
}

func (s *service) DropTable(ctx context.Context, req *connect.Request[tierv1.DropTableRequest]) (*connect.Response[tierv1.DropTableResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable()); err != nil {
		return nil, s.ddl("drop_table", err)
	}
	return connect.NewResponse(&tierv1.DropTableResponse{}), s.ddl("drop_table", s.dropTable(ctx, req.Msg))
}

func (s *service) dropTable(ctx context.Context, m *tierv1.DropTableRequest) error {
	t, err := s.c.leading(ctx)
	if err != nil {
		return err
	}
	if err := checkTablePath(m.GetPath()); err != nil {
		return err
	}
	db, name := m.GetPath().GetDatabase(), m.GetPath().GetTable()
	what := "drop table " + db + "." + name
	cur, err := s.c.store.GetTable(ctx, db, name)
	if errors.Is(err, meta.ErrNotFound) && m.GetIgnoreIfNotExists() {
		return nil
	}
	if err != nil {
		return s.c.tableReadError(ctx, db, name, err)
	}
	gone, err := s.c.assignedServers(ctx, []int64{cur.Value.ID}, 0)
	if err != nil {
		return s.c.rpcError(ctx, what, err)
	}
	err = s.c.store.DropTableID(ctx, t.guard, db, name, cur.Value.ID)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		t.dropFailed() // it may have stopped between its steps
	}
	s.c.notifyDropped(t, gone)
	if errors.Is(err, meta.ErrNotFound) && m.GetIgnoreIfNotExists() {
		return nil
	}
	return s.c.rpcError(ctx, what, err)
}

func (s *service) GetTable(ctx context.Context, req *connect.Request[tierv1.GetTableRequest]) (*connect.Response[tierv1.GetTableResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "get table", req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable(), false); err != nil {
		return nil, err
	}
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	tv, err := s.c.liveTable(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.GetTableResponse{Table: tableInfo(tv)}), nil
}

// liveTable reads a table that exists and is not being dropped.
func (c *Coordinator) liveTable(ctx context.Context, p *tierv1.TablePath) (meta.Versioned[meta.TableRecord], error) {
	if err := checkTablePath(p); err != nil {
		return meta.Versioned[meta.TableRecord]{}, err
	}
	tv, err := c.store.GetTable(ctx, p.GetDatabase(), p.GetTable())
	switch {
	case err != nil:
		return tv, c.tableReadError(ctx, p.GetDatabase(), p.GetTable(), err)
	case tv.Value.Dropping:
		return tv, notFound("table %s.%s is being dropped", p.GetDatabase(), p.GetTable())
	}
	return tv, nil
}

func (s *service) ListTables(ctx context.Context, req *connect.Request[tierv1.ListTablesRequest]) (*connect.Response[tierv1.ListTablesResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "list tables", req.Msg.GetDatabase(), "", false); err != nil {
		return nil, err
	}
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	db := req.Msg.GetDatabase()
	if err := checkName("database", db); err != nil {
		return nil, err
	}
	if _, err := s.c.store.GetDatabase(ctx, db); err != nil {
		return nil, s.c.readError(ctx, "database "+db, err)
	}
	tables, err := s.c.store.ListTables(ctx, db)
	if err != nil {
		return nil, s.c.rpcError(ctx, "list tables of "+db, err)
	}
	resp := &tierv1.ListTablesResponse{}
	for _, tv := range tables {
		if !tv.Value.Dropping {
			resp.Tables = append(resp.Tables, tv.Value.Name)
		}
	}
	slices.Sort(resp.Tables)
	return connect.NewResponse(resp), nil
}

// partitionName returns the canonical partition name a request gives by
// name or by values, checked against the table's partition keys.
func partitionName(tr meta.TableRecord, name *string, spec *tierv1.PartitionSpec) (string, error) {
	what := "table " + tr.Database + "." + tr.Name
	if !tr.Partitioned() {
		return "", invalid("%s is not partitioned", what)
	}
	table, err := kv.NewTable(tr.Schema)
	if err != nil {
		return "", fmt.Errorf("coordinator: %s: %w", what, err)
	}
	var n string
	switch {
	case name != nil && spec != nil:
		return "", invalid("%s: give the partition by name or by values, not both", what)
	case name != nil:
		n = *name
	case spec != nil:
		values := spec.GetValues()
		parts := make([]string, 0, len(table.PartitionKeys()))
		for _, i := range table.PartitionKeys() {
			col := table.Column(i).Name
			v, ok := values[col]
			if !ok {
				return "", invalid("%s: partition spec has no value for partition key %q", what, col)
			}
			parts = append(parts, v)
		}
		if len(values) != len(parts) {
			return "", invalid("%s: partition spec names columns that are not partition keys", what)
		}
		n = strings.Join(parts, "$")
	default:
		return "", invalid("%s: no partition given", what)
	}
	if err := kv.ValidatePartitionName(n); err != nil {
		return "", invalid("%s: %v", what, err)
	}
	if _, err := table.ParsePartitionName(n); err != nil {
		return "", invalid("%s: %v", what, err)
	}
	return n, nil
}

// partitionArg unpacks a CreatePartition or DropPartition oneof.
func partitionArg(nameSet bool, name string, spec *tierv1.PartitionSpec) (*string, *tierv1.PartitionSpec) {
	if nameSet {
		return &name, nil
	}
	return nil, spec
}

func (s *service) CreatePartition(ctx context.Context, req *connect.Request[tierv1.CreatePartitionRequest]) (*connect.Response[tierv1.CreatePartitionResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable()); err != nil {
		return nil, s.ddl("create_partition", err)
	}
	info, err := s.createPartition(ctx, req.Msg)
	if err = s.ddl("create_partition", err); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.CreatePartitionResponse{Partition: info}), nil
}

func (s *service) createPartition(ctx context.Context, m *tierv1.CreatePartitionRequest) (*tierv1.PartitionInfo, error) {
	t, err := s.c.leading(ctx)
	if err != nil {
		return nil, err
	}
	tv, err := s.c.liveTable(ctx, m.GetPath())
	if err != nil {
		return nil, err
	}
	_, nameSet := m.GetPartition().(*tierv1.CreatePartitionRequest_PartitionName)
	pname, pspec := partitionArg(nameSet, m.GetPartitionName(), m.GetPartitionSpec())
	name, err := partitionName(tv.Value, pname, pspec)
	if err != nil {
		return nil, err
	}
	what := "create partition " + name + " of " + tv.Value.Database + "." + tv.Value.Name
	cl, err := s.c.readCluster(ctx)
	if err != nil {
		return nil, s.c.rpcError(ctx, what, err)
	}
	buckets := cl.placeNew(tv.Value.ReplicationFactor, tv.Value.Schema.Buckets)
	v, err := s.c.store.CreatePartition(ctx, t.guard, tv.Value.Database, tv.Value.Name, name, buckets)
	if errors.Is(err, meta.ErrExists) {
		cur, gerr := s.c.store.GetPartition(ctx, tv.Value.ID, name)
		switch {
		case gerr == nil && cur.Value.Dropping:
			// As for a table being dropped (createTable).
			t.dropFailed()
			return nil, unavailable("%s: the partition is being dropped; retry once the drop has finished", what)
		case gerr == nil && m.GetIgnoreIfExists():
			return partitionInfo(cur.Value), nil
		}
	}
	if err != nil {
		return nil, s.c.rpcError(ctx, what, err)
	}
	t.rec.notifyLater(v.Value.Target(), nil)
	return partitionInfo(v.Value), nil
}

func (s *service) DropPartition(ctx context.Context, req *connect.Request[tierv1.DropPartitionRequest]) (*connect.Response[tierv1.DropPartitionResponse], error) {
	if err := s.c.authorizeDDL(req.Header(), req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable()); err != nil {
		return nil, s.ddl("drop_partition", err)
	}
	return connect.NewResponse(&tierv1.DropPartitionResponse{}), s.ddl("drop_partition", s.dropPartition(ctx, req.Msg))
}

func (s *service) dropPartition(ctx context.Context, m *tierv1.DropPartitionRequest) error {
	t, err := s.c.leading(ctx)
	if err != nil {
		return err
	}
	tv, err := s.c.liveTable(ctx, m.GetPath())
	if err != nil {
		return err
	}
	_, nameSet := m.GetPartition().(*tierv1.DropPartitionRequest_PartitionName)
	pname, pspec := partitionArg(nameSet, m.GetPartitionName(), m.GetPartitionSpec())
	name, err := partitionName(tv.Value, pname, pspec)
	if err != nil {
		return err
	}
	what := "drop partition " + name + " of " + tv.Value.Database + "." + tv.Value.Name
	cur, err := s.c.store.GetPartition(ctx, tv.Value.ID, name)
	if errors.Is(err, meta.ErrNotFound) && m.GetIgnoreIfNotExists() {
		return nil
	}
	if err != nil {
		return s.c.readError(ctx, "partition "+name+" of table "+tv.Value.Database+"."+tv.Value.Name, err)
	}
	gone, err := s.c.assignedServers(ctx, []int64{tv.Value.ID}, cur.Value.ID)
	if err != nil {
		return s.c.rpcError(ctx, what, err)
	}
	err = s.c.store.DropPartitionID(ctx, t.guard, tv.Value.Database, tv.Value.Name, name, tv.Value.ID, cur.Value.ID)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		t.dropFailed() // it may have stopped between its steps
	}
	s.c.notifyDropped(t, gone)
	if errors.Is(err, meta.ErrNotFound) && m.GetIgnoreIfNotExists() {
		return nil
	}
	return s.c.rpcError(ctx, what, err)
}

func (s *service) ListPartitions(ctx context.Context, req *connect.Request[tierv1.ListPartitionsRequest]) (*connect.Response[tierv1.ListPartitionsResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "list partitions", req.Msg.GetPath().GetDatabase(), req.Msg.GetPath().GetTable(), false); err != nil {
		return nil, err
	}
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	tv, err := s.c.liveTable(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if !tv.Value.Partitioned() {
		return nil, invalid("table %s.%s is not partitioned", tv.Value.Database, tv.Value.Name)
	}
	parts, err := s.c.store.ListPartitions(ctx, tv.Value.ID)
	if err != nil {
		return nil, s.c.rpcError(ctx, "list partitions", err)
	}
	resp := &tierv1.ListPartitionsResponse{}
	for _, p := range parts {
		if !p.Value.Dropping {
			resp.Partitions = append(resp.Partitions, partitionInfo(p.Value))
		}
	}
	slices.SortFunc(resp.Partitions, func(a, b *tierv1.PartitionInfo) int { return strings.Compare(a.PartitionName, b.PartitionName) })
	return connect.NewResponse(resp), nil
}

// resolveTarget reads a live target named by path, with its assignment.
func (c *Coordinator) resolveTarget(ctx context.Context, p *tierv1.TargetPath) (*targetState, error) {
	if p == nil {
		return nil, invalid("no target")
	}
	tv, err := c.liveTable(ctx, &tierv1.TablePath{Database: p.GetDatabase(), Table: p.GetTable()})
	if err != nil {
		return nil, err
	}
	ts := &targetState{table: tv}
	what := "table " + tv.Value.Database + "." + tv.Value.Name
	switch {
	case tv.Value.Partitioned() && p.Partition == nil:
		return nil, invalid("%s is partitioned: name a partition", what)
	case !tv.Value.Partitioned() && p.Partition != nil:
		return nil, invalid("%s is not partitioned: name no partition", what)
	case tv.Value.Partitioned():
		if err := kv.ValidatePartitionName(p.GetPartition()); err != nil {
			return nil, invalid("%s: %v", what, err)
		}
		pv, err := c.store.GetPartition(ctx, tv.Value.ID, p.GetPartition())
		if err != nil {
			return nil, c.readError(ctx, "partition "+p.GetPartition()+" of "+what, err)
		}
		if pv.Value.Dropping {
			return nil, notFound("partition %s of %s is being dropped", p.GetPartition(), what)
		}
		ts.partition = &pv
	}
	tgt := tv.Value.Target()
	if ts.partition != nil {
		tgt = ts.partition.Value.Target()
	}
	a, err := c.store.GetAssignment(ctx, tgt)
	if err != nil {
		return nil, c.rpcError(ctx, "read assignment of "+what, err)
	}
	ts.assignment = a
	return ts, nil
}

func (s *service) GetTargetLocations(ctx context.Context, req *connect.Request[tierv1.GetTargetLocationsRequest]) (*connect.Response[tierv1.GetTargetLocationsResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "get target locations", req.Msg.GetTarget().GetDatabase(), req.Msg.GetTarget().GetTable(), false); err != nil {
		return nil, err
	}
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	ts, err := s.c.resolveTarget(ctx, req.Msg.GetTarget())
	if err != nil {
		return nil, err
	}
	set, err := s.c.store.ListServers(ctx)
	if err != nil {
		return nil, s.c.rpcError(ctx, "read servers", err)
	}
	servers := indexServers(set)
	resp := &tierv1.GetTargetLocationsResponse{
		TargetId: targetIDProto(ts.target()),
		Schema:   tierpb.SchemaToProto(ts.table.Value.Schema),
	}
	resp.DataState, resp.BulkLoadId = dataStateOf(ts)
	for b, ba := range ts.assignment.Value.Buckets {
		resp.Buckets = append(resp.Buckets, bucketLocation(b, ba, servers))
	}
	return connect.NewResponse(resp), nil
}

func (s *service) ListServers(ctx context.Context, _ *connect.Request[tierv1.ListServersRequest]) (*connect.Response[tierv1.ListServersResponse], error) {
	if _, err := s.c.leading(ctx); err != nil {
		return nil, err
	}
	set, err := s.c.store.ListServers(ctx)
	if err != nil {
		return nil, s.c.rpcError(ctx, "list servers", err)
	}
	resp := &tierv1.ListServersResponse{}
	for _, r := range set.Servers {
		resp.Servers = append(resp.Servers, serverInfo(r))
	}
	slices.SortFunc(resp.Servers, func(a, b *tierv1.ServerInfo) int { return strings.Compare(a.ServerId, b.ServerId) })
	return connect.NewResponse(resp), nil
}

func (s *service) TriggerSnapshot(ctx context.Context, req *connect.Request[tierv1.TriggerSnapshotRequest]) (*connect.Response[tierv1.TriggerSnapshotResponse], error) {
	if err := s.c.authorizeMeta(req.Header(), "trigger snapshot", req.Msg.GetTarget().GetDatabase(), req.Msg.GetTarget().GetTable(), true); err != nil {
		return nil, err
	}
	t, err := s.c.leading(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := s.c.resolveTarget(ctx, req.Msg.GetTarget())
	if err != nil {
		return nil, err
	}
	if state, id := dataStateOf(ts); state == tierv1.DataState_DATA_STATE_LOADING {
		return nil, tierpb.NewTargetLoadingError(fmt.Sprintf("coordinator: trigger snapshot: %s is loading", ts.target()), state, id)
	}
	n := len(ts.assignment.Value.Buckets)
	buckets := make([]int, 0, n)
	if req.Msg.Bucket != nil {
		b := int(req.Msg.GetBucket())
		if b < 0 || b >= n {
			return nil, invalid("trigger snapshot: bucket %d not in 0..%d", b, n-1)
		}
		buckets = append(buckets, b)
	} else {
		for b := range n {
			buckets = append(buckets, b)
		}
	}
	set, err := s.c.store.ListServers(ctx)
	if err != nil {
		return nil, s.c.rpcError(ctx, "read servers", err)
	}
	servers := indexServers(set)
	addrs := make([]string, len(buckets))
	for i, b := range buckets {
		if addrs[i] = servers.address(ts.assignment.Value.Buckets[b].Leader); addrs[i] == "" {
			return nil, unavailable("trigger snapshot: bucket %d of %s has no live leader", b, ts.target())
		}
	}
	snaps := make([]*tierv1.BucketSnapshot, len(buckets))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.c.cfg.Fanout)
	for i, b := range buckets {
		ba, addr := ts.assignment.Value.Buckets[b], addrs[i]
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(gctx, s.c.cfg.TabletTimeout*takeSnapshotFactor)
			defer cancel()
			resp, err := s.c.tablets(addr).TakeSnapshot(cctx, connect.NewRequest(&tierv1.TakeSnapshotRequest{
				CoordinatorEpoch: int64(t.epoch()),
				Target:           targetIDProto(ts.target()),
				Bucket:           int32(b),
			}))
			if err != nil {
				var ce *connect.Error
				if errors.As(err, &ce) && tierpb.DetailOf(err) != nil {
					return err // the tablet's own reason
				}
				return unavailable("trigger snapshot: bucket %d of %s on %s: %v", b, ts.target(), ba.Leader, err)
			}
			snaps[i] = resp.Msg.GetSnapshot()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.TriggerSnapshotResponse{Snapshots: snaps}), nil
}

func (s *service) GetLeader(ctx context.Context, _ *connect.Request[tierv1.GetLeaderRequest]) (*connect.Response[tierv1.GetLeaderResponse], error) {
	if t := s.c.current(); t != nil {
		return connect.NewResponse(&tierv1.GetLeaderResponse{
			CoordinatorId: s.c.cfg.ID, Epoch: int64(t.epoch()), Address: s.c.cfg.AdvertiseAddress,
		}), nil
	}
	h := s.c.leaderHint(ctx)
	return connect.NewResponse(&tierv1.GetLeaderResponse{CoordinatorId: h.ID, Epoch: h.Epoch, Address: h.Address}), nil
}

func (s *service) ReportSnapshot(ctx context.Context, req *connect.Request[tierv1.ReportSnapshotRequest]) (*connect.Response[tierv1.ReportSnapshotResponse], error) {
	resp, err := s.c.reportSnapshot(ctx, req.Msg)
	result := "OK"
	if err != nil {
		result = string(tierpb.ReasonOf(err))
	}
	s.c.m.reports.WithLabelValues(result).Inc()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// assignedServers returns, for every target of the given tables (only
// partition partitionID of a single table when it is not 0), the servers
// holding replicas of it.
func (c *Coordinator) assignedServers(ctx context.Context, tableIDs []int64, partitionID int64) (map[meta.Target][]string, error) {
	as, err := c.store.ListAssignments(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[meta.Target][]string)
	for _, a := range as {
		tgt := a.Value.Target()
		if slices.Contains(tableIDs, tgt.TableID) && (partitionID == 0 || tgt.PartitionID == partitionID) {
			out[tgt] = replicasOf(a.Value)
		}
	}
	return out, nil
}

// notifyDropped asks the term's reconciler to tell the servers of targets
// that they are gone (or, if a drop failed, what they still hold).
func (c *Coordinator) notifyDropped(t *term, gone map[meta.Target][]string) {
	for tgt, servers := range gone {
		t.rec.notifyLater(tgt, servers)
	}
}
