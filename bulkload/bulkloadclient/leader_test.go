package bulkloadclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/coordlist/coordlisttest"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/daemon/daemontest"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierpb"
)

// startStandbyTier starts a real embedded tier with two coordinators
// sharing its etcd, one active and one standby, and returns the ids of
// both. Each coordinator is also served at its own address
// (daemon.Embedded.CoordinatorAddress), whether or not it leads; both
// publish the tier's root address, which serves the active one.
func startStandbyTier(ctx context.Context, t *testing.T) (tr *testTier, leader, standby string) {
	t.Helper()
	e, tc := daemontest.StartWithClient(ctx, t, daemon.EmbeddedConfig{
		DataDir: t.TempDir(), EtcdUnsafeNoFsync: true, Coordinators: 2,
		Coordinator: daemon.CoordinatorOptions{LeaseTTL: 2 * time.Second},
		Tablet:      daemon.TabletOptions{CacheSize: 32 << 20, MemTableBudget: 32 << 20},
		Logger:      logOnFailure(t),
	})
	eventually(ctx, t, "a coordinator leads", func() error {
		l, err := e.Leader(ctx)
		if err != nil {
			return err
		}
		switch l.ID {
		case "coord-1":
			leader, standby = "coord-1", "coord-2"
		case "coord-2":
			leader, standby = "coord-2", "coord-1"
		default:
			return fmt.Errorf("leader %q", l.ID)
		}
		return nil
	})
	return &testTier{e: e, tc: tc}, leader, standby
}

