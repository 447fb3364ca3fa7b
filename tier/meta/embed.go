package meta

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EmbeddedConfig configures a single-member etcd run inside the process.
type EmbeddedConfig struct {
	// Dir is the data directory (required). A restart on the same
	// directory keeps all data.
	Dir string
	// ClientURL is where clients connect: "host:port" or
	// "http://host:port"; default "127.0.0.1:0" (a random free port, see
	// Endpoints). Plain HTTP unless CertFile is set: bind it to loopback
	// unless the network is trusted.
	ClientURL string
	// Advertise is the "host:port" other processes reach etcd at (the
	// scheme follows CertFile): Endpoints returns it and etcd's member
	// list publishes it. Default: the listener's address. The process's
	// own clients (Client) dial the listener itself.
	Advertise string
	// CertFile and KeyFile, when set, make etcd serve its clients over TLS
	// with this key pair (Endpoints are https://; etcd reads the files at
	// each handshake); ClientCAFile then also makes it require client
	// certificates signed by a CA of that PEM bundle. ClientTLS is how
	// Client connects (trusting CertFile's issuer, presenting a client
	// certificate if required). With ClientTLS nil, Client trusts exactly
	// the certificate CertFile holds at each handshake, whatever signed it
	// and whatever address it names, and with ClientCAFile it presents
	// that same key pair as its client certificate (which must then allow
	// client authentication and be signed by a CA of ClientCAFile: see
	// CheckServingFiles).
	CertFile, KeyFile, ClientCAFile string
	ClientTLS                       *tls.Config
	// Logger receives etcd's warnings and errors; nil discards them.
	Logger *slog.Logger
	// CompactionRetention is how much history etcd keeps (periodic
	// compaction); default one hour. Watches that fall further behind
	// list again.
	CompactionRetention time.Duration
	// UnsafeNoFsync turns off fsync: a crash can lose acknowledged writes.
	// For tests only.
	UnsafeNoFsync bool
}

// Embedded is a running single-member etcd.
type Embedded struct {
	e         *embed.Etcd
	log       *slog.Logger
	scheme    string      // of Endpoints
	advertise string      // host:port, or "" for the listener's
	clientTLS *tls.Config // Client's

	closeOnce sync.Once
	closeErr  error
}

// StartEmbedded starts etcd and returns once it serves clients, or fails
// when it cannot start or ctx is done first.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: embedded etcd: no data directory", ErrInvalid)
	}
	clientURL, err := parseListenURL(cfg.ClientURL)
	if err != nil {
		return nil, err
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") || (cfg.ClientCAFile != "" && cfg.CertFile == "") {
		return nil, fmt.Errorf("%w: embedded etcd: TLS needs a certificate and its key (and a client CA bundle only with them)", ErrInvalid)
	}
	if cfg.CertFile != "" {
		// etcd would start anyway and fail every handshake.
		ownCA := cfg.ClientCAFile
		if cfg.ClientTLS != nil {
			ownCA = "" // the own clients present ClientTLS's certificate
		}
		if err := CheckServingFiles(cfg.CertFile, cfg.KeyFile, ownCA); err != nil {
			return nil, fmt.Errorf("meta: embedded etcd: %w", err)
		}
	}
	if cfg.CertFile != "" {
		clientURL.Scheme = "https"
	}
	if cfg.Advertise != "" {
		if err := CheckAdvertise(cfg.Advertise); err != nil {
			return nil, err
		}
	}
	if cfg.CompactionRetention == 0 {
		cfg.CompactionRetention = time.Hour
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ec := embed.NewConfig()
	ec.Dir = cfg.Dir
	// A name of its own (etcd warns of the default one). The initial
	// cluster only bootstraps a new data directory; one made under the old
	// default name keeps its membership and takes the new name.
	ec.Name = memberName
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ListenClientUrls = []url.URL{clientURL}
	// One member never talks to a peer, but etcd wants a peer listener.
	ec.ListenPeerUrls = []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(log))
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = cfg.CompactionRetention.String()
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.CertFile != "" {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
			TrustedCAFile: cfg.ClientCAFile, ClientCertAuth: cfg.ClientCAFile != ""}
		ec.AdvertiseClientUrls = ec.ListenClientUrls
	}
	if cfg.Advertise != "" {
		ec.AdvertiseClientUrls = []url.URL{{Scheme: clientURL.Scheme, Host: cfg.Advertise}}
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.Dir, err)
	}
	clientTLS := cfg.ClientTLS
	if clientTLS == nil && cfg.CertFile != "" {
		clientTLS = ownClientTLS(cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile != "")
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Embedded{e: e, log: log, scheme: clientURL.Scheme, advertise: cfg.Advertise, clientTLS: clientTLS}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.Dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.Dir, context.Cause(ctx))
	}
}

