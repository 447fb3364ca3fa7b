package promoter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/internal/periodic"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// Promoter is the reconcile core: see doc.go for its contract. Its methods
// are safe for concurrent use.
type Promoter struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	q      *queue
	pols   map[string]*policies.Policy
	byLake map[string]*policies.Policy // catalog + "\x00" + lake table

	ready atomic.Bool
	// resuming: Run resumes the ledger; Request and Cancel wait for it
	// (awaitResumed).
	resuming atomic.Bool
	running  atomic.Bool
	drainMu  sync.Mutex // one local drain at a time
	reqMu    sync.Mutex // one Request stores and queues at a time (enqueueRequests)
	// pruneMu: a Request holds it shared from its plan until its keys are
	// queued, PruneLedger exclusively: a record a request's answer counts
	// on (the attempt after it) is never deleted in between.
	pruneMu sync.RWMutex

	mu struct {
		sync.Mutex
		live   map[string]*liveProgress
		cancel context.CancelCauseFunc // Run's, while it runs
		halted error
		// unreadable ledger records logged at error level: key → reason
		unreadable map[string]string
		// skips: requested promotions skipped when their turn came, by
		// promotion id, until the id's record is written or it is
		// requested again (see Skipped)
		skips map[string]Skip
		// lakeParts: each lake table's partitions at the snapshot a plan
		// last listed them (see lakePartitions)
		lakeParts map[lakeSnapshot][]lake.PartitionStats
	}
}

// New validates cfg, fills in defaults and returns a Promoter. It rejects
// duplicate policy names, two policies of one lake table or one tier
// table (a promotion's identity names the lake table, so one table has one
// policy), and policies whose catalog is not configured.
func New(cfg Config) (*Promoter, error) {
	switch {
	case cfg.Tier == nil:
		return nil, errors.New("promoter: config: no tier")
	case cfg.BulkLoad == nil:
		return nil, errors.New("promoter: config: no bulk loader")
	case cfg.Ledger == nil:
		return nil, errors.New("promoter: config: no ledger")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = time.Minute
	}
	if cfg.LakePollInterval == 0 {
		cfg.LakePollInterval = 30 * time.Second
	}
	if cfg.LedgerRetention == 0 {
		cfg.LedgerRetention = DefaultLedgerRetention
	}
	if cfg.CommitBudget <= 0 {
		cfg.CommitBudget = 5 * time.Minute
	}
	if cfg.Retry.Initial <= 0 {
		cfg.Retry.Initial = time.Second
	}
	if cfg.Retry.Max <= 0 {
		cfg.Retry.Max = time.Minute
	}
	if cfg.Retry.Max < cfg.Retry.Initial {
		cfg.Retry.Max = cfg.Retry.Initial
	}
	if cfg.Retry.Attempts <= 0 {
		cfg.Retry.Attempts = 5
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	p := &Promoter{
		cfg: cfg, log: cfg.Logger, m: m,
		pols: map[string]*policies.Policy{}, byLake: map[string]*policies.Policy{},
	}
	if err := CheckPolicies(cfg.Policies); err != nil {
		return nil, err
	}
	for _, pol := range cfg.Policies {
		src := pol.Source()
		if _, ok := cfg.Lakes[src.Catalog]; !ok || cfg.Lakes[src.Catalog] == nil {
			return nil, fmt.Errorf("promoter: config: policy %s: no catalog %q", pol.Name(), src.Catalog)
		}
		p.pols[pol.Name()], p.byLake[lakeKey(src.Catalog, src.Table)] = pol, pol
	}
	p.q = newQueue(func(policy string) int {
		if pol := p.pols[policy]; pol != nil {
			return pol.Limits().ConcurrentPromotions
		}
		return 0
	})
	p.mu.live = map[string]*liveProgress{}
	p.mu.skips = map[string]Skip{}
	p.mu.lakeParts = map[lakeSnapshot][]lake.PartitionStats{}
	return p, nil
}

// CheckPolicies reports what New refuses in a set of policies, without a
// lake or a tier: a nil or repeated policy, two policies of one lake table
// (a promotion's identity names the lake table, so one table has one
// policy) or into one tier table.
func CheckPolicies(pols []*policies.Policy) error {
	byName, byLake, byTarget := map[string]bool{}, map[string]string{}, map[string]string{}
	for _, pol := range pols {
		if pol == nil {
			return errors.New("promoter: config: nil policy")
		}
		name := pol.Name()
		if byName[name] {
			return fmt.Errorf("promoter: config: duplicate policy %s", name)
		}
		src, t := pol.Source(), pol.Target()
		lk := lakeKey(src.Catalog, src.Table)
		if o, ok := byLake[lk]; ok {
			return fmt.Errorf("%w: policies %s and %s both promote lake table %s.%s", ErrNotAllowed, o, name, src.Catalog, src.Table)
		}
		tk := t.Database + "." + t.Table
		if o, ok := byTarget[tk]; ok {
			return fmt.Errorf("%w: policies %s and %s both promote into %s", ErrNotAllowed, o, name, tk)
		}
		byName[name], byLake[lk], byTarget[tk] = true, name, name
	}
	return nil
}

// lakeKey names a lake table in Promoter.byLake.
func lakeKey(catalog, table string) string { return catalog + "\x00" + table }

func (p *Promoter) now() time.Time { return p.cfg.Now() }

// Policies returns the configured policies.
func (p *Promoter) Policies() []*policies.Policy { return slices.Clone(p.cfg.Policies) }

// awaitResumed waits while Run resumes the ledger: a request or cancel
// then would not see the stored requests of the previous leader (not
// loaded yet), and a request would replace one of them, dropping its
// promotion ids. ctx ending first is ErrResuming (503, retriable).
func (p *Promoter) awaitResumed(ctx context.Context) error {
	for p.resuming.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrResuming, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// ExpectRun makes requests and cancels wait, from now, until Run has
// resumed the ledger, as they do while it resumes: a caller that serves
// them before it starts Run (an API installed first) calls it, so that
// one served in between does not replace a stored request of the previous
// leader. Run ends the wait, also when it fails.
func (p *Promoter) ExpectRun() { p.resuming.Store(true) }

// Ready reports whether Run has resumed the ledger and runs.
func (p *Promoter) Ready() bool { return p.ready.Load() }

func (p *Promoter) policy(name string) (*policies.Policy, error) {
	pol := p.pols[name]
	if pol == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	}
	return pol, nil
}

// halt stops Run after a fenced ledger write: this promoter's term is over.
func (p *Promoter) halt(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.halted == nil {
		p.mu.halted = err
		p.m.halted.Set(1)
		p.log.Error("promoter halted: leadership lost", "err", err)
	}
	if p.mu.cancel != nil {
		p.mu.cancel(err)
	}
}

// track registers the live progress of promotion id while fn runs.
func (p *Promoter) track(id string, phase Phase, fn func() (Record, error)) (Record, error) {
	lp := &liveProgress{id: id, started: p.now()}
	lp.mu.phase = phase
	p.mu.Lock()
	p.mu.live[id] = lp
	p.mu.Unlock()
	p.m.running.Inc()
	defer func() {
		p.m.running.Dec()
		p.mu.Lock()
		delete(p.mu.live, id)
		p.mu.Unlock()
	}()
	return fn()
}

func (p *Promoter) liveOf(id string) *liveProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.live[id]
}

