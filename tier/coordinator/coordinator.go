package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// Coordinator is one coordinator process: a candidate in the election and,
// while it leads, the only writer of the tier's metadata. Create it with
// New, serve Handler, and Run it.
type Coordinator struct {
	cfg     Config
	cli     *clientv3.Client
	store   *meta.Store
	tablets func(address string) tierv1connect.TabletServiceClient
	objects ObjectStore
	log     *slog.Logger
	m       *metrics

	// Bulk load: the state machine's configuration, the object store's
	// bulk-load capabilities (nil: bulk load unavailable), the clock and
	// the test hook.
	bulkCfg     bulktxn.Config
	bulkObjects BulkObjectStore
	clock       Clock
	hook        func(step string) error
	uploads     *uploadGateway
	// auth authenticates callers (nil: no callers configured, nothing
	// authenticated); SetCallers replaces it. publishMu serializes
	// publications of the data-access policy it implies.
	auth      atomic.Pointer[authn]
	publishMu sync.Mutex

	// term is the current leadership term, nil on standby. Written only by
	// Run's goroutine; read by RPC handlers.
	term atomic.Pointer[term]

	// snapLocks serialize ReportSnapshot per bucket (striped by a hash of
	// the bucket's identity), so that two reports of one bucket never
	// interleave their registry writes and retention.
	snapLocks [64]sync.Mutex

	// names caches table and partition names by id for ReportSnapshot,
	// which names its target by ids only.
	names struct {
		sync.Mutex
		tables     map[int64]tableName
		partitions map[meta.Target]string
	}
}

// term is one leadership term and the leader work that runs in it.
type term struct {
	l     *fencing.Leadership
	guard meta.Guard
	rec   *reconciler
	bulk  *bulkManager
	// unfinishedDrop wakes finishDropsLoop: a drop of this term failed
	// midway (its request's context ended, an etcd call failed).
	unfinishedDrop chan struct{}
}

// dropFailed has finishDropsLoop finish what a failed drop left.
func (t *term) dropFailed() {
	select {
	case t.unfinishedDrop <- struct{}{}:
	default:
	}
}

func (t *term) epoch() fencing.Epoch { return t.l.Epoch() }

// New returns a coordinator; it does nothing until Run.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	switch {
	case deps.Etcd == nil:
		return nil, errors.New("coordinator: new: no etcd client")
	case deps.Meta == nil:
		return nil, errors.New("coordinator: new: no metadata store")
	case deps.Tablets == nil:
		return nil, errors.New("coordinator: new: no tablet client factory")
	case deps.Objects == nil:
		return nil, errors.New("coordinator: new: no object store")
	}
	cfg, err := cfg.withDefaults(deps.Meta)
	if err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry() // private: the metrics go nowhere
	}
	bulkCfg, err := cfg.BulkLoad.machineConfig()
	if err != nil {
		return nil, fmt.Errorf("coordinator: config: %w", err)
	}
	clock := deps.Clock
	if clock == nil {
		clock = systemClock{}
	}
	bulkObjects, _ := deps.Objects.(BulkObjectStore)
	uploads, err := newUploadGateway(cfg.BulkLoad, deps.Objects, deps.UploadKey)
	if err != nil {
		return nil, err
	}
	auth, err := newAuthn(cfg.Callers) // checked by withDefaults
	if err != nil {
		return nil, fmt.Errorf("coordinator: config: %w", err)
	}
	c := &Coordinator{
		cfg:         cfg,
		cli:         deps.Etcd,
		store:       deps.Meta,
		tablets:     deps.Tablets,
		objects:     deps.Objects,
		log:         log.With("coordinator", cfg.ID),
		m:           newMetrics(reg),
		bulkCfg:     bulkCfg,
		bulkObjects: bulkObjects,
		clock:       clock,
		hook:        deps.BulkLoadHook,
		uploads:     uploads,
	}
	c.auth.Store(auth)
	return c, nil
}

// MaxRequestBytes bounds a request message of the coordinator's services,
// after decompression: their messages are small (manifests and snapshots
// go through the object store), and connect reads and decodes a message
// before any authentication, so without a bound one request, from anyone
// who reaches the listener, could make it allocate without limit.
const MaxRequestBytes = 16 << 20

// Handler returns the path ("/") and handler of the coordinator's
// services: the CoordinatorService, the BulkLoadService and the upload
// gateway (uploadcap.Path). Request messages are bounded by
// MaxRequestBytes (an option given here may change that).
func (c *Coordinator) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append([]connect.HandlerOption{tierpb.StrictJSON(), connect.WithReadMaxBytes(MaxRequestBytes)}, opts...)
	mux := http.NewServeMux()
	mux.Handle(tierv1connect.NewCoordinatorServiceHandler(&service{c: c}, opts...))
	bulkOpts := opts
	if c.auth.Load() != nil {
		bulkOpts = append(opts[:len(opts):len(opts)], connect.WithInterceptors(authInterceptor{c}))
	}
	mux.Handle(tierv1connect.NewBulkLoadServiceHandler(&bulkService{c: c}, bulkOpts...))
	mux.HandleFunc(uploadcap.Path, c.serveUpload)
	return "/", mux
}

