package tablet_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

// TestStalePushDoesNotOpenFencedTarget: a tablet server that starts while
// a bulk load fences a target, and whose first listing of the table
// records is slow, gets a push built before the Begin (a reconcile round's,
// sent late): ACTIVE at a revision older than the LOADING record. It
// adopted it and accepted a write on the fenced target; an ACTIVE push now
// applies only once the records were listed.
func TestStalePushDoesNotOpenFencedTarget(t *testing.T) {
	c := newCluster(t)
	tb := c.createTable("t", []string{"ts-1"})
	cur, err := c.store.GetTable(t.Context(), c.db, "t")
	if err != nil {
		t.Fatal(err)
	}
	activeRev := cur.Rev // what a reconcile round read before the Begin
	asg, err := c.store.GetAssignment(t.Context(), tb.mtgt)
	if err != nil {
		t.Fatal(err)
	}
	loadingRev := c.setState(tb, meta.Loading, "bl-1") // the Begin (fenced)

	// The tablet's etcd client: the listing of /tables/ is slow (a large
	// catalog, a slow or failing etcd member).
	var delayed atomic.Int32
	slow, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*etcdserverpb.RangeRequest); ok && (strings.HasSuffix(string(r.Key), "/tables/") || strings.Contains(string(r.Key), "/assignment/")) {
				delayed.Add(1)
				time.Sleep(3 * time.Second)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	slowStore, err := meta.New(slow, c.store.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	c.deps = func(d *tablet.Deps) { d.Etcd, d.Meta = slow, slowStore }

	ts1 := c.startServer("ts-1")
	eventually(t, "registered", ts1.s.Registered)

	// A NotifyAssignment built from a cluster read before the Begin,
	// delivered now: current coordinator epoch, ACTIVE at activeRev.
	eventually(t, "push accepted", func() error {
		resp, err := ts1.client.NotifyAssignment(t.Context(), connect.NewRequest(&tierv1.NotifyAssignmentRequest{
			CoordinatorEpoch: int64(c.lead.Epoch()), Target: tb.id,
			Path:   &tierv1.TargetPath{Database: c.db, Table: "t"},
			Schema: tierpb.SchemaToProto(testSchema(1)), RemoteDataDir: c.objects.Base(),
			AssignmentRevision: asg.Rev,
			Buckets:            []*tierv1.BucketLocation{{Bucket: 0, Replicas: []string{"ts-1"}, LeaderId: "ts-1", LeaderEpoch: 1}},
			DataState:          tierv1.DataState_DATA_STATE_ACTIVE, StateRevision: activeRev,
		}))
		_ = resp
		return err
	})
	waitReady(t, ts1, tb, 0, leader, 1)
	_, werr := write(t.Context(), ts1, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)
	rec, err := c.store.GetTable(t.Context(), c.db, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd: state %s bulk load %q rev %d (loading rev %d, pushed active rev %d); tables listings delayed %d",
		rec.Value.DataState, rec.Value.BulkLoadID, rec.Rev, loadingRev, activeRev, delayed.Load())
	if werr == nil && rec.Value.DataState == meta.Loading {
		_, end := c.logOffsets(tb, 0)
		t.Fatalf("write accepted on a target whose record says LOADING (bulk load %s); changelog end %d", rec.Value.BulkLoadID, end)
	}
	if r := tierpb.ReasonOf(werr); r != tierpb.ReasonUnavailable && r != tierpb.ReasonTargetLoading {
		t.Fatalf("write on the fenced target: %v, want UNAVAILABLE (state not known yet) or TARGET_LOADING", werr)
	}
	if delayed.Load() == 0 {
		t.Fatal("the records listing was not delayed: the push did not come first")
	}
}
