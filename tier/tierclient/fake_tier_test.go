package tierclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/tier/tierpb"
)

// fakeCoord is a coordinator of one table, db.x (simpleSchema(1)), whose
// one bucket leads at tablet; from failFrom on it answers every location
// request UNAVAILABLE. A fake: the tests need a tier that fails at exact
// moments.
type fakeCoord struct {
	tierv1connect.UnimplementedCoordinatorServiceHandler
	tablet   string
	failFrom time.Time
}

func (f *fakeCoord) GetLeader(context.Context, *connect.Request[tierv1.GetLeaderRequest]) (*connect.Response[tierv1.GetLeaderResponse], error) {
	return connect.NewResponse(&tierv1.GetLeaderResponse{CoordinatorId: "fake", Epoch: 1}), nil
}

func (f *fakeCoord) GetTable(context.Context, *connect.Request[tierv1.GetTableRequest]) (*connect.Response[tierv1.GetTableResponse], error) {
	return connect.NewResponse(&tierv1.GetTableResponse{Table: &tierv1.TableInfo{TableId: 7,
		Path: &tierv1.TablePath{Database: "db", Table: "x"}, Schema: tierclient.SchemaToProto(simpleSchema(1)),
		DataState: tierv1.DataState_DATA_STATE_ACTIVE}}), nil
}

func (f *fakeCoord) GetTargetLocations(context.Context, *connect.Request[tierv1.GetTargetLocationsRequest]) (*connect.Response[tierv1.GetTargetLocationsResponse], error) {
	if time.Now().After(f.failFrom) {
		return nil, tierpb.NewError(tierpb.ReasonUnavailable, "fake: coordinator unavailable", nil)
	}
	return connect.NewResponse(&tierv1.GetTargetLocationsResponse{TargetId: &tierv1.TargetId{TableId: 7},
		Schema: tierclient.SchemaToProto(simpleSchema(1)), DataState: tierv1.DataState_DATA_STATE_ACTIVE,
		Buckets: []*tierv1.BucketLocation{{Bucket: 0, LeaderId: "ts", LeaderAddress: f.tablet, LeaderEpoch: 1}}}), nil
}

// unavailableTablet answers every Lookup UNAVAILABLE.
type unavailableTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
}

func (f *unavailableTablet) Lookup(context.Context, *connect.Request[tierv1.LookupRequest]) (*connect.Response[tierv1.LookupResponse], error) {
	return nil, tierpb.NewError(tierpb.ReasonUnavailable, "fake: tablet unavailable", nil)
}

// attemptClock is an http.RoundTripper that records when the client sends
// each request to host: the attempts' starts as the client decides them,
// not as a loaded machine delivers them to the server.
type attemptClock struct {
	host   string
	mu     sync.Mutex
	starts []time.Time
}

func (a *attemptClock) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == a.host {
		a.mu.Lock()
		a.starts = append(a.starts, time.Now())
		a.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestRetryBudgetBoundsRefreshes: RetryPolicy.Timeout bounds the time from
// a request's first attempt to the start of its last one, also when the
// location refreshes between attempts meet an unavailable coordinator
// (each has retries of its own: unbounded, they carried the last attempt
// to about twice the Timeout).
func TestRetryBudgetBoundsRefreshes(t *testing.T) {
	tab := &unavailableTablet{}
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	tsrv := httptest.NewServer(th)
	defer tsrv.Close()
	const timeout = time.Second
	co := &fakeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://"), failFrom: time.Now().Add(900 * time.Millisecond)}
	_, ch := tierv1connect.NewCoordinatorServiceHandler(co)
	csrv := httptest.NewServer(ch)
	defer csrv.Close()
	clock := &attemptClock{host: strings.TrimPrefix(tsrv.URL, "http://")}
	c, err := tierclient.New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"),
		tierclient.WithHTTPClient(&http.Client{Transport: clock}),
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: timeout, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Get(t.Context(), tierclient.Target{Database: "db", Table: "x"}, []kv.Row{{int64(1), nil}})
	took := time.Since(start)
	clock.mu.Lock()
	defer clock.mu.Unlock()
	if len(clock.starts) == 0 {
		t.Fatalf("Get: %v: no attempt reached the tablet", err)
	}
	first, last := clock.starts[0], clock.starts[len(clock.starts)-1]
	t.Logf("Get: %v after %v; %d attempts, last started %v after the first", err, took.Round(time.Millisecond), len(clock.starts), last.Sub(first).Round(time.Millisecond))
	// The margin is scheduling slack; unbounded, the gap was ~1.9 s.
	if d := last.Sub(first); d > timeout+400*time.Millisecond {
		t.Errorf("last attempt started %v after the first; RetryPolicy.Timeout is %v", d.Round(time.Millisecond), timeout)
	}
}

// writeTablet answers Write with what write returns and counts the rows it
// took.
type writeTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	write func(*tierv1.WriteRequest) error
	rows  atomic.Int64
}

func (f *writeTablet) Write(_ context.Context, req *connect.Request[tierv1.WriteRequest]) (*connect.Response[tierv1.WriteResponse], error) {
	if err := f.write(req.Msg); err != nil {
		return nil, err
	}
	f.rows.Add(int64(len(req.Msg.GetMutations())))
	return connect.NewResponse(&tierv1.WriteResponse{Count: int32(len(req.Msg.GetMutations()))}), nil
}

// writerOnFake is a client of a fakeCoord leading at tab, buffering one
// byte (so a second Write waits for the first's batch), trying once.
func writerOnFake(t *testing.T, tab *writeTablet) *tierclient.Client {
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	tsrv := httptest.NewServer(th)
	t.Cleanup(tsrv.Close)
	co := &fakeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://"), failFrom: time.Now().Add(time.Hour)}
	_, ch := tierv1connect.NewCoordinatorServiceHandler(co)
	csrv := httptest.NewServer(ch)
	t.Cleanup(csrv.Close)
	c, err := tierclient.New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"),
		tierclient.WithHTTPClient(http.DefaultClient),
		tierclient.WithMaxBatchBytes(1), tierclient.WithMaxBufferedBytes(1),
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// secondWriteWaits opens a Writer of db.x on a fake tier leading at tab,
// writes one row (its batch goes to tab) and starts a second Write, which
// waits for buffer space; the channel gets its result.
func secondWriteWaits(t *testing.T, tab *writeTablet) (*tierclient.Writer, <-chan error) {
	t.Helper()
	w, err := writerOnFake(t, tab).NewWriter(t.Context(), tierclient.Target{Database: "db", Table: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), kv.Row{int64(1), "a"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Write(t.Context(), kv.Row{int64(2), "b"}) }()
	return w, done
}

// TestWriteWaitingWhenWriterFails: a Write waiting for buffer space when
// the Writer fails returns the failure (the dropped buffers are what
// freed the space), not nil with its row queued on a failed Writer.
func TestWriteWaitingWhenWriterFails(t *testing.T) {
	release := make(chan struct{})
	tab := &writeTablet{write: func(*tierv1.WriteRequest) error {
		<-release
		return tierpb.NewError(tierpb.ReasonInvalidArgument, "fake: bad batch", nil)
	}}
	w, done := secondWriteWaits(t, tab)
	time.Sleep(200 * time.Millisecond) // the Write waits (else it fails at once, which passes too)
	close(release)
	if err := <-done; err == nil {
		t.Errorf("Write returned nil after the Writer failed")
	}
	_ = w.Close(t.Context())
}

// TestWriteRacingClose: a Write waiting for buffer space while Close
// flushes either fails (ErrClosed) or has its row sent before Close
// returns nil; it was possible for both to return nil and the row never
// to be sent (the Write queued it after Close found nothing buffered).
func TestWriteRacingClose(t *testing.T) {
	lost := 0
	for i := range 40 {
		release := make(chan struct{})
		tab := &writeTablet{write: func(*tierv1.WriteRequest) error { <-release; return nil }}
		w, werr := secondWriteWaits(t, tab)
		time.Sleep(20 * time.Millisecond)
		cerr := make(chan error)
		go func() { cerr <- w.Close(t.Context()) }()
		time.Sleep(20 * time.Millisecond)
		close(release)
		e1, e2 := <-werr, <-cerr
		if e1 == nil && e2 == nil && tab.rows.Load() != 2 {
			lost++
			t.Logf("iteration %d: Write and Close returned nil, the server got %d of 2 rows", i, tab.rows.Load())
		}
	}
	if lost > 0 {
		t.Errorf("%d of 40: a row whose Write returned nil was never sent, and Close returned nil", lost)
	}
}