// IsLeader reports whether this coordinator currently leads, and its epoch.
func (c *Coordinator) IsLeader() (fencing.Epoch, bool) {
	t := c.current()
	if t == nil {
		return 0, false
	}
	return t.epoch(), true
}

// current returns the current term, nil if none or if it has ended.
func (c *Coordinator) current() *term {
	t := c.term.Load()
	if t == nil || t.l.Err() != nil {
		return nil
	}
	return t
}

// addressKey is {p}/coordinators/{id}.
func (c *Coordinator) addressKey(id string) string { return c.cfg.Prefix + "/coordinators/" + id }

// Run publishes the coordinator's address and campaigns; while it leads, it
// runs the leader work (reconciling assignments) until the term ends, then
// campaigns again. It returns nil when ctx is done (resigning a term it
// holds, so a standby takes over at once), and an error only when it cannot
// go on: its etcd client was closed.
func (c *Coordinator) Run(ctx context.Context) error {
	pctx, stopPublishing := context.WithCancel(ctx)
	published := make(chan struct{})
	go func() {
		defer close(published)
		c.publish(pctx)
	}()
	defer func() {
		stopPublishing()
		<-published
	}()
	backoff := newBackoff(100*time.Millisecond, c.cfg.LeaseTTL)
	for {
		if err := c.cli.Ctx().Err(); err != nil {
			return fmt.Errorf("coordinator: %s: etcd client closed: %w", c.cfg.ID, err)
		}
		l, err := fencing.Elect(ctx, c.cli, c.store.ElectionPrefix(), c.cfg.ID, c.cfg.LeaseTTL)
		switch {
		case ctx.Err() != nil:
			if l != nil {
				c.resign(ctx, l)
			}
			return nil
		case c.cli.Ctx().Err() != nil:
			return fmt.Errorf("coordinator: %s: campaign: etcd client closed: %w", c.cfg.ID, errors.Join(err, c.cli.Ctx().Err()))
		case err != nil:
			c.log.Warn("coordinator campaign failed", "err", err)
			if !backoff.wait(ctx) {
				return nil
			}
			continue
		}
		backoff.reset()
		c.lead(ctx, l)
		if ctx.Err() != nil {
			return nil
		}
	}
}

// lead runs the leader work of one term until the term ends, ctx is done,
// or the work finds itself fenced; then it resigns.
func (c *Coordinator) lead(ctx context.Context, l *fencing.Leadership) {
	log := c.log.With("epoch", int64(l.Epoch()))
	t := &term{l: l, guard: meta.GuardOf(l), unfinishedDrop: make(chan struct{}, 1)}
	t.rec = newReconciler(c, t, log)
	t.bulk = newBulkManager(c, t, log)
	c.m.terms.Inc()
	c.m.leader.Set(1)
	c.m.epoch.Set(float64(l.Epoch()))
	log.Info("coordinator leads")

	tctx, cancel := context.WithCancel(l.Context())
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	c.publishDataAccess(tctx, t)
	c.term.Store(t)
	g, gctx := errgroup.WithContext(tctx)
	g.Go(func() error { return t.rec.run(gctx) })
	g.Go(func() error { return c.watchServers(gctx, t) })
	g.Go(func() error { return t.bulk.run(gctx) })
	g.Go(func() error { return c.cleanDroppedLoop(gctx, t) })
	g.Go(func() error { c.finishDropsLoop(gctx, t); return nil })
	// A SetCallers between the publication above and the term's store saw
	// no term to publish in: publish what is current now (a comparison
	// that writes nothing when it is unchanged).
	g.Go(func() error { c.publishDataAccess(gctx, t); return nil })
	err := g.Wait()

	c.term.CompareAndSwap(t, nil)
	c.m.leader.Set(0)
	c.m.epoch.Set(0)
	// What only the leader measures says nothing once it is not: a
	// standby exporting the last term's values would keep alerts firing
	// after the new leader fixed what they were about.
	c.m.underReplicated.Set(0)
	c.m.liveServers.Set(0)
	c.m.droppedPending.Set(0)
	cause := l.Err()
	if cause == nil {
		cause = errors.Join(err, context.Cause(tctx))
	}
	log.Info("coordinator stops leading", "cause", cause)
	c.resign(ctx, l)
}

