package tierclient

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Target names what a call reads or writes: a non-partitioned table, one
// partition of a partitioned table, or (Partition empty) a whole
// partitioned table, whose rows are then routed to their partitions by
// their partition-key values.
type Target struct {
	Database  string
	Table     string
	Partition string
}

func (t Target) String() string {
	if t.Partition == "" {
		return t.Database + "." + t.Table
	}
	return t.Database + "." + t.Table + "/" + t.Partition
}

func (t Target) path() tablePath { return tablePath{t.Database, t.Table} }

func (t Target) proto() *tierv1.TargetPath {
	p := &tierv1.TargetPath{Database: t.Database, Table: t.Table}
	if t.Partition != "" {
		p.Partition = &t.Partition
	}
	return p
}

type tablePath struct{ database, table string }

// TableInfo describes a table as the coordinator reported it.
type TableInfo struct {
	Database          string
	Name              string
	ID                int64
	KV                *kv.Table // the compiled schema: encode and decode with it
	ReplicationFactor int
	// RemoteDataDir is the table's snapshot directory in the tier's object
	// store (where a bulk load's builders write).
	RemoteDataDir string
	// DataState and BulkLoadID of a non-partitioned table (each partition
	// of a partitioned table has its own).
	DataState  tierv1.DataState
	BulkLoadID string
}

// Partitioned reports whether the table has partition keys.
func (t *TableInfo) Partitioned() bool { return len(t.KV.PartitionKeys()) > 0 }

// KeyRow returns a row of the table holding pk, the primary-key values in
// primary-key order, and NULL elsewhere: the form Get and Delete take.
func (t *TableInfo) KeyRow(pk ...any) (kv.Row, error) {
	s := t.KV.Schema()
	if len(pk) != len(s.PrimaryKey) {
		return nil, fmt.Errorf("%w: %d key values for the %d primary-key columns of %s.%s", ErrInvalidArgument, len(pk), len(s.PrimaryKey), t.Database, t.Name)
	}
	r := make(kv.Row, t.KV.NumColumns())
	for i, name := range s.PrimaryKey {
		j, _ := t.KV.ColumnIndex(name)
		r[j] = pk[i]
	}
	return r, nil
}

// SchemaToProto converts a kv table schema to its wire form.
func SchemaToProto(s kv.TableSchema) *tierv1.TableSchema { return tierpb.SchemaToProto(s) }

// SchemaFromProto converts a wire schema to a compiled kv table. An empty
// bucketing means fluss.
func SchemaFromProto(p *tierv1.TableSchema) (*kv.Table, error) {
	s, err := tierpb.SchemaFromProto(p)
	if err != nil {
		return nil, fmt.Errorf("tierclient: %w", err)
	}
	t, err := kv.NewTable(s)
	if err != nil {
		return nil, fmt.Errorf("tierclient: %w", err)
	}
	return t, nil
}

func tableInfoFromProto(p *tierv1.TableInfo) (*TableInfo, error) {
	t, err := SchemaFromProto(p.GetSchema())
	if err != nil {
		return nil, err
	}
	return &TableInfo{
		Database:          p.GetPath().GetDatabase(),
		Name:              p.GetPath().GetTable(),
		ID:                p.GetTableId(),
		KV:                t,
		ReplicationFactor: int(p.GetReplicationFactor()),
		RemoteDataDir:     p.GetRemoteDataDir(),
		DataState:         p.GetDataState(),
		BulkLoadID:        p.GetBulkLoadId(),
	}, nil
}

// Table describes a table, from the client's cache when it has it.
func (c *Client) Table(ctx context.Context, database, table string) (*TableInfo, error) {
	p := tablePath{database, table}
	c.mu.Lock()
	t := c.mu.tables[p]
	c.mu.Unlock()
	if t != nil {
		return t, nil
	}
	return c.refreshTable(ctx, p)
}

// RefreshTable describes a table as the coordinator has it now, not from
// the cache, and updates the cache: a table dropped by another client (or
// dropped and created again) since it was cached is forgotten, with the
// locations cached for it. Callers that decide on a table's existence or
// schema (the promoter's plans) use it; data calls find a changed table on
// their own.
func (c *Client) RefreshTable(ctx context.Context, database, table string) (*TableInfo, error) {
	return c.refreshTable(ctx, tablePath{database, table})
}

