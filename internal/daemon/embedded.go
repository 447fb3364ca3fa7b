package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/flock"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
)

// EmbeddedConfig configures StartEmbedded: a whole tier in one process.
// Zero fields take the defaults in their comments; zero fields of the
// option sections take the defaults of the YAML keys (docs/tier.md).
type EmbeddedConfig struct {
	// DataDir holds etcd/, remote/ (the default object store),
	// changelog/ and tablets/{id}/ (required). Starting again on the same
	// directory keeps every table and row.
	DataDir string
	// Listen is the one HTTP listener (default 127.0.0.1:0: a free port;
	// see Address).
	Listen string
	// Advertise is the host:port others reach Listen at (default: the
	// listener's address, an unspecified host replaced by 127.0.0.1).
	Advertise string
	// TabletServers is the number of tablet servers, ts-1..ts-N (default
	// 3).
	TabletServers int
	// Coordinators is the number of coordinators, coord-1..coord-N
	// (default 1). More than one only exercises failover: they share the
	// process, so they do not survive its crash.
	Coordinators int
	// ObjectStore is the snapshot storage URL (default
	// file://{DataDir}/remote).
	ObjectStore string
	// EtcdListen is the embedded etcd's client address (default
	// 127.0.0.1:0).
	EtcdListen string
	// EtcdAdvertise is the host:port other processes reach the embedded
	// etcd at (default: its listener's address; see EtcdEndpoints).
	EtcdAdvertise string
	// Prefix is the etcd key prefix (default /thaw).
	Prefix string
	// EtcdCompactionRetention is etcd's history retention (default 1h).
	EtcdCompactionRetention time.Duration
	// EtcdTLS makes etcd serve its clients over TLS (the `etcd.tls:`
	// section of thaw server; zero: plain HTTP, and a warning at start
	// when EtcdListen is beyond the loopback interface).
	EtcdTLS EmbeddedEtcdTLS
	// EtcdUnsafeNoFsync turns etcd's fsync off: for tests only.
	EtcdUnsafeNoFsync bool
	// ShutdownTimeout bounds Close's graceful phases (default 30s).
	ShutdownTimeout time.Duration

	Coordinator CoordinatorOptions
	Tablet      TabletOptions
	Changelog   ChangelogOptions
	// TLS, when set, makes the listener serve HTTPS only and every address
	// https:// (see ListenerTLS); HTTPClient then trusts TLS.CAFile.
	TLS *ListenerTLS

	// Logger receives every log of the tier (default: discard).
	Logger *slog.Logger
	// Registry receives the process-level metrics, and /metrics serves it
	// together with every component's metrics (labelled coordinator="id"
	// or server="id"). Default: a new registry.
	Registry *prometheus.Registry

	// etcdProbed, a test's hook, runs between the check that the last
	// run's etcd port is free and etcd's bind of it.
	etcdProbed func(addr string)
}

// withDefaults fills zero fields.
func (c EmbeddedConfig) withDefaults() (EmbeddedConfig, error) {
	if c.DataDir == "" {
		return c, errors.New("daemon: embedded: no data directory")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("daemon: embedded: data directory: %w", err)
	}
	c.DataDir = abs
	setDefault(&c.Listen, "127.0.0.1:0")
	setDefault(&c.TabletServers, DefaultTabletServers)
	setDefault(&c.Coordinators, 1)
	setDefault(&c.ObjectStore, "file://"+filepath.ToSlash(filepath.Join(c.DataDir, "remote")))
	setDefault(&c.EtcdListen, DefaultEmbeddedEtcd)
	setDefault(&c.Prefix, DefaultPrefix)
	setDefault(&c.EtcdCompactionRetention, DefaultEtcdCompaction)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	var co CoordinatorOptions
	co.defaults()
	fillZero(&c.Coordinator, co)
	var to TabletOptions
	to.defaults()
	fillZero(&c.Tablet, to)
	var lo ChangelogOptions
	lo.defaults()
	fillZero(&c.Changelog, lo)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	errs := []error{
		validateHostPort("listen", c.Listen),
		validateHostPort("etcd listen", c.EtcdListen),
		c.EtcdTLS.validate("etcd TLS"),
		validatePrefix("prefix", c.Prefix),
		c.Coordinator.validate(), c.Tablet.validate(), c.Changelog.validate(),
		validateBatchBytes(c.Tablet, c.Changelog),
	}
	if c.Advertise != "" {
		errs = append(errs, validateAdvertise("advertise", c.Advertise))
	}
	if c.EtcdAdvertise != "" {
		errs = append(errs, validateEtcdAdvertise("etcd advertise", c.EtcdAdvertise))
	}
	if c.TabletServers < 0 || c.TabletServers > MaxEmbeddedTabletServers {
		errs = append(errs, fmt.Errorf("tablet servers %d not in 0..%d", c.TabletServers, MaxEmbeddedTabletServers))
	}
	if c.Coordinators < 1 || c.Coordinators > 9 {
		errs = append(errs, fmt.Errorf("coordinators %d not in 1..9", c.Coordinators))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("daemon: embedded: %w", err)
	}
	return c, nil
}

