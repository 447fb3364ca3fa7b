package bulkloadtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/testetcd"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

// endpoints are the client URLs of the embedded etcd the tests share; each
// test works under its own key prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "bulkloadtest", testetcd.Options{}, &endpoints))
}

// waitFor bounds every poll for a condition.
const waitFor = 60 * time.Second

var prefixes atomic.Int64

func testLogger(t *testing.T) *slog.Logger {
	switch os.Getenv("THAW_TEST_LOG") {
	case "":
		return slog.New(slog.DiscardHandler)
	case "debug":
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	default:
		return slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// harness is one test's tier: a prefix in the shared etcd, a file://
// object store, a changelog provider for the host, coordinators (each on
// its own HTTP server) and tablet servers mounted at /t/{id}/ of one HTTP
// server.
type harness struct {
	t       *testing.T
	prefix  string
	cli     *clientv3.Client
	store   *meta.Store
	objects *objstore.Store
	faults  *objstore.Faults // set by withFaults
	logs    *changelog.LocalProvider
	mux     *http.ServeMux
	url     string
	log     *slog.Logger
	reg     *prometheus.Registry

	clock coordinator.Clock
	cfg   coordinator.BulkLoadConfig
	hook  atomic.Pointer[func(node, step string) error]
	lost  atomic.Pointer[lostResponses]
	// dataStates, when set, sees every SetDataState request a tablet
	// server receives, before the server does.
	dataStates atomic.Pointer[func(server string, req *tierv1.SetDataStateRequest)]

	mu      sync.Mutex
	coords  map[string]*coordNode
	tablets map[string]*tabletNode
	mounts  map[string]*atomicHandler
	starts  int
}

type option func(*harness)

func withClock(c coordinator.Clock) option { return func(h *harness) { h.clock = c } }

// withFaults puts a fault injector under the object store (h.faults).
func withFaults() option {
	return func(h *harness) {
		h.faults = objstore.NewFaults(h.objects.Bucket())
		h.objects = objstore.New(h.faults, h.objects.Base())
	}
}

func withBulkConfig(f func(*coordinator.BulkLoadConfig)) option {
	return func(h *harness) { f(&h.cfg) }
}

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	cli, err := meta.Connect(t.Context(), endpoints, meta.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	prefix := fmt.Sprintf("/bulkloadtest/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), prefixes.Add(1))
	store, err := meta.New(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.Open(t.Context(), "file://"+filepath.ToSlash(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = objects.Close() })
	logs, err := changelog.NewLocalProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	h := &harness{
		t: t, prefix: prefix, cli: cli, store: store, objects: objects, logs: logs,
		mux: http.NewServeMux(), log: testLogger(t), reg: prometheus.NewRegistry(),
		cfg: coordinator.BulkLoadConfig{
			ResendInterval: 50 * time.Millisecond, RetryInterval: 50 * time.Millisecond,
			OrphanCleanInterval: -1,
		},
		coords: map[string]*coordNode{}, tablets: map[string]*tabletNode{}, mounts: map[string]*atomicHandler{},
	}
	for _, o := range opts {
		o(h)
	}
	srv := httptest.NewServer(h.mux)
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// standard starts two coordinators and three tablet servers and returns
// the leader.
func (h *harness) standard() *coordNode {
	h.t.Helper()
	h.startCoordinator("c-1")
	h.startCoordinator("c-2")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	return h.leader()
}

// setHook installs the coordinators' bulk-load hook, called with the id
// of the coordinator and the step (nil removes it).
func (h *harness) setHook(f func(node, step string) error) {
	if f == nil {
		h.hook.Store(nil)
		return
	}
	h.hook.Store(&f)
}

func (h *harness) runHook(node, step string) error {
	if f := h.hook.Load(); f != nil {
		return (*f)(node, step)
	}
	return nil
}

type atomicHandler struct{ atomic.Pointer[http.Handler] }

func (a *atomicHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := a.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "stopped", http.StatusServiceUnavailable)
}

// coordNode is a running coordinator.
type coordNode struct {
	id     string
	c      *coordinator.Coordinator
	cli    *clientv3.Client
	url    string
	reg    *prometheus.Registry
	bulk   tierv1connect.BulkLoadServiceClient
	coord  tierv1connect.CoordinatorServiceClient
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (h *harness) startCoordinator(id string) *coordNode {
	h.t.Helper()
	var handler atomicHandler
	srv := httptest.NewServer(&handler)
	h.t.Cleanup(srv.Close)
	cli, err := meta.Connect(h.t.Context(), endpoints, meta.ClientOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	store, err := meta.New(cli, h.prefix)
	if err != nil {
		h.t.Fatal(err)
	}
	clock := h.clock
	reg := prometheus.NewRegistry()
	c, err := coordinator.New(coordinator.Config{
		ID: id, AdvertiseAddress: srv.URL, RemoteDataDir: h.objects.Base(),
		LeaseTTL: 2 * time.Second, RebalanceInterval: 100 * time.Millisecond, ResyncInterval: time.Second,
		TabletTimeout: 10 * time.Second, BulkLoad: h.cfg,
	}, coordinator.Deps{
		Etcd: cli, Meta: store, Objects: h.objects,
		Tablets: func(addr string) tierv1connect.TabletServiceClient {
			return tierv1connect.NewTabletServiceClient(http.DefaultClient, addr)
		},
		Logger: h.log.With("node", id), Registerer: reg, Clock: clock,
		BulkLoadHook: func(step string) error { return h.runHook(id, step) },
	})
	if err != nil {
		h.t.Fatal(err)
	}
	_, hd := c.Handler()
	hd = h.lossy(hd)
	handler.Store(&hd)
	ctx, cancel := context.WithCancel(context.WithoutCancel(h.t.Context()))
	n := &coordNode{id: id, c: c, cli: cli, url: srv.URL, reg: reg, cancel: cancel, done: make(chan struct{}),
		bulk:  tierv1connect.NewBulkLoadServiceClient(http.DefaultClient, srv.URL),
		coord: tierv1connect.NewCoordinatorServiceClient(http.DefaultClient, srv.URL)}
	go func() {
		defer close(n.done)
		_ = c.Run(ctx)
	}()
	h.t.Cleanup(n.stop)
	h.mu.Lock()
	h.coords[id] = n
	h.mu.Unlock()
	return n
}

// loseResponses makes the coordinators serve the next n requests whose
// path ends with suffix completely, then answer 502 instead of their
// response: the client sees an error, the server did the work.
func (h *harness) loseResponses(suffix string, n int) {
	h.lost.Store(&lostResponses{suffix: suffix, left: int32(n)})
}

type lostResponses struct {
	suffix string
	left   int32
}

func (h *harness) lossy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := h.lost.Load()
		if l == nil || !strings.HasSuffix(r.URL.Path, l.suffix) || atomic.AddInt32(&l.left, -1) < 0 {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		h.t.Logf("the response to %s (status %d) is lost", r.URL.Path, rec.Code)
		http.Error(w, "response lost", http.StatusBadGateway)
	})
}

// stop ends the coordinator (resigning: a standby takes over at once).
func (n *coordNode) stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
		_ = n.cli.Close()
	})
}

// crash ends the coordinator as a crash would: its etcd client goes away
// without resigning, so its term lasts until the lease expires.
func (n *coordNode) crash() {
	n.once.Do(func() {
		_ = n.cli.Close()
		n.cancel()
		<-n.done
	})
}

// leader waits until a running coordinator leads and returns it.
func (h *harness) leader() *coordNode {
	h.t.Helper()
	var found *coordNode
	eventually(h.t, "a coordinator leads", func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, n := range h.coords {
			select {
			case <-n.done:
				continue
			default:
			}
			if _, ok := n.c.IsLeader(); ok {
				found = n
				return nil
			}
		}
		return errors.New("no leader")
	})
	return found
}

