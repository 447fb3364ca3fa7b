package tablet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Server is one tablet server. Create it with New, run it with Run and
// serve Handler; see the package documentation for the contract.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// writeFailures logs writes that failed on this server's side.
	writeFailures failureLog
	m             *metrics
	host          *replica.Host
	gate          fencing.Gate

	restoreSem chan struct{}    // one token per running restore
	calls      chan func(*loop) // closures the loop runs, in order
	up         chan struct{}    // closed when the loop starts
	down       chan struct{}    // closed when the loop has stopped
	ran        atomic.Bool
	registered atomic.Bool                // holds its registration lease now (register)
	access     atomic.Pointer[dataPolicy] // nil until read (watchDataAccess)
	scans      scanTable

	// mu guards what the loop publishes for the handlers. The loop is the
	// only writer; it holds mu only to swap entries, never across I/O.
	mu struct {
		sync.RWMutex
		targets  map[meta.Target]*targetView
		replicas map[bucketKey]*replicaEntry
		servers  map[string]string // live server id → address
	}
}

// New returns a server; it creates the data directory and the replica
// host (the shared block cache and memtable budget) but starts nothing.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("server", cfg.ID)
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"server": cfg.ID}, reg)
	host, err := replica.NewHost(cfg.DataDir, deps.Objects, deps.Changelog,
		replica.WithCacheSize(cfg.BlockCacheBytes),
		replica.WithMemTableBudget(cfg.MemtableBudgetBytes),
		replica.WithExpectedReplicas(cfg.ExpectedReplicas),
		replica.WithRequestLimits(cfg.MaxBatchMutations, cfg.MaxBatchBytes),
		replica.WithTransferConcurrency(cfg.TransferConcurrency),
		replica.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("tablet: new server %s: %w", cfg.ID, err)
	}
	s := &Server{
		cfg:        cfg,
		deps:       deps,
		log:        log,
		host:       host,
		restoreSem: make(chan struct{}, cfg.RestoreConcurrency),
		calls:      make(chan func(*loop)),
		up:         make(chan struct{}),
		down:       make(chan struct{}),
	}
	s.mu.targets = make(map[meta.Target]*targetView)
	s.mu.replicas = make(map[bucketKey]*replicaEntry)
	s.mu.servers = make(map[string]string)
	s.scans.init(cfg.MaxScans)
	s.m = newMetrics(reg, s)
	return s, nil
}

// ID returns the server's id.
func (s *Server) ID() string { return s.cfg.ID }

// Handler returns the path and handler of the server's TabletService, for
// the daemon to mount (under "/t/{id}/" with http.StripPrefix on the
// shared listener).
func (s *Server) Handler() (string, http.Handler) {
	return tierv1connect.NewTabletServiceHandler(&service{s: s}, tierpb.StrictJSON(), connect.WithReadMaxBytes(64<<20))
}

// Run registers the server, follows its assignment and serves its
// replicas until ctx is done; then it closes and removes every replica,
// revokes its registration and returns nil. It returns an error only if it
// cannot start. A Server runs once.
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("tablet: run: the server has already run")
	}
	defer close(s.down)
	defer func() {
		if err := s.host.Close(); err != nil && !errors.Is(err, replica.ErrClosed) {
			s.log.Warn("tablet host close", "err", err)
		}
	}()
	if err := removeStaleReplicas(s.cfg.DataDir); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	seeded := make(chan struct{})
	wg.Go(func() { s.register(ctx) })
	wg.Go(func() { s.observeCoordinator(ctx, seeded) })
	wg.Go(func() { s.watchRecords(ctx, s.deps.Meta.Prefix()+"/tables/", recordTables) })
	wg.Go(func() { s.watchRecords(ctx, s.deps.Meta.Prefix()+"/partitions/", recordPartitions) })
	wg.Go(func() { s.watchDataAccess(ctx) })
	wg.Go(func() { s.scans.expire(ctx, s.cfg.ScanIdleTimeout) })
	wg.Go(func() { s.sweepLogs(ctx) })

	l := newLoop(s)
	// The gate knows the elected coordinator's epoch before any command
	// is served: else a deposed coordinator's command (a data state, an
	// assignment, a restore) could pass in the moments after a restart.
	select {
	case <-seeded:
	case <-ctx.Done():
	}
	close(s.up)
	l.run(ctx, s.deps.Meta.WatchAssignments(ctx), s.deps.Meta.WatchServers(ctx))
	cancel()
	wg.Wait()
	s.scans.closeAll()
	return nil
}