// maxSkips bounds the skip notes kept; the oldest go first.
const maxSkips = 4096

// noteSkip records that requested promotion id was skipped when its turn
// came, for Skipped.
func (p *Promoter) noteSkip(id, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.mu.skips) >= maxSkips {
		oldest := ""
		for k, s := range p.mu.skips {
			if oldest == "" || s.At.Before(p.mu.skips[oldest].At) {
				oldest = k
			}
		}
		delete(p.mu.skips, oldest)
	}
	p.mu.skips[id] = Skip{Reason: reason, At: p.now()}
}

func (p *Promoter) clearSkip(id string) {
	p.mu.Lock()
	delete(p.mu.skips, id)
	p.mu.Unlock()
}

// Skipped reports whether promotion id, requested (Request) and not
// written to the ledger since, was skipped when its turn came, and why: the
// plan at that time no longer promoted it (the target was written or
// created meanwhile, say). A request's waiter (thaw promote --wait) ends
// on it instead of waiting for a record that will not come. The notes live
// in memory: a restart forgets them.
func (p *Promoter) Skipped(id string) (Skip, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.mu.skips[id]
	return s, ok
}

// QueuedRequest is a requested promotion waiting in the queue for its turn
// (it has no record before then, or only its earlier attempts' record).
type QueuedRequest struct {
	ID string
	Key
	Database, Table string // the policy's target table
	// Ahead: how many keys are queued before it; -1 when it was requested
	// while a promotion of its target runs, and waits for that.
	Ahead int
}

// Where says where in the queue q is, for its requester.
func (q QueuedRequest) Where() string {
	switch q.Ahead {
	case -1:
		return "after the promotion of that target that runs now"
	case 0:
		return "next to start"
	case 1:
		return "behind 1 other key"
	}
	return fmt.Sprintf("behind %d other keys", q.Ahead)
}

