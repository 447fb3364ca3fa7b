package tierclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/coordlist/coordlisttest"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// fakeCoordinator modes.
const (
	fakeServe       int32 = iota // answer GetLeader, CreateDatabase, ListPartitions
	fakeUnavailable              // read the request, answer UNAVAILABLE
	fakeNotLeader                // answer NOT_LEADER naming no one
)

// fakeCoordinator is a CoordinatorService that serves a few calls, or
// fails every call the way its mode says, and counts the calls by method.
// It stands in for coordinators in states a real one cannot be put in on
// demand (unavailable after reading a change, NOT_LEADER with the election
// undecided) so that the tests can tell exactly where each request went.
type fakeCoordinator struct {
	tierv1connect.UnimplementedCoordinatorServiceHandler
	srv  *httptest.Server
	mode atomic.Int32

	mu    sync.Mutex
	calls map[string]int
}

func newFakeCoordinator(t *testing.T) *fakeCoordinator {
	t.Helper()
	f := &fakeCoordinator{calls: make(map[string]int)}
	prefix, h := tierv1connect.NewCoordinatorServiceHandler(f)
	mux := http.NewServeMux()
	mux.Handle(prefix, h)
	ew := connect.NewErrorWriter()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[path.Base(r.URL.Path)]++
		f.mu.Unlock()
		switch f.mode.Load() {
		case fakeUnavailable:
			_, _ = io.Copy(io.Discard, r.Body)
			_ = ew.Write(w, r, tierpb.NewError(tierpb.ReasonUnavailable, "fake: unavailable", nil))
			return
		case fakeNotLeader:
			_ = ew.Write(w, r, tierpb.NewNotLeaderError("fake: not the active coordinator", tierpb.LeaderHint{}))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCoordinator) hostPort() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fakeCoordinator) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeCoordinator) GetLeader(context.Context, *connect.Request[tierv1.GetLeaderRequest]) (*connect.Response[tierv1.GetLeaderResponse], error) {
	// No address: the client keeps sending to the coordinator it asked.
	return connect.NewResponse(&tierv1.GetLeaderResponse{CoordinatorId: "fake", Epoch: 1}), nil
}

func (f *fakeCoordinator) CreateDatabase(context.Context, *connect.Request[tierv1.CreateDatabaseRequest]) (*connect.Response[tierv1.CreateDatabaseResponse], error) {
	return connect.NewResponse(&tierv1.CreateDatabaseResponse{}), nil
}

func (f *fakeCoordinator) ListPartitions(context.Context, *connect.Request[tierv1.ListPartitionsRequest]) (*connect.Response[tierv1.ListPartitionsResponse], error) {
	return connect.NewResponse(&tierv1.ListPartitionsResponse{}), nil
}

// fakeOpts: one attempt (attempts is the RetryPolicy's MaxAttempts) and a
// new connection per request, so that a closed server is a refused
// connection rather than a broken idle one.
func fakeOpts(attempts int) []tierclient.Opt {
	return []tierclient.Opt{
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{MaxAttempts: attempts, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}),
		tierclient.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}),
	}
}

