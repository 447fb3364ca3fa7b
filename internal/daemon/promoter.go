package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/tieradapter"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/promoter/promoterhttp"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/triggers/cron"
	"github.com/thawdb/thaw/triggers/kafka"
)

// PromoterOptions are the process-level dependencies of StartPromoter and
// PlanPromoter.
type PromoterOptions struct {
	RunOptions
	// Hooks and Now are handed to the promoter (tests).
	Hooks promoter.Hooks
	Now   func() time.Time
	// Embedded, if set, adjusts the embedded tier's configuration before
	// it starts (tests: smaller caches, no fsync).
	Embedded func(*EmbeddedConfig)
	// ConfigFile is the file the config was read from, named in hints of
	// the logs ("" if there is none).
	ConfigFile string
}

// promoterParts are the connections a promoter works through.
type promoterParts struct {
	log      *slog.Logger
	embedded *Embedded // nil with an external tier
	etcd     *clientv3.Client
	tier     *tierclient.Client
	bulk     *bulkloadclient.Client
	store    *objstore.Store // the embedded tier's snapshot store; nil otherwise
	scoped   bool            // tier.scoped_uploads: builds write through the upload gateway
	lakes    map[string]*lake.Lake
	policies []*policies.Policy
	// policyDigest is policyDigest of the policy files just before they
	// were read.
	policyDigest [sha256.Size]byte
	tempDir      string
	closers      []func() error
}

// LoadPolicies loads the policies of cfg and checks them against it and
// one another: every source catalog is configured, every schedule is
// valid, and no two policies share a lake table or a tier table
// (promoter.CheckPolicies). It reads no lake.
func LoadPolicies(cfg PromoterConfig) ([]*policies.Policy, error) {
	pols, err := policies.Load(cfg.Policies...)
	if err != nil {
		return nil, fmt.Errorf("daemon: policies: %w", err)
	}
	if len(pols) == 0 {
		return nil, fmt.Errorf("daemon: policies: no policy found in %v", cfg.Policies)
	}
	var errs []error
	for _, p := range pols {
		if c := p.Source().Catalog; !hasKey(cfg.Catalogs, c) {
			errs = append(errs, fmt.Errorf("policy %s: source catalog %q is not in catalogs (have %v)", p.Name(), c, sortedKeys(cfg.Catalogs)))
		}
		if s := p.Triggers().Schedule; s != nil {
			if err := cron.Validate(s.Cron, s.TimeZone); err != nil {
				errs = append(errs, fmt.Errorf("policy %s: schedule: %w", p.Name(), err))
			}
		}
	}
	errs = append(errs, promoter.CheckPolicies(pols))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("daemon: policies: %w", err)
	}
	return pols, nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// openPromoterParts loads the policies, opens the catalogs and connects