// QueuedRequests lists the requested promotions waiting in the queue, in
// queue order.
func (p *Promoter) QueuedRequests() []QueuedRequest {
	var out []QueuedRequest
	for _, q := range p.q.ids() {
		qr := QueuedRequest{ID: q.id, Key: q.k, Ahead: q.ahead}
		if pol := p.pols[q.k.Policy]; pol != nil {
			qr.Database, qr.Table = pol.Target().Database, pol.Target().Table
		}
		out = append(out, qr)
	}
	return out
}

// Queued returns the queued request of promotion id (QueuedRequests).
func (p *Promoter) Queued(id string) (QueuedRequest, bool) {
	for _, q := range p.QueuedRequests() {
		if q.ID == id {
			return q, true
		}
	}
	return QueuedRequest{}, false
}

// Progress returns the live progress of a running promotion.
func (p *Promoter) Progress(id string) (Progress, bool) {
	lp := p.liveOf(id)
	if lp == nil {
		return Progress{}, false
	}
	return lp.snapshot(), true
}

// Promotions returns the ledger's records, newest first. Like
// Ledger.List, when some records cannot be read it returns the others
// together with an error naming each unreadable key (errors.Is
// ErrUnreadable; UnreadableRecords lists them), which it logs.
func (p *Promoter) Promotions(ctx context.Context) ([]Record, error) {
	rs, err := p.cfg.Ledger.List(ctx)
	if err != nil && !errors.Is(err, ErrUnreadable) {
		return nil, err
	}
	p.logUnreadable(err)
	sortNewestFirst(rs)
	return rs, err
}

// Promotion returns one record; ErrNotFound when there is none, an
// *UnreadableRecordError (logged) when it cannot be read.
func (p *Promoter) Promotion(ctx context.Context, id string) (Record, error) {
	r, err := p.cfg.Ledger.Get(ctx, id)
	p.logUnreadable(err)
	return r, err
}

// logUnreadable logs, at error level with its key, each unreadable ledger
// record that err reports. The promoter leaves such records as they are.
// It logs each record at error level once per reason (status calls and
// every reconcile meet it again; later sightings log at debug level).
func (p *Promoter) logUnreadable(err error) {
	for _, u := range UnreadableRecords(err) {
		reason := u.Err.Error()
		p.mu.Lock()
		seen := p.mu.unreadable[u.Key] == reason
		if !seen {
			if p.mu.unreadable == nil {
				p.mu.unreadable = map[string]string{}
			}
			p.mu.unreadable[u.Key] = reason
		}
		p.mu.Unlock()
		if seen {
			p.log.Debug("unreadable ledger record: left as it is", "key", u.Key, "err", u.Err)
			continue
		}
		p.log.Error("unreadable ledger record: left as it is", "key", u.Key, "err", u.Err)
	}
}

// Plan returns what policy would promote now. It changes nothing.
func (p *Promoter) Plan(ctx context.Context, policy string) (*Plan, error) {
	pol, err := p.policy(policy)
	if err != nil {
		return nil, err
	}
	ps, err := p.plan(ctx, pol, nil, item{})
	if err != nil {
		return nil, err
	}
	return ps.plan, nil
}

// Reconcile reconciles every policy (see ReconcilePolicy). The report sums
// them (its Policy is ""); the error joins the policies' errors.
func (p *Promoter) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var sum ReconcileReport
	var errs []error
	for _, pol := range p.cfg.Policies {
		r, err := p.ReconcilePolicy(ctx, pol.Name())
		if err != nil {
			errs = append(errs, err)
		}
		sum.Selected += r.Selected
		sum.Enqueued += r.Enqueued
		sum.Promoted += r.Promoted
		sum.Running += r.Running
		sum.Skipped += r.Skipped
	}
	return sum, joinPolicies(errs)
}

// PolicyErrors are the errors of the policies of one Reconcile or
// LakeCommitted, one each: errors.Is and errors.As see every one. A caller
// that must tell whether retrying can help (a control event's handler)
// looks at each policy's alone.
type PolicyErrors struct{ Errs []error }

func (e *PolicyErrors) Error() string   { return errors.Join(e.Errs...).Error() }
func (e *PolicyErrors) Unwrap() []error { return e.Errs }

// joinPolicies is errs as a *PolicyErrors, nil if there are none.
func joinPolicies(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return &PolicyErrors{Errs: errs}
}