// tabletNode is a running tablet server.
type tabletNode struct {
	id     string
	s      *tablet.Server
	reg    *prometheus.Registry
	client tierv1connect.TabletServiceClient
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startTablet starts a tablet server and waits until it serves reads and
// writes: until it has read the data-access policy the first coordinator
// to lead publishes (a read before that is refused as UNAVAILABLE, which
// a test reading replicas directly would take for a wrong answer). Call
// it after starting a coordinator, on the test's goroutine.
func (h *harness) startTablet(id string) *tabletNode {
	h.t.Helper()
	n := h.launchTablet(id)
	eventually(h.t, "tablet "+id+" has read the data access policy", n.s.DataAccessReady)
	return n
}

// launchTablet starts a tablet server and returns at once (it may be
// called from any goroutine).
func (h *harness) launchTablet(id string) *tabletNode {
	h.mu.Lock()
	h.starts++
	dir := filepath.Join(h.t.TempDir(), fmt.Sprintf("%s-%d", id, h.starts))
	mount := h.mounts[id]
	if mount == nil {
		mount = &atomicHandler{}
		h.mounts[id] = mount
		h.mux.Handle("/t/"+id+"/", http.StripPrefix("/t/"+id, mount))
	}
	h.mu.Unlock()
	addr := h.url + "/t/" + id
	reg := prometheus.NewRegistry()
	s, err := tablet.New(tablet.Config{
		ID: id, AdvertiseAddress: addr, DataDir: dir, SnapshotInterval: -1,
		BlockCacheBytes: 8 << 20, MemtableBudgetBytes: 8 << 20, LeaseTTL: 2 * time.Second,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	}, tablet.Deps{
		Meta: h.store, Etcd: h.cli, Changelog: h.logs, Objects: h.objects,
		Coordinator: tierv1connect.NewCoordinatorServiceClient(http.DefaultClient, "http://127.0.0.1:1"),
		Logger:      h.log.With("node", id),
		Registerer:  reg,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	_, hd := s.Handler()
	mux := http.NewServeMux()
	mux.Handle("/", hd)
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := h.dataStates.Load(); f != nil && strings.HasSuffix(r.URL.Path, "/SetDataState") {
			body, err := io.ReadAll(r.Body)
			var req tierv1.SetDataStateRequest
			if err == nil && proto.Unmarshal(body, &req) == nil {
				(*f)(id, &req)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		mux.ServeHTTP(w, r)
	})
	mount.Store(&handler)
	ctx, cancel := context.WithCancel(context.WithoutCancel(h.t.Context()))
	n := &tabletNode{id: id, s: s, reg: reg, client: tierv1connect.NewTabletServiceClient(http.DefaultClient, addr), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		if err := s.Run(ctx); err != nil {
			h.t.Errorf("tablet %s: %v", id, err)
		}
	}()
	h.t.Cleanup(n.stop)
	h.mu.Lock()
	h.tablets[id] = n
	h.mu.Unlock()
	return n
}

// stop stops the tablet server: it closes its replicas and revokes its
// registration, as a process that exits does.
func (n *tabletNode) stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
	})
}

