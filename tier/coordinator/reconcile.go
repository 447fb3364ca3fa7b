package coordinator

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	"github.com/thawdb/thaw/fencing"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// reconciler is the leader's assignment loop: one goroutine (run) that
// computes Placement over every live target and writes the assignments
// that change, level-based: each round reads everything again, so a missed
// or merged trigger costs nothing. Triggers (server-set changes, DDL, the
// resync ticker) are deduplicated by a one-slot channel.
type reconciler struct {
	c    *Coordinator
	t    *term
	log  *slog.Logger
	kick chan struct{} // one slot: a pending request

	underReplicated int // as of the last round; run's goroutine only
	// tooLarge holds the targets whose placement did not fit their
	// assignment record at the last round that changed them (warned
	// once). run's goroutine only.
	tooLarge map[meta.Target]bool

	// The servers the term's assignments named that were not registered
	// at its first round: Placement keeps their replicas (Server.Awaited)
	// until they register or graceEnd passes (Config.ServerGrace). run's
	// goroutine only.
	awaited  map[string]bool
	graced   bool // the first round has set awaited
	graceEnd time.Time

	mu struct {
		sync.Mutex
		// pending are targets created or dropped by DDL whose servers must
		// be told, with servers to tell besides the current replicas (the
		// replicas of a dropped target).
		pending map[meta.Target][]string
	}
}

func newReconciler(c *Coordinator, t *term, log *slog.Logger) *reconciler {
	r := &reconciler{c: c, t: t, log: log, kick: make(chan struct{}, 1), graceEnd: time.Now().Add(c.cfg.ServerGrace)}
	r.mu.pending = make(map[meta.Target][]string)
	return r
}

// request asks for a round; requests made before a round starts are
// served by it.
func (r *reconciler) request() {
	select {
	case r.kick <- struct{}{}:
	default: // a round is already requested
	}
}

// notifyLater asks for a round that tells the servers of target (its
// replicas, and also extra) about its assignment, or about its drop.
func (r *reconciler) notifyLater(target meta.Target, extra []string) {
	r.mu.Lock()
	r.mu.pending[target] = union(r.mu.pending[target], extra)
	r.mu.Unlock()
	r.request()
}

// takePending takes the notifications a round covers.
func (r *reconciler) takePending() map[meta.Target][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	pending := r.mu.pending
	r.mu.pending = make(map[meta.Target][]string)
	return pending
}

// requeue puts back notifications of a round that failed.
func (r *reconciler) requeue(pending map[meta.Target][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, s := range pending {
		r.mu.pending[t] = union(r.mu.pending[t], s)
	}
}

// run runs rounds until ctx is done or the term is found to be over (a
// fenced write), which it returns.
func (r *reconciler) run(ctx context.Context) error {
	resync := time.NewTicker(r.c.cfg.ResyncInterval)
	defer resync.Stop()
	var again <-chan time.Time // a follow-up round: retry, or more moves
	var graceOver <-chan time.Time
	retry := newBackoff(100*time.Millisecond, 5*time.Second)
	r.request()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-resync.C:
		case <-again:
		case <-graceOver:
		}
		again, graceOver = nil, nil
		pending := r.takePending()
		log := r.log.With("round", n)
		more, err := r.round(ctx, log, pending)
		switch {
		case ctx.Err() != nil:
			return nil
		case fencing.IsFenced(err):
			r.c.m.rounds.WithLabelValues("fenced").Inc()
			log.Warn("coordinator reconcile fenced: the term is over", "err", err)
			return err
		case err != nil:
			r.c.m.rounds.WithLabelValues("retry").Inc()
			r.requeue(pending)
			d := retry.next()
			log.Warn("coordinator reconcile round failed; retrying", "err", err, "in", d)
			again = time.After(d)
		default:
			r.c.m.rounds.WithLabelValues("ok").Inc()
			retry.reset()
			if more {
				again = time.After(r.c.cfg.RebalanceInterval)
			}
		}
		if len(r.awaited) > 0 {
			// A round when the grace ends replaces what is still missing.
			graceOver = time.After(time.Until(r.graceEnd))
		}
	}
}

// notice is one NotifyAssignment to send to each of servers: the target's
// current assignment, or its drop (state nil).
type notice struct {
	target  meta.Target
	state   *targetState
	servers []string
}