// ReconcilePolicy plans policy and enqueues every selected target that is
// not promoted yet, and every unsettled promotion of the policy that does
// not run (it is resumed). It does not wait for them (see Drain).
// Selected counts the targets the policy selects; Enqueued, Promoted
// (already committed), Running (being promoted now) and Skipped (selected,
// but skipped for another reason, e.g. the target is not empty) split them.
func (p *Promoter) ReconcilePolicy(ctx context.Context, policy string) (ReconcileReport, error) {
	rep := ReconcileReport{Policy: policy}
	pol, err := p.policy(policy)
	if err != nil {
		return rep, err
	}
	ps, err := p.plan(ctx, pol, nil, item{})
	if err != nil {
		p.m.reconciles.WithLabelValues(policy, "error").Inc()
		p.log.Error("reconcile failed", "policy", policy, "err", err)
		return rep, err
	}
	p.m.reconciles.WithLabelValues(policy, "ok").Inc()
	for _, it := range ps.plan.Items {
		if strings.HasPrefix(it.Reason, "not selected") {
			continue
		}
		rep.Selected++
		switch {
		case it.Action == ActionPromote || strings.HasPrefix(it.Reason, ReasonInProgress) && !p.q.isRunning(it.Key):
			// A closed queue (Run's term ended) drops the key: the caller
			// (a control event) must not count it as handled.
			if _, err := p.q.enqueue(it.Key, item{}); err != nil {
				return rep, fmt.Errorf("promoter: reconcile %s: %w", policy, err)
			}
			rep.Enqueued++
		case strings.HasPrefix(it.Reason, "already promoted"):
			rep.Promoted++
		case strings.HasPrefix(it.Reason, ReasonInProgress):
			rep.Running++
		default:
			rep.Skipped++
		}
	}
	p.updateDepth()
	p.log.Info("reconciled", "policy", policy, "lake_snapshot", ps.plan.LakeSnapshotID,
		"selected", rep.Selected, "enqueued", rep.Enqueued, "promoted", rep.Promoted, "running", rep.Running, "skipped", rep.Skipped)
	return rep, nil
}

func (p *Promoter) updateDepth() {
	pending, _ := p.q.depth()
	p.m.queueDepth.Set(float64(pending))
}

// Request enqueues an on-demand promotion and returns the plan items it
// concerns. The policy is r.Policy, or the one policy whose tier target
// ("db.table") or lake table ("ns.table") is r.Table. It must have the
// onRequest trigger (ErrNotAllowed otherwise). Without a partition, every
// target the policy selects is enqueued; with one, that target is, whether
// the policy's selection includes it or not (prechecks still apply:
// already promoted, not empty, in progress). ErrNotFound: the lake has no
// such partition. The requests are stored in the ledger before Request
// answers (when not all can be, it fails; those stored are queued, and
// repeating the request merges with them): a promoter that stops before
// their turn leaves them to the next one, whose Run queues them again.
func (p *Promoter) Request(ctx context.Context, r Request) ([]PlanItem, error) {
	if err := p.awaitResumed(ctx); err != nil {
		return nil, err
	}
	pol, err := p.resolve(r)
	if err != nil {
		return nil, err
	}
	if !pol.Triggers().OnRequest {
		return nil, fmt.Errorf("%w: policy %s has no onRequest trigger", ErrNotAllowed, pol.Name())
	}
	var only *string
	if r.Partition != "" {
		only = &r.Partition
	}
	asker := item{forced: only != nil, requested: true}
	p.pruneMu.RLock()
	defer p.pruneMu.RUnlock()
	ps, err := p.plan(ctx, pol, only, asker)
	if err != nil {
		return nil, err
	}
	var keys []Key
	var reqs []item
	for _, it := range ps.plan.Items {
		if it.Action == ActionPromote || (strings.HasPrefix(it.Reason, ReasonInProgress) && !p.q.isRunning(it.Key)) {
			req := asker
			req.ids = []string{it.PromotionID}
			keys, reqs = append(keys, it.Key), append(reqs, req)
		}
	}
	if err := p.enqueueRequests(ctx, keys, reqs); err != nil {
		p.updateDepth()
		return nil, err
	}
	p.updateDepth()
	p.log.Info("promotion requested", "policy", pol.Name(), "partition", r.Partition, "items", len(ps.plan.Items))
	return ps.plan.Items, nil
}

