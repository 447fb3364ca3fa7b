package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/thawdb/thaw/tier/tierpb"
)

// Paths served at the root of every thaw listener.
const (
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// TabletPath returns the prefix tablet server id is mounted at in the
// embedded mode: "/t/{id}/".
func TabletPath(id string) string { return "/t/" + id + "/" }

// httpServer is the Runnable of a process's one listener: HTTP/1.1 and h2c
// (gRPC needs HTTP/2 without TLS).
type httpServer struct {
	ln      net.Listener
	srv     *http.Server
	timeout time.Duration
	log     *slog.Logger
}

// httpLimits bound how long a client may hold a connection without
// progress. A request's header must arrive within 10 s in every case.
type httpLimits struct {
	// read bounds reading a whole request, body included (0: no bound; the
	// tier's listeners carry uploads of any length).
	read time.Duration
	// paced bounds instead how slowly a body may arrive (pacedBodies): a
	// client that sends a request's header and then stalls its body held
	// the connection and a goroutine for ever, before any authentication.
	paced bool
	// idle bounds a kept-alive connection's wait for its next request. It
	// is longer than the 90 s after which thaw's clients close idle
	// connections themselves, so a client never reuses one the server is
	// closing.
	idle time.Duration
}

var (
	tierHTTPLimits = httpLimits{paced: true, idle: 2 * time.Minute}
	// The promoter's requests are small JSON bodies (64 KiB at most).
	promoterHTTPLimits = httpLimits{read: time.Minute, idle: 2 * time.Minute}
)

// newHTTPServer serves h on ln: with tc, HTTPS only (HTTP/1.1 and HTTP/2
// by ALPN); without, HTTP/1.1 and h2c.
func newHTTPServer(ln net.Listener, h http.Handler, limits httpLimits, shutdownTimeout time.Duration, log *slog.Logger, tc *tls.Config) *httpServer {
	var protos http.Protocols
	protos.SetHTTP1(true)
	if tc != nil {
		protos.SetHTTP2(true)
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	if limits.paced {
		h = pacedBodies(h)
	}
	srv := &http.Server{
		Handler:           h,
		Protocols:         &protos,
		TLSConfig:         tc,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       limits.read,
		IdleTimeout:       limits.idle,
		ErrorLog:          stdlog.New(serverErrorLog{log}, "", 0),
	}
	return &httpServer{ln: ln, srv: srv, timeout: shutdownTimeout, log: log}
}

// Body pacing: a request body must arrive at paceMinRate bytes a second on
// average, after a grace of paceGrace (an upload of any length at any
// reasonable speed passes; a stalled body ends with its connection).
var (
	paceGrace   = 30 * time.Second
	paceMinRate = int64(64 << 10)
)

// pacedBodies paces the body of every request h serves (see paceGrace).
// The read deadline is set only while the body is unread: at its end the
// server clears the deadline for its own background read of the
// connection, and one set after that would cancel the handler's context
// when it passed. A body that fails (its deadline passed) closes an
// HTTP/1 connection after the answer: what remains on the wire is no
// request (the server sees that only for its own body type, which this one
// wraps); on HTTP/2 its stream alone ends.
func pacedBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			b := &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now()}
			if r.ProtoMajor == 1 {
				// (On HTTP/2 the failed stream alone ends: a Connection
				// header there would end every stream of the connection.)
				b.header = w.Header()
			}
			// Also for a handler that never reads it: the server's
			// discard of the rest after the handler ends with it.
			_ = b.rc.SetReadDeadline(b.start.Add(paceGrace)) // (not supported: unpaced)
			r.Body = b
		}
		h.ServeHTTP(w, r)
	})
}

type pacedBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	header http.Header // HTTP/1 only
	start  time.Time
	n      int64 // bytes read so far
	secs   int64 // the deadline set: start + paceGrace + secs seconds
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case err == nil && n > 0:
		if secs := b.n / paceMinRate; secs != b.secs { // (moved once a second's worth arrived)
			b.secs = secs
			_ = b.rc.SetReadDeadline(b.start.Add(paceGrace + time.Duration(secs)*time.Second))
		}
	case err != nil && !errors.Is(err, io.EOF) && b.header != nil:
		b.header.Set("Connection", "close")
	}
	return n, err
}

