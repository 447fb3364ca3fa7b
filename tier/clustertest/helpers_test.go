package clustertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kfake"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// Timing of the test clusters: etcd's minimum lease TTL is 2s.
const (
	leaseTTL = 2 * time.Second
	// waitFor bounds every poll for a condition.
	waitFor = 60 * time.Second
)

// cluster is a running embedded tier and clients of it.
type cluster struct {
	t     *testing.T
	e     *daemon.Embedded
	c     *tierclient.Client
	coord tierv1connect.CoordinatorServiceClient
}

func testLogger() *slog.Logger {
	switch os.Getenv("THAW_TEST_LOG") {
	case "":
		return slog.New(slog.DiscardHandler)
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	default:
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// startCluster starts an embedded tier with three tablet servers and short
// leases; mod adjusts the config.
func startCluster(t *testing.T, mod func(*daemon.EmbeddedConfig)) *cluster {
	t.Helper()
	cfg := daemon.EmbeddedConfig{
		DataDir:           t.TempDir(),
		TabletServers:     3,
		EtcdUnsafeNoFsync: true,
		Coordinator: daemon.CoordinatorOptions{
			LeaseTTL:          leaseTTL,
			RebalanceInterval: 100 * time.Millisecond,
			ResyncInterval:    time.Second,
			TabletTimeout:     10 * time.Second,
		},
		Tablet: daemon.TabletOptions{
			LeaseTTL:         leaseTTL,
			SnapshotInterval: -1, // tests take snapshots explicitly
			CacheSize:        8 << 20,
			MemTableBudget:   8 << 20,
			MaxBatchRows:     500,
		},
		Logger: testLogger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := daemon.StartEmbedded(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close the tier: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, e: e, coord: tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())}
	cl.c = cl.newClient(t)
	return cl
}

// eachChangelog runs test on the local segment log (the tablet servers
// share one log root, as on one host) and on the Kafka changelog (kfake, a
// Kafka that speaks the real protocol; each tablet server has its own
// client, as on hosts of their own).
func eachChangelog(t *testing.T, test func(*testing.T, func(*daemon.EmbeddedConfig))) {
	t.Run("local", func(t *testing.T) { test(t, nil) })
	t.Run("kafka", func(t *testing.T) {
		k, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.DefaultNumPartitions(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		test(t, func(c *daemon.EmbeddedConfig) {
			c.Changelog.Kafka = &daemon.KafkaChangelogOptions{Brokers: k.ListenAddrs(), PollInterval: 50 * time.Millisecond}
		})
	})
}

// newClient returns a tier client of the cluster.
func (cl *cluster) newClient(t *testing.T) *tierclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	// The tier's own client trusts its certificate when it serves HTTPS.
	trust := cl.e.HTTPClient().Transport.(*http.Transport).TLSClientConfig
	c, err := tierclient.New(ctx, cl.e.Address(), tierclient.WithTLSConfig(trust), tierclient.WithRetryPolicy(tierclient.RetryPolicy{
		Timeout: 45 * time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// fresh returns the cluster with a new client, which has cached nothing.
func (cl *cluster) fresh(t *testing.T) *cluster {
	c := *cl
	c.c = cl.newClient(t)
	return &c
}

// eventually polls cond every 50ms until it returns nil, failing the test
// with its last error after waitFor.
func eventually(t *testing.T, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	var err error
	for {
		if err = cond(ctx); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still not true after %v: %v", what, waitFor, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The table most tests use: partitioned by dt, four buckets, RF 3.
const (
	db      = "shop"
	orders  = "orders"
	dayOne  = "2024-01-01"
	dayTwo  = "2024-01-02"
	buckets = 4
)

func ordersSchema() kv.TableSchema {
	mustType := func(s string) kv.Type {
		t, err := kv.ParseType(s)
		if err != nil {
			panic(err)
		}
		return t
	}
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "dt", Type: mustType("STRING")},
			{Name: "id", Type: mustType("BIGINT")},
			{Name: "item", Type: mustType("STRING"), Nullable: true},
			{Name: "qty", Type: mustType("INT"), Nullable: true},
		},
		PrimaryKey:    []string{"dt", "id"},
		PartitionKeys: []string{"dt"},
		Buckets:       buckets,
	}
}

// createOrders creates shop.orders with partitions dayOne and dayTwo.
func (cl *cluster) createOrders(ctx context.Context) {
	cl.t.Helper()
	if err := cl.c.CreateDatabase(ctx, db); err != nil {
		cl.t.Fatal(err)
	}
	if _, err := cl.c.CreateTable(ctx, db, orders, ordersSchema(), 3); err != nil {
		cl.t.Fatal(err)
	}
	for _, p := range []string{dayOne, dayTwo} {
		if err := cl.c.CreatePartition(ctx, db, orders, p); err != nil {
			cl.t.Fatal(err)
		}
	}
}

func order(dt string, id int64, item string, qty int32) kv.Row {
	return kv.Row{dt, id, item, qty}
}

func target(partition string) tierclient.Target {
	return tierclient.Target{Database: db, Table: orders, Partition: partition}
}

func targetPath(partition string) *tierv1.TargetPath {
	p := &tierv1.TargetPath{Database: db, Table: orders}
	if partition != "" {
		p.Partition = &partition
	}
	return p
}

// model is the expected content of a table: rendered row by key.
type model map[string]string

func keyOf(r kv.Row) string { return fmt.Sprintf("%v/%v", r[0], r[1]) }

func render(r kv.Row) string { return fmt.Sprint([]any(r)) }

func (m model) upsert(rows ...kv.Row) {
	for _, r := range rows {
		m[keyOf(r)] = render(r)
	}
}

func (m model) delete(rows ...kv.Row) {
	for _, r := range rows {
		delete(m, keyOf(r))
	}
}

// scanAll returns the rows of t (the whole table when partition is "").
func (cl *cluster) scanAll(ctx context.Context, t tierclient.Target) (model, error) {
	got := model{}
	err := cl.c.Scan(ctx, t, func(r kv.Row) error {
		if _, dup := got[keyOf(r)]; dup {
			return fmt.Errorf("row %s scanned twice", keyOf(r))
		}
		got[keyOf(r)] = render(r)
		return nil
	})
	return got, err
}

// diff describes how got differs from want ("" if equal).
func diff(want, got model) string {
	var out []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+w)
		} else if g != w {
			out = append(out, "want "+w+" got "+g)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "unexpected "+g)
		}
	}
	slices.Sort(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d differences in all", len(out)))
	}
	return strings.Join(out, "; ")
}

// expectRows checks a scan of the whole table and a Get of every expected
// key against want.
func (cl *cluster) expectRows(ctx context.Context, want model) error {
	got, err := cl.scanAll(ctx, target(""))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	if d := diff(want, got); d != "" {
		return fmt.Errorf("scan differs: %s", d)
	}
	var keys []kv.Row
	for k := range want {
		dt, id, _ := strings.Cut(k, "/")
		var n int64
		fmt.Sscan(id, &n)
		keys = append(keys, kv.Row{dt, n, nil, nil})
	}
	rows, err := cl.c.Get(ctx, target(""), keys)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	for i, r := range rows {
		if r == nil || render(r) != want[keyOf(keys[i])] {
			return fmt.Errorf("get %s = %v, want %s", keyOf(keys[i]), r, want[keyOf(keys[i])])
		}
	}
	return nil
}

// locations returns a target's bucket locations.
func (cl *cluster) locations(ctx context.Context, partition string) (*tierv1.GetTargetLocationsResponse, error) {
	resp, err := cl.coord.GetTargetLocations(ctx, connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: targetPath(partition)}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// tablet returns a TabletService client of an embedded tablet server.
func (cl *cluster) tablet(id string) tierv1connect.TabletServiceClient {
	return tierv1connect.NewTabletServiceClient(cl.e.InternalHTTPClient(), cl.e.TabletAddress(id))
}

// replicated checks that every bucket of the partition has rf replicas on
// live servers and a leader, and that every replica is READY with the
// leader's log end offset: each holds every write.
func (cl *cluster) replicated(ctx context.Context, partition string, rf int) error {
	loc, err := cl.locations(ctx, partition)
	if err != nil {
		return err
	}
	live := cl.e.Tablets()
	for _, b := range loc.GetBuckets() {
		if len(b.GetReplicas()) != rf || b.GetLeaderId() == "" {
			return fmt.Errorf("bucket %d: replicas %v, leader %q", b.GetBucket(), b.GetReplicas(), b.GetLeaderId())
		}
		var leaderEnd int64 = -1
		ends := map[string]int64{}
		for _, id := range b.GetReplicas() {
			if !slices.Contains(live, id) {
				return fmt.Errorf("bucket %d: replica on dead server %s", b.GetBucket(), id)
			}
			st, err := cl.replicaStatus(ctx, id, loc.GetTargetId(), b.GetBucket())
			if err != nil {
				return err
			}
			if st.GetState() != tierv1.ReplicaState_REPLICA_STATE_READY {
				return fmt.Errorf("bucket %d on %s: %v %s", b.GetBucket(), id, st.GetState(), st.GetError())
			}
			ends[id] = st.GetLogEndOffset()
			if id == b.GetLeaderId() {
				leaderEnd = st.GetLogEndOffset()
			}
		}
		for id, end := range ends {
			if end != leaderEnd {
				return fmt.Errorf("bucket %d: replica on %s at offset %d, leader %s at %d", b.GetBucket(), id, end, b.GetLeaderId(), leaderEnd)
			}
		}
	}
	return nil
}

// replicatedWhere is replicated, and place holds for every bucket's
// replica list.
func (cl *cluster) replicatedWhere(ctx context.Context, partition string, rf int, place func(bucket int32, replicas []string) error) error {
	if err := cl.replicated(ctx, partition, rf); err != nil {
		return err
	}
	loc, err := cl.locations(ctx, partition)
	if err != nil {
		return err
	}
	for _, b := range loc.GetBuckets() {
		if err := place(b.GetBucket(), b.GetReplicas()); err != nil {
			return err
		}
	}
	return nil
}

func (cl *cluster) replicaStatus(ctx context.Context, server string, t *tierv1.TargetId, bucket int32) (*tierv1.ReplicaStatus, error) {
	resp, err := cl.tablet(server).ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: t, Buckets: []int32{bucket}}))
	if err != nil {
		return nil, fmt.Errorf("replica status of bucket %d on %s: %w", bucket, server, err)
	}
	for _, r := range resp.Msg.GetReplicas() {
		if r.GetBucket() == bucket {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s hosts no replica of bucket %d", server, bucket)
}

// ledOnlyBy checks that every bucket of the partition is led by server.
func (cl *cluster) ledOnlyBy(ctx context.Context, partition, server string) error {
	loc, err := cl.locations(ctx, partition)
	if err != nil {
		return err
	}
	for _, b := range loc.GetBuckets() {
		if b.GetLeaderId() != server {
			return fmt.Errorf("bucket %d led by %q, want %s", b.GetBucket(), b.GetLeaderId(), server)
		}
	}
	return nil
}

// snapshotAll snapshots every bucket of the partition now.
func (cl *cluster) snapshotAll(ctx context.Context, partition string) []*tierv1.BucketSnapshot {
	cl.t.Helper()
	resp, err := cl.coord.TriggerSnapshot(ctx, connect.NewRequest(&tierv1.TriggerSnapshotRequest{Target: targetPath(partition)}))
	if err != nil {
		cl.t.Fatalf("snapshot %s: %v", partition, err)
	}
	return resp.Msg.GetSnapshots()
}

func isCanceled(err error) bool { return errors.Is(err, context.Canceled) }