// resign ends a term, deleting its leader key if it still holds it.
func (c *Coordinator) resign(ctx context.Context, l *fencing.Leadership) {
	if c.cli.Ctx().Err() != nil {
		return // the lease went with the client
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL)
	defer cancel()
	if err := l.Resign(rctx); err != nil {
		c.log.Warn("coordinator resign failed; the leader key goes with its lease", "epoch", int64(l.Epoch()), "err", err)
	}
}

// watchServers requests a reconcile round on every change of the live
// tablet servers (the first delivery included).
func (c *Coordinator) watchServers(ctx context.Context, t *term) error {
	for set := range c.store.WatchServers(ctx) {
		c.m.liveServers.Set(float64(len(set.Servers)))
		t.rec.request()
	}
	return nil
}

// publish keeps {p}/coordinators/{id} = AdvertiseAddress under a lease of
// its own until ctx is done, then revokes the lease. A lost lease is
// replaced.
func (c *Coordinator) publish(ctx context.Context) {
	backoff := newBackoff(100*time.Millisecond, c.cfg.LeaseTTL)
	for ctx.Err() == nil && c.cli.Ctx().Err() == nil {
		if err := c.publishOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("coordinator cannot publish its address", "err", err)
			backoff.wait(ctx)
			continue
		}
		backoff.reset()
	}
}

// publishOnce publishes under one lease until the lease is lost or ctx is
// done.
func (c *Coordinator) publishOnce(ctx context.Context) error {
	secs := int64((c.cfg.LeaseTTL + time.Second - 1) / time.Second)
	granted := time.Now()
	lease, err := c.cli.Grant(ctx, secs)
	if err != nil {
		return fmt.Errorf("coordinator: publish address: grant lease: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LeaseTTL)
		defer cancel()
		_, _ = c.cli.Revoke(rctx, lease.ID) // best effort: otherwise it expires
	}()
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kch, err := c.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		return fmt.Errorf("coordinator: publish address: keep lease alive: %w", err)
	}
	if _, err := c.cli.Put(ctx, c.addressKey(c.cfg.ID), c.cfg.AdvertiseAddress, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("coordinator: publish address: %w", err)
	}
	// Returns when the lease is lost, goes unanswered for its TTL, or ctx
	// is done.
	fencing.DrainKeepAlive(kch, time.Duration(lease.TTL)*time.Second, granted, cancel)
	if ctx.Err() == nil {
		return fmt.Errorf("coordinator: publish address: lease %x lost", lease.ID)
	}
	return nil
}

// leaderHint names the active coordinator as etcd knows it: id, epoch and
// published address; zero fields where unknown.
func (c *Coordinator) leaderHint(ctx context.Context) tierpb.LeaderHint {
	if c.cli.Ctx().Err() != nil {
		return tierpb.LeaderHint{} // cut off from etcd for good
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTTL)
	defer cancel()
	ldr, err := fencing.CurrentLeader(ctx, c.cli, c.store.ElectionPrefix())
	if err != nil || ldr.ID == "" {
		return tierpb.LeaderHint{}
	}
	hint := tierpb.LeaderHint{ID: ldr.ID, Epoch: int64(ldr.Epoch)}
	if resp, err := c.cli.Get(ctx, c.addressKey(ldr.ID)); err == nil && len(resp.Kvs) > 0 {
		hint.Address = string(resp.Kvs[0].Value)
	}
	return hint
}

// leading returns the current term, or a NOT_LEADER error naming the
// active coordinator.
func (c *Coordinator) leading(ctx context.Context) (*term, error) {
	if t := c.current(); t != nil {
		return t, nil
	}
	return nil, c.notLeader(ctx)
}

func (c *Coordinator) notLeader(ctx context.Context) error {
	msg := fmt.Sprintf("coordinator: %s is not the active coordinator", c.cfg.ID)
	return c.notLeaderError(msg, c.leaderHint(ctx))
}

// notLeaderError is NOT_LEADER naming the active coordinator, unless etcd
// names this one: it won the election and has not stored its term yet, or
// its term ended before its leader key went (or a fenced write met its own
// next term). A hint to itself would only send the client back here, so
// that is UNAVAILABLE: retry shortly, here or at another coordinator.
func (c *Coordinator) notLeaderError(msg string, hint tierpb.LeaderHint) error {
	if hint.ID == c.cfg.ID {
		return tierpb.NewError(tierpb.ReasonUnavailable,
			msg+"; it is the elected coordinator, and its term is starting or ending: retry", nil)
	}
	if hint.ID != "" {
		msg += "; " + hint.ID + " is"
	}
	return tierpb.NewNotLeaderError(msg, hint)
}

// backoff is a capped exponential backoff.
type backoff struct{ min, max, cur time.Duration }

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: max(maxDelay, minDelay), cur: minDelay}
}

func (b *backoff) reset() { b.cur = b.min }

// next returns the current delay and doubles it.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d
}

// wait sleeps the current delay and doubles it; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	tm := time.NewTimer(b.next())
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