// warnPlainEtcd warns when the embedded etcd serves plain HTTP beyond the
// loopback interface: etcd has no authentication of its own here, so
// anyone who reaches it can read and change the tier's metadata.
func warnPlainEtcd(log *slog.Logger, t EmbeddedEtcdTLS, addrs []net.Addr) {
	if t.CertFile != "" {
		return
	}
	for _, a := range addrs {
		if beyondLoopback(a) {
			log.Warn("the embedded etcd serves plain HTTP beyond the loopback interface: whoever reaches it can read and change the tier's metadata; set etcd.tls or bind etcd.listen to loopback (docs/tier.md)",
				"listen", a.String())
		}
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// fillZero sets every zero field of *dst to the field of def.
func fillZero[T any](dst *T, def T) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(def)
	for i := range d.NumField() {
		if d.Field(i).IsZero() {
			d.Field(i).Set(s.Field(i))
		}
	}
}

// Embedded is a running in-process tier: embedded etcd, coordinators,
// tablet servers, the local changelog and the object store, behind one
// HTTP listener (coordinator at /, tablet server {id} at /t/{id}/,
// /metrics, /healthz, /readyz). Its methods are safe for concurrent use.
type Embedded struct {
	cfg     EmbeddedConfig
	log     *slog.Logger
	lock    *os.File // flock of {data_dir}/LOCK
	etcd    *meta.Embedded
	cli     *clientv3.Client
	leases  *leaseLedger // every lease its clients hold, for the next start
	store   *meta.Store
	objects *objstore.Store
	logs    changelogProvider // nil with the Kafka changelog
	hc      *http.Client
	token   *internalToken // random, shared by the components
	// uploadKey signs upload capabilities: THAW_UPLOAD_KEY; nil: each
	// coordinator signs with a random key of its own.
	uploadKey []byte
	callers   *callersFile // coordinator.callers_file; nil: none
	ihc       *http.Client // hc presenting token: the components' own requests
	tablets   *tabletClients
	gath      *gatherers
	addr      string // advertised host:port
	scheme    string // "http://" or "https://"

	ctx      context.Context // lifetime of the components; cancelled by Close
	cancel   context.CancelFunc
	httpStop context.CancelFunc
	httpDone chan error
	draining atomic.Bool
	failed   chan struct{} // closed on the first component failure
	failOnce sync.Once
	failErr  error

	mu struct {
		sync.Mutex
		coords  map[string]*component
		tablets map[string]*component
		mounts  map[string]*switchable // /t/{id}/ of every tablet server ever started, kept across failed starts
		closed  bool
	}
	coordOrder []string // coord-1..coord-N
	mux        *http.ServeMux
}

// component is one coordinator or tablet server instance and its mount.
type component struct {
	id     string
	sw     *switchable
	cancel context.CancelFunc // stops it gracefully
	crash  func()             // stops it as a crash would (nil once stopped)
	done   chan struct{}      // closed when its Run returned
	err    error              // Run's error, set before done closes
	killed atomic.Bool

	coord  *coordinator.Coordinator
	tablet *tablet.Server
}

func (c *component) running() bool {
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// StartEmbedded starts a tier in the process and returns once the HTTP
// listener serves, the coordinators run and every tablet server has
// started (registration may still be in flight: poll Ready or /readyz).
// Close stops it.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (_ *Embedded, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	key, err := uploadKey()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	e := &Embedded{cfg: cfg, log: log, failed: make(chan struct{}), gath: newGatherers(cfg.Registry), uploadKey: key}
	e.mu.coords = make(map[string]*component)
	e.mu.tablets = make(map[string]*component)
	e.mu.mounts = make(map[string]*switchable)
	if f := cfg.Coordinator.CallersFile; f != "" {
		if e.callers, err = readCallersFile(f, cfg.Coordinator.AuthorizeData, log, e.setCallers); err != nil {
			return nil, err
		}
	}
	var closers []func() error
	defer func() {
		if err != nil {
			e.draining.Store(true) // etcd's complaints about closing early
			for _, c := range slices.Backward(closers) {
				err = errors.Join(err, c())
			}
		}
	}()
	for _, d := range []string{"etcd", "changelog", "tablets"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), privateDirMode); err != nil {
			return nil, fmt.Errorf("daemon: embedded: %w", err)
		}
	}
	// One process per data directory: a second one would wait for etcd's
	// database lock forever, without a word.
	if e.lock, err = flock.Lock(filepath.Join(cfg.DataDir, "LOCK")); err != nil {
		return nil, fmt.Errorf("daemon: data_dir %s (is another thaw process using it?): %w", cfg.DataDir, err)
	}
	closers = append(closers, e.lock.Close)
	// The listener before etcd, so that a port in use fails at once.
	if err := cfg.TLS.validate(); err != nil {
		return nil, fmt.Errorf("daemon: embedded: %w", err)
	}
	serverTLS, clientTLS, err := cfg.TLS.load(log.With("component", "tls"))
	if err != nil {
		return nil, err
	}
	e.scheme = cfg.TLS.Scheme()
	ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() error { return closeListener(ln) })
	e.addr = advertised(cfg.Advertise, ln.Addr())
	etcdCfg := meta.EmbeddedConfig{
		Dir:                 filepath.Join(cfg.DataDir, "etcd"),
		ClientURL:           cfg.EtcdListen,
		Advertise:           cfg.EtcdAdvertise,
		Logger:              slog.New(quietHandler{Handler: log.Handler(), quiet: &e.draining}).With("component", "etcd"),
		CompactionRetention: cfg.EtcdCompactionRetention,
		UnsafeNoFsync:       cfg.EtcdUnsafeNoFsync,
		CertFile:            cfg.EtcdTLS.CertFile,
		KeyFile:             cfg.EtcdTLS.KeyFile,
		ClientCAFile:        cfg.EtcdTLS.ClientCAFile,
	}
	// A default listener (port 0) takes the previous run's port again.
	ports := newEtcdPortFile(cfg.DataDir, log)
	listenAt, prev := ports.listen(cfg.EtcdListen)
	etcdCfg.ClientURL = listenAt
	if cfg.etcdProbed != nil && prev != 0 {
		cfg.etcdProbed(listenAt)
	}
	e.etcd, err = meta.StartEmbedded(ctx, etcdCfg)
	if err != nil && prev != 0 && isAddrInUse(err) {
		// Taken between the check and etcd's bind.
		ports.warnMoved(prev, err)
		etcdCfg.ClientURL = cfg.EtcdListen
		e.etcd, err = meta.StartEmbedded(ctx, etcdCfg)
	}
	if err != nil {
		return nil, err
	}
	closers = append(closers, e.etcd.Close)
	if _, zero := zeroPortHost(cfg.EtcdListen); zero {
		ports.write(e.etcd.Addrs())
	}
	log.Info("embedded etcd serving", "endpoints", e.etcd.Endpoints(), "listen", e.etcd.Addrs())
	warnPlainEtcd(log, cfg.EtcdTLS, e.etcd.Addrs())
	if e.cli, err = e.etcd.Client(ctx); err != nil {
		return nil, err
	}
	closers = append(closers, e.cli.Close)
	// A run killed before it revoked its leases (election, registrations)
	// would hold this one up until they expire: revoke them, then record
	// this run's.
	revokeLeftLeases(ctx, e.cli, cfg.DataDir, log)
	e.leases = newLeaseLedger(cfg.DataDir, log)
	e.leases.record(e.cli)
	if e.store, err = meta.New(e.cli, cfg.Prefix, meta.WithLogger(log.With("component", "meta"))); err != nil {
		return nil, err
	}
	if e.objects, err = objstore.Open(ctx, cfg.ObjectStore); err != nil {
		return nil, fmt.Errorf("daemon: open object store: %w", err)
	}
	closers = append(closers, e.objects.Close)
	if cfg.Changelog.Kafka == nil {
		// One local log root shared by every tablet server (one host).
		// With Kafka, each tablet server gets its own client, as if it ran
		// on a host of its own (StartTablet).
		if e.logs, err = openChangelog(filepath.Join(cfg.DataDir, "changelog"), cfg.Changelog, log); err != nil {
			return nil, err
		}
		closers = append(closers, e.logs.Close)
	}
	e.hc = newHTTPClient(clientTLS)
	if e.token, err = newInternalToken(); err != nil {
		return nil, err
	}
	e.ihc = e.token.client(e.hc)
	e.tablets = newTabletClients(e.ihc)
	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if e.callers != nil {
		go e.callers.watch(e.ctx)
	}

	e.mux = http.NewServeMux()
	healthz, readyz := healthHandlers(e.draining.Load, []readiness{
		{"etcd", e.checkEtcd},
		{"coordinator", e.checkCoordinator},
		{"tablets", e.checkTablets},
	})
	e.mux.Handle(PathHealthz, healthz)
	e.mux.Handle(PathReadyz, readyz)
	e.mux.Handle(PathMetrics, metricsHandler(e.gath))
	e.mux.Handle("/", http.HandlerFunc(e.serveLeader))
	for i := 1; i <= cfg.Coordinators; i++ {
		id := "coord-" + strconv.Itoa(i)
		e.coordOrder = append(e.coordOrder, id)
		sw := newSwitchable("coordinator " + id)
		e.mux.Handle(CoordinatorPath(id), http.StripPrefix(CoordinatorPath(id)[:len(CoordinatorPath(id))-1], sw))
		e.mu.coords[id] = &component{id: id, sw: sw, done: closedChan()}
	}
	hctx, hstop := context.WithCancel(context.WithoutCancel(ctx))
	e.httpStop = hstop
	e.httpDone = make(chan error, 1)
	srv := newHTTPServer(ln, cfg.TLS.wrap(e.token.guard(e.mux)), tierHTTPLimits, cfg.ShutdownTimeout, log.With("component", "http"), serverTLS)
	go func() { e.httpDone <- srv.Start(hctx) }()
	closers = append(closers, func() error { hstop(); return <-e.httpDone })

	for _, id := range e.coordOrder {
		if err := e.StartCoordinator(ctx, id); err != nil {
			e.stopAll()
			return nil, err
		}
	}
	for i := 1; i <= cfg.TabletServers; i++ {
		if err := e.StartTablet(ctx, TabletID(i)); err != nil {
			e.stopAll()
			return nil, err
		}
	}
	return e, nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TabletID returns the id of the i-th embedded tablet server, "ts-{i}".
