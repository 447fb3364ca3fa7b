package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestLocalChangelogsKeepBucketsApart runs two thaw tablet processes'
// worth of tablet servers, each with its own local changelog (as two hosts
// without Kafka would): no bucket gets replicas on both, and a bucket
// whose only server stops waits for it instead of moving to the other
// server, which would serve the bucket's last snapshot without the writes
// since (they are in the stopped server's changelog). When the server
// comes back every row is there.
func TestLocalChangelogsKeepBucketsApart(t *testing.T) {
	tr := startTabletRoles(t, nil)
	tr.start("ts-1")
	tr.start("ts-2")
	// Each registered its own changelog.
	logOf := tr.registeredChangelogs(2)
	if !strings.HasPrefix(logOf["ts-1"], "local:") || !strings.HasPrefix(logOf["ts-2"], "local:") || logOf["ts-1"] == logOf["ts-2"] {
		t.Fatalf("changelogs registered: %q", logOf)
	}

	c := tr.client()
	tr.createTables(c, 8, map[string]int{"r1": 1, "r2": 2})
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(nil), BaseURL(tr.coordAddr))
	locations := func(table string) []*tierv1.BucketLocation {
		t.Helper()
		resp, err := coord.GetTargetLocations(tr.ctx, connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "d", Table: table}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetBuckets()
	}
	// Replication factor 2 with one server per changelog: one replica each
	// (under-replicated), never one on each server.
	on := map[string]int{}
	for _, b := range locations("r2") {
		if len(b.GetReplicas()) != 1 {
			t.Fatalf("d.r2 bucket %d has replicas %v across changelogs", b.GetBucket(), b.GetReplicas())
		}
		on[b.GetReplicas()[0]]++
	}
	if on["ts-1"] == 0 || on["ts-2"] == 0 {
		t.Fatalf("d.r2's buckets are not spread: %v", on)
	}

	target := tierclient.Target{Database: "d", Table: "r1"}
	rows := idRows(100, "v")
	retry(t, "write", func() error { return c.Upsert(tr.ctx, target, rows) })
	var onTS2 []int32
	for _, b := range locations("r1") {
		if b.GetLeaderId() == "ts-2" {
			onTS2 = append(onTS2, b.GetBucket())
		}
	}
	if len(onTS2) == 0 {
		t.Fatal("no bucket of d.r1 on ts-2")
	}

	tr.stop("ts-2")
	tr.registeredChangelogs(1)
	// Rounds of the reconciler (every 100ms) go by: ts-2's buckets stay
	// with ts-2, leaderless until it comes back.
	time.Sleep(2 * time.Second)
	for _, b := range locations("r1") {
		if slices.Contains(onTS2, b.GetBucket()) && (b.GetLeaderId() != "ts-2" || !slices.Equal(b.GetReplicas(), []string{"ts-2"}) || b.GetLeaderAddress() != "") {
			t.Fatalf("bucket %d of d.r1 moved off its changelog's server: %v", b.GetBucket(), b)
		}
	}

	tr.start("ts-2")
	retry(t, "read every row back", func() error { return readBack(tr.ctx, c, target, rows) })
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

// kafkaClusterID asks the brokers for their cluster id.
func kafkaClusterID(t *testing.T, brokers []string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil || resp.ClusterID == nil || *resp.ClusterID == "" {
		t.Fatalf("cluster id: %v %v", resp, err)
	}
	return *resp.ClusterID
}