// TestCoordinatorList: the rules of a comma-separated coordinator list,
// bulkloadclient's: blanks trimmed, repeats dropped, an empty entry is an
// error; a change moves on to the next coordinator within an attempt only
// where it certainly did nothing, a read also past an unavailable one; the
// coordinator reached is remembered, and one found not serving leaves the
// next request to start at the next one.
func TestCoordinatorList(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("empty entry", func(t *testing.T) {
		f := newFakeCoordinator(t)
		for _, addr := range []string{"", ",", f.hostPort() + ",", " ," + f.hostPort(), f.hostPort() + ", ," + f.hostPort()} {
			if _, err := tierclient.New(ctx, addr, fakeOpts(1)...); !errors.Is(err, tierclient.ErrInvalidArgument) || !strings.Contains(err.Error(), "empty coordinator address") {
				t.Errorf("New(%q): %v, want an empty-address error", addr, err)
			}
		}
		if n := f.count("GetLeader"); n != 0 {
			t.Fatalf("New contacted the coordinator %d times for invalid lists", n)
		}
	})

	t.Run("blanks and repeats", func(t *testing.T) {
		d, l := newFakeCoordinator(t), newFakeCoordinator(t)
		// d three times (host:port, its URL with a slash, blanks around it),
		// then l: the list is d,l.
		addr := " " + d.hostPort() + " , " + d.srv.URL + "/ ," + d.hostPort() + ",\t" + l.hostPort() + " "
		c, err := tierclient.New(ctx, addr, fakeOpts(2)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if d.count("GetLeader") != 1 || l.count("GetLeader") != 0 {
			t.Fatalf("GetLeader sent to d %d, l %d times; want 1, 0", d.count("GetLeader"), l.count("GetLeader"))
		}
		// d is no longer the active coordinator: the first attempt ends
		// there (NOT_LEADER without a hint), the retry goes to the next
		// configured coordinator: l, not d again under another spelling.
		d.mode.Store(fakeNotLeader)
		if err := c.CreateDatabase(ctx, "db"); err != nil {
			t.Fatal(err)
		}
		if err := c.CreateDatabase(ctx, "db2"); err != nil {
			t.Fatal(err)
		}
		if d.count("CreateDatabase") != 1 || l.count("CreateDatabase") != 2 {
			t.Fatalf("CreateDatabase sent to d %d, l %d times; want 1, 2 (l remembered)", d.count("CreateDatabase"), l.count("CreateDatabase"))
		}
	})

	t.Run("unavailable change stays, read moves on", func(t *testing.T) {
		u, l := newFakeCoordinator(t), newFakeCoordinator(t)
		c, err := tierclient.New(ctx, u.hostPort()+","+l.hostPort(), fakeOpts(1)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// u read the change and answered UNAVAILABLE: it may have acted, so
		// the attempt does not send it to l.
		u.mode.Store(fakeUnavailable)
		err = c.CreateDatabase(ctx, "db")
		if !tierclient.IsRetriable(err) || tierpb.ReasonOf(err) != tierpb.ReasonUnavailable {
			t.Fatalf("create database at an unavailable coordinator: %v, want a retriable UNAVAILABLE", err)
		}
		if u.count("CreateDatabase") != 1 || l.count("CreateDatabase") != 0 {
			t.Fatalf("CreateDatabase sent to u %d, l %d times; want 1, 0", u.count("CreateDatabase"), l.count("CreateDatabase"))
		}
		// u was found not serving: the next request starts at l.
		if err := c.CreateDatabase(ctx, "db"); err != nil {
			t.Fatal(err)
		}
		if u.count("CreateDatabase") != 1 || l.count("CreateDatabase") != 1 {
			t.Fatalf("CreateDatabase sent to u %d, l %d times; want 1, 1", u.count("CreateDatabase"), l.count("CreateDatabase"))
		}

		// A read passes over an unavailable coordinator within its one
		// attempt, and the client remembers the one that answered.
		u2, l2 := newFakeCoordinator(t), newFakeCoordinator(t)
		u2.mode.Store(fakeUnavailable)
		c2, err := tierclient.New(ctx, u2.hostPort()+","+l2.hostPort(), fakeOpts(1)...)
		if err != nil {
			t.Fatalf("New with the first coordinator unavailable: %v", err)
		}
		defer c2.Close()
		if _, err := c2.Partitions(ctx, "db", "t"); err != nil {
			t.Fatal(err)
		}
		if u2.count("GetLeader") != 1 || l2.count("GetLeader") != 1 || u2.count("ListPartitions") != 0 || l2.count("ListPartitions") != 1 {
			t.Fatalf("GetLeader at u2 %d, l2 %d, ListPartitions at u2 %d, l2 %d; want 1, 1, 0, 1",
				u2.count("GetLeader"), l2.count("GetLeader"), u2.count("ListPartitions"), l2.count("ListPartitions"))
		}
	})

	t.Run("no connection", func(t *testing.T) {
		a, l := newFakeCoordinator(t), newFakeCoordinator(t)
		c, err := tierclient.New(ctx, a.hostPort()+","+l.hostPort(), fakeOpts(1)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a.srv.Close()
		// Nothing was sent: the change moves on to l within its one attempt.
		if err := c.CreateDatabase(ctx, "db"); err != nil {
			t.Fatalf("create database with the first coordinator gone: %v", err)
		}
		if err := c.CreateDatabase(ctx, "db2"); err != nil {
			t.Fatal(err)
		}
		if a.count("CreateDatabase") != 0 || l.count("CreateDatabase") != 2 {
			t.Fatalf("CreateDatabase reached a %d, l %d times; want 0, 2", a.count("CreateDatabase"), l.count("CreateDatabase"))
		}
	})
}

// TestCoordinatorRedirectBound: two coordinators naming each other end
// each attempt after MaxLeaderRedirects redirects, and the request after
// the retry policy's attempts, with a retriable error that says what
// happened; one naming an address nobody serves ends its attempt at once.
func TestCoordinatorRedirectBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b := coordlisttest.NewNotLeaderServer(t, "coord-a"), coordlisttest.NewNotLeaderServer(t, "coord-b")
	aAddr, bAddr := a.HostPort(), b.HostPort()
	a.To.Store(&bAddr)
	b.To.Store(&aAddr)

	const attempts = 2
	_, err := tierclient.New(ctx, aAddr, fakeOpts(attempts)...)
	if !tierclient.IsRetriable(err) || !strings.Contains(err.Error(), "NOT_LEADER redirects") {
		t.Fatalf("New: %v, want a retriable error about redirects", err)
	}
	if hint, ok := tierpb.IsNotLeader(err); !ok || hint.ID != "elsewhere" {
		t.Fatalf("error %v does not wrap the last NOT_LEADER answer", err)
	}
	if n := a.Calls.Load() + b.Calls.Load(); n != attempts*(1+tierclient.MaxLeaderRedirects) {
		t.Fatalf("%d calls, want %d", n, attempts*(1+tierclient.MaxLeaderRedirects))
	}

	dead := coordlisttest.ClosedAddress(t)
	d := coordlisttest.NewNotLeaderServer(t, "coord-d")
	d.To.Store(&dead)
	_, err = tierclient.New(ctx, d.HostPort(), fakeOpts(1)...)
	if !tierclient.IsRetriable(err) || !strings.Contains(err.Error(), dead) {
		t.Fatalf("New: %v, want a retriable error naming %s", err, dead)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("error %v does not wrap the connection failure", err)
	}
	if n := d.Calls.Load(); n != 1 {
		t.Fatalf("%d calls to the coordinator naming the dead one, want 1", n)
	}
}

// coordLog is an HTTP transport that records where each CoordinatorService
// call went: host and path prefix ("127.0.0.1:1234/c/coord-2" for one
// coordinator's own address, "127.0.0.1:1234" for the tier's root).
type coordLog struct {
	mu      sync.Mutex
	calls   []string
	methods map[string]int // calls per method name
}

func (l *coordLog) RoundTrip(r *http.Request) (*http.Response, error) {
	const svc = "/" + tierv1connect.CoordinatorServiceName + "/"
	if prefix, method, ok := strings.Cut(r.URL.Path, svc); ok {
		l.mu.Lock()
		l.calls = append(l.calls, r.URL.Host+prefix)
		if l.methods == nil {
			l.methods = make(map[string]int)
		}
		l.methods[method]++
		l.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// method returns how many calls of the named method went out.
func (l *coordLog) method(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.methods[name]
}

func (l *coordLog) count(to string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if c == to {
			n++
		}
	}
	return n
}

// leaderAndStandby returns the ids of the active and the standby
// coordinator of a tier of two.
func leaderAndStandby(t *testing.T, e *daemon.Embedded) (leader, standby string) {
	t.Helper()
	l, err := e.Leader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	switch l.ID {
	case "coord-1":
		return "coord-1", "coord-2"
	case "coord-2":
		return "coord-2", "coord-1"
	}
	t.Fatalf("leader %q", l.ID)
	return "", ""
}

// writeAndRead upserts rows with ids from..from+n-1 into target and reads
// them back.
func writeAndRead(ctx context.Context, t *testing.T, c *tierclient.Client, target tierclient.Target, from int64, n int) {
	t.Helper()
	var rows, keys []kv.Row
	for i := from; i < from+int64(n); i++ {
		rows = append(rows, kv.Row{i, "v" + string(rune('a'+i%26))})
		keys = append(keys, kv.Row{i, nil})
	}
	if err := c.Upsert(ctx, target, rows); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, target, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r == nil || r[0] != rows[i][0] || r[1] != rows[i][1] {
			t.Fatalf("row %v read back as %v", rows[i], r)
		}
	}
}

// TestCoordinatorListThroughStandby gives the client a dead address and
// the standby coordinator's: it passes over the dead one, the standby
// names the active coordinator, and databases, tables, writes and reads
// work there; neither the dead address nor the standby is asked again.
func TestCoordinatorListThroughStandby(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1, Coordinators: 2})
	leader, standby := leaderAndStandby(t, e)
	dead := coordlisttest.ClosedAddress(t)
	log := &coordLog{}
	c := newClient(t, dead+", "+e.CoordinatorAddress(standby), tierclient.WithHTTPClient(&http.Client{Transport: log}))
	l, err := c.Leader(t.Context())
	if err != nil || l.ID != leader {
		t.Fatalf("leader %+v, %v; want %s", l, err, leader)
	}
	target, _ := createTable(t, c, "listed", simpleSchema(2), 1)
	writeAndRead(t.Context(), t, c, target, 1, 50)

	// New's GetLeader went to the dead address, then to the standby;
	// everything since to the active coordinator it named.
	if n := log.count(dead); n != 1 {
		t.Errorf("%d calls to the dead address, want 1", n)
	}
	if n := log.count(strings.TrimPrefix(e.CoordinatorAddress(standby), "http://")); n != 1 {
		t.Errorf("%d calls to the standby, want 1", n)
	}
}