func TabletID(i int) string { return "ts-" + strconv.Itoa(i) }

// CoordinatorPath returns where an embedded coordinator is mounted in
// addition to the root: "/c/{id}/".
func CoordinatorPath(id string) string { return "/c/" + id + "/" }

// Address returns the base URL of the tier, "http://host:port" (https://
// with TLS): the CoordinatorService (of whichever coordinator leads),
// /metrics, /healthz and /readyz.
func (e *Embedded) Address() string { return e.scheme + e.addr }

// HostPort returns the advertised host:port (what --server takes).
func (e *Embedded) HostPort() string { return e.addr }

// TabletAddress returns the base URL tablet server id is served at,
// "http://host:port/t/{id}".
func (e *Embedded) TabletAddress(id string) string { return e.scheme + e.addr + "/t/" + id }

// CoordinatorAddress returns the base URL of one coordinator,
// "http://host:port/c/{id}", whether or not it leads.
func (e *Embedded) CoordinatorAddress(id string) string { return e.scheme + e.addr + "/c/" + id }

// Meta returns the metadata store (for assertions; writes need a
// coordinator's Guard).
func (e *Embedded) Meta() *meta.Store { return e.store }

// Etcd returns the process's etcd client. Do not close it.
func (e *Embedded) Etcd() *clientv3.Client { return e.cli }