func (c *Client) refreshTable(ctx context.Context, p tablePath) (*TableInfo, error) {
	resp, err := coordCall(ctx, c, connect.NewRequest(&tierv1.GetTableRequest{
		Path: &tierv1.TablePath{Database: p.database, Table: p.table},
	}), tierv1connect.CoordinatorServiceClient.GetTable)
	if err != nil {
		if tierpb.ReasonOf(err) == tierpb.ReasonNotFound {
			c.forgetTable(p, 0)
		}
		return nil, fmt.Errorf("tierclient: get table %s.%s: %w", p.database, p.table, err)
	}
	t, err := tableInfoFromProto(resp.Msg.GetTable())
	if err != nil {
		return nil, fmt.Errorf("tierclient: table %s.%s: %w", p.database, p.table, err)
	}
	c.forgetTable(p, t.ID)
	c.mu.Lock()
	c.mu.tables[p] = t
	c.mu.Unlock()
	return t, nil
}

// forgetTable drops what the client cached about table p (its
// description, the locations of its targets) that is not of the table of
// id keep (0: the table does not exist).
func (c *Client) forgetTable(p tablePath, keep int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.mu.tables[p]; t != nil && t.ID != keep {
		delete(c.mu.tables, p)
	}
	for t, e := range c.mu.targets {
		if t.Database != p.database || t.Table != p.table {
			continue
		}
		if st := e.state.Load(); keep == 0 || st != nil && st.id.GetTableId() != keep {
			delete(c.mu.targets, t)
		}
	}
}

// CreateDatabase creates a database unless it exists.
func (c *Client) CreateDatabase(ctx context.Context, database string) error {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: database, IgnoreIfExists: true}),
		tierv1connect.CoordinatorServiceClient.CreateDatabase)
	if err != nil {
		return fmt.Errorf("tierclient: create database %s: %w", database, err)
	}
	return nil
}

// CreateNewDatabase creates a database and reports whether it did: false
// when it exists already (nothing changed then).
func (c *Client) CreateNewDatabase(ctx context.Context, database string) (bool, error) {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: database}),
		tierv1connect.CoordinatorServiceClient.CreateDatabase)
	switch {
	case connect.CodeOf(err) == connect.CodeAlreadyExists:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("tierclient: create database %s: %w", database, err)
	}
	return true, nil
}

// DropEmptyDatabase drops a database that holds no table. One that holds
// tables stays as it is (an error: FAILED_PRECONDITION); one that does not
// exist is no error.
func (c *Client) DropEmptyDatabase(ctx context.Context, database string) error {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.DropDatabaseRequest{Database: database, IgnoreIfNotExists: true}),
		tierv1connect.CoordinatorServiceClient.DropDatabase)
	if err != nil {
		return fmt.Errorf("tierclient: drop database %s: %w", database, err)
	}
	return nil
}

// CreateTable creates a table (replicationFactor 0: the tier's default).
// A table of that name that exists is an ALREADY_EXISTS error.
func (c *Client) CreateTable(ctx context.Context, database, table string, schema kv.TableSchema, replicationFactor int) (*TableInfo, error) {
	if replicationFactor < 0 || replicationFactor > tierpb.MaxReplicationFactor {
		return nil, fmt.Errorf("%w: create table %s.%s: replication factor %d not in 0..%d", ErrInvalidArgument, database, table, replicationFactor, tierpb.MaxReplicationFactor)
	}
	if _, err := kv.NewTable(schema); err != nil {
		return nil, fmt.Errorf("%w: create table %s.%s: %w", ErrInvalidArgument, database, table, err)
	}
	resp, err := coordCall(ctx, c, connect.NewRequest(&tierv1.CreateTableRequest{
		Path:              &tierv1.TablePath{Database: database, Table: table},
		Schema:            SchemaToProto(schema),
		ReplicationFactor: int32(replicationFactor),
	}), tierv1connect.CoordinatorServiceClient.CreateTable)
	if err != nil {
		return nil, fmt.Errorf("tierclient: create table %s.%s: %w", database, table, err)
	}
	t, err := tableInfoFromProto(resp.Msg.GetTable())
	if err != nil {
		return nil, fmt.Errorf("tierclient: table %s.%s: %w", database, table, err)
	}
	// What this client cached of an earlier table of that name (dropped by
	// another client since) must not route the new one's requests.
	p := tablePath{database, table}
	c.forgetTable(p, t.ID)
	c.mu.Lock()
	c.mu.tables[p] = t
	c.mu.Unlock()
	return t, nil
}

