package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
)

// roleTest is an embedded etcd and a file:// store under one directory,
// for tests that run the external roles (thaw coordinator, thaw tablet).
type roleTest struct {
	dir, remote string
	endpoints   []string
}

func startRoleTest(t *testing.T, dir string) roleTest {
	t.Helper()
	etcd, err := meta.StartEmbedded(t.Context(), meta.EmbeddedConfig{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	return roleTest{dir: dir, remote: "file://" + filepath.Join(dir, "remote"), endpoints: etcd.Endpoints()}
}

// coordinator is the config of coordinator coord-1 with short leases.
func (r roleTest) coordinator() CoordinatorConfig {
	var cc CoordinatorConfig
	cc.Defaults()
	cc.ID, cc.Listen, cc.ObjectStore, cc.Etcd.Endpoints = "coord-1", "127.0.0.1:0", r.remote, r.endpoints
	cc.Coordinator.LeaseTTL = 2 * time.Second
	return cc
}

// tablet is the config of tablet server id on {dir}/{id}, with short
// leases and small caches.
func (r roleTest) tablet(id string) TabletConfig {
	var tc TabletConfig
	tc.Defaults()
	tc.ID, tc.Listen, tc.DataDir, tc.ObjectStore, tc.Etcd.Endpoints = id, "127.0.0.1:0", filepath.Join(r.dir, id), r.remote, r.endpoints
	tc.Tablet.LeaseTTL = 2 * time.Second
	tc.Tablet.CacheSize, tc.Tablet.MemTableBudget = 4<<20, 4<<20
	return tc
}

// runRoles runs thaw coordinator cc and thaw tablet tc until the test
// ends (a role that returns an error then fails it) and returns their
// advertised host:port once both listen. Both roles get opts (at most
// one; OnReady is runRoles' own).
func runRoles(t *testing.T, cc CoordinatorConfig, tc TabletConfig, opts ...RunOptions) (coord, tablet string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	coordAddr, tabletAddr := make(chan string, 1), make(chan string, 1)
	done := make(chan error, 2)
	co, to := RunOptions{}, RunOptions{}
	if len(opts) > 0 {
		co, to = opts[0], opts[0]
	}
	co.OnReady = func(a string) { coordAddr <- a }
	to.OnReady = func(a string) { tabletAddr <- a }
	go func() { done <- RunCoordinator(ctx, cc, co) }()
	go func() { done <- RunTablet(ctx, tc, to) }()
	running := 2
	t.Cleanup(func() {
		cancel()
		for ; running > 0; running-- {
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("a role returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("a role did not stop")
				return
			}
		}
	})
	for coord == "" || tablet == "" {
		select {
		case coord = <-coordAddr:
		case tablet = <-tabletAddr:
		case err := <-done:
			running--
			t.Fatalf("a role stopped before it listened: %v", err)
		}
	}
	return coord, tablet
}

// awaitOneServer waits until the coordinator lists one tablet server.
func awaitOneServer(t *testing.T, coord tierv1connect.CoordinatorServiceClient) {
	t.Helper()
	retry(t, "the tablet server registered", func() error {
		s, err := coord.ListServers(t.Context(), connect.NewRequest(&tierv1.ListServersRequest{}))
		if err == nil && len(s.Msg.GetServers()) != 1 {
			err = errors.New(s.Msg.String())
		}
		return err
	})
}

// createTable creates database db and its table name, replication factor
// 1, keyed by the first column.
func createTable(t *testing.T, coord tierv1connect.CoordinatorServiceClient, db, name string, buckets int32, cols ...*tierv1.Column) {
	t.Helper()
	ctx := t.Context()
	if _, err := coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: db})); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.CreateTable(ctx, connect.NewRequest(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: db, Table: name}, ReplicationFactor: 1,
		Schema: &tierv1.TableSchema{Columns: cols, PrimaryKey: []string{cols[0].GetName()}, Buckets: buckets},
	})); err != nil {
		t.Fatal(err)
	}
}