// round runs Placement over every live target, writes the assignments that
// change (each a compare-and-swap on the revision read) and pushes them to
// the tablet servers concerned. It reports whether another round would
// move more replicas.
func (r *reconciler) round(ctx context.Context, log *slog.Logger, pending map[meta.Target][]string) (more bool, err error) {
	cl, err := r.c.readCluster(ctx)
	if err != nil {
		return false, err
	}
	awaited := r.awaitedServers(log, cl)
	placed := append(cl.servers.placement(), awaited...)
	res := Placement(placed, cl.placements(), r.c.cfg.MaxMovesPerRound)
	var (
		notes    []notice
		errs     []error
		fellBack bool // a placement did not fit: no follow-up round for more moves
	)
	for i := range cl.targets {
		ts := &cl.targets[i]
		tgt := ts.target()
		extra, wanted := pending[tgt]
		delete(pending, tgt)
		if !res.Changed[i] {
			if wanted {
				notes = append(notes, notice{target: tgt, state: ts, servers: union(replicasOf(ts.assignment.Value), extra)})
			}
			continue
		}
		old := ts.assignment.Value
		next := old
		next.Buckets = toMeta(res.Targets[i].Buckets)
		rev, err := r.c.store.PutAssignment(ctx, r.t.guard, next, ts.assignment.Rev)
		if errors.Is(err, meta.ErrTooLarge) {
			// The replicas added would not fit the record (many buckets,
			// long server ids): write the part of the change that keeps
			// the buckets served, the gone servers' replicas removed and
			// their leaderships moved.
			if r.tooLarge == nil {
				r.tooLarge = make(map[meta.Target]bool)
			}
			if !r.tooLarge[tgt] {
				log.Warn("coordinator cannot place replicas: the assignment would exceed the metadata record limit; "+
					"only replicas on servers that are gone are removed, and buckets may stay under-replicated "+
					"(fewer buckets or shorter tablet server ids fit)", "target", tgt.String(), "err", err)
			}
			r.tooLarge[tgt], fellBack = true, true
			next.Buckets = withoutGone(old.Buckets, next.Buckets, placed)
			if reflect.DeepEqual(next.Buckets, old.Buckets) {
				if wanted { // as for a target Placement left alone
					notes = append(notes, notice{target: tgt, state: ts, servers: union(replicasOf(old), extra)})
				}
				continue
			}
			rev, err = r.c.store.PutAssignment(ctx, r.t.guard, next, ts.assignment.Rev)
		} else if err == nil {
			delete(r.tooLarge, tgt)
		}
		switch {
		case fencing.IsFenced(err):
			return false, err
		case errors.Is(err, meta.ErrNotFound):
			continue // dropped since it was read
		case err != nil:
			errs = append(errs, err)
			continue
		}
		log.Info("coordinator reassigned target", "target", tgt.String(), "rev", rev,
			"moved_from", diff(replicasOf(old), replicasOf(next)), "moved_to", diff(replicasOf(next), replicasOf(old)))
		ts.assignment = meta.Versioned[meta.Assignment]{Value: next, Rev: rev}
		notes = append(notes, notice{target: tgt, state: ts, servers: union(union(replicasOf(old), replicasOf(next)), extra)})
	}
	// Pending targets that are no longer live were dropped.
	for _, tgt := range slices.SortedFunc(maps.Keys(pending), compareTargets) {
		notes = append(notes, notice{target: tgt, servers: pending[tgt]})
	}
	r.c.m.moves.Add(float64(res.Moves))
	r.c.m.leaderChanges.Add(float64(res.LeaderChanges))
	r.c.m.underReplicated.Set(float64(res.UnderReplicated))
	r.c.m.liveServers.Set(float64(len(cl.servers)))
	// While servers are awaited their buckets are under-replicated
	// until they register: no news.
	if len(awaited) == 0 {
		if res.UnderReplicated != r.underReplicated && res.UnderReplicated > 0 {
			log.Warn("coordinator has under-replicated buckets", "buckets", res.UnderReplicated, "servers", len(cl.servers))
		}
		r.underReplicated = res.UnderReplicated
	}
	r.push(ctx, log, cl, notes)
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return !res.Balanced && res.Moves > 0 && !fellBack, nil
}

// awaitedServers returns the servers Placement awaits this round: at the
// term's first round, those its assignments name that are not live (none
// with a negative ServerGrace); then, until the grace ends, those of them
// that have not registered since.
func (r *reconciler) awaitedServers(log *slog.Logger, cl *cluster) []Server {
	if !r.graced {
		r.graced = true
		if r.c.cfg.ServerGrace > 0 {
			r.awaited = make(map[string]bool)
			for _, t := range cl.targets {
				for _, b := range t.assignment.Value.Buckets {
					for _, id := range b.Replicas {
						if cl.servers.address(id) == "" {
							r.awaited[id] = true
						}
					}
				}
			}
			if len(r.awaited) > 0 {
				log.Info("coordinator waits for tablet servers to register before replacing their replicas and leaderships",
					"servers", slices.Sorted(maps.Keys(r.awaited)), "grace", r.c.cfg.ServerGrace)
			}
		}
	}
	if len(r.awaited) > 0 && !time.Now().Before(r.graceEnd) {
		log.Warn("coordinator stops waiting for tablet servers that did not register: their replicas and leaderships are replaced",
			"servers", slices.Sorted(maps.Keys(r.awaited)), "grace", r.c.cfg.ServerGrace)
		r.awaited = nil
	}
	var out []Server
	for _, id := range slices.Sorted(maps.Keys(r.awaited)) {
		if cl.servers.address(id) != "" {
			delete(r.awaited, id) // registered: from now on like any server
			continue
		}
		out = append(out, Server{ID: id, Awaited: true})
	}
	return out
}

