package tablet_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testetcd"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// endpoints are the client URLs of the embedded etcd the tests of this
// binary share; each test works under its own key prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "tablet", testetcd.Options{}, &endpoints))
}

var prefixes atomic.Int64

// cluster is one test's tier without a coordinator: etcd metadata under
// the test's prefix (written directly, under a coordinator term the test
// holds), a file:// object store, one changelog provider for the host, a
// recording CoordinatorService, and one HTTP listener on which every
// tablet server is mounted at /t/{id}/, as the daemon does.
type cluster struct {
	t        *testing.T
	cli      *clientv3.Client
	store    *meta.Store
	lead     *fencing.Leadership
	guard    meta.Guard
	objects  *objstore.Store
	logs     *changelog.LocalProvider
	coord    *fakeCoordinator
	mux      *http.ServeMux
	url      string
	db       string
	reg      *prometheus.Registry // every server's metrics, labelled by server
	coordURL string               // where servers started from now on report snapshots
	deps     func(*tablet.Deps)   // when set, changes the deps of servers started from now on
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cli, err := meta.Connect(t.Context(), endpoints, meta.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	prefix := fmt.Sprintf("/tablet-test/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), prefixes.Add(1))
	store, err := meta.New(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	lead, err := fencing.Elect(t.Context(), cli, store.ElectionPrefix(), "coordinator-1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lead.Resign(context.WithoutCancel(t.Context())) })
	objects, err := objstore.Open(t.Context(), "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	// Small segments, so that truncation below a snapshot drops some.
	logs, err := changelog.NewLocalProvider(t.TempDir(), changelog.WithSegmentBytes(4096), changelog.WithMaxBatchBytes(4000), changelog.WithMaxRecordBytes(3000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	c := &cluster{t: t, cli: cli, store: store, lead: lead, guard: meta.GuardOf(lead), objects: objects, logs: logs, db: "db", reg: prometheus.NewRegistry()}
	c.coord = &fakeCoordinator{c: c, keep: 2}
	c.mux = http.NewServeMux()
	path, h := tierv1connect.NewCoordinatorServiceHandler(c.coord)
	c.mux.Handle(path, h)
	srv := httptest.NewServer(c.mux)
	t.Cleanup(srv.Close)
	c.url, c.coordURL = srv.URL, srv.URL
	if _, err := store.CreateDatabase(t.Context(), c.guard, c.db); err != nil {
		t.Fatal(err)
	}
	// What a coordinator publishes at the start of its term: reads and
	// writes open to everyone.
	if _, err := store.PutDataAccess(t.Context(), c.guard, meta.DataAccess{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// testSchema: rows (tenant, id, v), keyed by (tenant, id), bucketed by
// tenant, so that all rows of a tenant share a bucket and a key prefix.
func testSchema(buckets int) kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "tenant", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"tenant", "id"},
		BucketKey:  []string{"tenant"},
		Buckets:    buckets,
	}
}

// table is a created table and its codec.
type table struct {
	rec   meta.TableRecord
	t     *kv.Table
	id    *tierv1.TargetId
	mtgt  meta.Target
	ctest *cluster
}

// createTable creates a non-partitioned table whose bucket i is assigned
// to replicas[i] with the first as leader at epoch 1.
func (c *cluster) createTable(name string, replicas ...[]string) *table {
	c.t.Helper()
	buckets := make([]meta.BucketAssignment, len(replicas))
	rf := 1
	for i, r := range replicas {
		buckets[i] = meta.BucketAssignment{Replicas: r, Leader: r[0], LeaderEpoch: 1}
		rf = max(rf, len(r))
	}
	v, err := c.store.CreateTable(c.t.Context(), c.guard, meta.TableSpec{
		Database: c.db, Name: name, Schema: testSchema(len(replicas)), ReplicationFactor: rf,
		RemoteDataDir: c.objects.Base(), Buckets: buckets,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	kt, err := kv.NewTable(v.Value.Schema)
	if err != nil {
		c.t.Fatal(err)
	}
	return &table{rec: v.Value, t: kt, id: &tierv1.TargetId{TableId: v.Value.ID}, mtgt: v.Value.Target(), ctest: c}
}

// assign replaces the assignment of one bucket.
func (c *cluster) assign(tb *table, bucket int, replicas []string, leader string, epoch int32) {
	c.t.Helper()
	cur, err := c.store.GetAssignment(c.t.Context(), tb.mtgt)
	if err != nil {
		c.t.Fatal(err)
	}
	a := cur.Value
	a.Buckets = slices.Clone(a.Buckets)
	a.Buckets[bucket] = meta.BucketAssignment{Replicas: replicas, Leader: leader, LeaderEpoch: epoch}
	if _, err := c.store.PutAssignment(c.t.Context(), c.guard, a, cur.Rev); err != nil {
		c.t.Fatal(err)
	}
}

// setState sets a table's data state in etcd and returns the revision.
func (c *cluster) setState(tb *table, state meta.DataState, bulkLoadID string) int64 {
	c.t.Helper()
	cur, err := c.store.GetTable(c.t.Context(), c.db, tb.rec.Name)
	if err != nil {
		c.t.Fatal(err)
	}
	rev, err := c.store.SetDataState(c.t.Context(), c.guard, meta.DataStateChange{
		Target: meta.TargetName{Database: c.db, Table: tb.rec.Name}, Rev: cur.Rev, State: state, BulkLoadID: bulkLoadID,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return rev
}

// logOffsets returns the offsets of a bucket's changelog.
func (c *cluster) logOffsets(tb *table, bucket int) (start, end int64) {
	c.t.Helper()
	l, err := c.logs.Open(c.t.Context(), changelog.BucketLogID{TableID: tb.rec.ID, Bucket: int32(bucket)})
	if err != nil {
		c.t.Fatal(err)
	}
	defer l.Close()
	start, end, err = l.Offsets(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	return start, end
}

// server is a running tablet server.
type server struct {
	s      *tablet.Server
	id     string
	client tierv1connect.TabletServiceClient
	cancel context.CancelFunc
	done   chan error
}

// startServer starts a tablet server mounted at /t/{id}/.
func (c *cluster) startServer(id string, tweak ...func(*tablet.Config)) *server {
	c.t.Helper()
	addr := c.url + "/t/" + id
	cfg := tablet.Config{
		ID:                  id,
		AdvertiseAddress:    addr,
		DataDir:             filepath.Join(c.t.TempDir(), id),
		SnapshotInterval:    -1,
		BlockCacheBytes:     8 << 20,
		MemtableBudgetBytes: 8 << 20,
		MaxBatchMutations:   64,
		MaxBatchBytes:       2000,
		RetryMin:            20 * time.Millisecond,
		RetryMax:            200 * time.Millisecond,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	deps := tablet.Deps{
		Meta:        c.store,
		Etcd:        c.cli,
		Changelog:   c.logs,
		Objects:     c.objects,
		Coordinator: tierv1connect.NewCoordinatorServiceClient(http.DefaultClient, c.coordURL),
		Logger:      slog.New(slog.NewTextHandler(testWriter{c.t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Registerer:  c.reg,
	}
	if c.deps != nil {
		c.deps(&deps)
	}
	s, err := tablet.New(cfg, deps)
	if err != nil {
		c.t.Fatal(err)
	}
	path, h := s.Handler()
	c.mux.Handle("/t/"+id+path, http.StripPrefix("/t/"+id, h))
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.t.Context()))
	srv := &server{s: s, id: id, client: tierv1connect.NewTabletServiceClient(http.DefaultClient, addr), cancel: cancel, done: make(chan error, 1)}
	go func() { srv.done <- s.Run(ctx) }()
	c.t.Cleanup(srv.stop)
	return srv
}

// stop cancels the server's Run and waits for it.
func (s *server) stop() {
	s.cancel()
	if err := <-s.done; err != nil {
		panic(err)
	}
	s.done <- nil
}

// metric returns the value of a counter or gauge of server id whose
// other labels are labels, -1 if there is none.
func (c *cluster) metric(name, id string, labels map[string]string) float64 {
	c.t.Helper()
	mfs, err := c.reg.Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			want := maps.Clone(labels)
			if want == nil {
				want = map[string]string{}
			}
			want["server"] = id
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if want[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// testWriter sends log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// eventually retries fn until it returns nil or 20 seconds pass.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitReady waits until s hosts a READY replica of bucket with role.
func waitReady(t *testing.T, s *server, tb *table, bucket int, role tierv1.ReplicaRole, epoch int32) *tierv1.ReplicaStatus {
	t.Helper()
	var got *tierv1.ReplicaStatus
	eventually(t, fmt.Sprintf("%s: bucket %d ready as %v", s.id, bucket, role), func() error {
		resp, err := s.client.ReplicaStatus(t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id, Buckets: []int32{int32(bucket)}}))
		if err != nil {
			return err
		}
		if len(resp.Msg.Replicas) != 1 {
			return fmt.Errorf("%d replicas", len(resp.Msg.Replicas))
		}
		got = resp.Msg.Replicas[0]
		if got.State != tierv1.ReplicaState_REPLICA_STATE_READY || got.Role != role || got.LeaderEpoch != epoch {
			return fmt.Errorf("replica %v", got)
		}
		return nil
	})
	return got
}

// row is one test row.
type row struct {
	tenant string
	id     int64
	v      string
}

func (tb *table) encode(t *testing.T, r row) (key, value []byte, bucket int32) {
	t.Helper()
	kr := kv.Row{r.tenant, r.id, r.v}
	key, err := tb.t.EncodeKey(kr)
	if err != nil {
		t.Fatal(err)
	}
	value, err = tb.t.EncodeValue(kr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tb.t.Bucket(kr)
	if err != nil {
		t.Fatal(err)
	}
	return key, value, int32(b)
}

func (tb *table) bucketOf(t *testing.T, tenant string) int32 {
	_, _, b := tb.encode(t, row{tenant: tenant})
	return b
}

// tenantNotIn returns a tenant whose rows are not in bucket b.
func (tb *table) tenantNotIn(t *testing.T, b int32) string {
	for i := 0; ; i++ {
		if name := "tenant" + strconv.Itoa(i); tb.bucketOf(t, name) != b {
			return name
		}
	}
}

// prefix is the key prefix of a tenant's rows.
func prefix(tenant string) []byte {
	w := kv.NewKeyWriter()
	w.WriteBytes([]byte(tenant))
	return append([]byte(nil), w.Bytes()...)
}

func (tb *table) upsert(t *testing.T, rows ...row) []*tierv1.Mutation {
	out := make([]*tierv1.Mutation, len(rows))
	for i, r := range rows {
		k, v, _ := tb.encode(t, r)
		out[i] = &tierv1.Mutation{Op: tierv1.MutationOp_MUTATION_OP_UPSERT, Key: k, Value: v}
	}
	return out
}

func (tb *table) del(t *testing.T, r row) *tierv1.Mutation {
	k, _, _ := tb.encode(t, r)
	return &tierv1.Mutation{Op: tierv1.MutationOp_MUTATION_OP_DELETE, Key: k}
}

func write(ctx context.Context, s *server, tb *table, bucket, epoch int32, muts ...*tierv1.Mutation) (*tierv1.WriteResponse, error) {
	resp, err := s.client.Write(ctx, connect.NewRequest(&tierv1.WriteRequest{Target: tb.id, Bucket: bucket, LeaderEpoch: epoch, Mutations: muts}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func mustWrite(t *testing.T, s *server, tb *table, bucket, epoch int32, muts ...*tierv1.Mutation) *tierv1.WriteResponse {
	t.Helper()
	resp, err := write(t.Context(), s, tb, bucket, epoch, muts...)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// scanAll reads a bucket through Scan pages of limit rows; epoch nil reads
// any replica.
func scanAll(t *testing.T, s *server, tb *table, bucket int32, epoch *int32, limit int32) (map[string]string, error) {
	t.Helper()
	out := map[string]string{}
	var token []byte
	for {
		resp, err := s.client.Scan(t.Context(), connect.NewRequest(&tierv1.ScanRequest{
			Target: tb.id, Bucket: bucket, LeaderEpoch: epoch, Limit: limit, PageToken: token,
		}))
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Msg.Rows {
			if _, dup := out[string(r.Key)]; dup {
				return nil, fmt.Errorf("key %x twice", r.Key)
			}
			out[string(r.Key)] = string(r.Value)
		}
		if len(resp.Msg.NextPageToken) == 0 {
			return out, nil
		}
		token = resp.Msg.NextPageToken
	}
}

// model is what a bucket should hold: key → value bytes.
type model map[string]string

func (m model) apply(muts []*tierv1.Mutation) {
	for _, x := range muts {
		if x.Op == tierv1.MutationOp_MUTATION_OP_DELETE {
			delete(m, string(x.Key))
		} else {
			m[string(x.Key)] = string(x.Value)
		}
	}
}

func sameRows(got map[string]string, want model) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("key %x: %x, want %x", k, got[k], v)
		}
	}
	return nil
}

func wantReason(t *testing.T, err error, want tierpb.Reason) map[string]string {
	t.Helper()
	if got := tierpb.ReasonOf(err); got != want {
		t.Fatalf("reason %q (err %v), want %q", got, err, want)
	}
	return tierpb.MetadataOf(err)
}

// fakeCoordinator is the CoordinatorService of the tests: ReportSnapshot
// records the call, registers the snapshot in etcd under the test's
// coordinator term and keeps the last keep entries of the bucket (without
// deleting files), answering with the oldest retained log offset.
type fakeCoordinator struct {
	tierv1connect.UnimplementedCoordinatorServiceHandler
	c    *cluster
	keep int

	mu      sync.Mutex
	reports []*tierv1.ReportSnapshotRequest
	// reportMu serializes reports, as the coordinator does a bucket's.
	reportMu sync.Mutex
	// refuseNext makes the next report fail as the coordinator refuses a
	// snapshot that references files the store does not hold.
	refuseNext atomic.Bool
}

// readMetadata reads and decodes the _METADATA at uri.
func (c *cluster) readMetadata(ctx context.Context, uri string) (*snapshot.Metadata, error) {
	key, err := c.objects.Key(uri)
	if err != nil {
		return nil, err
	}
	b, err := c.objects.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return snapshot.DecodeMetadata(b)
}

func (f *fakeCoordinator) ReportSnapshot(ctx context.Context, req *connect.Request[tierv1.ReportSnapshotRequest]) (*connect.Response[tierv1.ReportSnapshotResponse], error) {
	m := req.Msg
	f.reportMu.Lock()
	defer f.reportMu.Unlock()
	f.mu.Lock()
	f.reports = append(f.reports, m)
	f.mu.Unlock()
	if f.refuseNext.CompareAndSwap(true, false) {
		return nil, tierpb.NewError(tierpb.ReasonInvalidArgument, "fake coordinator: _METADATA references 1 shared file the store does not hold", nil)
	}
	t := meta.Target{TableID: m.GetTarget().GetTableId(), PartitionID: m.GetTarget().GetPartitionId()}
	a, err := f.c.store.GetAssignment(ctx, t)
	if err != nil {
		return nil, err
	}
	if ba := a.Value.Buckets[m.GetBucket()]; ba.LeaderEpoch != m.GetLeaderEpoch() || ba.Leader != m.GetServerId() {
		return nil, tierpb.NewStaleEpochError("fake coordinator: not the leader", int64(ba.LeaderEpoch))
	}
	if _, err := f.c.store.AddSnapshot(ctx, f.c.guard, t, int(m.GetBucket()), meta.BucketSnapshot{
		SnapshotID: m.GetSnapshotId(), LogOffset: m.GetLogOffset(), MetadataPath: m.GetMetadataPath(),
	}); err != nil {
		return nil, err
	}
	snaps, err := f.c.store.ListSnapshots(ctx, t, int(m.GetBucket()))
	if err != nil {
		return nil, err
	}
	// The coordinator's retention: the registry first, then the files no
	// retained snapshot references (snapshot.Retain, the rule it shares).
	docs := make([]snapshot.Metadata, len(snaps))
	for i, v := range snaps {
		md, err := f.c.readMetadata(ctx, v.Value.MetadataPath)
		if err != nil {
			return nil, err
		}
		docs[i] = *md
	}
	_, garbage := snapshot.Retain(docs, f.keep)
	for len(snaps) > f.keep {
		if err := f.c.store.DeleteSnapshot(ctx, f.c.guard, t, int(m.GetBucket()), snaps[0].Value.SnapshotID); err != nil {
			return nil, err
		}
		snaps = snaps[1:]
	}
	if err := replica.DeleteFiles(ctx, f.c.objects, garbage); err != nil {
		return nil, err
	}
	resp := &tierv1.ReportSnapshotResponse{OldestRetainedLogOffset: snaps[0].Value.LogOffset}
	for _, s := range slices.Backward(snaps) {
		resp.Retained = append(resp.Retained, &tierv1.BucketSnapshot{Bucket: m.GetBucket(), SnapshotId: s.Value.SnapshotID, LogOffset: s.Value.LogOffset, MetadataPath: s.Value.MetadataPath})
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeCoordinator) reportList() []*tierv1.ReportSnapshotRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reports)
}