func (h *harness) tablet(id string) tierv1connect.TabletServiceClient {
	return tierv1connect.NewTabletServiceClient(http.DefaultClient, h.url+"/t/"+id)
}

// eventually polls cond every 20ms until it returns nil, failing the test
// with its last error after waitFor.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %v: %v", what, waitFor, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantReason(t *testing.T, err error, want tierpb.Reason) map[string]string {
	t.Helper()
	if got := tierpb.ReasonOf(err); got != want {
		t.Fatalf("reason %q (err %v), want %q", got, err, want)
	}
	return tierpb.MetadataOf(err)
}

// ---------------------------------------------------------------------------
// Tables and rows.

const db = "shop"

// itemsSchema: (id BIGINT, name STRING, qty INT NULL), keyed by id; when
// partitioned, (dt STRING, id, name, qty) keyed by (dt, id).
func itemsSchema(buckets int, partitioned bool) *tierv1.TableSchema {
	s := &tierv1.TableSchema{
		Columns: []*tierv1.Column{
			{Name: "id", Type: "BIGINT"},
			{Name: "name", Type: "STRING"},
			{Name: "qty", Type: "INT", Nullable: true},
		},
		PrimaryKey: []string{"id"},
		Buckets:    int32(buckets),
	}
	if partitioned {
		s.Columns = append([]*tierv1.Column{{Name: "dt", Type: "STRING"}}, s.Columns...)
		s.PrimaryKey = []string{"dt", "id"}
		s.PartitionKeys = []string{"dt"}
	}
	return s
}