// ownClientTLS is the TLS of an embedded etcd's own clients: the server
// must present exactly the certificate certFile holds now (read at each
// handshake, so a renewed pair applies as it does to etcd), and with
// present the client presents the same pair.
func ownClientTLS(certFile, keyFile string, present bool) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// VerifyConnection does the verification: pinning the one
		// certificate etcd serves needs no chain and no name.
		InsecureSkipVerify: true, //nolint:gosec // see VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("meta: embedded etcd's own certificate: %w", err)
			}
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pair.Certificate[0]) {
				return fmt.Errorf("meta: the server is not the embedded etcd: it did not present the certificate of %s", certFile)
			}
			return nil
		},
	}
	if present {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("meta: embedded etcd's own certificate: %w", err)
			}
			return &pair, nil
		}
	}
	return c
}

// CheckServingFiles reports why an embedded etcd could not serve TLS
// with the key pair of certFile and keyFile (nil if it can): the pair must
// load, and with clientCAFile (etcd then requires client certificates and
// its own clients present that pair) it must be signed by a CA of that PEM
// bundle and allow client authentication.
func CheckServingFiles(certFile, keyFile, clientCAFile string) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("%w: key pair %s and %s: %w", ErrInvalid, certFile, keyFile, err)
	}
	if clientCAFile == "" {
		return nil
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, certFile, err)
	}
	b, err := os.ReadFile(clientCAFile)
	if err != nil {
		return fmt.Errorf("%w: client CA bundle: %w", ErrInvalid, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("%w: client CA bundle %s holds no PEM certificate", ErrInvalid, clientCAFile)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("%w: %s cannot authenticate the embedded etcd's own clients (it must be signed by a CA of %s and allow client authentication): %w",
			ErrInvalid, certFile, clientCAFile, err)
	}
	return nil
}

// memberName is the name of the embedded member.
const memberName = "thaw"