// TestCoordinatorListFailover gives the client both coordinators' own
// addresses and crashes the active one: once its lease expires the
// standby leads, and tables, writes and reads keep working through the
// same client within its retry policy.
func TestCoordinatorListFailover(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1, Coordinators: 2, Coordinator: daemon.CoordinatorOptions{LeaseTTL: time.Second}})
	leader, standby := leaderAndStandby(t, e)
	c := newClient(t, e.CoordinatorAddress(leader)+","+e.CoordinatorAddress(standby))
	first, err := c.Leader(t.Context())
	if err != nil || first.ID != leader {
		t.Fatalf("leader %+v, %v; want %s", first, err, leader)
	}
	before, _ := createTable(t, c, "before", simpleSchema(2), 1)
	writeAndRead(t.Context(), t, c, before, 1, 20)

	if err := e.KillCoordinator(t.Context(), leader); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateTable(ctx, "db", "after", simpleSchema(2), 1); err != nil {
		t.Fatalf("create table after the crash: %v", err)
	}
	writeAndRead(ctx, t, c, tierclient.Target{Database: "db", Table: "after"}, 1, 20)
	writeAndRead(ctx, t, c, before, 100, 20)
	now, err := c.Leader(ctx)
	if err != nil || now.ID != standby || now.Epoch <= first.Epoch {
		t.Fatalf("leader after the crash %+v, %v; want %s with an epoch above %d", now, err, standby, first.Epoch)
	}
}