// resolve finds the policy of a request.
func (p *Promoter) resolve(r Request) (*policies.Policy, error) {
	if r.Policy != "" {
		pol, err := p.policy(r.Policy)
		if err != nil {
			return nil, err
		}
		if r.Table != "" {
			t, s := pol.Target(), pol.Source()
			if r.Table != t.Database+"."+t.Table && r.Table != s.Table {
				return nil, fmt.Errorf("%w: policy %s does not promote %s", ErrUnknownPolicy, r.Policy, r.Table)
			}
		}
		return pol, nil
	}
	if r.Table == "" {
		return nil, fmt.Errorf("%w: the request names no policy and no table", ErrUnknownPolicy)
	}
	var found []*policies.Policy
	for _, pol := range p.cfg.Policies {
		t, s := pol.Target(), pol.Source()
		if r.Table == t.Database+"."+t.Table || r.Table == s.Table {
			found = append(found, pol)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: no policy promotes %s", ErrUnknownPolicy, r.Table)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%w: several policies promote %s; name one", ErrUnknownPolicy, r.Table)
}

// Promote plans and executes one key now, synchronously, under the key's
// exclusion (it waits for a queued run of the same key). Like an on-demand
// request it ignores the policy's selection but not its prechecks; unlike
// Request it does not need the onRequest trigger. It returns the
// identity's record: committed, or already committed before (nil error).
// A skipped key is an error wrapping ErrSkipped (ErrTargetNotEmpty for a
// non-empty target) with the plan's reason.
func (p *Promoter) Promote(ctx context.Context, k Key) (Record, error) {
	if _, err := p.policy(k.Policy); err != nil {
		return Record{}, err
	}
	if err := p.q.acquire(ctx, k); err != nil {
		return Record{}, err
	}
	defer p.q.done(k)
	return p.process(ctx, k, item{forced: true})
}

// process plans and runs one key (the caller holds its exclusion). An
// unsettled record of the key's target is resumed instead.
func (p *Promoter) process(ctx context.Context, k Key, it item) (Record, error) {
	pol, err := p.policy(k.Policy)
	if err != nil {
		return Record{}, err
	}
	ps, err := p.plan(ctx, pol, &k.Partition, it)
	if err != nil {
		return Record{}, err
	}
	if len(ps.plan.Items) != 1 {
		return Record{}, fmt.Errorf("%w: policy %s: no plan item for partition %q", ErrNotFound, pol.Name(), k.Partition)
	}
	pi := ps.plan.Items[0]
	for _, id := range it.ids {
		if id != pi.PromotionID {
			p.noteSkip(id, fmt.Sprintf("the lake partition changed after the request (the lake is at snapshot %d now): its current data is promotion %s",
				ps.plan.LakeSnapshotID, pi.PromotionID))
		}
	}
	if pi.Action != ActionPromote {
		for _, r := range ps.records[k.Partition] {
			switch {
			case !r.Phase.Terminal() && strings.HasPrefix(pi.Reason, ReasonInProgress):
				return p.resumeRecord(ctx, pol, r)
			case r.Phase == PhaseCommitted && strings.HasPrefix(pi.Reason, "already promoted") && r.ID == pi.PromotionID:
				if it.requested {
					p.noteSkip(pi.PromotionID, pi.Reason)
				}
				return r, nil
			}
		}
		if it.requested {
			p.noteSkip(pi.PromotionID, pi.Reason)
		}
		if pi.Reason == "target not empty" {
			return Record{}, fmt.Errorf("%w: %s: %s", ErrTargetNotEmpty, k, pi.Reason)
		}
		return Record{}, fmt.Errorf("%w: %s: %s", ErrSkipped, k, pi.Reason)
	}
	// A request starts the interrupted-build count afresh (the operator
	// says the cause is repaired), unless it was stored before the
	// record's last change: a crash mid-build leaves the request stored,
	// and it would start a crash loop over.
	restart := false
	if it.requested || it.forced {
		restart = true
		for _, r := range ps.records[k.Partition] {
			if r.ID == pi.PromotionID && it.rev != 0 && it.rev < r.Revision {
				restart = false
			}
		}
	}
	return p.track(pi.PromotionID, PhasePlanned, func() (Record, error) {
		r, err := p.startRecord(ctx, ps, pi, restart)
		if err != nil {
			return r, err
		}
		return p.drive(ctx, ps.src, r, false)
	})
}

// worker runs queued keys until ctx is done or the queue closes.
func (p *Promoter) worker(ctx context.Context) {
	for {
		k, it, err := p.q.get(ctx)
		if err != nil {
			return
		}
		p.updateDepth()
		r, err := p.process(ctx, k, it)
		p.settleRequest(ctx, k, it, r, err)
		switch {
		case err == nil:
		case errors.Is(err, ErrSkipped):
			p.log.Debug("promotion skipped", "key", k.String(), "reason", err)
		default:
			p.log.Warn("promotion ended with an error", "key", k.String(), "promotion", r.ID, "phase", string(r.Phase), "err", err)
		}
		p.q.done(k)
		p.updateDepth()
	}
}

// Drain waits until the queue is empty and no promotion runs. While Run
// runs, its workers do the work; otherwise Drain runs Workers workers of
// its own until the queue is empty (so Reconcile + Drain promote without
// Run).
func (p *Promoter) Drain(ctx context.Context) error {
	if p.running.Load() {
		return p.q.waitIdle(ctx)
	}
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Go(func() { p.worker(wctx) })
	}
	err := p.q.waitIdle(ctx)
	cancel()
	wg.Wait()
	return err
}