// to (or starts) the tier. On error everything opened is closed.
func openPromoterParts(ctx context.Context, cfg PromoterConfig, opts PromoterOptions) (_ *promoterParts, err error) {
	log := opts.Logger
	pp := &promoterParts{log: log, lakes: make(map[string]*lake.Lake)}
	defer func() {
		if err != nil {
			err = errors.Join(err, pp.close())
		}
	}()
	// The files' digest before they are read: a change in between shows
	// as a change (policyWatch). LoadPolicies reports unreadable paths.
	pp.policyDigest, _ = policyDigest(cfg.Policies)
	if pp.policies, err = LoadPolicies(cfg); err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(cfg.Catalogs) {
		l, err := lake.Open(ctx, cfg.Catalogs[name])
		if err != nil {
			return nil, fmt.Errorf("daemon: catalog %s: %w", name, err)
		}
		pp.lakes[name] = l
		pp.closers = append(pp.closers, l.Close)
	}
	if cfg.DataDir != "" {
		pp.tempDir = filepath.Join(cfg.DataDir, "tmp")
		if err := os.MkdirAll(pp.tempDir, privateDirMode); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	var ctls *clientConfig
	if cfg.Tier.CAFile != "" || cfg.Tier.CertFile != "" || cfg.Tier.KeyFile != "" {
		if ctls, err = clientTLS(cfg.Tier.CAFile, "tier.ca_file", cfg.Tier.CertFile, cfg.Tier.KeyFile, log.With("component", "tls")); err != nil {
			return nil, err
		}
	}
	hc := newHTTPClient(ctls)
	var address string
	if cfg.Tier.IsEmbedded() {
		ec := EmbeddedConfig{
			DataDir:         filepath.Join(cfg.DataDir, "tier"),
			Listen:          cfg.Tier.Listen,
			TabletServers:   cfg.Tier.Tablets,
			ObjectStore:     cfg.Tier.ObjectStore,
			ShutdownTimeout: cfg.ShutdownTimeout,
			Logger:          log.With("component", "tier"),
		}
		if opts.Embedded != nil {
			opts.Embedded(&ec)
		}
		e, err := StartEmbedded(ctx, ec)
		if err != nil {
			return nil, fmt.Errorf("daemon: embedded tier: %w", err)
		}
		pp.embedded, pp.etcd, pp.store, hc = e, e.Etcd(), e.Objects(), e.HTTPClient()
		pp.closers = append(pp.closers, e.Close)
		if err := e.WaitReady(ctx); err != nil {
			return nil, err
		}
		address = e.Address()
	} else {
		cli, err := connectEtcd(ctx, cfg.Tier.Etcd, log)
		if err != nil {
			return nil, err
		}
		pp.etcd = cli
		pp.closers = append(pp.closers, func() error { return ignoreCanceled(cli.Close()) })
		address = cfg.Tier.Address
	}
	// The token is for a tier that authorizes DDL (createIfMissing) and
	// reads (a target checked empty).
	topts := []tierclient.Opt{tierclient.WithHTTPClient(hc), tierclient.WithLogger(log.With("component", "tierclient")),
		tierclient.WithConnectOptions(BearerFromEnv()...)}
	pp.tier, err = tierclient.New(ctx, address, topts...)
	if err != nil {
		return nil, fmt.Errorf("daemon: tier at %s: %w", address, err)
	}
	tc := pp.tier
	pp.closers = append(pp.closers, func() error { tc.Close(); return nil })
	bopts := []bulkloadclient.Opt{bulkloadclient.WithHTTPClient(hc), bulkloadclient.WithLogger(log.With("component", "bulkload"))}
	if tok := os.Getenv(EnvToken); tok != "" {
		bopts = append(bopts, bulkloadclient.WithBearerToken(tok))
	}
	switch {
	case cfg.Tier.ScopedUploads:
		// Builds and manifests go through the upload gateway, even with
		// the embedded tier's store at hand.
		bopts = append(bopts, bulkloadclient.WithScopedUploads())
		pp.store = nil
		pp.scoped = true
	case pp.store != nil:
		bopts = append(bopts, bulkloadclient.WithObjectStore(pp.store))
	}
	if pp.bulk, err = bulkloadclient.New(ctx, address, bopts...); err != nil {
		return nil, fmt.Errorf("daemon: bulk-load client: %w", err)
	}
	return pp, nil
}

// stores is promoter.Config.Stores: the bulk-load client's scoped stores
// under tier.scoped_uploads, else nil.
func (pp *promoterParts) stores() func(*bulkloadclient.BuildContext) snapshotbuild.Store {
	if !pp.scoped {
		return nil
	}
	return func(bc *bulkloadclient.BuildContext) snapshotbuild.Store { return pp.bulk.ScopedStore(bc) }
}

// close closes what openPromoterParts opened, last first.
func (pp *promoterParts) close() error {
	var errs []error
	for _, c := range slices.Backward(pp.closers) {
		errs = append(errs, c())
	}
	pp.closers = nil
	return errors.Join(errs...)
}

// promoterConfig is the promoter.Config of cfg over pp.
func (pp *promoterParts) promoterConfig(cfg PromoterConfig, opts PromoterOptions, ledger promoter.Ledger, reg prometheus.Registerer) promoter.Config {
	lakes := make(map[string]promoter.Lake, len(pp.lakes))
	for name, l := range pp.lakes {
		lakes[name] = l
	}
	return promoter.Config{
		Policies:          pp.policies,
		Lakes:             lakes,
		Tier:              tieradapter.New(pp.tier),
		BulkLoad:          pp.bulk,
		Store:             pp.store,
		Stores:            pp.stores(),
		Ledger:            ledger,
		Logger:            pp.log.With("component", "promoter"),
		Registry:          reg,
		Now:               opts.Now,
		Workers:           cfg.Workers,
		ReconcileInterval: cfg.ReconcileInterval,
		LakePollInterval:  cfg.LakePollInterval,
		CommitBudget:      cfg.CommitBudget,
		LedgerRetention:   cfg.LedgerRetention,
		TempDir:           pp.tempDir,
		Hooks:             opts.Hooks,
	}
}

// PlanPromoter is `thaw plan`: it loads cfg's policies, connects to the
// tier (starting the embedded one on data_dir when configured) and returns
// the dry-run plan of policy ("" for every policy; those of them that
// could not be planned come back as a promoterhttp.PlanErrors error with
// the others' plans, as the API answers). It writes nothing:
// no table, partition, transaction or ledger record, and it does not
// campaign for leadership.
func PlanPromoter(ctx context.Context, cfg PromoterConfig, policy string, opts PromoterOptions) (_ []*promoter.Plan, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: promoter config: %w", err)
	}
	opts.RunOptions = opts.RunOptions.withDefaults()
	pp, err := openPromoterParts(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, pp.close()) }()
	p, err := promoter.New(pp.promoterConfig(cfg, opts, promoter.NewEtcdLedger(pp.etcd, cfg.Prefix, nil), prometheus.NewRegistry()))
	if err != nil {
		return nil, err
	}
	names := []string{policy}
	if policy == "" {
		names = names[:0]
		for _, pol := range pp.policies {
			names = append(names, pol.Name())
		}
	}
	plans := make([]*promoter.Plan, 0, len(names))
	var failed promoterhttp.PlanErrors
	for _, name := range names {
		pl, err := p.Plan(ctx, name)
		switch {
		case err == nil:
			plans = append(plans, pl)
		case policy != "" || ctx.Err() != nil || errors.Is(err, promoter.ErrUnreadable):
			return nil, fmt.Errorf("daemon: plan %s: %w", name, err)
		default: // one policy's failure hides no other's plan
			failed = append(failed, promoterhttp.PlanError{Policy: name, Error: err.Error()})
		}
	}
	if len(failed) > 0 {
		return plans, failed
	}
	return plans, nil
}

