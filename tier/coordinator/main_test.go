package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
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
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testetcd"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// endpoints are the client URLs of the embedded etcd shared by all tests
// of this binary (short elections: one-second leases); each test works
// under its own prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "coordinator", testetcd.Options{FastElections: true}, &endpoints))
}

// newClient returns a client of the shared etcd (see testetcd.Client).
func newClient(t *testing.T) *clientv3.Client { return testetcd.Client(t, endpoints) }

var envs atomic.Int64

// env is one test's world: a prefix of its own in the shared etcd, an
// object store in a temporary directory and fake tablet servers.
type env struct {
	t       *testing.T
	prefix  string
	cli     *clientv3.Client // the test's own client (not a coordinator's)
	store   *meta.Store
	objects *objstore.Store
	remote  string // the object store's base: the remote data dir
	// wrapObjects, when set, wraps the object store of the nodes started
	// from now on (a fault injector).
	wrapObjects func(ObjectStore) ObjectStore
	// wrapKV, when set, wraps the etcd KV of the nodes started from now on
	// (a fault injector).
	wrapKV func(clientv3.KV) clientv3.KV

	mu      sync.Mutex
	tablets map[string]*fakeTablet // by address
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, tablets: make(map[string]*fakeTablet)}
	e.prefix = fmt.Sprintf("/c/%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), envs.Add(1))
	e.cli = newClient(t)
	var err error
	if e.store, err = meta.New(e.cli, e.prefix); err != nil {
		t.Fatal(err)
	}
	if e.objects, err = objstore.Open(t.Context(), "file://"+t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.objects.Close() })
	e.remote = e.objects.Base()
	return e
}

// node is one running coordinator, its etcd client and its HTTP server.
type node struct {
	c      *Coordinator
	cli    *clientv3.Client
	url    string
	client tierv1connect.CoordinatorServiceClient
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error // Run's result
}

// startNode starts coordinator id with its own etcd client, serving its
// CoordinatorService over httptest.
func (e *env) startNode(id string, tweak func(*Config)) *node {
	e.t.Helper()
	n := e.newNode(id, tweak)
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.t.Context()))
	n.cancel = cancel
	go func() { n.done <- n.c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			e.t.Errorf("coordinator %s did not stop", id)
		}
	})
	return n
}