// EtcdEndpoints returns the embedded etcd's client URLs.
func (e *Embedded) EtcdEndpoints() []string { return e.etcd.Endpoints() }

// Objects returns the object store holding snapshots.
func (e *Embedded) Objects() *objstore.Store { return e.objects }

// HTTPClient returns an h2c-capable HTTP client for the tier's RPCs, as
// any client of the tier has: the RPCs internal to the tier (the
// coordinator's orders to tablet servers, their snapshot reports) refuse
// it as unauthenticated.
func (e *Embedded) HTTPClient() *http.Client { return e.hc }

// InternalHTTPClient is HTTPClient presenting the embedded tier's internal
// token (random, made at start), as its own components do: for tests that
// act as the tier itself.
func (e *Embedded) InternalHTTPClient() *http.Client { return e.ihc }

// Gatherer returns what /metrics serves.
func (e *Embedded) Gatherer() prometheus.Gatherer { return e.gath }

// Done is closed when a component failed on its own (not killed, not
// closed); Err then says why. RunServer stops the process on it.
func (e *Embedded) Done() <-chan struct{} { return e.failed }

// Err returns the first component failure, nil if none.
func (e *Embedded) Err() error {
	select {
	case <-e.failed:
		return e.failErr
	default:
		return nil
	}
}