// PromoterDaemon is a running `thaw promoter`: the HTTP listener, the
// tier (embedded or a client of an external one), the campaign for
// leadership and, once it leads, the promoter and its cron trigger.
type PromoterDaemon struct {
	cfg      PromoterConfig
	opts     PromoterOptions
	log      *slog.Logger
	pp       *promoterParts
	kafka    *kafka.Config          // the control-event trigger's, without handler; nil: none
	statusTo *kafka.PublisherConfig // the status-event publisher's; nil: none
	status   *kafka.Publisher       // open from start to Close when statusTo is set
	id       string
	addr     string
	draining atomic.Bool

	ctx      context.Context // cancelled by Close: stops the leader's work
	cancel   context.CancelFunc
	httpStop context.CancelFunc
	httpDone chan error
	leadDone chan struct{} // closed when the leader goroutine returned
	leadErr  error         // set before leadDone closes
	// watchDone is closed when the policy files' watch has stopped.
	watchDone chan struct{}

	api atomic.Pointer[http.Handler] // nil: not leading
	mu  struct {
		sync.Mutex
		p      *promoter.Promoter
		lead   *fencing.Leadership
		closed bool
	}
}

// StartPromoter starts the promoter daemon and returns once its listener
// serves. It campaigns for leadership in the background; Promoter is nil
// and /readyz answers 503 until it leads and has resumed its ledger
// (WaitReady). Close stops it.
func StartPromoter(ctx context.Context, cfg PromoterConfig, opts PromoterOptions) (_ *PromoterDaemon, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: promoter config: %w", err)
	}
	opts.RunOptions = opts.RunOptions.withDefaults()
	d := &PromoterDaemon{cfg: cfg, opts: opts, log: opts.Logger, id: cfg.ID, leadDone: make(chan struct{})}
	if d.id == "" {
		d.id = promoterID()
	}
	// The Kafka client's TLS files and password are read now (not by
	// thaw plan, which does not connect), so that a mistake stops the
	// start, not the first leadership term.
	if cfg.Kafka != nil {
		if d.kafka, d.statusTo, err = cfg.Kafka.load(os.Getenv, d.log.With("component", "kafka-tls")); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	// The API's key pair, callers file and address first, as every role
	// binds its address before etcd and the tier: a mistake there, or an
	// address in use, fails at once (not after the embedded tier started,
	// nor never, behind an etcd that does not answer).
	serverTLS, _, err := cfg.TLS.load(d.log.With("component", "tls"))
	if err != nil {
		return nil, err
	}
	apiCallers, err := readAPICallers(cfg.APICallersFile, d.log.With("component", "api"))
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("daemon: listen: %w", err)
	}
	d.addr = advertised("", ln.Addr())
	d.pp, err = openPromoterParts(ctx, cfg, opts)
	if err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	// A promoter killed during a build left its spill and SST files (not
	// thaw plan's to remove: it changes nothing).
	if st, err := snapshotbuild.RemoveStaleTemp(d.pp.tempDir); err != nil {
		d.log.Warn("cannot remove the temporary files of builds a killed process left", "err", err)
	} else if st.Dirs > 0 {
		d.log.Info("removed the temporary files of builds a killed process left", "dir", cmp.Or(d.pp.tempDir, os.TempDir()), "dirs", st.Dirs, "bytes", st.Bytes)
	}
	// Fail now, not after winning the election, on what the promoter
	// refuses (e.g. two policies of one lake table). This instance only
	// checks: it runs nothing and its ledger cannot write.
	if _, err := promoter.New(d.pp.promoterConfig(cfg, opts, promoter.NewEtcdLedger(d.pp.etcd, cfg.Prefix, nil), prometheus.NewRegistry())); err != nil {
		return nil, errors.Join(fmt.Errorf("daemon: promoter: %w", err), ln.Close(), d.pp.close())
	}
	if d.statusTo != nil {
		pc := *d.statusTo
		pc.Logger, pc.Registerer = d.log.With("component", "kafka"), opts.Registry
		if d.status, err = kafka.NewPublisher(pc); err != nil {
			return nil, errors.Join(fmt.Errorf("daemon: status events: %w", err), ln.Close(), d.pp.close())
		}
	}

	gath := newGatherers(opts.Registry)
	var metrics prometheus.Gatherer = gath
	if d.pp.embedded != nil {
		metrics = prometheus.Gatherers{gath, d.pp.embedded.Gatherer()}
	}
	healthz, readyz := healthHandlers(d.draining.Load, []readiness{
		{"etcd", func(ctx context.Context) error { _, err := d.pp.etcd.Get(ctx, cfg.Prefix+"/health"); return err }},
		{"tier", d.checkTier},
		{"leader", d.checkLeader},
		{"promoter", d.checkPromoter},
	})
	mux := http.NewServeMux()
	mux.Handle(PathHealthz, healthz)
	mux.Handle(PathReadyz, readyz)
	mux.Handle(PathMetrics, metricsHandler(metrics))
	mux.Handle("/v1/", apiCallers.guard(http.HandlerFunc(d.serveAPI)))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		promoterhttp.WriteError(w, http.StatusNotFound, promoterhttp.CodeNotFound, "no route "+r.URL.Path)
	}))
	hctx, hstop := context.WithCancel(context.WithoutCancel(ctx))
	d.httpStop, d.httpDone = hstop, make(chan error, 1)
	srv := newHTTPServer(ln, cfg.TLS.wrap(mux), promoterHTTPLimits, cfg.ShutdownTimeout, d.log.With("component", "http"), serverTLS)
	go func() { d.httpDone <- srv.Start(hctx) }()

	d.ctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	d.watchDone = make(chan struct{})
	go func() {
		defer close(d.watchDone)
		newPolicyWatch(cfg.Policies, opts.ConfigFile, d.pp.policyDigest, d.log.With("component", "policies")).run(d.ctx)
	}()
	go func() {
		defer close(d.leadDone)
		// A component of the embedded tier that fails on its own (as
		// thaw server, the process then stops so that a supervisor
		// restarts it) ends the term: the promoter would otherwise go on
		// with no coordinator, or a dead tablet server, for good.
		lctx, cancel := context.WithCancelCause(d.ctx)
		defer cancel(nil)
		if e := d.pp.embedded; e != nil {
			go func() {
				select {
				case <-e.Done():
					cancel(fmt.Errorf("daemon: the embedded tier failed: %w", e.Err()))
				case <-lctx.Done():
				}
			}()
		}
		d.leadErr = d.lead(lctx)
		if cause := context.Cause(lctx); d.leadErr == nil && d.ctx.Err() == nil && cause != nil {
			d.leadErr = cause
		}
		if d.leadErr != nil {
			d.log.Error("promoter stopped", "err", d.leadErr)
		}
	}()
	d.log.Info("thaw promoter started", "address", d.addr, "id", d.id, "policies", len(d.pp.policies), "embedded_tier", d.pp.embedded != nil)
	return d, nil
}