// target names a table (partition "" ) or one of its partitions.
func target(table, partition string) *tierv1.TargetPath {
	p := &tierv1.TargetPath{Database: db, Table: table}
	if partition != "" {
		p.Partition = &partition
	}
	return p
}

// createTable creates db.table with rf 3 (and partition, if not "") and
// waits until every replica of the target is ready.
func (h *harness) createTable(n *coordNode, table string, buckets int, partition string) *tierv1.TargetPath {
	h.t.Helper()
	ctx := h.t.Context()
	if _, err := n.coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: db, IgnoreIfExists: true})); err != nil {
		h.t.Fatal(err)
	}
	if _, err := n.coord.CreateTable(ctx, connect.NewRequest(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: db, Table: table}, Schema: itemsSchema(buckets, partition != ""), ReplicationFactor: 3,
	})); err != nil {
		h.t.Fatal(err)
	}
	if partition != "" {
		if _, err := n.coord.CreatePartition(ctx, connect.NewRequest(&tierv1.CreatePartitionRequest{
			Path: &tierv1.TablePath{Database: db, Table: table}, Partition: &tierv1.CreatePartitionRequest_PartitionName{PartitionName: partition},
		})); err != nil {
			h.t.Fatal(err)
		}
	}
	tp := target(table, partition)
	h.waitReady(tp)
	return tp
}