// DropTable drops a table and its partitions unless it does not exist,
// and forgets what the client cached about it.
func (c *Client) DropTable(ctx context.Context, database, table string) error {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.DropTableRequest{
		Path:              &tierv1.TablePath{Database: database, Table: table},
		IgnoreIfNotExists: true,
	}), tierv1connect.CoordinatorServiceClient.DropTable)
	if err != nil {
		return fmt.Errorf("tierclient: drop table %s.%s: %w", database, table, err)
	}
	c.forgetTable(tablePath{database, table}, 0)
	return nil
}

// CreatePartition creates a partition of a partitioned table by name
// unless it exists.
func (c *Client) CreatePartition(ctx context.Context, database, table, partition string) error {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.CreatePartitionRequest{
		Path:           &tierv1.TablePath{Database: database, Table: table},
		Partition:      &tierv1.CreatePartitionRequest_PartitionName{PartitionName: partition},
		IgnoreIfExists: true,
	}), tierv1connect.CoordinatorServiceClient.CreatePartition)
	if err != nil {
		return fmt.Errorf("tierclient: create partition %s.%s/%s: %w", database, table, partition, err)
	}
	return nil
}

// DropPartition drops a partition of a partitioned table by name unless
// it does not exist, and forgets what the client cached about it.
func (c *Client) DropPartition(ctx context.Context, database, table, partition string) error {
	_, err := coordCall(ctx, c, connect.NewRequest(&tierv1.DropPartitionRequest{
		Path:              &tierv1.TablePath{Database: database, Table: table},
		Partition:         &tierv1.DropPartitionRequest_PartitionName{PartitionName: partition},
		IgnoreIfNotExists: true,
	}), tierv1connect.CoordinatorServiceClient.DropPartition)
	if err != nil {
		return fmt.Errorf("tierclient: drop partition %s.%s/%s: %w", database, table, partition, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.targets, Target{Database: database, Table: table, Partition: partition})
	return nil
}

// Partitions lists the partition names of a partitioned table.
func (c *Client) Partitions(ctx context.Context, database, table string) ([]string, error) {
	resp, err := coordCall(ctx, c, connect.NewRequest(&tierv1.ListPartitionsRequest{
		Path: &tierv1.TablePath{Database: database, Table: table},
	}), tierv1connect.CoordinatorServiceClient.ListPartitions)
	if err != nil {
		return nil, fmt.Errorf("tierclient: list partitions of %s.%s: %w", database, table, err)
	}
	var names []string
	for _, p := range resp.Msg.GetPartitions() {
		names = append(names, p.GetPartitionName())
	}
	return names, nil
}

// targetEntry is the client's cached routing of one physical target.
type targetEntry struct {
	target    Target // Partition set exactly for a partition
	refreshMu sync.Mutex
	state     atomic.Pointer[targetState]
}

// targetState is one GetTargetLocations answer; immutable.
type targetState struct {
	id         *tierv1.TargetId // shared, read-only
	table      *kv.Table
	dataState  tierv1.DataState
	bulkLoadID string
	buckets    []location
}

// location is where to send a bucket's requests: url is "" while the
// bucket has no leader.
type location struct {
	url      string
	leaderID string
	epoch    int32
}

// Locations describes a physical target as the client routes it.
type Locations struct {
	Target     Target
	TableID    int64
	Partition  int64 // partition id; 0 for a non-partitioned table
	KV         *kv.Table
	DataState  tierv1.DataState
	BulkLoadID string
	// Leaders holds each bucket's leader address ("" for none).
	Leaders []string
}

// Locations returns the routing of a physical target (a partition must be
// named for a partitioned table), refreshed from the coordinator when
// refresh is set.
func (c *Client) Locations(ctx context.Context, t Target, refresh bool) (*Locations, error) {
	e, err := c.entry(ctx, t)
	if err != nil {
		return nil, err
	}
	st := e.state.Load()
	if refresh {
		if st, err = c.refresh(ctx, e, st); err != nil {
			return nil, err
		}
	}
	l := &Locations{Target: e.target, TableID: st.id.GetTableId(), Partition: st.id.GetPartitionId(), KV: st.table,
		DataState: st.dataState, BulkLoadID: st.bulkLoadID}
	for _, b := range st.buckets {
		l.Leaders = append(l.Leaders, b.url)
	}
	return l, nil
}

// entry returns the cached routing of a physical target, fetching it the
// first time.
func (c *Client) entry(ctx context.Context, t Target) (*targetEntry, error) {
	if t.Database == "" || t.Table == "" {
		return nil, fmt.Errorf("%w: target %q names no table", ErrInvalidArgument, t)
	}
	c.mu.Lock()
	e := c.mu.targets[t]
	if e == nil {
		e = &targetEntry{target: t}
		c.mu.targets[t] = e
	}
	c.mu.Unlock()
	if e.state.Load() != nil {
		return e, nil
	}
	if _, err := c.refresh(ctx, e, nil); err != nil {
		// An entry that never located anything (a partition or table that
		// does not exist) is not kept: each such call added one for good.
		c.mu.Lock()
		if c.mu.targets[t] == e && e.state.Load() == nil {
			delete(c.mu.targets, t)
		}
		c.mu.Unlock()
		return nil, err
	}
	return e, nil
}

// refresh replaces seen, the entry's state a caller found stale, with the
// coordinator's current answer; concurrent callers that saw the same state
// share one request.
func (c *Client) refresh(ctx context.Context, e *targetEntry, seen *targetState) (*targetState, error) {
	e.refreshMu.Lock()
	defer e.refreshMu.Unlock()
	if cur := e.state.Load(); cur != seen {
		return cur, nil
	}
	resp, err := coordCall(ctx, c, connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: e.target.proto()}),
		tierv1connect.CoordinatorServiceClient.GetTargetLocations)
	if err != nil {
		return nil, fmt.Errorf("tierclient: locate %v: %w", e.target, err)
	}
	m := resp.Msg
	st := &targetState{id: m.GetTargetId(), dataState: m.GetDataState(), bulkLoadID: m.GetBulkLoadId()}
	if st.table, err = SchemaFromProto(m.GetSchema()); err != nil {
		return nil, fmt.Errorf("tierclient: locate %v: %w", e.target, err)
	}
	if seen != nil && seen.id.GetTableId() != st.id.GetTableId() {
		// The table was dropped and created again: forget its description.
		c.mu.Lock()
		delete(c.mu.tables, e.target.path())
		c.mu.Unlock()
	}
	// Reuse the cached kv.Table while it is the same table with the same
	// schema, so that batches encoded before the refresh keep matching
	// it. A table created again under the name is another table even
	// with the same columns: its buckets, keys or bucketing may differ,
	// and routing by the old ones would look keys up in wrong buckets.
	if seen != nil && seen.id.GetTableId() == st.id.GetTableId() && reflect.DeepEqual(seen.table.Schema(), st.table.Schema()) {
		st.table = seen.table
	}
	st.buckets = make([]location, st.table.Buckets())
	for _, b := range m.GetBuckets() {
		i := int(b.GetBucket())
		if i < 0 || i >= len(st.buckets) {
			return nil, fmt.Errorf("tierclient: locate %v: bucket %d out of range", e.target, i)
		}
		if b.GetLeaderAddress() != "" {
			st.buckets[i] = location{url: baseURL(b.GetLeaderAddress()), leaderID: b.GetLeaderId(), epoch: b.GetLeaderEpoch()}
		}
	}
	e.state.Store(st)
	return st, nil
}