// Run resumes the ledger (Resume), queues the stored requests a promoter
// before it answered and did not get to (Request), then runs until ctx is
// done: Workers queue workers, the periodic reconcile of every policy (at
// once, then every ReconcileInterval) and the poll of each onLakeCommit
// policy's lake table (every LakePollInterval; a new current snapshot
// reconciles the policy).
// Cron schedules and requests come from outside (ReconcilePolicy, Request).
//
// When ctx is done Run shuts down gracefully: the queue stops, promotions
// before their commit decision are aborted (recorded aborted, "shutdown"),
// a commit in flight finishes (bounded by CommitBudget), and Run returns nil
// once every worker has stopped. A fenced ledger write (the leadership is
// lost) stops Run the same way and returns that error.
func (p *Promoter) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("promoter: already running")
	}
	defer p.running.Store(false)
	p.resuming.Store(true)
	defer p.resuming.Store(false)
	fatal, records := p.resume(ctx)
	if fatal != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fatal
	}
	if records != nil {
		// Logged record by record; the reconciles retry what is unsettled.
		p.log.Warn("promoter starts with promotions that could not be settled yet", "err", records)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p.mu.Lock()
	p.mu.cancel = cancel
	halted := p.mu.halted
	p.mu.Unlock()
	if halted != nil {
		return halted
	}
	p.q.reopen()
	if err := p.loadRequests(rctx); err != nil {
		p.q.close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p.ready.Store(true)
	p.resuming.Store(false)
	p.log.Info("promoter running", "policies", len(p.cfg.Policies), "workers", p.cfg.Workers)

	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Go(func() { p.worker(rctx) })
	}
	if p.cfg.ReconcileInterval >= 0 {
		wg.Go(func() { p.reconcileLoop(rctx) })
	}
	if p.cfg.LakePollInterval >= 0 {
		wg.Go(func() { p.pollLoop(rctx) })
	}
	if p.cfg.LedgerRetention >= 0 {
		wg.Go(func() { p.pruneLoop(rctx) })
	}
	<-rctx.Done()
	p.ready.Store(false)
	p.q.close()
	p.log.Info("promoter stopping")
	wg.Wait()
	p.mu.Lock()
	p.mu.cancel = nil
	halted = p.mu.halted
	p.mu.Unlock()
	p.updateDepth()
	p.log.Info("promoter stopped")
	return halted
}

func (p *Promoter) reconcileLoop(ctx context.Context) {
	periodic.Every(ctx, 0, p.cfg.ReconcileInterval, func() {
		if _, err := p.Reconcile(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("reconcile", "err", err)
		}
	})
}