func (e *Embedded) fail(err error) {
	e.failOnce.Do(func() {
		e.failErr = err
		close(e.failed)
	})
}

// Leader returns the election's current leader (zero if none).
func (e *Embedded) Leader(ctx context.Context) (fencing.Leader, error) {
	return fencing.CurrentLeader(ctx, e.cli, e.store.ElectionPrefix())
}

// Guard returns the metadata write guard of the current leader, for tests
// that act as the coordinator (e.g. setting a data state).
func (e *Embedded) Guard(ctx context.Context) (meta.Guard, error) {
	l, err := e.Leader(ctx)
	if err != nil {
		return meta.Guard{}, err
	}
	if l.ID == "" {
		return meta.Guard{}, errors.New("daemon: no coordinator leads")
	}
	return meta.Guard{LeaderKey: l.Key, Epoch: l.Epoch}, nil
}

// serveLeader serves the root: the local coordinator that leads, else the
// first running one (which answers NOT_LEADER naming the leader, if any).
func (e *Embedded) serveLeader(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	var pick, first *component
	for _, id := range e.coordOrder {
		c := e.mu.coords[id]
		if !c.running() {
			continue
		}
		if first == nil {
			first = c
		}
		if _, ok := c.coord.IsLeader(); ok {
			pick = c
			break
		}
	}
	e.mu.Unlock()
	if pick == nil {
		pick = first
	}
	if pick == nil {
		sw := newSwitchable("coordinator")
		sw.ServeHTTP(w, r)
		return
	}
	pick.sw.ServeHTTP(w, r)
}