// lead campaigns, then runs the promoter, the cron trigger and the Kafka
// control-event trigger under the term until ctx is done (nil) or the term
// is lost (an error).
func (d *PromoterDaemon) lead(ctx context.Context) (err error) {
	log := d.log
	electionKey := d.cfg.Prefix + "/leader"
	log.Info("promoter campaigning", "id", d.id, "election", electionKey)
	lead, err := fencing.Elect(ctx, d.pp.etcd, electionKey, d.id, d.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("daemon: promoter election: %w", err)
	}
	log = log.With("epoch", int64(lead.Epoch()))
	log.Info("promoter leads", "id", d.id)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := lead.Resign(rctx); rerr != nil && !errors.Is(rerr, fencing.ErrLeadershipLost) {
			log.Warn("promoter resign", "err", rerr)
		} else {
			log.Info("promoter resigned")
		}
	}()
	pc := d.pp.promoterConfig(d.cfg, d.opts, promoter.NewEtcdLedger(d.pp.etcd, d.cfg.Prefix, lead), d.opts.Registry)
	if d.status != nil {
		pc.Status = statusSink{pub: d.status, log: log.With("component", "kafka")}
	}
	p, err := promoter.New(pc)
	if err != nil {
		return err
	}
	var trigger *cron.Trigger
	var entries []cron.Entry
	for _, pol := range d.pp.policies {
		if s := pol.Triggers().Schedule; s != nil {
			entries = append(entries, cron.Entry{Policy: pol.Name(), Cron: s.Cron, TimeZone: s.TimeZone})
		}
	}
	if len(entries) > 0 {
		trigger, err = cron.New(entries, func(ctx context.Context, policy string) {
			rep, err := p.ReconcilePolicy(ctx, policy)
			if err != nil {
				log.Warn("scheduled reconcile", "policy", policy, "err", err)
				return
			}
			log.Info("scheduled reconcile", "policy", policy, "selected", rep.Selected, "enqueued", rep.Enqueued, "promoted", rep.Promoted, "running", rep.Running, "skipped", rep.Skipped)
		}, log.With("component", "cron"))
		if err != nil {
			return fmt.Errorf("daemon: cron trigger: %w", err)
		}
	}
	var control *kafka.Trigger
	if d.kafka != nil {
		kc := *d.kafka
		kc.Handle = controlHandler(p, log.With("component", "kafka"))
		kc.Logger = log.With("component", "kafka")
		kc.Registerer = d.opts.Registry
		if control, err = kafka.New(kc); err != nil {
			return fmt.Errorf("daemon: kafka trigger: %w", err)
		}
	}
	// The term's work stops on shutdown (ctx) or when the term is lost.
	rctx, rcancel := context.WithCancel(lead.Context())
	defer rcancel()
	stop := context.AfterFunc(ctx, rcancel)
	defer stop()
	d.mu.Lock()
	d.mu.p, d.mu.lead = p, lead
	d.mu.Unlock()
	api := promoterhttp.NewHandler(p, log.With("component", "api"))
	p.ExpectRun() // requests served before Run starts wait for its resume
	d.api.Store(&api)
	defer d.api.Store(nil)

	g, gctx := errgroup.WithContext(rctx)
	g.Go(func() error { return p.Run(gctx) })
	if trigger != nil {
		g.Go(func() error { return trigger.Run(gctx) })
	}
	if control != nil {
		g.Go(func() error { return control.Run(gctx) })
	}
	err = g.Wait()
	switch {
	case ctx.Err() != nil: // shutdown
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	case lead.Err() != nil:
		return fmt.Errorf("daemon: promoter leadership lost: %w", lead.Err())
	case err == nil:
		return errors.New("daemon: promoter stopped on its own")
	}
	return err
}

