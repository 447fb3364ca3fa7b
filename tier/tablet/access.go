package tablet

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/access"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// dataPolicy is the server's copy of the data-access policy
// (meta.DataAccess). Until the server has read one it refuses reads and
// writes as UNAVAILABLE, and so while none is stored (no coordinator has
// led yet: the first publishes one before it does anything else) or the
// stored one does not parse (err): it never serves them openly by mistake.
type dataPolicy struct {
	raw     []byte // the stored record
	enforce bool
	byHash  map[string]*meta.DataCaller
	err     error // none stored, or unreadable
}

// errNoDataPolicy: no coordinator has published a data-access policy.
var errNoDataPolicy = errors.New("no coordinator has published the data access policy yet")

// newDataPolicy returns the policy of a stored record; nil data: none
// stored.
func newDataPolicy(data []byte) *dataPolicy {
	if data == nil {
		return &dataPolicy{err: errNoDataPolicy}
	}
	d, err := meta.Unmarshal[meta.DataAccess](data)
	if err != nil {
		return &dataPolicy{raw: data, err: err}
	}
	p := &dataPolicy{raw: data, enforce: d.Enforce, byHash: make(map[string]*meta.DataCaller, len(d.Callers))}
	for i := range d.Callers {
		p.byHash[d.Callers[i].TokenSHA256] = &d.Callers[i]
	}
	return p
}

// DataAccessReady returns nil once the server has read a data-access
// policy it can serve by, else why it refuses reads and writes (for a
// readiness check).
func (s *Server) DataAccessReady() error {
	p := s.access.Load()
	switch {
	case p == nil:
		return errors.New("the data access policy is not read yet")
	case errors.Is(p.err, errNoDataPolicy):
		return p.err
	case p.err != nil:
		return errors.New("the stored data access policy is unreadable")
	}
	return nil
}

// watchDataAccess keeps the server's data-access policy current: it reads
// the record, then follows its changes; a broken or compacted watch reads
// again. It returns when ctx is done.
func (s *Server) watchDataAccess(ctx context.Context) {
	key := s.deps.Meta.DataAccessKey()
	b := backoff{min: s.cfg.RetryMin, max: s.cfg.RetryMax}
	for ctx.Err() == nil {
		resp, err := s.deps.Etcd.Get(ctx, key)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("tablet could not read the data access policy", "err", err)
			}
			b.sleep(ctx)
			continue
		}
		var data []byte
		if len(resp.Kvs) > 0 {
			data = resp.Kvs[0].Value
		}
		s.setDataPolicy(data)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range s.deps.Etcd.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.CompactRevision != 0 || wr.Err() != nil {
				if ctx.Err() == nil {
					s.log.Info("tablet data access watch broke; reading again", "err", wr.Err())
				}
				break
			}
			for _, ev := range wr.Events {
				data = nil
				if ev.Type == clientv3.EventTypePut {
					data = ev.Kv.Value
				}
				s.setDataPolicy(data)
			}
			b.reset()
		}
		cancel()
		b.sleep(ctx)
	}
}

// setDataPolicy installs the policy of a stored record (nil: none stored).
func (s *Server) setDataPolicy(data []byte) {
	p := newDataPolicy(data)
	old := s.access.Swap(p)
	switch {
	case errors.Is(p.err, errNoDataPolicy):
		s.log.Info("tablet refuses reads and writes until a coordinator publishes the data access policy")
	case p.err != nil:
		s.log.Error("tablet refuses reads and writes: the data access policy is unreadable", "err", p.err)
	case old == nil || old.err != nil || !bytes.Equal(old.raw, p.raw):
		s.log.Info("tablet follows the data access policy", "enforce", p.enforce, "callers", len(p.byHash))
	}
}

// dataOp is what a data RPC does to a table's rows.
type dataOp bool

const (
	readOp  dataOp = false
	writeOp dataOp = true
)

func (op dataOp) String() string {
	if op == writeOp {
		return "write"
	}
	return "read"
}

// resolveData resolves a read or write request (resolve) once its caller
// is authenticated and authorized under the data-access policy:
// UNAVAILABLE before the server has read the policy or while it is
// unreadable, UNAUTHENTICATED without a caller's bearer token,
// PERMISSION_DENIED when the caller's patterns do not cover the table.
// Its errors never quote the token.
func (s *Server) resolveData(h http.Header, op dataOp, id *tierv1.TargetId, bucket int32) (resolved, error) {
	p := s.access.Load()
	switch {
	case p == nil:
		return resolved{}, errUnavailable("%s: the data access policy is not read yet", op)
	case errors.Is(p.err, errNoDataPolicy):
		return resolved{}, errUnavailable("%s: %v", op, p.err)
	case p.err != nil:
		return resolved{}, errUnavailable("%s: the data access policy is unreadable (see the tablet server's log)", op)
	}
	var caller *meta.DataCaller
	if p.enforce {
		tok, ok := access.Bearer(h.Values("Authorization"))
		if !ok {
			return resolved{}, tierpb.NewError(tierpb.ReasonUnauthenticated,
				tabletMsg("%s: this tier requires a caller's bearer token (an Authorization: Bearer header; thaw takes it from THAW_TOKEN)", op), nil)
		}
		if caller = p.byHash[access.TokenSHA256(tok)]; caller == nil {
			return resolved{}, tierpb.NewError(tierpb.ReasonUnauthenticated, tabletMsg("%s: the bearer token is not a caller's", op), nil)
		}
	}
	r, err := s.resolve(id, bucket)
	if err != nil || caller == nil {
		return r, err
	}
	db, table := r.tv.snap.Database, r.tv.snap.Table
	patterns := caller.Read
	if op == writeOp {
		patterns = caller.Write
	}
	if !access.MatchAny(patterns, db, table) {
		return resolved{}, tierpb.NewError(tierpb.ReasonPermissionDenied,
			tabletMsg("caller %s may not %s %s.%s (its %s patterns: %v)", caller.Name, op, db, table, op, patterns), nil)
	}
	return r, nil
}
