package tierclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/coordlist"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Client reads and writes the tier. It finds the active coordinator, caches
// tables and target locations, and sends each bucket's requests to the
// bucket's leader. It is safe for concurrent use.
//
// Coordinator requests go to the coordinator the client last reached. One
// that is not the active one answers NOT_LEADER, usually naming the active
// one; the client repeats the request there at once (at most
// MaxLeaderRedirects times per attempt) and sends later requests there
// too. With several configured coordinators, one that cannot be connected
// to is passed over for the next configured one within the attempt (reads
// also pass over one that is unavailable), and an attempt that found its
// coordinator not serving (NOT_LEADER, no connection, UNAVAILABLE, a
// transport failure) leaves later requests to start at the next
// configured one. A failed attempt is retried under the RetryPolicy; for a
// coordinator request, an attempt is one such pass, which never waits.
type Client struct {
	opts         options
	hc           connect.HTTPClient
	ownHTTP      *http.Client // built by New; nil with WithHTTPClient
	connOpts     []connect.ClientOption
	coords       *coordlist.List[tierv1connect.CoordinatorServiceClient] // where coordinator requests go
	inflight     chan struct{}                                           // one token per request in flight
	closed       atomic.Bool
	batches      sync.Pool // *batch
	prefixTables sync.Map  // *kv.Table -> its prefix table

	mu struct {
		sync.Mutex
		tablets map[string]tierv1connect.TabletServiceClient
		tables  map[tablePath]*TableInfo
		targets map[Target]*targetEntry
	}
}

// New returns a client of the tier whose coordinators listen at
// coordinatorAddress: one address ("host:port" or a URL) or a
// comma-separated list of them ("a:7070,b:7070"; blanks are trimmed,
// repeats dropped, an empty entry is ErrInvalidArgument). Any coordinator
// will do, active or standby: a standby names the active one (see
// Client). New validates the options and asks the coordinators for the
// active one, which must answer within ctx.
func New(ctx context.Context, coordinatorAddress string, opts ...Opt) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	seeds, err := coordlist.Parse(coordinatorAddress)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Client{opts: o, inflight: make(chan struct{}, o.maxInFlight)}
	c.hc = o.httpClient
	if c.hc == nil {
		c.ownHTTP = newHTTPClient(o.protocol, o.maxInFlight, o.tlsConfig)
		c.hc = c.ownHTTP
	}
	// Responses are not compressed: on a data center network gzip costs more
	// CPU than it saves time.
	c.connOpts = []connect.ClientOption{connect.WithAcceptCompression("gzip", nil, nil)}
	if o.protocol == ProtocolGRPC {
		c.connOpts = append(c.connOpts, connect.WithGRPC())
	}
	if o.bearer != "" {
		c.connOpts = append(c.connOpts, connect.WithInterceptors(tierpb.Bearer(o.bearer)))
	}
	c.connOpts = append(c.connOpts, o.connectOpts...)
	c.mu.tablets = make(map[string]tierv1connect.TabletServiceClient)
	c.mu.tables = make(map[tablePath]*TableInfo)
	c.mu.targets = make(map[Target]*targetEntry)
	c.coords = coordlist.New(seeds, func(url string) tierv1connect.CoordinatorServiceClient {
		return tierv1connect.NewCoordinatorServiceClient(c.hc, url, c.connOpts...)
	})
	if _, err := c.Leader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// newHTTPClient returns the HTTP client of a protocol: HTTP/1.1 keeping up
// to maxInFlight idle connections per server, or HTTP/2 (cleartext for
// http:// servers); https:// servers get TLS with tc (nil: the system's
// roots).
func newHTTPClient(p Protocol, maxInFlight int, tc *tls.Config) *http.Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxInFlight,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		Protocols:           new(http.Protocols),
		TLSHandshakeTimeout: 10 * time.Second,
	}
	if tc != nil {
		t.TLSClientConfig = tc.Clone()
	}
	if p == ProtocolConnectHTTP1 {
		t.Protocols.SetHTTP1(true)
	} else {
		t.Protocols.SetUnencryptedHTTP2(true)
		t.Protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: t}
}

// baseURL turns "host:port" into "http://host:port"; a URL (with a scheme)
// is kept, without a trailing slash.
func baseURL(addr string) string { return coordlist.BaseURL(addr) }

// Close releases the client's idle connections. Calls in progress fail or
// finish; later calls fail with ErrClosed. Writers must be closed first.
func (c *Client) Close() {
	if c.closed.Swap(true) {
		return
	}
	if c.ownHTTP != nil {
		c.ownHTTP.CloseIdleConnections()
	}
}

func (c *Client) tablet(url string) tierv1connect.TabletServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.mu.tablets[url]
	if !ok {
		t = tierv1connect.NewTabletServiceClient(c.hc, url, c.connOpts...)
		c.mu.tablets[url] = t
	}
	return t
}

// LeaderInfo names the active coordinator.
type LeaderInfo struct {
	ID      string
	Epoch   int64
	Address string
}