func (d *PromoterDaemon) serveAPI(w http.ResponseWriter, r *http.Request) {
	h := d.api.Load()
	if h == nil || d.draining.Load() {
		promoterhttp.WriteError(w, http.StatusServiceUnavailable, promoterhttp.CodeUnavailable,
			"this promoter is not leading (standby, starting or shutting down)")
		return
	}
	(*h).ServeHTTP(w, r)
}

func (d *PromoterDaemon) checkTier(ctx context.Context) error {
	if d.pp.embedded != nil {
		return d.pp.embedded.Ready(ctx)
	}
	_, err := d.pp.tier.Leader(ctx)
	return err
}

func (d *PromoterDaemon) checkLeader(context.Context) error {
	d.mu.Lock()
	lead := d.mu.lead
	d.mu.Unlock()
	if lead == nil {
		return errors.New("not leading (campaigning)")
	}
	if err := lead.Err(); err != nil {
		return err
	}
	return nil
}

func (d *PromoterDaemon) checkPromoter(context.Context) error {
	if p := d.Promoter(); p == nil || !p.Ready() {
		return errors.New("not resumed yet")
	}
	return nil
}

// Address returns the listener's host:port.
func (d *PromoterDaemon) Address() string { return d.addr }

// URL returns the API's base URL (https:// with TLS).
func (d *PromoterDaemon) URL() string { return d.cfg.TLS.Scheme() + d.addr }