// LakeCommitted reconciles every policy that promotes the lake table
// (catalog, table) on lake commits (its onLakeCommit trigger), as the lake
// poll does when it sees a new snapshot: a control event reports a commit
// without waiting for the next poll. It returns one report per such
// policy, none when no policy promotes that table on lake commits; the
// error joins the policies' errors.
func (p *Promoter) LakeCommitted(ctx context.Context, catalog, table string) ([]ReconcileReport, error) {
	var reps []ReconcileReport
	var errs []error
	for _, pol := range p.cfg.Policies {
		src := pol.Source()
		if !pol.Triggers().OnLakeCommit || src.Catalog != catalog || src.Table != table {
			continue
		}
		rep, err := p.ReconcilePolicy(ctx, pol.Name())
		reps = append(reps, rep)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return reps, joinPolicies(errs)
}

// pollLoop reconciles each onLakeCommit policy when its lake table's
// current snapshot changes (the first poll reconciles every one of them).
func (p *Promoter) pollLoop(ctx context.Context) {
	var watched []*policies.Policy
	for _, pol := range p.cfg.Policies {
		if pol.Triggers().OnLakeCommit {
			watched = append(watched, pol)
		}
	}
	if len(watched) == 0 {
		return
	}
	seen := map[string]int64{}
	periodic.Every(ctx, 0, p.cfg.LakePollInterval, func() {
		for _, pol := range watched {
			src := pol.Source()
			info, err := p.cfg.Lakes[src.Catalog].Describe(ctx, src.Table)
			if err != nil {
				if ctx.Err() == nil {
					p.log.Warn("lake poll", "policy", pol.Name(), "table", src.Table, "err", err)
				}
				continue
			}
			var cur int64
			if info.CurrentSnapshotID != nil {
				cur = *info.CurrentSnapshotID
			}
			if last, ok := seen[pol.Name()]; ok && last == cur {
				continue
			}
			p.log.Info("lake commit seen", "policy", pol.Name(), "table", src.Table, "lake_snapshot", cur)
			if _, err := p.ReconcilePolicy(ctx, pol.Name()); err != nil {
				// Not seen: the next poll reconciles again.
				if ctx.Err() == nil {
					p.log.Warn("reconcile on lake commit", "policy", pol.Name(), "err", err)
				}
				continue
			}
			seen[pol.Name()] = cur
		}
	})
}

// Resume settles every non-terminal record of the ledger, oldest first,
// each under its key's exclusion: planned, begun and building records are
// begun again with their caller token (which resumes the transaction, or
// finds it aborted and starts the next attempt) and rebuilt (the builder
// adopts what an earlier attempt uploaded); committing records are settled
// through Status (and committed again after a rebuild if the transaction is
// still BEGUN; decided by the target when the tier forgot the transaction:
// see outcomeExpired). A record whose policy is gone is released: its
// transaction is aborted. Errors of single records are logged and joined;
// a fenced write stops Resume at once. A record the ledger cannot read
// (corrupt, or written by a newer promoter: ErrRecordVersion) is logged
// with its key and left as it is; the others are settled, and the error
// (errors.Is ErrUnreadable) names its key, so Run does not start over a
// ledger it cannot read whole. Run starts despite errors of single records
// (a pinned lake snapshot expired, an Abort the tier refuses, a commit
// still undecided): the reconciles settle them later, and one record
// stops no other promotion.
func (p *Promoter) Resume(ctx context.Context) error {
	fatal, records := p.resume(ctx)
	return errors.Join(fatal, records)
}

// resume is Resume. fatal: the ledger could not be listed or read whole,
// a write was fenced, or ctx ended; records: the joined errors of single
// records.
func (p *Promoter) resume(ctx context.Context) (fatal, records error) {
	recs, err := p.cfg.Ledger.List(ctx)
	var errs []error
	switch {
	case errors.Is(err, ErrUnreadable):
		p.logUnreadable(err)
		fatal = fmt.Errorf("promoter: resume: %w", err)
	case err != nil:
		return fmt.Errorf("promoter: resume: %w", err), nil
	}
	slices.Reverse(recs) // oldest first
	for _, r := range recs {
		if r.Phase.Terminal() {
			continue
		}
		pol := p.byLake[lakeKey(r.Catalog, r.LakeTable)]
		k := p.recordKey(r)
		if err := p.q.acquire(ctx, k); err != nil {
			return errors.Join(fatal, err), errors.Join(errs...)
		}
		p.log.Info("resuming promotion", "promotion", r.ID, "phase", string(r.Phase), "txn", r.TxnID)
		nr, err := p.resumeRecord(ctx, pol, r)
		p.q.done(k)
		if err != nil {
			if halts(err) || ctx.Err() != nil {
				return errors.Join(fatal, err), errors.Join(errs...)
			}
			p.log.Warn("resume", "promotion", r.ID, "phase", string(nr.Phase), "err", err)
			errs = append(errs, fmt.Errorf("promoter: resume %s: %w", r.ID, err))
		}
	}
	return fatal, errors.Join(errs...)
}

// resumeRecord settles one non-terminal record (the caller holds its key).
func (p *Promoter) resumeRecord(ctx context.Context, pol *policies.Policy, r Record) (Record, error) {
	h := bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}
	return p.track(r.ID, r.Phase, func() (Record, error) {
		if pol == nil {
			return p.release(ctx, r, h)
		}
		expired := false
		if r.Phase == PhaseCommitting && r.TxnID != "" {
			st, err := p.cfg.BulkLoad.Status(ctx, h)
			switch {
			case errors.Is(err, bulkload.ErrNotFound):
				nr, eerr := p.outcomeExpired(ctx, r, err)
				if nr.Phase != PhaseAborted || !errors.Is(eerr, errOutcomeExpired) {
					return nr, eerr
				}
				// Not committed, recorded aborted: like ABORTED, the next
				// attempt starts.
				r, expired = nr, true
			case err != nil:
				return r, fmt.Errorf("promoter: status of %s: %w", r.TxnID, err)
			case st.State == bulkload.Committed:
				return p.committed(ctx, r)
			case st.State == bulkload.Committing:
				return p.awaitCommit(ctx, r, h, errors.New("promoter: resumed while committing"))
			case st.State == bulkload.Begun && st.ManifestFrozen:
				return p.awaitCommit(ctx, r, h, errDecisionPending)
			}
			// BEGUN without a frozen manifest: rebuild and commit again
			// (Begin with the token resumes it); ABORTED: Begin fails with
			// the token aborted, and the next attempt starts.
		}
		src, _, err := p.openSource(ctx, pol, &r.ScanSnapshotID)
		if err == nil && expired {
			if r, err = p.nextAttempt(ctx, r); err != nil {
				return r, err
			}
			return p.drive(ctx, src, r, false)
		}
		if err != nil {
			var (
				ar   Record
				aerr error
			)
			if r.TxnID == "" {
				ar, aerr = p.abortUnrecorded(ctx, r, err)
			} else {
				ar, aerr = p.abortAttempt(ctx, r, &h, err)
			}
			if errors.Is(aerr, errAbortFailed) || halts(aerr) {
				return ar, aerr
			}
			return p.fail(ctx, ar, err)
		}
		return p.drive(ctx, src, r, true)
	})
}