// Leader asks the coordinators for the active one and sends the client's
// coordinator requests there from now on.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	resp, co, err := coordCallAt(ctx, c, connect.NewRequest(&tierv1.GetLeaderRequest{}), tierv1connect.CoordinatorServiceClient.GetLeader)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("tierclient: find the active coordinator: %w", err)
	}
	m := resp.Msg
	if m.GetAddress() != "" {
		c.coords.MoveTo(baseURL(m.GetAddress()), co)
	}
	return LeaderInfo{ID: m.GetCoordinatorId(), Epoch: m.GetEpoch(), Address: m.GetAddress()}, nil
}

// acquire takes an in-flight token.
func (c *Client) acquire(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	select {
	case c.inflight <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) release() { <-c.inflight }

// coordCall sends one coordinator request to the active coordinator and
// retries it under the retry policy. An attempt (see coordPass) follows
// NOT_LEADER hints and passes over coordinators it cannot reach; an
// attempt that failed with NOT_LEADER or a retriable error (UNAVAILABLE, a
// transport failure, a timeout) is retried after a backoff, whatever the
// request. Coordinator requests are metadata reads or changes that are
// idempotent where the caller asked to ignore existence
// (CreateDatabase, CreatePartition, DropTable), so a retry whose
// predecessor's outcome is unknown is safe for them; a retried CreateTable
// may find the table it created (ALREADY_EXISTS).
func coordCall[Req, Res any](ctx context.Context, c *Client, req *connect.Request[Req],
	method func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	resp, _, err := coordCallAt(ctx, c, req, method)
	return resp, err
}

// coordCallAt is coordCall, also returning the coordinator that answered.
func coordCallAt[Req, Res any](ctx context.Context, c *Client, req *connect.Request[Req],
	method func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], *coordinator, error) {
	kind := kindOf(req.Msg)
	r := c.newRetrier()
	for {
		resp, co, err := coordPass(ctx, c, kind, req, method)
		if err == nil {
			return resp, co, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		if _, notLeader := tierpb.IsNotLeader(err); !notLeader && classify(err) != backoff {
			return nil, nil, err
		}
		if !r.next(ctx, false) {
			return nil, nil, err
		}
		c.opts.logger.Debug("tierclient: retry coordinator request", "request", fmt.Sprintf("%T", req.Msg), "attempt", r.attempt, "err", err)
	}
}

// coordPass makes one attempt of a coordinator request without waiting:
// one pass of coordlist.Route (NOT_LEADER hints followed at most
// MaxLeaderRedirects times, a read moved on past an unavailable
// coordinator, a change never sent twice after an answer), each send
// bounded by the request timeout and the in-flight limit. It returns the
// answer and the coordinator that gave it, or the last error as it is
// (the tierpb classifiers see through the wrapping).
func coordPass[Req, Res any](ctx context.Context, c *Client, kind callKind, req *connect.Request[Req],
	method func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], *coordinator, error) {
	var resp *connect.Response[Res]
	co, err := coordlist.Route(ctx, c.coords, kind == read, func(err error) bool { return classify(err) == backoff },
		c.opts.logger, "tierclient", func(co *coordinator) error {
			if err := c.acquire(ctx); err != nil {
				return err
			}
			defer c.release()
			rctx, cancel := context.WithTimeout(ctx, c.opts.requestTimeout)
			defer cancel()
			var err error
			resp, err = method(co.Svc, rctx, cloneRequest(req))
			return err
		})
	if err != nil {
		return nil, nil, err
	}
	return resp, co, nil
}

// cloneRequest copies req's message pointer and headers into a new request,
// since connect records per-call state in the request it sends.
func cloneRequest[T any](req *connect.Request[T]) *connect.Request[T] {
	out := connect.NewRequest(req.Msg)
	for k, v := range req.Header() {
		out.Header()[k] = v
	}
	return out
}

// retrier paces the attempts of one request under the retry policy.
type retrier struct {
	p         RetryPolicy
	start     time.Time
	attempt   int // attempts made so far
	immediate bool
}

func (c *Client) newRetrier() *retrier {
	return &retrier{p: c.opts.retry, start: time.Now(), attempt: 1}
}

// bounded returns ctx bounded by what is left of the retry budget, for a
// call made between attempts (a location refresh, with its own retries):
// it cannot carry the request's last attempt past RetryPolicy.Timeout.
func (r *retrier) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.p.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, r.start.Add(r.p.Timeout))
}

// next waits before the next attempt and reports whether to make it. An
// immediate retry (a new leader is known) skips the wait, but two in a row
// do not, so a leader moving back and forth cannot spin.
func (r *retrier) next(ctx context.Context, immediate bool) bool {
	if r.p.MaxAttempts > 0 && r.attempt >= r.p.MaxAttempts {
		return false
	}
	if r.p.Timeout > 0 && time.Since(r.start) >= r.p.Timeout {
		return false
	}
	skip := immediate && !r.immediate
	r.immediate = skip
	r.attempt++
	if skip {
		return ctx.Err() == nil
	}
	d := r.p.MinBackoff << min(r.attempt-2, 30)
	if d <= 0 || d > r.p.MaxBackoff {
		d = r.p.MaxBackoff
	}
	d = d/2 + rand.N(d/2+1) // jitter in [d/2, d]
	if r.p.Timeout > 0 {
		d = min(d, r.p.Timeout-time.Since(r.start))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