// Promoter returns the promoter once this daemon leads, else nil.
func (d *PromoterDaemon) Promoter() *promoter.Promoter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.p
}

// Tier returns the embedded tier, or nil with an external one.
func (d *PromoterDaemon) Tier() *Embedded { return d.pp.embedded }

// Etcd returns the etcd client the ledger lives in.
func (d *PromoterDaemon) Etcd() *clientv3.Client { return d.pp.etcd }

// Done is closed when the promoter stopped on its own (leadership lost,
// a failure) or after Close.
func (d *PromoterDaemon) Done() <-chan struct{} { return d.leadDone }

// Err returns why the promoter stopped, once Done is closed.
func (d *PromoterDaemon) Err() error {
	select {
	case <-d.leadDone:
		return d.leadErr
	default:
		return nil
	}
}

// WaitReady polls until this daemon leads and its promoter has resumed,
// or ctx is done, or the promoter stopped.
func (d *PromoterDaemon) WaitReady(ctx context.Context) error {
	for {
		if p := d.Promoter(); p != nil && p.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("daemon: promoter not ready: %w", context.Cause(ctx))
		case <-d.leadDone:
			return fmt.Errorf("daemon: promoter stopped before it was ready: %w", d.leadErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close shuts down gracefully: /readyz turns 503 and the API answers
// unavailable; the HTTP server drains running requests; the promoter
// stops (promotions before their commit decision are aborted, committing
// ones are left for the next leader's resume) and resigns; then the tier
// client, the catalogs and the tier (or the etcd client) close. Each phase
// is bounded by shutdown_timeout.
func (d *PromoterDaemon) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.closed = true
	d.mu.Unlock()
	d.draining.Store(true)
	var errs []error
	d.httpStop()
	if err := <-d.httpDone; err != nil {
		errs = append(errs, err)
	}
	d.cancel()
	<-d.watchDone
	timer := time.NewTimer(d.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-d.leadDone:
		errs = append(errs, d.leadErr)
	case <-timer.C:
		errs = append(errs, fmt.Errorf("daemon: promoter did not stop within %v", d.cfg.ShutdownTimeout))
	}
	if d.status != nil {
		// The last events (a promotion aborted by the shutdown) go out
		// before the client closes.
		errs = append(errs, d.status.Close(context.Background()))
	}
	errs = append(errs, d.pp.close())
	return errors.Join(errs...)
}

// RunPromoter runs `thaw promoter` until ctx is done (then it shuts down
// gracefully, see PromoterDaemon.Close) or the promoter stops on its own
// (leadership lost: the process should exit and be restarted).
func RunPromoter(ctx context.Context, cfg PromoterConfig, opts PromoterOptions) error {
	d, err := StartPromoter(ctx, cfg, opts)
	if err != nil {
		return err
	}
	log := d.log
	if opts.OnReady != nil {
		opts.OnReady(d.Address())
	}
	var failure error
	select {
	case <-ctx.Done():
		log.Info("thaw promoter shutting down")
	case <-d.Done():
		failure = d.Err()
		if failure == nil {
			failure = errors.New("daemon: promoter stopped")
		}
		log.Error("thaw promoter failed; shutting down", "err", failure)
	}
	err = errors.Join(failure, d.Close())
	if err != nil {
		log.Error("thaw promoter stopped", "err", err)
	} else {
		log.Info("thaw promoter stopped")
	}
	return err
}