// StartCoordinator starts (or restarts) embedded coordinator id, one of
// coord-1..coord-N.
func (e *Embedded) StartCoordinator(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return errors.New("daemon: embedded tier is closed")
	}
	old, ok := e.mu.coords[id]
	if !ok {
		return fmt.Errorf("daemon: no coordinator %q (have %v)", id, e.coordOrder)
	}
	if old.running() {
		return fmt.Errorf("daemon: coordinator %s is running", id)
	}
	// Its own etcd client, so that a kill can cut it off like a crash.
	cli, err := e.etcd.Client(ctx)
	if err != nil {
		return err
	}
	e.leases.record(cli)
	store, err := meta.New(cli, e.cfg.Prefix, meta.WithLogger(e.log.With("component", "meta", "coordinator", id)))
	if err != nil {
		return errors.Join(err, cli.Close())
	}
	o := e.cfg.Coordinator
	ccfg := o.coordinatorConfig(id, e.cfg.TLS.coordinatorAddress(e.addr), e.cfg.Prefix, e.objects.Base(), min(o.DefaultReplicationFactor, max(e.cfg.TabletServers, 1)))
	if e.callers != nil {
		ccfg.Callers = e.callers.callers()
	}
	c, err := coordinator.New(ccfg, coordinator.Deps{
		Etcd:       cli,
		Meta:       store,
		Tablets:    e.tablets.get,
		Objects:    e.objects,
		Logger:     e.log.With("component", "coordinator"),
		Registerer: e.gath.component("coordinator/"+id, prometheus.Labels{"coordinator": id}),
		UploadKey:  e.uploadKey,
	})
	if err != nil {
		return errors.Join(err, cli.Close())
	}
	_, h := c.Handler()
	cctx, cancel := context.WithCancel(e.ctx)
	comp := &component{id: id, sw: old.sw, cancel: cancel, done: make(chan struct{}), coord: c}
	var crashOnce sync.Once
	comp.crash = func() {
		crashOnce.Do(func() {
			// A crash: the client goes away without resigning, so the
			// election lease lapses after its TTL.
			_ = cli.Close()
			cancel()
		})
	}
	go func() {
		defer close(comp.done)
		err := c.Run(cctx)
		comp.sw.set(nil)
		if cerr := cli.Close(); cerr != nil && !comp.killed.Load() && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, cerr)
		}
		comp.err = err
		if err != nil && !comp.killed.Load() && e.ctx.Err() == nil {
			e.log.Error("coordinator failed", "coordinator", id, "err", err)
			e.fail(fmt.Errorf("coordinator %s: %w", id, err))
		}
	}()
	comp.sw.set(h)
	e.mu.coords[id] = comp
	e.log.Info("coordinator started", "coordinator", id)
	return nil
}

// setCallers hands reloaded callers (coordinator.callers_file) to every
// running coordinator.
func (e *Embedded) setCallers(cs []coordinator.Caller) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range e.coordOrder {
		if comp := e.mu.coords[id]; comp.coord != nil && comp.running() {
			if err := comp.coord.SetCallers(cs); err != nil {
				e.log.Error("a coordinator refused the reloaded callers; keeping the previous ones", "coordinator", id, "err", err)
			}
		}
	}
}