// moveLeader records a bucket leader named by a NOT_LEADER hint, when it is
// newer than the one seen, without asking the coordinator.
func (e *targetEntry) moveLeader(seen *targetState, bucket int, hint tierpb.LeaderHint) bool {
	if hint.Address == "" || hint.Epoch <= int64(seen.buckets[bucket].epoch) || hint.Epoch > math.MaxInt32 {
		return false
	}
	st := *seen
	st.buckets = slices.Clone(seen.buckets)
	st.buckets[bucket] = location{url: baseURL(hint.Address), leaderID: hint.ID, epoch: int32(hint.Epoch)}
	return e.state.CompareAndSwap(seen, &st)
}

// router resolves the physical target of each row of one call's Target.
type router struct {
	c     *Client
	base  Target
	info  *TableInfo
	fixed *targetEntry            // base names a physical target
	parts map[string]*targetEntry // partitions met so far, when derived per row
	same  bool                    // info was found current (sameTable)
}

func (c *Client) newRouter(ctx context.Context, t Target) (*router, error) {
	if t.Database == "" || t.Table == "" {
		return nil, fmt.Errorf("%w: target %q names no table", ErrInvalidArgument, t)
	}
	info, err := c.Table(ctx, t.Database, t.Table)
	if err != nil {
		return nil, err
	}
	r := &router{c: c, base: t, info: info}
	switch {
	case t.Partition != "" && !info.Partitioned():
		return nil, fmt.Errorf("%w: target %v: table %s.%s is not partitioned", ErrInvalidArgument, t, t.Database, t.Table)
	case t.Partition != "" || !info.Partitioned():
		if r.fixed, err = c.entry(ctx, t); err != nil {
			return nil, err
		}
	default:
		r.parts = make(map[string]*targetEntry)
	}
	return r, nil
}

