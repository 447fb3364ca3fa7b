package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/internal/flock"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/changelog/kafkalog"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
	"github.com/thawdb/thaw/tier/tierpb"
)

// EnvEtcdPassword is the environment variable holding the etcd password
// of thaw coordinator and thaw tablet (never in the config file).
const EnvEtcdPassword = "THAW_ETCD_PASSWORD"

// EnvToken is the environment variable holding a caller's bearer token
// for a tier that authenticates its callers (coordinator.callers: bulk
// loads, and DDL and reads and writes with authorize_ddl and
// authorize_data): the client commands, the benchmarks and thaw promoter
// send it. Never in a config file.
const EnvToken = "THAW_TOKEN"

// EnvUploadKey is the environment variable holding the upload gateway's
// signing key of thaw coordinator: 64 hex digits (32 bytes), the same for
// every coordinator of a tier so that each accepts the capabilities the
// others minted. Without it each coordinator signs with a random key of its
// own and builders ask the new active coordinator for new capabilities
// after a failover.
const EnvUploadKey = "THAW_UPLOAD_KEY"

// uploadKey reads EnvUploadKey: nil when unset.
func uploadKey() ([]byte, error) {
	v, ok := os.LookupEnv(EnvUploadKey)
	if !ok || v == "" {
		return nil, nil
	}
	k, err := hex.DecodeString(strings.TrimSpace(v))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("daemon: %s must be 64 hex digits (32 bytes), have %d characters", EnvUploadKey, len(v))
	}
	return k, nil
}

// RunOptions are the process-level dependencies of the Run functions.
type RunOptions struct {
	// Logger receives every log (default: discard).
	Logger *slog.Logger
	// Registry receives the metrics that /metrics serves (default: a new
	// registry with the Go and process collectors).
	Registry *prometheus.Registry
	// OnReady, if set, is called with the advertised host:port once the
	// listener serves.
	OnReady func(address string)
}

func (o RunOptions) withDefaults() RunOptions {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return o
}

// Embedded returns the EmbeddedConfig of a validated ServerConfig.
func (c ServerConfig) Embedded() EmbeddedConfig {
	return EmbeddedConfig{
		DataDir:                 c.DataDir,
		Listen:                  c.Listen,
		Advertise:               c.Advertise,
		TabletServers:           c.Tablets,
		Coordinators:            1,
		ObjectStore:             c.ObjectStore,
		EtcdListen:              c.Etcd.Listen,
		EtcdAdvertise:           c.Etcd.Advertise,
		Prefix:                  c.Etcd.Prefix,
		EtcdCompactionRetention: c.Etcd.CompactionRetention,
		EtcdTLS:                 c.Etcd.TLS,
		ShutdownTimeout:         c.ShutdownTimeout,
		Coordinator:             c.Coordinator,
		Tablet:                  c.Tablet,
		Changelog:               c.Changelog,
		TLS:                     c.TLS,
	}
}

// RunServer runs `thaw server`: the embedded tier, until ctx is done (then
// it shuts down gracefully) or a component fails.
func RunServer(ctx context.Context, cfg ServerConfig, opts RunOptions) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("daemon: server config: %w", err)
	}
	opts = opts.withDefaults()
	ec := cfg.Embedded()
	ec.Logger, ec.Registry = opts.Logger, opts.Registry
	e, err := StartEmbedded(ctx, ec)
	if err != nil {
		return err
	}
	opts.Logger.Info("thaw server started", "address", e.HostPort(), "data_dir", ec.DataDir, "tablets", ec.TabletServers)
	if opts.OnReady != nil {
		opts.OnReady(e.HostPort())
	}
	var failure error
	select {
	case <-ctx.Done():
		opts.Logger.Info("thaw server shutting down")
	case <-e.Done():
		failure = e.Err()
		opts.Logger.Error("thaw server component failed; shutting down", "err", failure)
	}
	err = errors.Join(failure, e.Close())
	if err != nil {
		opts.Logger.Error("thaw server stopped", "err", err)
	} else {
		opts.Logger.Info("thaw server stopped")
	}
	return err
}

// connectEtcd connects to the external etcd of cfg.
// Over TLS (etcd.tls, https:// endpoints) the client certificate and the
// CA bundle are read again when their files change: each new connection
// to etcd presents and trusts them as they are then.
func connectEtcd(ctx context.Context, cfg EtcdConfig, log *slog.Logger) (*clientv3.Client, error) {
	var tc *tls.Config
	var roots func() *x509.CertPool
	if cfg.secure() {
		c, err := clientTLS(cfg.TLS.CAFile, "etcd.tls.ca_file", cfg.TLS.CertFile, cfg.TLS.KeyFile, log.With("component", "etcd-tls"))
		if err != nil {
			return nil, err
		}
		tc = c.TLS()
		if c.roots != nil {
			roots = c.roots.get
		}
	}
	return meta.Connect(ctx, cfg.Endpoints, meta.ClientOptions{
		DialTimeout: cfg.DialTimeout,
		TLS:         tc,
		Roots:       roots,
		Username:    cfg.Username,
		Password:    os.Getenv(EnvEtcdPassword),
		Logger:      log.With("component", "etcd"),
	})
}