// parseListenURL accepts "host:port" or "http://host:port"; "" is
// 127.0.0.1:0.
func parseListenURL(s string) (url.URL, error) {
	if s == "" {
		s = "127.0.0.1:0"
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
		return url.URL{}, fmt.Errorf("%w: embedded etcd client url %q (want host:port or http://host:port)", ErrInvalid, s)
	}
	return url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// Endpoints returns the client URLs other processes reach etcd at: the
// advertised one, or those etcd listens on, with the ports it got.
func (m *Embedded) Endpoints() []string {
	if m.advertise != "" {
		return []string{m.scheme + "://" + m.advertise}
	}
	return m.listenEndpoints()
}

func (m *Embedded) listenEndpoints() []string {
	eps := make([]string, len(m.e.Clients))
	for i, l := range m.e.Clients {
		eps[i] = m.scheme + "://" + l.Addr().String()
	}
	return eps
}

// CheckAdvertise accepts a host:port a client can dial (ErrInvalid
// otherwise): CheckDialable, for the embedded etcd's advertised address.
func CheckAdvertise(s string) error {
	if err := CheckDialable(s); err != nil {
		return fmt.Errorf("%w: embedded etcd advertise %q: %w", ErrInvalid, s, err)
	}
	return nil
}

// CheckDialable checks that s is a host:port another process can dial: a
// port in 1..65535 and a host that is neither empty nor an unspecified
// address (0.0.0.0, ::), which would make the dialler reach its own host.
func CheckDialable(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	switch {
	case err != nil || p < 1 || p > 65535:
		return errors.New("want a port in 1..65535")
	case host == "" || strings.ContainsAny(host, "/ @?#"):
		return errors.New("want a host name or address")
	case net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
		return errors.New("an unspecified address cannot be dialled")
	}
	return nil
}

// Addrs returns the addresses etcd listens on for clients.
func (m *Embedded) Addrs() []net.Addr {
	out := make([]net.Addr, len(m.e.Clients))
	for i, l := range m.e.Clients {
		out[i] = l.Addr()
	}
	return out
}

// Client connects a new client to the embedded etcd; the caller closes it,
// before Close.
func (m *Embedded) Client(ctx context.Context) (*clientv3.Client, error) {
	return Connect(ctx, m.listenEndpoints(), ClientOptions{Logger: m.log, TLS: m.clientTLS})
}

// Close stops etcd, waiting for it to shut down, and returns the error it
// stopped with, if any. Later calls return the same.
func (m *Embedded) Close() error {
	m.closeOnce.Do(func() {
		m.e.Close()
		select {
		case err, ok := <-m.e.Err():
			if ok && err != nil {
				m.closeErr = fmt.Errorf("meta: embedded etcd: %w", err)
			}
		default:
		}
	})
	return m.closeErr
}

// ClientOptions configures Connect.
type ClientOptions struct {
	DialTimeout time.Duration // default 5s
	TLS         *tls.Config   // nil: plain HTTP
	// Roots, with TLS, is the CA bundle as it is now: each new connection
	// (the first, and every reconnection) verifies etcd against what it
	// returns at the handshake instead of TLS.RootCAs, so a bundle that
	// changes while the client runs applies without a new client. Nil:
	// TLS.RootCAs.
	Roots              func() *x509.CertPool
	Username, Password string
	Logger             *slog.Logger // the client's warnings and errors; nil discards them
}

// KeepAliveTime and KeepAliveTimeout are the gRPC keepalive of Connect's
// clients: a ping after KeepAliveTime without traffic (10 s is gRPC's
// least; etcd's server takes pings every 5 s or more), and a connection
// whose ping is not answered within KeepAliveTimeout is closed, so that
// the client reconnects and its watches resume.
const (
	KeepAliveTime    = 10 * time.Second
	KeepAliveTimeout = 5 * time.Second
)

// Connect returns a client of the etcd cluster at endpoints once one of
// them has answered a read, or fails when ctx is done first (logging a
// warning every DialTimeout meanwhile). The client lives until closed,
// not until ctx is done. Over TLS it first shakes hands with each
// endpoint: when every one fails in a way no retry mends (etcd's
// certificate does not verify, etcd refuses the client's), it fails at
// once with that reason (ErrTLS) instead of waiting.
func Connect(ctx context.Context, endpoints []string, opts ClientOptions) (*clientv3.Client, error) {
	if len(endpoints) == 0 || slices.Contains(endpoints, "") {
		return nil, fmt.Errorf("%w: connect etcd: endpoints %q", ErrInvalid, endpoints)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var dialOpts []grpc.DialOption
	if opts.TLS != nil {
		if err := probeTLS(ctx, endpoints, withRoots(opts.TLS, opts.Roots), opts.DialTimeout); err != nil {
			return nil, fmt.Errorf("meta: connect etcd %v: %w", endpoints, err)
		}
		if opts.Roots != nil {
			// Given after the client's own credentials, so they win.
			dialOpts = append(dialOpts, grpc.WithTransportCredentials(&rootsCreds{tls: opts.TLS.Clone(), roots: opts.Roots}))
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: opts.DialTimeout,
		// gRPC pings: without them a connection that dies without a reset
		// (a host off the network, a dropped NAT entry) looks alive, and a
		// watch over it delivers nothing, without an error, for as long
		// as the kernel keeps the socket (a watch-only client: for ever).
		// Only while a call or a watch is open: etcd's server counts pings
		// on an idle connection as abuse and closes it (too_many_pings).
		DialKeepAliveTime:    KeepAliveTime,
		DialKeepAliveTimeout: KeepAliveTimeout,
		TLS:                  opts.TLS,
		DialOptions:          dialOpts,
		Username:             opts.Username,
		Password:             opts.Password,
		Logger:               zapLogger(log),
	})
	if err != nil {
		return nil, fmt.Errorf("meta: connect etcd %v: %w", endpoints, err)
	}
	// The read etcdctl's health check makes: any answer, even "permission
	// denied", proves a member with a quorum serves us.
	// Only silence is waited out; any other answer (wrong credentials,
	// say) fails at once.
	for {
		actx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
		_, err := cli.Get(actx, "health")
		timedOut := actx.Err() != nil
		cancel()
		switch {
		case err == nil || errors.Is(err, rpctypes.ErrPermissionDenied):
			return cli, nil
		case ctx.Err() != nil:
			return nil, errors.Join(fmt.Errorf("meta: connect etcd %v: %w", endpoints, context.Cause(ctx)), cli.Close())
		case !timedOut && !transient(err):
			return nil, errors.Join(fmt.Errorf("meta: connect etcd %v: %w", endpoints, err), cli.Close())
		}
		log.Warn("etcd does not answer yet; still trying", "endpoints", endpoints, "err", err)
	}
}

// transient reports whether an etcd error that came back before its
// deadline may pass: no leader or a leader change, an election timeout.
func transient(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// ErrTLS: a TLS handshake with etcd failed in a way no retry mends.
var ErrTLS = errors.New("TLS handshake with etcd failed")

// probeTLS shakes hands with each https:// endpoint (bounded by timeout)
// and returns ErrTLS when every one failed for a reason that retrying
// cannot mend: the server's certificate does not verify, or the server
// rejected the client's certificate (or the lack of one). Network
// failures are left to the client's own retries.
func probeTLS(ctx context.Context, endpoints []string, tc *tls.Config, timeout time.Duration) error {
	var errs []error
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			return nil
		}
		err = handshake(ctx, u.Host, tc, timeout)
		if err == nil || !permanentTLS(err) {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u.Host, err))
	}
	return fmt.Errorf("%w: %w", ErrTLS, errors.Join(errs...))
}