// outcomeExpired settles a committing record whose transaction the tier no
// longer knows (Status: ErrNotFound): the coordinator forgets a finished
// transaction after its result retention (24h by default). A committing
// record's transaction held the target, which was empty when it began, so
// the target says the outcome: rows in it → committed; empty → aborted,
// retriable, with errOutcomeExpired (Resume then starts the next attempt).
// When the tier cannot tell (an error), the record stays committing.
func (p *Promoter) outcomeExpired(ctx context.Context, r Record, statusErr error) (Record, error) {
	empty, err := p.cfg.Tier.IsEmpty(ctx, r.Database, r.Table, r.Partition)
	if err != nil {
		return r, fmt.Errorf("%w: status of %s: %w; check target %s: %w", errPending, r.TxnID, statusErr, r.Target(), err)
	}
	if !empty {
		p.logger(r).Warn("the tier forgot the transaction; its target holds rows: recorded committed", "txn", r.TxnID)
		return p.committed(ctx, r)
	}
	return p.abortAttempt(ctx, r, nil, fmt.Errorf("%w: the tier forgot transaction %s and target %s is empty: %w",
		errOutcomeExpired, r.TxnID, r.Target(), statusErr))
}

// fail records a terminal failure of r.
func (p *Promoter) fail(ctx context.Context, r Record, cause error) (Record, error) {
	r.Phase, r.Error, r.Retriable = PhaseFailed, cause.Error(), IsRetriable(cause)
	dctx, cancel := detached(ctx)
	defer cancel()
	if err := p.write(dctx, &r); err != nil {
		return r, errors.Join(cause, err)
	}
	p.m.promotions.WithLabelValues(r.Policy, outcomeFailed).Inc()
	p.logger(r).Error("promotion failed", "err", cause)
	return r, cause
}

// release settles a record whose policy is gone: a BEGUN transaction is
// aborted, a COMMITTING one awaited, a COMMITTED one recorded. A planned
// record without a transaction id is marked aborted after the transaction
// its token may have begun unrecorded is aborted (abortUnrecorded).
func (p *Promoter) release(ctx context.Context, r Record, h bulkload.Handle) (Record, error) {
	cause := fmt.Errorf("%w: policy %s of lake table %s is no longer configured", ErrUnknownPolicy, r.Policy, r.LakeTable)
	if r.TxnID == "" {
		return p.abortUnrecorded(ctx, r, cause)
	}
	st, err := p.cfg.BulkLoad.Status(ctx, h)
	if errors.Is(err, bulkload.ErrNotFound) {
		if r.Phase == PhaseCommitting {
			return p.outcomeExpired(ctx, r, err)
		}
		// Before the commit decision: the transaction ended aborted.
		return p.abortAttempt(ctx, r, nil, cause)
	}
	if err != nil {
		return r, fmt.Errorf("promoter: status of %s: %w", r.TxnID, err)
	}
	switch {
	case st.State == bulkload.Committed:
		return p.committed(ctx, r)
	case st.State == bulkload.Committing:
		return p.awaitCommit(ctx, r, h, cause)
	case st.State == bulkload.Aborted:
		return p.abortAttempt(ctx, r, nil, cause)
	case st.ManifestFrozen:
		// A Commit is being decided: the policy's removal does not undo
		// the commit decision.
		return p.awaitCommit(ctx, r, h, errDecisionPending)
	}
	return p.abortAttempt(ctx, r, &h, cause)
}