// RunCoordinator runs `thaw coordinator`: one coordinator (campaigning,
// leading or on standby) against an external etcd, serving the
// CoordinatorService at / of its own listener, until ctx is done.
func RunCoordinator(ctx context.Context, cfg CoordinatorConfig, opts RunOptions) (err error) {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("daemon: coordinator config: %w", err)
	}
	opts = opts.withDefaults()
	log := opts.Logger
	if cfg.DataDir != "" {
		unlock, lerr := lockDataDir(cfg.DataDir, "thaw coordinator")
		if lerr != nil {
			return lerr
		}
		defer func() { err = errors.Join(err, unlock()) }()
	}
	ln, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeListener(ln)) }()
	cli, err := connectEtcd(ctx, cfg.Etcd, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ignoreCanceled(cli.Close())) }()
	if cfg.DataDir != "" {
		// A run killed before it resigned would hold the election (and
		// its address) until the leases expire (coordinator.lease_ttl).
		revokeLeftLeases(ctx, cli, cfg.DataDir, log)
		newLeaseLedger(cfg.DataDir, log).record(cli)
	}
	store, err := meta.New(cli, cfg.Etcd.Prefix, meta.WithLogger(log.With("component", "meta")))
	if err != nil {
		return err
	}
	objects, err := objstore.Open(ctx, cfg.ObjectStore)
	if err != nil {
		return fmt.Errorf("daemon: open object store: %w", err)
	}
	defer func() { err = errors.Join(err, objects.Close()) }()
	serverTLS, clientTLS, token, err := loadSecrets(cfg.TLS, cfg.InternalTokenFile, log)
	if err != nil {
		return err
	}
	addr := advertised(cfg.Advertise, ln.Addr())
	o := cfg.Coordinator
	key, err := uploadKey()
	if err != nil {
		return err
	}
	ccfg := o.coordinatorConfig(cfg.ID, cfg.TLS.coordinatorAddress(addr), cfg.Etcd.Prefix, objects.Base(), o.DefaultReplicationFactor)
	var c *coordinator.Coordinator
	var callers *callersFile
	if o.CallersFile != "" {
		callers, err = readCallersFile(o.CallersFile, o.AuthorizeData, log, func(cs []coordinator.Caller) {
			if err := c.SetCallers(cs); err != nil {
				log.Error("the coordinator refused the reloaded callers; keeping the previous ones", "err", err)
			}
		})
		if err != nil {
			return err
		}
		ccfg.Callers = callers.callers()
	}
	c, err = coordinator.New(ccfg, coordinator.Deps{
		Etcd:       cli,
		Meta:       store,
		Tablets:    newTabletClients(token.client(newHTTPClient(clientTLS))).get,
		Objects:    objects,
		Logger:     log.With("component", "coordinator"),
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"coordinator": cfg.ID}, opts.Registry),
		UploadKey:  key,
	})
	if err != nil {
		return err
	}
	var draining atomic.Bool
	healthz, readyz := healthHandlers(draining.Load, []readiness{
		{"etcd", func(ctx context.Context) error { _, err := cli.Get(ctx, cfg.Etcd.Prefix+"/health"); return err }},
		{"coordinator", func(ctx context.Context) error {
			l, err := fencing.CurrentLeader(ctx, cli, store.ElectionPrefix())
			if err == nil && l.ID == "" {
				err = errors.New("no coordinator elected")
			}
			return err
		}},
	})
	mux := http.NewServeMux()
	mux.Handle(PathHealthz, healthz)
	mux.Handle(PathReadyz, readyz)
	mux.Handle(PathMetrics, metricsHandler(opts.Registry))
	_, h := c.Handler()
	mux.Handle("/", h)
	srv := newHTTPServer(ln, cfg.TLS.wrap(token.guard(mux)), tierHTTPLimits, cfg.ShutdownTimeout, log.With("component", "http"), serverTLS)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
		draining.Store(true)
		return nil
	})
	g.Go(func() error { return srv.Start(gctx) })
	g.Go(func() error { return c.Run(gctx) })
	if callers != nil {
		g.Go(func() error { callers.watch(gctx); return nil })
	}
	log.Info("thaw coordinator started", "id", cfg.ID, "address", addr)
	warnUnguarded(log, token, ln.Addr())
	if opts.OnReady != nil {
		opts.OnReady(addr)
	}
	return g.Wait()
}

// listen binds a role's listener. A role binds it first, before etcd and
// the object store, so that an address in use fails at once and in one
// line.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: listen: %w", err)
	}
	return ln, nil
}

// closeListener closes ln unless its server already has.
func closeListener(ln net.Listener) error {
	if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// lockDataDir creates dir (private) if it is missing and locks its LOCK
// file for this process; unlock releases it. role names the command in the
// error when another process holds the lock.
func lockDataDir(dir, role string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	lock, err := flock.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("daemon: data_dir %s (is another %s using it?): %w", dir, role, err)
	}
	return lock.Close, nil
}

// RunTablet runs `thaw tablet`: one tablet server against an external
// etcd, serving its TabletService at / of its own listener (registered as
// http://{advertise}), with its own local changelog root or the Kafka
// changelog, until ctx is done. See the package documentation for what
// the local changelog limits.
func RunTablet(ctx context.Context, cfg TabletConfig, opts RunOptions) (err error) {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("daemon: tablet config: %w", err)
	}
	opts = opts.withDefaults()
	log := opts.Logger
	logDir := cfg.Changelog.Dir
	if logDir == "" {
		logDir = filepath.Join(cfg.DataDir, "changelog")
	}
	replicaDir := filepath.Join(cfg.DataDir, "replicas")
	if err := os.MkdirAll(replicaDir, privateDirMode); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	// One process per data directory: its replicas, and the leases it
	// lists for the next start (leaseLedger), are this process's alone.
	unlock, err := lockDataDir(cfg.DataDir, "thaw tablet")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, unlock()) }()
	ln, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeListener(ln)) }()
	cli, err := connectEtcd(ctx, cfg.Etcd, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ignoreCanceled(cli.Close())) }()
	// A run killed before it revoked its registration would hold this one
	// up until the lease expires (tablet.lease_ttl).
	revokeLeftLeases(ctx, cli, cfg.DataDir, log)
	newLeaseLedger(cfg.DataDir, log).record(cli)
	store, err := meta.New(cli, cfg.Etcd.Prefix, meta.WithLogger(log.With("component", "meta")))
	if err != nil {
		return err
	}
	objects, err := objstore.Open(ctx, cfg.ObjectStore)
	if err != nil {
		return fmt.Errorf("daemon: open object store: %w", err)
	}
	defer func() { err = errors.Join(err, objects.Close()) }()
	logs, err := openChangelog(logDir, cfg.Changelog, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, logs.Close()) }()
	serverTLS, clientTLS, token, err := loadSecrets(cfg.TLS, cfg.InternalTokenFile, log)
	if err != nil {
		return err
	}
	addr := advertised(cfg.Advertise, ln.Addr())
	hc := newHTTPClient(clientTLS)
	coordHC := &http.Client{Transport: newLeaderTransport(cli, store, token.transport(hc.Transport))}
	srv, err := tablet.New(tabletConfig(cfg.ID, cfg.TLS.Scheme()+addr, replicaDir, logs, cfg.Tablet), tablet.Deps{
		Meta:        store,
		Etcd:        cli,
		Changelog:   logs,
		Objects:     objects,
		Coordinator: tierv1connect.NewCoordinatorServiceClient(coordHC, "http://coordinator.invalid"),
		Logger:      log.With("component", "tablet"),
		Registerer:  opts.Registry,
	})
	if err != nil {
		return err
	}
	var draining atomic.Bool
	healthz, readyz := healthHandlers(draining.Load, []readiness{
		{"etcd", func(ctx context.Context) error { _, err := cli.Get(ctx, cfg.Etcd.Prefix+"/health"); return err }},
		// Its own registration: the key may be an earlier incarnation's,
		// whose lease has not expired yet.
		{"registered", func(context.Context) error { return srv.Registered() }},
		{"data_access", func(context.Context) error { return srv.DataAccessReady() }},
	})
	mux := http.NewServeMux()
	mux.Handle(PathHealthz, healthz)
	mux.Handle(PathReadyz, readyz)
	mux.Handle(PathMetrics, metricsHandler(opts.Registry))
	_, h := srv.Handler()
	mux.Handle("/", h)
	hs := newHTTPServer(ln, cfg.TLS.wrap(token.guard(mux)), tierHTTPLimits, cfg.ShutdownTimeout, log.With("component", "http"), serverTLS)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
		draining.Store(true)
		return nil
	})
	g.Go(func() error { return hs.Start(gctx) })
	g.Go(func() error { return srv.Run(gctx) })
	log.Info("thaw tablet started", "id", cfg.ID, "address", addr)
	warnUnguarded(log, token, ln.Addr())
	if opts.OnReady != nil {
		opts.OnReady(addr)
	}
	return g.Wait()
}