// handshake completes a TLS handshake with addr and waits briefly for the
// server's verdict on the client's certificate (under TLS 1.3 a rejection
// arrives as an alert after the client's side is done).
func handshake(ctx context.Context, addr string, tc *tls.Config, timeout time.Duration) error {
	c := tc.Clone()
	c.NextProtos = []string{"h2"}
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := tls.Dialer{Config: c}
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The client speaks first in HTTP/2; the server's alert, if any,
	// arrives within this read.
	_ = conn.SetReadDeadline(time.Now().Add(min(timeout, 500*time.Millisecond)))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// permanentTLS reports whether a handshake error is a verdict on the
// certificates: ours did not verify theirs, or theirs rejected ours (a
// "remote error" alert about a certificate, or access denied).
func permanentTLS(err error) bool {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return true
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	msg := op.Err.Error()
	return strings.Contains(msg, "certificate") || strings.Contains(msg, "access denied")
}

// zapLogger bridges etcd's zap logging to slog, warnings and errors only.
func zapLogger(log *slog.Logger) *zap.Logger {
	if log.Handler() == slog.DiscardHandler {
		return zap.NewNop()
	}
	return zap.New(slogCore{log: log})
}

// slogCore is a zapcore.Core that writes warnings and errors to slog with
// the message "etcd" and etcd's message as the attribute "event".
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{log: c.log, fields: append(slices.Clip(c.fields), fields...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// quietEvents are etcd warnings that do not apply to the embedded member,
// dropped so that every start does not log them:
//   - it never enables etcd's authentication, so the token type that
//     authentication would sign with does not matter;
//   - it serves gRPC and etcd's HTTP endpoints on its one client port (a
//     second port, as etcd advises for production clusters, cannot be
//     had when the client port is chosen by the system, and nothing of
//     thaw uses the HTTP endpoints).
var quietEvents = map[string]bool{
	"simple token is not cryptographically signed":                                         true,
	"Running http and grpc server on single port. This is not recommended for production.": true,
}

// quiet reports whether an etcd warning is dropped: a quietEvents one, or
// the client's note that a call failed because its caller cancelled it
// (the retry interceptor warns of every failed attempt, and a cancelled
// call is the caller's own doing: a restore given up when its replica was
// reassigned, a server stopping).
func quiet(e zapcore.Entry, fields []zapcore.Field) bool {
	if quietEvents[e.Message] {
		return true
	}
	if e.Message != "retrying of unary invoker failed" {
		return false
	}
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && status.Code(err) == codes.Canceled {
			return true
		}
	}
	return false
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if quiet(e, fields) {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+2)
	attrs = append(attrs, slog.String("event", e.Message))
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	c.log.LogAttrs(context.Background(), level, "etcd", attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }
