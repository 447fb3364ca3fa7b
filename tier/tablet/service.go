package tablet

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// service implements the TabletService of a Server.
type service struct{ s *Server }

var _ tierv1connect.TabletServiceHandler = (*service)(nil)

// resolved is what a client request addresses: the target's view, the
// bucket's route and this server's replica of it (nil if none).
type resolved struct {
	tv         *targetView
	key        bucketKey
	route      bucketRoute
	routed     bool
	leaderAddr string
	e          *replicaEntry
}

func (r resolved) hint() tierpb.LeaderHint {
	return tierpb.LeaderHint{ID: r.route.leader, Address: r.leaderAddr, Epoch: int64(r.route.epoch)}
}

// resolve looks a request's target and bucket up: NOT_FOUND for a target
// this server does not know, INVALID_ARGUMENT for a bucket outside the
// table's.
func (s *Server) resolve(id *tierv1.TargetId, bucket int32) (resolved, error) {
	t, cerr := targetOf(id)
	if cerr != nil {
		return resolved{}, cerr
	}
	r := resolved{key: bucketKey{t, bucket}}
	s.mu.RLock()
	r.tv, r.e = s.mu.targets[t], s.mu.replicas[r.key]
	if r.tv != nil {
		r.route, r.routed = r.tv.routes[bucket]
		r.leaderAddr = r.route.leaderAddr
		if r.leaderAddr == "" && r.route.leader != "" {
			r.leaderAddr = s.mu.servers[r.route.leader]
		}
	}
	s.mu.RUnlock()
	switch {
	case r.tv == nil:
		return resolved{}, errNotFound("%s is not known here", t)
	case bucket < 0 || int(bucket) >= r.tv.table.Buckets():
		return resolved{}, errInvalid("%s has buckets 0..%d, not %d", t, r.tv.table.Buckets()-1, bucket)
	}
	return r, nil
}

// replicaFor returns the replica a client request may use. With a leader
// epoch (a write, or a read that asks for the leader) the replica must be
// the bucket's leader at exactly that epoch: NOT_LEADER (with the leader's
// id, address and epoch when known) on another replica, STALE_EPOCH for an
// older epoch, UNAVAILABLE for a newer one this server has not seen yet.
// Without one, any replica here serves. Then the target's data state: a
// target a bulk load holds is TARGET_LOADING whether or not this replica
// is ready (admit checks it again under the fence). A replica that is not
// ready is UNAVAILABLE. A leader's first use after it took over catches up
// with the changelog, so it sees every write its predecessor acknowledged.
func (s *Server) replicaFor(ctx context.Context, r resolved, leaderEpoch *int32, what string) (*replica.Replica, error) {
	t, b := r.key.target, r.key.bucket
	if r.e == nil {
		if r.routed && r.route.leader != "" && r.route.leader != s.cfg.ID {
			return nil, tierpb.NewNotLeaderError(tabletMsg("%s bucket %d is not hosted here; %s leads it", t, b, r.route.leader), r.hint())
		}
		return nil, errNotFound("no replica of %s bucket %d here", t, b)
	}
	leader := r.route.leader == s.cfg.ID
	if leaderEpoch != nil {
		switch {
		case !leader && r.route.leader == "":
			return nil, tierpb.NewNotLeaderError(tabletMsg("%s bucket %d has no leader", t, b), r.hint())
		case !leader:
			return nil, tierpb.NewNotLeaderError(tabletMsg("%s bucket %d is led by %s", t, b, r.route.leader), r.hint())
		case *leaderEpoch < r.route.epoch:
			return nil, errStaleLeaderEpoch(r.hint(), *leaderEpoch, "%s bucket %d", t, b)
		case *leaderEpoch > r.route.epoch:
			return nil, errUnavailable("%s bucket %d: leader epoch %d is newer than %d known here", t, b, *leaderEpoch, r.route.epoch)
		}
	}
	if ds := r.tv.state.get(); ds.state == meta.Loading {
		return nil, errTargetLoading(r.tv, ds, what)
	}
	rep := r.e.rep.Load()
	if rep == nil {
		st := r.e.getStatus()
		if st.state == failedState {
			return nil, errUnavailable("the replica of %s bucket %d failed: %s", t, b, st.err)
		}
		return nil, errUnavailable("the replica of %s bucket %d is restoring", t, b)
	}
	if tok := r.e.needCatchUp.Load(); leader && tok != 0 {
		if err := rep.CatchUp(ctx); err != nil {
			return nil, replicaErr("catch up", err)
		}
		// A newer term that began during CatchUp keeps its own token.
		r.e.needCatchUp.CompareAndSwap(tok, 0)
	}
	return rep, nil
}

// admit admits a request under the target's data state: only an ACTIVE
// target serves (TARGET_LOADING with the state and bulk-load id
// otherwise). The caller calls release once its work on the replica is
// done; SetDataState waits for that.
func admit(tv *targetView, what string) (release func(), err error) {
	st := tv.state
	st.fence.RLock()
	ds := st.get()
	switch ds.state {
	case meta.Active:
		return st.fence.RUnlock, nil
	case meta.Loading:
		st.fence.RUnlock()
		return nil, errTargetLoading(tv, ds, what)
	}
	st.fence.RUnlock()
	return nil, errUnavailable("%s: the data state of %s is not known yet", what, tv.id)
}