// locations returns a target's locations from the leader.
func (h *harness) locations(tp *tierv1.TargetPath) (*tierv1.GetTargetLocationsResponse, error) {
	n := h.leader()
	resp, err := n.coord.GetTargetLocations(h.t.Context(), connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: tp}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// waitReady waits until every bucket of the target has three replicas on
// live servers, each READY.
func (h *harness) waitReady(tp *tierv1.TargetPath) {
	h.t.Helper()
	eventually(h.t, "replicas of "+targetName(tp)+" ready", func() error {
		loc, err := h.locations(tp)
		if err != nil {
			return err
		}
		for _, b := range loc.GetBuckets() {
			if len(b.GetReplicas()) != 3 {
				return fmt.Errorf("bucket %d: replicas %v", b.GetBucket(), b.GetReplicas())
			}
			for _, s := range b.GetReplicas() {
				st, err := h.replicaStatus(s, loc.GetTargetId(), b.GetBucket())
				if err != nil {
					return err
				}
				if st.GetState() != tierv1.ReplicaState_REPLICA_STATE_READY {
					return fmt.Errorf("bucket %d on %s: %v", b.GetBucket(), s, st.GetState())
				}
			}
		}
		return nil
	})
}

func (h *harness) replicaStatus(server string, tid *tierv1.TargetId, bucket int32) (*tierv1.ReplicaStatus, error) {
	resp, err := h.tablet(server).ReplicaStatus(h.t.Context(), connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tid, Buckets: []int32{bucket}}))
	if err != nil {
		return nil, err
	}
	for _, r := range resp.Msg.GetReplicas() {
		if r.GetBucket() == bucket {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s hosts no replica of bucket %d", server, bucket)
}

func targetName(tp *tierv1.TargetPath) string {
	s := tp.GetDatabase() + "." + tp.GetTable()
	if tp.Partition != nil {
		s += "/" + tp.GetPartition()
	}
	return s
}

// makeRows returns n rows of the target's table.
func makeRows(n int, partition string) []kv.Row {
	rows := make([]kv.Row, n)
	for i := range n {
		r := kv.Row{int64(i), fmt.Sprintf("item-%d", i), int32(i % 97)}
		if partition != "" {
			r = append(kv.Row{partition}, r...)
		}
		rows[i] = r
	}
	return rows
}

// ---------------------------------------------------------------------------
// The bulk-load steps a client takes.

// begin calls Begin on n.
func begin(ctx context.Context, n *coordNode, tp *tierv1.TargetPath, token string) (*tierv1.BeginBulkLoadResponse, error) {
	resp, err := n.bulk.Begin(ctx, connect.NewRequest(&tierv1.BeginBulkLoadRequest{Target: tp, CallerToken: token}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// mustBegin begins and returns the frozen target info.
func (h *harness) mustBegin(n *coordNode, tp *tierv1.TargetPath, token string) *tierv1.BulkLoadTargetInfo {
	h.t.Helper()
	resp, err := begin(h.t.Context(), n, tp, token)
	if err != nil {
		h.t.Fatalf("begin %s: %v", targetName(tp), err)
	}
	if resp.GetTargetInfo() == nil || resp.GetStatus().GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN {
		h.t.Fatalf("begin %s: %v", targetName(tp), resp)
	}
	return resp.GetTargetInfo()
}

// table compiles the frozen schema of info.
func table(t *testing.T, info *tierv1.BulkLoadTargetInfo) *kv.Table {
	t.Helper()
	var s kv.TableSchema
	if err := json.Unmarshal(info.GetTableSchemaJson(), &s); err != nil {
		t.Fatal(err)
	}
	tb, err := kv.NewTable(s)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func snapTarget(info *tierv1.BulkLoadTargetInfo) snapshot.Target {
	h := info.GetHandle()
	return snapshot.Target{
		RemoteDir: info.GetRemoteDataDir(), Database: h.GetTarget().GetDatabase(), Table: h.GetTarget().GetTable(),
		TableID: h.GetTableId(), Partition: h.GetTarget().GetPartition(), PartitionID: h.GetPartitionId(),
	}
}

// build builds the snapshots of rows for info with snapshotbuild.
func (h *harness) build(info *tierv1.BulkLoadTargetInfo, rows []kv.Row) []snapshotbuild.BucketResult {
	h.t.Helper()
	res, err := h.buildWith(info, rows, 2)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// buildWith is build with the given number of workers, returning Finish's
// error.
func (h *harness) buildWith(info *tierv1.BulkLoadTargetInfo, rows []kv.Row, workers int) ([]snapshotbuild.BucketResult, error) {
	h.t.Helper()
	tb := table(h.t, info)
	b, err := snapshotbuild.New(h.objects, snapshotbuild.Target{
		Table: tb, Snapshot: snapTarget(info), SnapshotIDs: info.GetSnapshotIds(),
	}, snapshotbuild.Options{Workers: workers, MemoryBudget: 8 << 20, TempDir: h.t.TempDir(), TargetFileSize: 64 << 10})
	if err != nil {
		h.t.Fatal(err)
	}
	defer b.Close()
	for _, r := range rows {
		key, err := tb.EncodeKey(r)
		if err != nil {
			h.t.Fatal(err)
		}
		val, err := tb.EncodeValue(r)
		if err != nil {
			h.t.Fatal(err)
		}
		bucket, err := tb.Bucket(r)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := b.AddPair(h.t.Context(), bucket, key, val); err != nil {
			h.t.Fatal(err)
		}
	}
	res, err := b.Finish(h.t.Context())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(res, func(a, b snapshotbuild.BucketResult) int { return a.Bucket - b.Bucket })
	return res, nil
}

// manifestOf encodes the manifest of results.
func manifestOf(t *testing.T, info *tierv1.BulkLoadTargetInfo, res []snapshotbuild.BucketResult) []byte {
	t.Helper()
	m := &snapshot.Manifest{BulkLoadID: info.GetHandle().GetTxnId()}
	for _, r := range res {
		m.Buckets = append(m.Buckets, snapshot.ManifestBucket{BucketID: int32(r.Bucket), Metadata: r.MetadataRef()})
	}
	b, err := snapshot.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// manifestRef is what Commit carries.
type manifestRef struct {
	path   string
	length int64
	sha    string
}

// put writes an object at uri (replacing any).
func (h *harness) put(uri string, b []byte) {
	h.t.Helper()
	key, err := h.objects.Key(uri)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.objects.Bucket().Put(h.t.Context(), key, bytes.NewReader(b), false); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) get(uri string) []byte {
	h.t.Helper()
	key, err := h.objects.Key(uri)
	if err != nil {
		h.t.Fatal(err)
	}
	b, err := h.objects.Get(h.t.Context(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

// writeManifest writes manifest bytes at path and returns the reference.
func (h *harness) writeManifest(path string, b []byte) manifestRef {
	h.t.Helper()
	h.put(path, b)
	return refOf(path, b)
}

func refOf(path string, b []byte) manifestRef {
	sum := sha256.Sum256(b)
	return manifestRef{path: path, length: int64(len(b)), sha: hex.EncodeToString(sum[:])}
}

// load builds rows, writes the manifest at the planned path and returns
// its reference.
func (h *harness) load(info *tierv1.BulkLoadTargetInfo, rows []kv.Row) manifestRef {
	h.t.Helper()
	res := h.build(info, rows)
	return h.writeManifest(info.GetManifestPath(), manifestOf(h.t, info, res))
}

func commit(ctx context.Context, n *coordNode, hd *tierv1.BulkLoadHandle, m manifestRef) (*tierv1.BulkLoadStatus, error) {
	resp, err := n.bulk.Commit(ctx, connect.NewRequest(&tierv1.CommitBulkLoadRequest{
		Handle: hd, ManifestPath: m.path, ManifestLength: m.length, ManifestSha256: m.sha,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetStatus(), nil
}

func abort(ctx context.Context, n *coordNode, hd *tierv1.BulkLoadHandle) (*tierv1.BulkLoadStatus, error) {
	resp, err := n.bulk.Abort(ctx, connect.NewRequest(&tierv1.AbortBulkLoadRequest{Handle: hd}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetStatus(), nil
}

func status(ctx context.Context, n *coordNode, txnID string) (*tierv1.BulkLoadStatus, error) {
	resp, err := n.bulk.Status(ctx, connect.NewRequest(&tierv1.BulkLoadStatusRequest{Handle: &tierv1.BulkLoadHandle{TxnId: txnID}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetStatus(), nil
}

// awaitState polls the leader until the transaction reaches state.
func (h *harness) awaitState(txnID string, state tierv1.BulkLoadState) *tierv1.BulkLoadStatus {
	h.t.Helper()
	var st *tierv1.BulkLoadStatus
	eventually(h.t, fmt.Sprintf("transaction %s %v", txnID, state), func() error {
		var err error
		st, err = status(h.t.Context(), h.leader(), txnID)
		if err != nil {
			return err
		}
		if st.GetState() != state {
			return fmt.Errorf("state %v, phase %s, error %q", st.GetState(), st.GetPhase(), st.GetError())
		}
		return nil
	})
	return st
}

// ---------------------------------------------------------------------------
// Reading back.

// readResult is what a lookup of every row on every replica found.
type readResult struct {
	loading  int // replicas answering TARGET_LOADING
	found    int // rows found with the right value, over all replicas
	missing  int // rows not found
	wrong    int // rows found with another value
	replicas int // replicas asked
	errs     []error
}

// String shows the counts and the errors' texts.
func (r readResult) String() string {
	return fmt.Sprintf("{loading:%d found:%d missing:%d wrong:%d replicas:%d errs:[%v]}", r.loading, r.found, r.missing, r.wrong, r.replicas, errors.Join(r.errs...))
}

// readAll looks up every row on every replica of its bucket, without a
// leader epoch (any ready replica answers).
func (h *harness) readAll(ctx context.Context, tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) (readResult, error) {
	var res readResult
	loc, err := h.locations(tp)
	if err != nil {
		return res, err
	}
	byBucket := map[int][]kv.Row{}
	for _, r := range rows {
		b, err := tb.Bucket(r)
		if err != nil {
			return res, err
		}
		byBucket[b] = append(byBucket[b], r)
	}
	for _, bl := range loc.GetBuckets() {
		b := int(bl.GetBucket())
		var keys, vals [][]byte
		for _, r := range byBucket[b] {
			k, _ := tb.EncodeKey(r)
			v, _ := tb.EncodeValue(r)
			keys, vals = append(keys, k), append(vals, v)
		}
		if len(keys) == 0 {
			continue
		}
		for _, s := range bl.GetReplicas() {
			res.replicas++
			resp, err := h.tablet(s).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: loc.GetTargetId(), Bucket: int32(b), Keys: keys}))
			if tierpb.IsTargetLoading(err) {
				res.loading++
				continue
			}
			if err != nil {
				res.errs = append(res.errs, fmt.Errorf("bucket %d on %s: %w", b, s, err))
				continue
			}
			for i, r := range resp.Msg.GetResults() {
				switch {
				case !r.GetFound():
					res.missing++
				case !bytes.Equal(r.GetValue(), vals[i]):
					res.wrong++
				default:
					res.found++
				}
			}
		}
	}
	return res, nil
}

// expectAll checks that every replica serves every row.
func (h *harness) expectAll(tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) {
	h.t.Helper()
	if err := h.servesAll(tp, tb, rows); err != nil {
		h.t.Fatal(err)
	}
}

// servesAll returns nil if every replica serves every row.
func (h *harness) servesAll(tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) error {
	res, err := h.readAll(h.t.Context(), tp, tb, rows)
	if err != nil {
		return err
	}
	if res.loading > 0 || res.missing > 0 || res.wrong > 0 || len(res.errs) > 0 || res.found != 3*len(rows) {
		return fmt.Errorf("read back %s: %+v (want %d rows on 3 replicas each)", targetName(tp), res, len(rows))
	}
	return nil
}

// expectEmpty checks that the target is readable and holds no row.
func (h *harness) expectEmpty(tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) {
	h.t.Helper()
	eventually(h.t, targetName(tp)+" readable and empty", func() error {
		res, err := h.readAll(h.t.Context(), tp, tb, rows)
		if err != nil {
			return err
		}
		if res.loading > 0 || res.found > 0 || res.wrong > 0 || len(res.errs) > 0 {
			return fmt.Errorf("%+v", res)
		}
		return nil
	})
}

// noFence checks that the target's registration is ACTIVE without a
// bulk-load id.
func (h *harness) noFence(tp *tierv1.TargetPath) {
	h.t.Helper()
	loc, err := h.locations(tp)
	if err != nil {
		h.t.Fatal(err)
	}
	if loc.GetDataState() != tierv1.DataState_DATA_STATE_ACTIVE || loc.GetBulkLoadId() != "" {
		h.t.Fatalf("%s: data state %v, bulk load %q", targetName(tp), loc.GetDataState(), loc.GetBulkLoadId())
	}
}