// TestRunCoordinatorAndTablet runs the two external roles against one
// etcd, each on its own listener: the tablet server registers under its
// own address, serves a replication-factor-1 table, and reports a
// snapshot to the coordinator it finds through etcd.
func TestRunCoordinatorAndTablet(t *testing.T) {
	dir := t.TempDir()
	roles := startRoleTest(t, dir)
	remote := roles.remote
	cc := roles.coordinator()
	tc := roles.tablet("ts-1")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	coordAddr, tabletAddr := make(chan string, 1), make(chan string, 1)
	coordDone, tabletDone := make(chan error, 1), make(chan error, 1)
	go func() {
		coordDone <- RunCoordinator(ctx, cc, RunOptions{OnReady: func(a string) { coordAddr <- a }})
	}()
	go func() {
		tabletDone <- RunTablet(ctx, tc, RunOptions{OnReady: func(a string) { tabletAddr <- a }})
	}()
	ca, ta := <-coordAddr, <-tabletAddr
	hc := NewHTTPClient(nil)
	coord := tierv1connect.NewCoordinatorServiceClient(hc, BaseURL(ca))

	// Ready, and the coordinator's services lead: /readyz says a coordinator
	// is elected, which the elected one's own services learn a moment later
	// (until then they answer FAILED_PRECONDITION, not the active one, or,
	// once they know they are elected and before their term is stored,
	// UNAVAILABLE: retry).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c1, _ := get(t, "http://"+ca+PathReadyz)
		c2, body := get(t, "http://"+ta+PathReadyz)
		if c1 == 200 && c2 == 200 && strings.Contains(body, "registered: ok") {
			servers, err := coord.ListServers(ctx, connect.NewRequest(&tierv1.ListServersRequest{}))
			if err == nil {
				if len(servers.Msg.GetServers()) != 1 || servers.Msg.GetServers()[0].GetAddress() != "http://"+ta {
					t.Fatalf("servers: %v", servers.Msg)
				}
				break
			}
			if code := connect.CodeOf(err); code != connect.CodeFailedPrecondition && code != connect.CodeUnavailable || time.Now().After(deadline) {
				t.Fatalf("servers: %v", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: coordinator %d, tablet %d %s", c1, c2, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	createTable(t, coord, "d", "t", 1, &tierv1.Column{Name: "k", Type: "BIGINT"})
	// The tablet server snapshots the bucket and reports it to the
	// coordinator it finds in etcd.
	var snaps *connect.Response[tierv1.TriggerSnapshotResponse]
	var err error
	for {
		snaps, err = coord.TriggerSnapshot(ctx, connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: &tierv1.TargetPath{Database: "d", Table: "t"}}))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(snaps.Msg.GetSnapshots()) != 1 || !strings.HasPrefix(snaps.Msg.GetSnapshots()[0].GetMetadataPath(), remote+"/kv/d/t-") {
		t.Fatalf("snapshot: %v %v", snaps, err)
	}
	cancel()
	for _, done := range []chan error{coordDone, tabletDone} {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("role returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a role did not stop")
		}
	}
}

// tabletRoles runs `thaw coordinator` (rebalancing every 100ms) and `thaw
// tablet` roles on one etcd until the test ends; a role that returns an
// error fails the test.
type tabletRoles struct {
	t         *testing.T
	ctx       context.Context
	roles     roleTest
	prefix    string
	coordAddr string
	tune      func(*TabletConfig) // nil: roleTest.tablet's config
	tablets   map[string]roleRun
}

type roleRun struct {
	cancel context.CancelFunc
	done   chan error
}

// wait waits for the role to return and fails the test on its error.
func (r roleRun) wait(t *testing.T, what string) {
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("%s returned %v", what, err)
	}
}

func startTabletRoles(t *testing.T, tune func(*TabletConfig)) *tabletRoles {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	tr := &tabletRoles{t: t, ctx: ctx, roles: startRoleTest(t, t.TempDir()), tune: tune, tablets: map[string]roleRun{}}
	cc := tr.roles.coordinator()
	cc.Coordinator.RebalanceInterval = 100 * time.Millisecond
	tr.prefix = cc.Etcd.Prefix
	addr, coord := make(chan string, 1), roleRun{cancel: cancel, done: make(chan error, 1)}
	go func() { coord.done <- RunCoordinator(ctx, cc, RunOptions{OnReady: func(a string) { addr <- a }}) }()
	t.Cleanup(func() {
		cancel()
		for id, r := range tr.tablets {
			r.wait(t, "tablet "+id)
		}
		coord.wait(t, "coordinator")
	})
	tr.coordAddr = <-addr
	return tr
}