// perRow reports whether rows are routed to partitions by their values.
func (r *router) perRow() bool { return r.fixed == nil }

// route returns the physical target of a key row for a read (only
// partition-key columns are read): nil when the row's partition does not
// exist.
func (r *router) route(ctx context.Context, row kv.Row) (*targetEntry, error) {
	if !r.perRow() && r.base.Partition == "" {
		return r.fixed, nil
	}
	name, err := r.info.KV.PartitionName(row)
	if err != nil {
		return nil, err
	}
	if !r.perRow() {
		if name != r.base.Partition {
			return nil, fmt.Errorf("%w: the row belongs to partition %q", ErrInvalidArgument, name)
		}
		return r.fixed, nil
	}
	if e, ok := r.parts[name]; ok {
		return e, nil
	}
	t := r.base
	t.Partition = name
	e, err := r.c.entry(ctx, t)
	switch {
	case tierpb.ReasonOf(err) == tierpb.ReasonNotFound:
		if !r.same {
			if err := r.c.sameTable(ctx, r.info); err != nil {
				return nil, err
			}
			r.same = true
		}
		r.parts[name] = nil // a partition that does not exist holds no row
		return nil, nil
	case err != nil:
		return nil, err
	}
	r.parts[name] = e
	return e, nil
}

// sameTable fails unless info still describes the table the coordinator
// has under its name: only then does a partition that is not found hold
// no row. Another client may have dropped the table and created it again
// with other partition keys, and rows routed by the cached description
// would name partitions the new table never has (a Get answered "no row"
// for a row that exists, a Delete deleted nothing and succeeded).
func (c *Client) sameTable(ctx context.Context, info *TableInfo) error {
	cur, err := c.RefreshTable(ctx, info.Database, info.Name)
	if err != nil {
		return err
	}
	if cur.ID != info.ID {
		return fmt.Errorf("%w: table %s.%s was dropped and created again (id %d, now %d)", ErrTargetChanged, info.Database, info.Name, info.ID, cur.ID)
	}
	return nil
}

// partitionEntry returns the entry of partition name of the partitioned
// table t names, creating the partition first when the client does that.
func (c *Client) partitionEntry(ctx context.Context, t Target, name string) (*targetEntry, error) {
	t.Partition = name
	e, err := c.entry(ctx, t)
	if err != nil && c.opts.createPartitions && tierpb.ReasonOf(err) == tierpb.ReasonNotFound {
		if err = c.CreatePartition(ctx, t.Database, t.Table, name); err == nil {
			e, err = c.entry(ctx, t)
		}
	}
	return e, err
}