// Start serves until ctx is done, then shuts down gracefully: it stops
// accepting, lets running requests finish for up to the shutdown timeout
// and then closes what is left.
func (s *httpServer) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	secure := s.srv.TLSConfig != nil // read before serving: Serve configures it
	go func() {
		if secure {
			errc <- s.srv.ServeTLS(s.ln, "", "")
		} else {
			errc <- s.srv.Serve(s.ln)
		}
	}()
	s.log.Info("http listening", "addr", s.ln.Addr().String(), "tls", secure)
	select {
	case err := <-errc:
		return fmt.Errorf("daemon: serve http on %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("daemon: http shutdown: %w", err), s.srv.Close())
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// readiness is one named check of /readyz.
type readiness struct {
	name  string
	check func(ctx context.Context) error
}

// healthHandlers returns /healthz (the process serves) and /readyz (every
// check passes within 2s). Both answer 503 once draining is set.
func healthHandlers(draining func() bool, checks []readiness) (healthz, readyz http.Handler) {
	healthz = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if draining() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	readyz = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var b strings.Builder
		ok := true
		for _, c := range checks {
			if err := c.check(ctx); err != nil {
				ok = false
				fmt.Fprintf(&b, "%s: %v\n", c.name, err)
			} else {
				fmt.Fprintf(&b, "%s: ok\n", c.name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(b.String()))
	})
	return healthz, readyz
}

// switchable serves a component's handler while it is up, and UNAVAILABLE
// (in the caller's RPC protocol) while it is down: killed, restarting or
// not started yet, as a crashed server's port would refuse it.
type switchable struct {
	what string
	mu   sync.RWMutex
	h    http.Handler // nil: down
	ew   *connect.ErrorWriter
}

func newSwitchable(what string) *switchable {
	return &switchable{what: what, ew: connect.NewErrorWriter()}
}

func (s *switchable) set(h http.Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	h := s.h
	s.mu.RUnlock()
	if h == nil {
		err := tierpb.NewError(tierpb.ReasonUnavailable, s.what+" is not running", nil)
		if s.ew.IsSupported(r) {
			_ = s.ew.Write(w, r, err)
			return
		}
		http.Error(w, err.Message(), http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// gatherers is the /metrics source: the injected registry plus one
// registry per running component instance (a restarted tablet server gets
// a fresh one, so its metrics register again without conflict).
type gatherers struct {
	root prometheus.Gatherer
	mu   sync.Mutex
	regs map[string]*prometheus.Registry
}

func newGatherers(root prometheus.Gatherer) *gatherers {
	return &gatherers{root: root, regs: make(map[string]*prometheus.Registry)}
}

// component returns a fresh registry for the named component instance,
// replacing the previous one, and a Registerer that labels everything
// registered with labels (none if nil).
func (g *gatherers) component(name string, labels prometheus.Labels) prometheus.Registerer {
	reg := prometheus.NewRegistry()
	g.mu.Lock()
	g.regs[name] = reg
	g.mu.Unlock()
	if labels == nil {
		return reg
	}
	return prometheus.WrapRegistererWith(labels, reg)
}

// drop forgets a component's metrics.
func (g *gatherers) drop(name string) {
	g.mu.Lock()
	delete(g.regs, name)
	g.mu.Unlock()
}

// Gather implements prometheus.Gatherer, merging families of one name.
func (g *gatherers) Gather() ([]*dto.MetricFamily, error) {
	g.mu.Lock()
	gs := prometheus.Gatherers{g.root}
	for _, name := range slices.Sorted(maps.Keys(g.regs)) {
		gs = append(gs, g.regs[name])
	}
	g.mu.Unlock()
	return gs.Gather()
}

func metricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// serverErrorLog takes net/http's error log lines: a failed TLS handshake
// (one a line for every scanner, load-balancer probe or plain-HTTP client
// that connects, so anyone who can reach the port could flood the log)
// at DEBUG, anything else at WARN.
type serverErrorLog struct{ log *slog.Logger }

func (w serverErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg)
	return len(p), nil
}