// start runs tablet server id (on its own data directory) until it is ready.
func (tr *tabletRoles) start(id string) {
	tc := tr.roles.tablet(id)
	if tr.tune != nil {
		tr.tune(&tc)
	}
	if err := tc.Validate(); err != nil {
		tr.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(tr.ctx)
	r := roleRun{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() { r.done <- RunTablet(ctx, tc, RunOptions{OnReady: func(a string) { ready <- a }}) }()
	<-ready
	tr.tablets[id] = r
}

// stop stops tablet server id and waits for it.
func (tr *tabletRoles) stop(id string) {
	r := tr.tablets[id]
	delete(tr.tablets, id)
	r.cancel()
	r.wait(tr.t, "tablet "+id)
}

// client is a tier client of the coordinator that retries for 20s.
func (tr *tabletRoles) client() *tierclient.Client {
	c, err := tierclient.New(tr.ctx, tr.coordAddr, tierclient.WithRetryPolicy(tierclient.RetryPolicy{
		Timeout: 20 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}))
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(func() { c.Close() })
	return c
}

// createTables creates database d and its tables (name: replication
// factor) of schema (id BIGINT, v STRING) with the given buckets.
func (tr *tabletRoles) createTables(c *tierclient.Client, buckets int, tables map[string]int) {
	bigint, _ := kv.ParseType("BIGINT")
	str, _ := kv.ParseType("STRING")
	schema := kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: bigint}, {Name: "v", Type: str, Nullable: true}},
		PrimaryKey: []string{"id"}, Buckets: buckets,
	}
	retry(tr.t, "create the tables", func() error {
		if err := c.CreateDatabase(tr.ctx, "d"); err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
			return err
		}
		for name, rf := range tables {
			if _, err := c.CreateTable(tr.ctx, "d", name, schema, rf); err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
				return err
			}
		}
		return nil
	})
}

// registeredChangelogs waits until n tablet servers are registered and
// returns the changelog identity each registered.
func (tr *tabletRoles) registeredChangelogs(n int) map[string]string {
	tr.t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: tr.roles.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		tr.t.Fatal(err)
	}
	defer etcd.Close()
	store, err := meta.New(etcd, tr.prefix)
	if err != nil {
		tr.t.Fatal(err)
	}
	logOf := map[string]string{}
	retry(tr.t, fmt.Sprintf("%d tablet servers registered", n), func() error {
		set, err := store.ListServers(tr.ctx)
		if err != nil {
			return err
		}
		if len(set.Servers) != n {
			return fmt.Errorf("servers %+v", set.Servers)
		}
		for _, s := range set.Servers {
			logOf[s.ID] = s.Changelog
		}
		return nil
	})
	return logOf
}

// idRows are rows 0..n-1 of (id, v) with v = prefix and the id.
func idRows(n int, prefix string) []kv.Row {
	rows := make([]kv.Row, n)
	for i := range rows {
		rows[i] = kv.Row{int64(i), fmt.Sprintf("%s%d", prefix, i)}
	}
	return rows
}

// readBack checks every row's key against the row.
func readBack(ctx context.Context, c *tierclient.Client, target tierclient.Target, rows []kv.Row) error {
	keys := make([]kv.Row, len(rows))
	for i, r := range rows {
		keys[i] = kv.Row{r[0], nil}
	}
	got, err := c.Get(ctx, target, keys)
	if err != nil {
		return err
	}
	for i, r := range got {
		if r == nil || r[1] != rows[i][1] {
			return fmt.Errorf("row %d: %v, want %v", i, r, rows[i])
		}
	}
	return nil
}

// TestRolesBindBeforeEtcd: thaw coordinator and thaw tablet bind their
// listener before anything else they start, so a listen address in use is
// the error, at once, even when etcd is unreachable too (an etcd error
// here means etcd was dialled first).
func TestRolesBindBeforeEtcd(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	nobody, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadEtcd := "http://" + nobody.Addr().String()
	nobody.Close()
	roles := roleTest{dir: t.TempDir(), remote: "file://" + t.TempDir(), endpoints: []string{deadEtcd}}
	cc := roles.coordinator()
	cc.Listen = busy.Addr().String()
	tc := roles.tablet("ts-1")
	tc.Listen = busy.Addr().String()
	// A role that dials etcd first waits for it to come up: the deadline
	// turns that into a failure instead of a hang.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for name, run := range map[string]func() error{
		"coordinator": func() error { return RunCoordinator(ctx, cc, RunOptions{}) },
		"tablet":      func() error { return RunTablet(ctx, tc, RunOptions{}) },
	} {
		if err := run(); err == nil || !strings.Contains(err.Error(), "daemon: listen:") || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("%s on a listen address in use with etcd unreachable: %v", name, err)
		}
	}
}