// leaderTransport sends every request to the active coordinator, found in
// etcd: the election's leader id and the address it published at
// {prefix}/coordinators/{id}. The request URL's scheme and host are
// replaced; its path is appended to the address's.
type leaderTransport struct {
	cli   *clientv3.Client
	store *meta.Store
	inner http.RoundTripper
	mu    struct {
		sync.Mutex
		base string
		at   time.Time
	}
}

func newLeaderTransport(cli *clientv3.Client, store *meta.Store, inner http.RoundTripper) *leaderTransport {
	return &leaderTransport{cli: cli, store: store, inner: inner}
}

func (t *leaderTransport) leader(ctx context.Context) (string, error) {
	t.mu.Lock()
	base, at := t.mu.base, t.mu.at
	t.mu.Unlock()
	if base != "" && time.Since(at) < time.Second {
		return base, nil
	}
	l, err := fencing.CurrentLeader(ctx, t.cli, t.store.ElectionPrefix())
	if err != nil {
		return "", err
	}
	if l.ID == "" {
		return "", errors.New("daemon: no coordinator is elected")
	}
	resp, err := t.cli.Get(ctx, t.store.Prefix()+"/coordinators/"+l.ID)
	if err != nil {
		return "", fmt.Errorf("daemon: read the address of coordinator %s: %w", l.ID, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("daemon: coordinator %s has not published its address", l.ID)
	}
	base = BaseURL(string(resp.Kvs[0].Value))
	t.mu.Lock()
	t.mu.base, t.mu.at = base, time.Now()
	t.mu.Unlock()
	return base, nil
}

func (t *leaderTransport) forget() {
	t.mu.Lock()
	t.mu.base = ""
	t.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (t *leaderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base, err := t.leader(r.Context())
	if err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("daemon: coordinator address %q: %w", base, err)
	}
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host = u.Scheme, u.Host, ""
	r2.URL.Path = strings.TrimRight(u.Path, "/") + r.URL.Path
	r2.URL.RawPath = ""
	resp, err := t.inner.RoundTrip(r2)
	if err != nil || resp.Header.Get(tierpb.HeaderReason) == string(tierpb.ReasonNotLeader) {
		t.forget()
	}
	return resp, err
}

// kafkaPingTimeout bounds the Kafka changelog's check at start.
const kafkaPingTimeout = 15 * time.Second

// changelogProvider is a host's changelog.Provider that the daemon closes,
// with the identity its tablet servers register (tablet.Config).
type changelogProvider interface {
	changelog.Provider
	Close() error
	Identity() string
}

// kafkaChangelog is the Kafka changelog with the identity asked of its
// cluster at start.
type kafkaChangelog struct {
	*kafkalog.Provider
	identity string
}

func (k kafkaChangelog) Identity() string { return k.identity }

// openChangelog opens one host's changelog: the local segment log under
// dir, or (changelog.kafka) the Kafka changelog.
func openChangelog(dir string, o ChangelogOptions, log *slog.Logger) (changelogProvider, error) {
	if o.Kafka != nil {
		cfg, err := o.Kafka.load(o.MaxBatchBytes, log.With("component", "changelog"), os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		p, err := kafkalog.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		// Fail at start, plainly, on wrong brokers, TLS or SASL: franz-go
		// itself would retry every request until its caller gives up.
		ctx, cancel := context.WithTimeout(context.Background(), kafkaPingTimeout)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("daemon: changelog.kafka: %w", err), p.Close())
		}
		id, err := p.Identity(ctx)
		if err == nil {
			err = meta.CheckChangelogIdentity(id)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("daemon: changelog.kafka: %w", err), p.Close())
		}
		return kafkaChangelog{p, id}, nil
	}
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	return changelog.NewLocalProvider(dir,
		changelog.WithSegmentBytes(int64(o.SegmentBytes)),
		changelog.WithMaxBatchBytes(int64(o.MaxBatchBytes)),
		// A row as large as a write may be (tablet.max_batch_bytes, below
		// changelog.max_batch_bytes) is one record: the default 1 MiB
		// record limit refused rows between it and a write's limit, for
		// good (BATCH_TOO_LARGE, and a single row cannot be split).
		changelog.WithMaxRecordBytes(changelog.RecordRoom(int64(o.MaxBatchBytes))),
		changelog.WithTailRepairHook(func(r changelog.TailRepair) {
			log.Warn("changelog torn tail repaired", "segment", r.Segment, "pos", r.Pos, "dropped", r.Dropped, "reason", r.Reason)
		}))
}