// newNode is startNode without Run: the coordinator serves its handler
// but neither publishes its address nor campaigns.
func (e *env) newNode(id string, tweak func(*Config)) *node {
	e.t.Helper()
	var h atomicHandler
	srv := httptest.NewServer(&h)
	e.t.Cleanup(srv.Close)
	cli := newClient(e.t)
	if e.wrapKV != nil {
		cli.KV = e.wrapKV(cli.KV)
	}
	store, err := meta.New(cli, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := Config{
		ID:                id,
		AdvertiseAddress:  srv.URL,
		RemoteDataDir:     e.remote,
		LeaseTTL:          time.Second,
		RebalanceInterval: 50 * time.Millisecond,
		ResyncInterval:    time.Second,
		TabletTimeout:     5 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	reg := prometheus.NewRegistry()
	var objects ObjectStore = e.objects
	if e.wrapObjects != nil {
		objects = e.wrapObjects(objects)
	}
	c, err := New(cfg, Deps{
		Etcd:       cli,
		Meta:       store,
		Tablets:    e.tabletClient,
		Objects:    objects,
		Logger:     slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: reg,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	path, handler := c.Handler()
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	h.Store(mux)
	return &node{c: c, cli: cli, url: srv.URL, reg: reg, done: make(chan error, 1),
		client: tierv1connect.NewCoordinatorServiceClient(srv.Client(), srv.URL)}
}

// awaitLeader waits until n leads and returns its term.
func (e *env) awaitLeader(n *node) *term {
	e.t.Helper()
	var t *term
	eventually(e.t, 15*time.Second, "coordinator "+n.c.cfg.ID+" leads", func() bool {
		t = n.c.current()
		return t != nil
	})
	return t
}

type atomicHandler struct{ atomic.Pointer[http.ServeMux] }

func (h *atomicHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m := h.Load(); m != nil {
		m.ServeHTTP(w, r)
		return
	}
	http.Error(w, "not ready", http.StatusServiceUnavailable)
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// eventually polls cond every 20ms until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dump returns every key and value under the env's prefix, except the
// keys that come and go on their own (leases of coordinators and servers).
func (e *env) dump() map[string]string {
	e.t.Helper()
	resp, err := e.cli.Get(e.t.Context(), e.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]string)
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if strings.HasPrefix(k, e.prefix+"/coordinator/election/") || strings.HasPrefix(k, e.prefix+"/coordinators/") {
			continue
		}
		out[k] = string(kv.Value)
	}
	return out
}

func sameDump(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k, v := range after {
		if before[k] != v {
			t.Errorf("key %s changed: %q -> %q", k, before[k], v)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("key %s deleted", k)
		}
	}
}

// reasonOf asserts that err carries reason want.
func wantReason(t *testing.T, err error, want tierpb.Reason) {
	t.Helper()
	if got := tierpb.ReasonOf(err); got != want {
		t.Fatalf("reason %q (err %v), want %q", got, err, want)
	}
}

// register registers a tablet server record with a fake tablet behind its
// address, under a lease of ttl held by cli (close cli to let it expire).
func (e *env) register(cli *clientv3.Client, id string, ttl time.Duration) (*meta.Registration, *fakeTablet) {
	e.t.Helper()
	return e.registerOn(cli, id, "", ttl)
}

// registerOn is register for a server that reports changelog identity log
// ("": a server of a release that reports none).
func (e *env) registerOn(cli *clientv3.Client, id, log string, ttl time.Duration) (*meta.Registration, *fakeTablet) {
	e.t.Helper()
	ft := &fakeTablet{id: id}
	path, handler := tierv1connect.NewTabletServiceHandler(ft)
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	srv := httptest.NewServer(mux)
	e.t.Cleanup(srv.Close)
	e.mu.Lock()
	e.tablets[srv.URL] = ft
	e.mu.Unlock()
	store, err := meta.New(cli, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := store.RegisterServer(e.t.Context(), meta.ServerRecord{ID: id, Address: srv.URL, Changelog: log}, ttl)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.Close(context.WithoutCancel(e.t.Context())) })
	return r, ft
}

// tabletClient is the coordinators' tablet client factory.
func (e *env) tabletClient(address string) tierv1connect.TabletServiceClient {
	return tierv1connect.NewTabletServiceClient(http.DefaultClient, address)
}

// fakeTablet is the coordinator-facing half of a tablet server, enough to
// observe what the coordinator sends: it admits coordinator epochs through a
// fencing.Gate as a real one does, records NotifyAssignment calls and takes
// snapshots through take.
type fakeTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	id   string
	gate fencing.Gate

	mu      sync.Mutex
	notices []*tierv1.NotifyAssignmentRequest
	take    func(ctx context.Context, req *tierv1.TakeSnapshotRequest) (*tierv1.BucketSnapshot, error)
}

func (f *fakeTablet) admit(epoch int64) error {
	if err := f.gate.Admit(fencing.Epoch(epoch)); err != nil {
		return tierpb.NewStaleEpochError(err.Error(), int64(f.gate.Highest()))
	}
	return nil
}

func (f *fakeTablet) NotifyAssignment(_ context.Context, req *connect.Request[tierv1.NotifyAssignmentRequest]) (*connect.Response[tierv1.NotifyAssignmentResponse], error) {
	if err := f.admit(req.Msg.GetCoordinatorEpoch()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.notices = append(f.notices, req.Msg)
	f.mu.Unlock()
	return connect.NewResponse(&tierv1.NotifyAssignmentResponse{AssignmentRevision: req.Msg.GetAssignmentRevision()}), nil
}

func (f *fakeTablet) TakeSnapshot(ctx context.Context, req *connect.Request[tierv1.TakeSnapshotRequest]) (*connect.Response[tierv1.TakeSnapshotResponse], error) {
	if err := f.admit(req.Msg.GetCoordinatorEpoch()); err != nil {
		return nil, err
	}
	f.mu.Lock()
	take := f.take
	f.mu.Unlock()
	if take == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no snapshots here"))
	}
	s, err := take(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.TakeSnapshotResponse{Snapshot: s}), nil
}

func (f *fakeTablet) noticeList() []*tierv1.NotifyAssignmentRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.notices)
}

func isNotLeader(err error) bool { return errors.Is(err, fencing.ErrNotLeader) }

// metricValue returns the value of the metric name whose labels include
// the given ones (a counter or a gauge), failing the test if there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok, err := metricvalue.Value(reg, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("no metric %s %v", name, labels)
	}
	return v
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return metricValue(t, reg, name, labels)
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricValue(t, reg, name, nil)
}