// errTargetLoading is TARGET_LOADING for a request on a target a bulk load
// holds.
func errTargetLoading(tv *targetView, ds dataState, what string) error {
	return errLoading(ds, "%s: %s is loading (bulk load %s)", what, tv.id, ds.bulkLoadID)
}

// readReplica authorizes and resolves a read request (resolveData), picks
// its replica and admits it.
func (s *Server) readReplica(ctx context.Context, h http.Header, id *tierv1.TargetId, bucket int32, leaderEpoch *int32, what string) (resolved, *replica.Replica, func(), error) {
	r, err := s.resolveData(h, readOp, id, bucket)
	if err != nil {
		return r, nil, nil, err
	}
	rep, err := s.replicaFor(ctx, r, leaderEpoch, what)
	if err != nil {
		return r, nil, nil, err
	}
	release, err := admit(r.tv, what)
	if err != nil {
		return r, nil, nil, err
	}
	return r, rep, release, nil
}

// Lookup returns the value of each key from one consistent view.
func (h *service) Lookup(ctx context.Context, req *connect.Request[tierv1.LookupRequest]) (_ *connect.Response[tierv1.LookupResponse], err error) {
	s := h.s
	defer func() { s.m.reads.WithLabelValues("lookup", resultOf(err)).Inc() }()
	m := req.Msg
	_, rep, release, err := s.readReplica(ctx, req.Header(), m.GetTarget(), m.GetBucket(), m.LeaderEpoch, "lookup")
	if err != nil {
		return nil, err
	}
	defer release()
	if len(m.GetKeys()) > s.cfg.MaxBatchMutations {
		return nil, errTooLarge(s.cfg.MaxBatchMutations, "lookup: %d keys, the limit is %d", len(m.GetKeys()), s.cfg.MaxBatchMutations)
	}
	for i, k := range m.GetKeys() {
		if len(k) == 0 {
			return nil, errInvalidAt(i, "lookup: empty key")
		}
	}
	values, err := rep.Lookup(ctx, m.GetKeys())
	if err != nil {
		return nil, replicaErr("lookup", err)
	}
	resp := &tierv1.LookupResponse{Results: make([]*tierv1.LookupResult, len(values))}
	for i, v := range values {
		resp.Results[i] = &tierv1.LookupResult{Found: v != nil, Value: v}
	}
	return connect.NewResponse(resp), nil
}

// PrefixLookup returns the rows under each prefix, all from one view. The
// rows of all prefixes together are bounded by MaxBatchMutations rows and
// MaxBatchBytes bytes; a larger result is BATCH_TOO_LARGE (use Scan with
// a prefix instead).
func (h *service) PrefixLookup(ctx context.Context, req *connect.Request[tierv1.PrefixLookupRequest]) (_ *connect.Response[tierv1.PrefixLookupResponse], err error) {
	s := h.s
	defer func() { s.m.reads.WithLabelValues("prefix_lookup", resultOf(err)).Inc() }()
	m := req.Msg
	_, rep, release, err := s.readReplica(ctx, req.Header(), m.GetTarget(), m.GetBucket(), m.LeaderEpoch, "prefix lookup")
	if err != nil {
		return nil, err
	}
	defer release()
	if len(m.GetPrefixes()) > s.cfg.MaxBatchMutations {
		return nil, errTooLarge(s.cfg.MaxBatchMutations, "prefix lookup: %d prefixes, the limit is %d", len(m.GetPrefixes()), s.cfg.MaxBatchMutations)
	}
	for i, p := range m.GetPrefixes() {
		if len(p) == 0 {
			return nil, errInvalidAt(i, "prefix lookup: empty prefix")
		}
	}
	view, err := rep.NewView()
	if err != nil {
		return nil, replicaErr("prefix lookup", err)
	}
	defer view.Close()
	rowsLeft, bytesLeft := s.cfg.MaxBatchMutations, s.cfg.MaxBatchBytes
	resp := &tierv1.PrefixLookupResponse{Results: make([]*tierv1.PrefixLookupResult, len(m.GetPrefixes()))}
	for i, p := range m.GetPrefixes() {
		page, err := view.Scan(ctx, replica.ScanOptions{Prefix: p, Limit: max(rowsLeft, 1)})
		if err != nil {
			return nil, replicaErr("prefix lookup", err)
		}
		res := &tierv1.PrefixLookupResult{Rows: make([]*tierv1.Row, len(page.Rows))}
		for j, kv := range page.Rows {
			res.Rows[j] = &tierv1.Row{Key: kv.Key, Value: kv.Value}
			bytesLeft -= len(kv.Key) + len(kv.Value)
		}
		rowsLeft -= len(page.Rows)
		if page.Next != nil || rowsLeft < 0 || bytesLeft < 0 {
			return nil, errTooLarge(s.cfg.MaxBatchMutations, "prefix lookup: the result exceeds %d rows or %d bytes (at prefix %d)",
				s.cfg.MaxBatchMutations, s.cfg.MaxBatchBytes, i)
		}
		resp.Results[i] = res
	}
	return connect.NewResponse(resp), nil
}

func tabletMsg(format string, args ...any) string {
	return "tablet: " + fmt.Sprintf(format, args...)
}
