package tierclient

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Client reads and writes the tier. It finds the active coordinator, caches
// tables and target locations, and sends each bucket's requests to the
// bucket's leader. It is safe for concurrent use.
type Client struct {
	opts         options
	hc           connect.HTTPClient
	ownHTTP      *http.Client // built by New; nil with WithHTTPClient
	connOpts     []connect.ClientOption
	configured   string        // base URL of the configured coordinator
	inflight     chan struct{} // one token per request in flight
	closed       atomic.Bool
	batches      sync.Pool // *batch
	prefixTables sync.Map  // *kv.Table -> its prefix table

	mu struct {
		sync.Mutex
		coordURL string
		coord    tierv1connect.CoordinatorServiceClient
		tablets  map[string]tierv1connect.TabletServiceClient
		tables   map[tablePath]*TableInfo
		targets  map[Target]*targetEntry
	}
}

// New returns a client of the tier whose coordinator (any of them: a
// standby names the active one) listens at coordinatorAddress ("host:port"
// or a URL). It validates the options and asks the coordinator for the
// active one, which must answer within ctx.
func New(ctx context.Context, coordinatorAddress string, opts ...Opt) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if coordinatorAddress == "" {
		return nil, fmt.Errorf("%w: empty coordinator address", ErrInvalidArgument)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	c := &Client{opts: o, configured: baseURL(coordinatorAddress), inflight: make(chan struct{}, o.maxInFlight)}
	c.hc = o.httpClient
	if c.hc == nil {
		c.ownHTTP = newHTTPClient(o.protocol, o.maxInFlight)
		c.hc = c.ownHTTP
	}
	// Responses are not compressed: on a data center network gzip costs more
	// CPU than it saves time.
	c.connOpts = []connect.ClientOption{connect.WithAcceptCompression("gzip", nil, nil)}
	if o.protocol == ProtocolGRPC {
		c.connOpts = append(c.connOpts, connect.WithGRPC())
	}
	c.connOpts = append(c.connOpts, o.connectOpts...)
	c.mu.tablets = make(map[string]tierv1connect.TabletServiceClient)
	c.mu.tables = make(map[tablePath]*TableInfo)
	c.mu.targets = make(map[Target]*targetEntry)
	c.setCoordinator(c.configured)
	if _, err := c.Leader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// newHTTPClient returns the HTTP client of a protocol: HTTP/1.1 keeping up
// to maxInFlight idle connections per server, or cleartext HTTP/2.
func newHTTPClient(p Protocol, maxInFlight int) *http.Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxInFlight,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		Protocols:           new(http.Protocols),
	}
	if p == ProtocolConnectHTTP1 {
		t.Protocols.SetHTTP1(true)
	} else {
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: t}
}

// baseURL turns "host:port" into "http://host:port"; a URL (with a scheme)
// is kept, without a trailing slash.
func baseURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

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

func (c *Client) setCoordinator(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.coordURL != url {
		c.mu.coordURL = url
		c.mu.coord = tierv1connect.NewCoordinatorServiceClient(c.hc, url, c.connOpts...)
	}
}

func (c *Client) coordinator() (tierv1connect.CoordinatorServiceClient, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.coord, c.mu.coordURL
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

// Leader asks the coordinator for the active one and sends the client's
// coordinator requests there from now on.
func (c *Client) Leader(ctx context.Context) (LeaderInfo, error) {
	resp, err := coordCall(ctx, c, connect.NewRequest(&tierv1.GetLeaderRequest{}), tierv1connect.CoordinatorServiceClient.GetLeader)
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("tierclient: find the active coordinator: %w", err)
	}
	m := resp.Msg
	if m.GetAddress() != "" {
		c.setCoordinator(baseURL(m.GetAddress()))
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

// coordCall sends one coordinator request to the active coordinator,
// following NOT_LEADER hints and retrying retriable errors. Coordinator
// requests are metadata reads or idempotent changes, so a retry whose
// predecessor's outcome is unknown is safe where the caller asked to
// ignore existence.
func coordCall[Req, Res any](ctx context.Context, c *Client, req *connect.Request[Req],
	method func(tierv1connect.CoordinatorServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*connect.Response[Res], error) {
	r := c.newRetrier()
	for {
		if err := c.acquire(ctx); err != nil {
			return nil, err
		}
		cl, url := c.coordinator()
		rctx, cancel := context.WithTimeout(ctx, c.opts.requestTimeout)
		resp, err := method(cl, rctx, cloneRequest(req))
		cancel()
		c.release()
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		immediate := false
		hint, notLeader := tierpb.IsNotLeader(err)
		switch {
		case notLeader && hint.Address != "" && baseURL(hint.Address) != url:
			c.setCoordinator(baseURL(hint.Address))
			immediate = true
		case notLeader || classify(err) == backoff:
			// The coordinator we used may be gone or deposed: go back to
			// the configured one, which is or names the new leader.
			c.setCoordinator(c.configured)
		default:
			return nil, err
		}
		if !r.next(ctx, immediate) {
			return nil, err
		}
		c.opts.logger.Debug("tierclient: retry coordinator request", "request", fmt.Sprintf("%T", req.Msg), "attempt", r.attempt, "err", err)
	}
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