// KillCoordinator stops coordinator id as a crash would: its etcd client
// closes without resigning, so its election lease expires after the lease
// TTL and only then does a standby take over. Its mount answers
// UNAVAILABLE.
func (e *Embedded) KillCoordinator(ctx context.Context, id string) error {
	e.mu.Lock()
	c, ok := e.mu.coords[id]
	e.mu.Unlock()
	if !ok || !c.running() {
		return fmt.Errorf("daemon: coordinator %q is not running", id)
	}
	c.killed.Store(true)
	c.sw.set(nil)
	c.crash()
	select {
	case <-c.done:
		e.gath.drop("coordinator/" + id) // its metrics go with it, as a tablet server's do
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// StopCoordinator stops coordinator id gracefully: it resigns, so a
// standby takes over at once.
func (e *Embedded) StopCoordinator(ctx context.Context, id string) error {
	e.mu.Lock()
	c, ok := e.mu.coords[id]
	e.mu.Unlock()
	if !ok || !c.running() {
		return fmt.Errorf("daemon: coordinator %q is not running", id)
	}
	c.killed.Store(true)
	c.cancel()
	select {
	case <-c.done:
		e.gath.drop("coordinator/" + id)
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Coordinator returns embedded coordinator id while it runs.
func (e *Embedded) Coordinator(id string) (*coordinator.Coordinator, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.mu.coords[id]
	if !c.running() {
		return nil, false
	}
	return c.coord, true
}

func (e *Embedded) checkEtcd(ctx context.Context) error {
	_, err := e.cli.Get(ctx, e.cfg.Prefix+"/health")
	return err
}

func (e *Embedded) checkCoordinator(ctx context.Context) error {
	l, err := e.Leader(ctx)
	if err != nil {
		return err
	}
	if l.ID == "" {
		return errors.New("no coordinator elected")
	}
	// Elected is not yet serving: the winner answers NOT_LEADER until it
	// has started its term.
	e.mu.Lock()
	c := e.mu.coords[l.ID]
	e.mu.Unlock()
	if c.running() && c.coord != nil {
		if _, ok := c.coord.IsLeader(); !ok {
			return fmt.Errorf("coordinator %s elected, not serving yet", l.ID)
		}
	}
	return nil
}

func (e *Embedded) checkTablets(ctx context.Context) error {
	set, err := e.store.ListServers(ctx)
	if err != nil {
		return err
	}
	live := make(map[string]bool, len(set.Servers))
	for _, s := range set.Servers {
		live[s.ID] = true
	}
	e.mu.Lock()
	var missing []string
	var errs []error
	for id, c := range e.mu.tablets {
		switch {
		case !c.running():
		case !live[id] || c.tablet != nil && c.tablet.Registered() != nil:
			missing = append(missing, id)
		case c.tablet != nil:
			if err := c.tablet.DataAccessReady(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
	}
	e.mu.Unlock()
	if len(missing) > 0 {
		slices.Sort(missing)
		errs = append(errs, fmt.Errorf("not registered: %v", missing))
	}
	return errors.Join(errs...)
}

// Ready returns nil once etcd answers, a coordinator is elected and every
// running tablet server is registered and has read the data-access policy:
// what /readyz reports.
func (e *Embedded) Ready(ctx context.Context) error {
	return errors.Join(e.checkEtcd(ctx), e.checkCoordinator(ctx), e.checkTablets(ctx))
}

// WaitReady polls Ready until it passes or ctx is done.
func (e *Embedded) WaitReady(ctx context.Context) error {
	for {
		err := e.Ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("daemon: not ready: %w (%w)", err, context.Cause(ctx))
		case <-e.failed:
			return e.failErr
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopAll stops every component at once (start-up failure).
func (e *Embedded) stopAll() {
	e.cancel()
	e.mu.Lock()
	var all []*component
	for _, c := range e.mu.coords {
		all = append(all, c)
	}
	for _, c := range e.mu.tablets {
		all = append(all, c)
	}
	e.mu.Unlock()
	for _, c := range all {
		<-c.done
	}
}

// Close shuts the tier down gracefully: /readyz and /healthz turn 503,
// coordinators resign (a Begin or Commit still waiting on tablet rounds is
// answered UNAVAILABLE at once: those rounds go through this process's own
// listener, which must still be open), the HTTP server drains running
// requests, tablet servers deregister and close their replicas, then the
// changelog, object store and etcd close. Phases are bounded by the
// shutdown timeout.
func (e *Embedded) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	e.mu.Unlock()
	e.draining.Store(true)
	var errs []error
	e.mu.Lock()
	coords := make([]*component, 0, len(e.mu.coords))
	for _, id := range e.coordOrder {
		coords = append(coords, e.mu.coords[id])
	}
	tablets := make([]*component, 0, len(e.mu.tablets))
	for _, id := range slices.Sorted(maps.Keys(e.mu.tablets)) {
		tablets = append(tablets, e.mu.tablets[id])
	}
	e.mu.Unlock()
	errs = append(errs, stopComponents(coords, e.cfg.ShutdownTimeout)...)
	e.httpStop()
	if err := <-e.httpDone; err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, stopComponents(tablets, e.cfg.ShutdownTimeout)...)
	e.cancel()
	if e.logs != nil {
		if err := e.logs.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.objects.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := e.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	if err := e.etcd.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := e.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopComponents cancels the running components of a group and waits for
// them, all within one timeout: once it has passed, a component that has
// not stopped is reported at once (with a timer shared by the group, the
// wait for a second stuck component never ended). It returns the
// components' errors and the ones that did not stop.
func stopComponents(cs []*component, timeout time.Duration) []error {
	for _, c := range cs {
		if c.running() {
			c.cancel()
		}
	}
	var errs []error
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	expired := false
	for _, c := range cs {
		if !expired {
			select {
			case <-c.done:
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-c.done:
			if c.err != nil && !c.killed.Load() {
				errs = append(errs, fmt.Errorf("%s: %w", c.id, c.err))
			}
		default:
			errs = append(errs, fmt.Errorf("daemon: %s did not stop within %v", c.id, timeout))
		}
	}
	return errs
}

// privateDirMode is the permission of the data directories the daemon
// creates (etcd's, the changelog's, the replicas', temporary build files):
// they hold the tier's data and metadata, for the daemon's user only.
const privateDirMode = 0o700