// push sends every notice to its live servers, at most Fanout at a time.
// Pushes are best effort: tablet servers also watch the assignments in
// etcd, so a failed push only delays them.
func (r *reconciler) push(ctx context.Context, log *slog.Logger, cl *cluster, notes []notice) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.c.cfg.Fanout)
	epoch := int64(r.t.epoch())
	for _, n := range notes {
		for _, id := range n.servers {
			addr := cl.servers.address(id)
			if addr == "" {
				continue // not live: it learns from etcd when it comes back
			}
			req := notifyRequest(epoch, cl, n, id)
			g.Go(func() error {
				cctx, cancel := context.WithTimeout(gctx, r.c.cfg.TabletTimeout)
				defer cancel()
				_, err := r.c.tablets(addr).NotifyAssignment(cctx, connect.NewRequest(req))
				if err != nil {
					r.c.m.notifies.WithLabelValues("error").Inc()
					log.Debug("coordinator could not notify a tablet server", "server", id, "target", n.target.String(), "err", err)
					return nil
				}
				r.c.m.notifies.WithLabelValues("ok").Inc()
				return nil
			})
		}
	}
	_ = g.Wait() // the goroutines return nil: failures are logged
}

// notifyRequest builds the NotifyAssignment of notice n for server id.
func notifyRequest(epoch int64, cl *cluster, n notice, id string) *tierv1.NotifyAssignmentRequest {
	req := &tierv1.NotifyAssignmentRequest{CoordinatorEpoch: epoch, Target: targetIDProto(n.target)}
	if n.state == nil {
		// Dropped: an empty list stops every replica; any revision after
		// the drop orders it after the last assignment.
		req.AssignmentRevision = cl.rev
		return req
	}
	ts := n.state
	tr := ts.table.Value
	req.Path = targetPathProto(ts)
	req.Schema = tierpb.SchemaToProto(tr.Schema)
	req.RemoteDataDir = tr.RemoteDataDir
	req.AssignmentRevision = ts.assignment.Rev
	req.DataState, req.BulkLoadId = dataStateOf(ts)
	req.StateRevision = ts.stateRev()
	for b, ba := range ts.assignment.Value.Buckets {
		if slices.Contains(ba.Replicas, id) {
			req.Buckets = append(req.Buckets, bucketLocation(b, ba, cl.servers))
		}
	}
	return req
}

// withoutGone is old without the replicas on servers that are gone (not
// in servers): the part of a placement that must be written for buckets
// to stay served, without the replicas it adds or moves. A bucket whose
// leader is gone takes next's leader if it remains (at next's epoch, above
// old's), else its first remaining replica at an epoch above both; a
// bucket with no replica left keeps old (next's buckets beyond old are
// taken as they are).
func withoutGone(old, next []meta.BucketAssignment, servers []Server) []meta.BucketAssignment {
	live := make(map[string]bool, len(servers))
	for _, s := range servers {
		live[s.ID] = true
	}
	out := make([]meta.BucketAssignment, len(next))
	for i, n := range next {
		if i >= len(old) {
			out[i] = n
			continue
		}
		o := old[i]
		var keep []string
		for _, id := range o.Replicas {
			if live[id] {
				keep = append(keep, id)
			}
		}
		if len(keep) == 0 || len(keep) == len(o.Replicas) {
			out[i] = o
			continue
		}
		b := o
		b.Replicas = keep
		switch {
		case slices.Contains(keep, o.Leader):
		case slices.Contains(keep, n.Leader):
			b.Leader, b.LeaderEpoch = n.Leader, max(n.LeaderEpoch, o.LeaderEpoch+1)
		default:
			b.Leader, b.LeaderEpoch = keep[0], max(o.LeaderEpoch, n.LeaderEpoch)+1
		}
		out[i] = b
	}
	return out
}

func replicasOf(a meta.Assignment) []string {
	var out []string
	for _, b := range a.Buckets {
		out = union(out, b.Replicas)
	}
	return out
}

// union returns the sorted union of a and b.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// diff returns the elements of a not in b.
func diff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func compareTargets(a, b meta.Target) int {
	return cmp.Or(cmp.Compare(a.TableID, b.TableID), cmp.Compare(a.PartitionID, b.PartitionID))
}