// replicaDirPattern matches the directories replica.Host keeps replicas in.
var replicaDirPattern = regexp.MustCompile(`^t[0-9]+(-p[0-9]+)?-b[0-9]+$`)

// removeStaleReplicas removes what an earlier process left in the data
// directory: replicas are rebuilt from snapshots and the changelog, never
// reused.
func removeStaleReplicas(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("tablet: list data dir: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && replicaDirPattern.MatchString(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("tablet: remove stale replica: %w", err)
			}
		}
	}
	return nil
}

// call runs fn on the loop goroutine and waits for it.
func (s *Server) call(ctx context.Context, fn func(l *loop)) error {
	select {
	case <-s.up:
	default:
		return errNotRunning
	}
	done := make(chan struct{})
	select {
	case s.calls <- func(l *loop) { defer close(done); fn(l) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.down:
		return errNotRunning
	}
	<-done
	return nil
}

// post hands fn to the loop without waiting for it to run.
func (s *Server) post(ctx context.Context, fn func(l *loop)) bool {
	select {
	case s.calls <- fn:
		return true
	case <-ctx.Done():
		return false
	case <-s.down:
		return false
	}
}

// Registered returns nil while the server holds its own registration
// (another incarnation's, left by a process killed with the same id,
// does not count), else why not (for a readiness check).
func (s *Server) Registered() error {
	if !s.registered.Load() {
		return fmt.Errorf("%s does not hold its registration (registering, or the id is registered under another lease)", s.cfg.ID)
	}
	return nil
}

// register keeps the server registered: it registers under a lease, and
// when the lease is lost (expired, revoked, not kept alive) tells the loop,
// which stops every replica, and registers again. On ctx done it revokes
// the lease.
func (s *Server) register(ctx context.Context) {
	rec := meta.ServerRecord{ID: s.cfg.ID, Address: s.cfg.AdvertiseAddress, Changelog: s.cfg.ChangelogIdentity}
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	for ctx.Err() == nil {
		reg, err := s.deps.Meta.RegisterServer(ctx, rec, s.cfg.LeaseTTL)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("tablet registration failed", "err", err)
			}
			b.sleep(ctx)
			continue
		}
		b.reset()
		s.log.Info("tablet registered", "lease", fmt.Sprintf("%x", reg.Lease()), "changelog", s.cfg.ChangelogIdentity)
		s.m.registered.Set(1)
		s.registered.Store(true)
		s.post(ctx, func(l *loop) { l.setRegistered(true) })
		select {
		case <-reg.Done():
			s.registered.Store(false)
			s.m.registered.Set(0)
			s.m.leaseLost.Inc()
			s.log.Warn("tablet lost its registration lease; stopping its replicas")
			s.post(ctx, func(l *loop) { l.setRegistered(false) })
		case <-ctx.Done():
			s.registered.Store(false)
			s.m.registered.Set(0)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := reg.Close(rctx); err != nil {
				s.log.Warn("tablet could not revoke its registration", "err", err)
			}
			cancel()
		}
	}
}

// observeCoordinator admits the epoch of every coordinator elected into the
// gate, so that requests of a deposed coordinator are refused even if it
// never reached this server after its successor did.
func (s *Server) observeCoordinator(ctx context.Context, seeded chan<- struct{}) {
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	first := true
	for ctx.Err() == nil {
		for l := range fencing.Observe(ctx, s.deps.Etcd, s.deps.Meta.ElectionPrefix()) {
			if l.Epoch > 0 {
				_ = s.gate.Admit(l.Epoch) // a lower epoch than one admitted is a stale observation
			}
			if first {
				first = false
				close(seeded) // the current leader (or none) is known
			}
			b.reset()
		}
		b.sleep(ctx)
	}
}

// coordinatorGuard returns the guard of the current coordinator's term,
// under which the server allocates snapshot ids.
func (s *Server) coordinatorGuard(ctx context.Context) (meta.Guard, error) {
	l, err := fencing.CurrentLeader(ctx, s.deps.Etcd, s.deps.Meta.ElectionPrefix())
	if err != nil {
		return meta.Guard{}, fmt.Errorf("tablet: read the coordinator leader: %w", err)
	}
	if l.Epoch <= 0 {
		return meta.Guard{}, errors.New("tablet: no coordinator is elected")
	}
	return meta.Guard{LeaderKey: l.Key, Epoch: l.Epoch}, nil
}

// backoff is an exponential delay between attempts.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits the next delay or until ctx is done; it reports whether ctx
// is still live.
func (b *backoff) sleep(ctx context.Context) bool {
	b.cur = min(max(2*b.cur, b.min), b.max)
	t := time.NewTimer(b.cur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