// logOnFailure returns a debug logger whose output the test prints (its
// last 300 lines) only if it fails: elections and retries explain a
// failover test that timed out.
func logOnFailure(t *testing.T) *slog.Logger {
	var buf testlog.Buffer
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
		t.Logf("last %d log lines:\n%s", min(len(lines), 300), strings.Join(lines[max(len(lines)-300, 0):], "\n"))
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// callLog is an HTTP transport that records where each BulkLoadService
// call went: the path prefix before the service ("/c/coord-2" for one
// coordinator's own address, "" for the tier's root) and the method.
type callLog struct {
	mu    sync.Mutex
	calls []string // "prefix method"
}

func (l *callLog) RoundTrip(r *http.Request) (*http.Response, error) {
	const svc = "/" + tierv1connect.BulkLoadServiceName + "/"
	if prefix, method, ok := strings.Cut(r.URL.Path, svc); ok {
		l.mu.Lock()
		l.calls = append(l.calls, prefix+" "+method)
		l.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// count returns the number of calls sent to prefix (any method when
// method is "").
func (l *callLog) count(prefix, method string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		p, m, _ := strings.Cut(c, " ")
		if p == prefix && (method == "" || m == method) {
			n++
		}
	}
	return n
}

func (l *callLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// mount is the path prefix of coordinator id's own address.
func mount(id string) string { return strings.TrimSuffix(daemon.CoordinatorPath(id), "/") }

// TestThroughStandby gives clients only the standby coordinator's address
// (alone, or after an address nothing listens at). The standby answers
// NOT_LEADER naming the active coordinator; the client follows it and
// remembers it: Begin, a build, Commit (every row readable), then
// GetInProgress, Status and Abort of a second load all work, and only the
// first call of each client reaches the standby.
func TestThroughStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr, _, standby := startStandbyTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a", "b")

	log := &callLog{}
	c, err := bulkloadclient.New(ctx, tr.e.CoordinatorAddress(standby), bulkloadclient.WithHTTPClient(&http.Client{Transport: log}))
	if err != nil {
		t.Fatal(err)
	}
	// A read: the standby would answer UNAVAILABLE-classed NOT_LEADER;
	// the active coordinator says there is no load in progress.
	a := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
	if _, _, err := c.GetInProgress(ctx, a); !errors.Is(err, bulkload.ErrNotFound) {
		t.Fatalf("get in progress through the standby: %v", err)
	}
	if calls := log.all(); len(calls) != 2 || calls[0] != mount(standby)+" GetInProgress" || calls[1] != " GetInProgress" {
		t.Fatalf("calls %q, want the standby's then the root's (the leader's) GetInProgress", calls)
	}

	bc, err := begin(ctx, c, a, "standby-a")
	if err != nil {
		t.Fatal(err)
	}
	rows := regionRows("a", 300)
	res := build(ctx, t, bc, rows)
	st, err := c.Commit(ctx, bc, res, time.Minute)
	if err != nil || st.State != bulkload.Committed || st.Handle != bc.Handle() {
		t.Fatalf("commit: %+v, %v", st, err)
	}
	expectOneCommitted(ctx, t, tr, bc)
	tr.expectRows(ctx, t, a, rows)

	// GetInProgress, Status and Abort of a BEGUN load, from a client whose
	// first configured address is dead: a change (Begin) moves on to the
	// next address, since nothing was sent.
	log2 := &callLog{}
	c2, err := bulkloadclient.New(ctx, coordlisttest.ClosedAddress(t)+", "+tr.e.CoordinatorAddress(standby),
		bulkloadclient.WithHTTPClient(&http.Client{Transport: log2}))
	if err != nil {
		t.Fatal(err)
	}
	b := bulkload.Target{Database: "shop", Table: "events", Partition: "b"}
	bc2, err := begin(ctx, c2, b, "standby-b")
	if err != nil {
		t.Fatal(err)
	}
	st, got, err := c2.GetInProgress(ctx, b)
	if err != nil || st.State != bulkload.Begun || got == nil || got.Handle() != bc2.Handle() {
		t.Fatalf("get in progress: %+v %v, %v", st, got, err)
	}
	if st, err := c2.Status(ctx, bc2.Handle()); err != nil || st.State != bulkload.Begun {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if st, err := c2.Abort(ctx, bc2.Handle()); err != nil || st.State != bulkload.Aborted {
		t.Fatalf("abort: %+v, %v", st, err)
	}
	tr.expectActiveEmpty(ctx, t, b)

	// Many goroutines on a fresh client: each finds the leader.
	c3, err := bulkloadclient.New(ctx, tr.e.CoordinatorAddress(standby))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if st, err := c3.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Committed {
				errs <- fmt.Errorf("status: %+v, %w", st, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// The leader was remembered: after its first call, no client went to
	// the standby again.
	if n := log.count(mount(standby), ""); n != 1 {
		t.Errorf("client 1 sent %d calls to the standby, want 1: %q", n, log.all())
	}
	if n := log2.count(mount(standby), ""); n != 1 {
		t.Errorf("client 2 sent %d calls to the standby, want 1: %q", n, log2.all())
	}
}

// TestLeaderFailover crashes the active coordinator between Begin and
// Commit. The client, configured with both coordinators' own addresses,
// finds the new leader by itself within Commit's budget, and the load
// begun under the old leader commits under the new one.
func TestLeaderFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tr, leader, standby := startStandbyTier(ctx, t)
	tr.createPartitioned(ctx, t, "shop", "events", 4, 3, "a")

	log := &callLog{}
	c, err := bulkloadclient.New(ctx, tr.e.CoordinatorAddress(leader)+","+tr.e.CoordinatorAddress(standby),
		bulkloadclient.WithHTTPClient(&http.Client{Transport: log}), bulkloadclient.WithLogger(logOnFailure(t)))
	if err != nil {
		t.Fatal(err)
	}
	a := bulkload.Target{Database: "shop", Table: "events", Partition: "a"}
	bc, err := begin(ctx, c, a, "failover-a")
	if err != nil {
		t.Fatal(err)
	}
	if n := log.count(mount(standby), ""); n != 0 {
		t.Fatalf("%d calls went to the standby before the failover", n)
	}
	rows := regionRows("a", 300)
	res := build(ctx, t, bc, rows)

	// A crash: the old leader's address now answers UNAVAILABLE, and the
	// standby takes over once the old leader's lease expires.
	if err := tr.e.KillCoordinator(ctx, leader); err != nil {
		t.Fatal(err)
	}
	st, err := c.Commit(ctx, bc, res, time.Minute)
	if err != nil || st.State != bulkload.Committed || st.Handle != bc.Handle() {
		t.Fatalf("commit after the failover: %+v, %v", st, err)
	}
	if l, err := tr.e.Leader(ctx); err != nil || l.ID != standby {
		t.Fatalf("leader after the failover: %+v, %v", l, err)
	}
	if n := log.count(mount(standby), "Commit"); n == 0 {
		t.Fatalf("no Commit reached the new leader: %q", log.all())
	}
	expectOneCommitted(ctx, t, tr, bc)
	tr.expectRows(ctx, t, a, rows)

	// The next calls go to the new leader directly.
	before := log.count(mount(leader), "")
	if st, err := c.Status(ctx, bc.Handle()); err != nil || st.State != bulkload.Committed {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if _, _, err := c.GetInProgress(ctx, a); !errors.Is(err, bulkload.ErrNotFound) {
		t.Fatalf("get in progress: %v", err)
	}
	if n := log.count(mount(leader), ""); n != before {
		t.Fatalf("%d calls went to the dead coordinator after the failover was found", n-before)
	}
}

// TestLeaderRedirectBound: two coordinators naming each other, and one
// naming an address nobody serves, end every call quickly with a
// retriable error that says what happened; nothing loops.
func TestLeaderRedirectBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, b := coordlisttest.NewNotLeaderServer(t, "coord-a"), coordlisttest.NewNotLeaderServer(t, "coord-b")
	aAddr, bAddr := a.HostPort(), b.HostPort()
	a.To.Store(&bAddr)
	b.To.Store(&aAddr)
	dead := coordlisttest.ClosedAddress(t)
	d := coordlisttest.NewNotLeaderServer(t, "coord-d")
	d.To.Store(&dead)

	bc := offlineContext(t)
	var res []snapshotbuild.BucketResult
	for bucket, id := range bc.SnapshotIDs() {
		res = append(res, snapshotbuild.BucketResult{Bucket: bucket, SnapshotID: id, MetadataPath: bc.SnapshotTarget().MetadataPath(bucket, id), MetadataLength: 1,
			MetadataSHA256: strings.Repeat("0", 64)})
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "us"}
	calls := map[string]func(*bulkloadclient.Client) error{
		"Begin": func(c *bulkloadclient.Client) error {
			_, err := c.Begin(ctx, target, "redirects", bulkloadclient.BeginOptions{})
			return err
		},
		"GetInProgress": func(c *bulkloadclient.Client) error { _, _, err := c.GetInProgress(ctx, target); return err },
		"Status":        func(c *bulkloadclient.Client) error { _, err := c.Status(ctx, bc.Handle()); return err },
		"Abort":         func(c *bulkloadclient.Client) error { _, err := c.Abort(ctx, bc.Handle()); return err },
		// A zero budget: one attempt, then Status, then the error.
		"Commit": func(c *bulkloadclient.Client) error { _, err := c.Commit(ctx, bc, res, 0); return err },
	}
	for name, do := range calls {
		t.Run(name+"/ping-pong", func(t *testing.T) {
			c, err := bulkloadclient.New(ctx, aAddr)
			if err != nil {
				t.Fatal(err)
			}
			before := a.Calls.Load() + b.Calls.Load()
			err = do(c)
			if !bulkloadclient.IsRetriable(err) || !errors.Is(err, bulkload.ErrUnavailable) || !strings.Contains(err.Error(), "redirects") {
				t.Fatalf("error %v, want a retriable one about redirects", err)
			}
			if hint, ok := tierpb.IsNotLeader(err); !ok || hint.ID != "elsewhere" {
				t.Fatalf("error %v does not wrap the last NOT_LEADER answer", err)
			}
			// Each RPC (Commit also asks Status once) is sent to the first
			// server and then redirected MaxLeaderRedirects times.
			rpcs := int32(1)
			if name == "Commit" {
				rpcs = 2
			}
			if n := a.Calls.Load() + b.Calls.Load() - before; n != rpcs*(1+bulkloadclient.MaxLeaderRedirects) {
				t.Fatalf("%d calls, want %d", n, rpcs*(1+bulkloadclient.MaxLeaderRedirects))
			}
		})
		t.Run(name+"/unreachable-leader", func(t *testing.T) {
			c, err := bulkloadclient.New(ctx, d.HostPort())
			if err != nil {
				t.Fatal(err)
			}
			before := d.Calls.Load()
			err = do(c)
			if !bulkloadclient.IsRetriable(err) || !errors.Is(err, bulkload.ErrUnavailable) || !strings.Contains(err.Error(), dead) {
				t.Fatalf("error %v, want a retriable one naming %s", err, dead)
			}
			var op *net.OpError
			if !errors.As(err, &op) {
				t.Fatalf("error %v does not wrap the connection failure", err)
			}
			rpcs := int32(1)
			if name == "Commit" {
				rpcs = 2
			}
			if n := d.Calls.Load() - before; n != rpcs {
				t.Fatalf("%d calls to the coordinator naming the dead one, want %d", n, rpcs)
			}
		})
	}
}

// TestUnavailableCoordinatorPassedOver: a coordinator that answers a
// change UNAVAILABLE itself is not bypassed for that call (the attempt may
// have done something; the caller decides to repeat it), but the caller's
// next call starts at the next configured coordinator instead of asking
// the unavailable one again.
func TestUnavailableCoordinatorPassedOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	u := coordlisttest.NewUnavailableServer(t, "coord-u")
	b := coordlisttest.NewNotLeaderServer(t, "coord-b")
	bAddr := b.HostPort()
	b.To.Store(&bAddr) // names itself: its answer ends a call
	c, err := bulkloadclient.New(ctx, u.HostPort()+","+bAddr)
	if err != nil {
		t.Fatal(err)
	}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "us"}
	_, err = c.Begin(ctx, target, "passed-over", bulkloadclient.BeginOptions{})
	if !errors.Is(err, bulkload.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach etcd") {
		t.Fatalf("first Begin: %v, want the unavailable coordinator's answer", err)
	}
	if u.Calls.Load() != 1 || b.Calls.Load() != 0 {
		t.Fatalf("first Begin sent %d times to the unavailable coordinator and %d to the next; want 1 and 0", u.Calls.Load(), b.Calls.Load())
	}
	_, err = c.Begin(ctx, target, "passed-over", bulkloadclient.BeginOptions{})
	if _, ok := tierpb.IsNotLeader(err); !ok {
		t.Fatalf("second Begin: %v, want the next coordinator's answer", err)
	}
	if u.Calls.Load() != 1 || b.Calls.Load() != 1 {
		t.Fatalf("second Begin: %d calls to the unavailable coordinator, %d to the next; want 1 and 1", u.Calls.Load(), b.Calls.Load())
	}
}
