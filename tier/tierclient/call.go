package tierclient

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/tierpb"
)

// attemptFunc makes one attempt of a bucket request at loc, the leader
// st names.
type attemptFunc func(ctx context.Context, tablet tierv1connect.TabletServiceClient, st *targetState, loc location) error

// call runs one request to a bucket's leader under the retry policy and
// returns the attempts made. The request was encoded for the target state
// enc; if the target is found dropped and created again, or its schema
// changed, call fails with ErrTargetChanged rather than send it to the new
// target. A BATCH_TOO_LARGE error is returned for the caller to split.
func (c *Client) call(ctx context.Context, e *targetEntry, bucket int, enc *targetState, attempt attemptFunc) (int, error) {
	r := c.newRetrier()
	st := e.state.Load()
	for {
		if st.id.GetTableId() != enc.id.GetTableId() || st.id.GetPartitionId() != enc.id.GetPartitionId() || st.table != enc.table {
			return r.attempt, fmt.Errorf("%w: %v is now table id %d, partition id %d, schema id %d",
				ErrTargetChanged, e.target, st.id.GetTableId(), st.id.GetPartitionId(), st.table.SchemaID())
		}
		loc := st.buckets[bucket]
		var err error
		if loc.url == "" {
			err = ErrNoLeader
		} else {
			if err := c.acquire(ctx); err != nil {
				return r.attempt, err
			}
			actx, cancel := context.WithTimeout(ctx, c.opts.requestTimeout)
			err = attempt(actx, c.tablet(loc.url), st, loc)
			cancel()
			c.release()
			if err == nil {
				return r.attempt, nil
			}
		}
		if ctx.Err() != nil {
			return r.attempt, err
		}
		immediate := false
		switch classify(err) {
		case relocate:
			if hint, ok := tierpb.IsNotLeader(err); ok && e.moveLeader(st, bucket, hint) {
				immediate = true
				break
			}
			rctx, cancel := r.bounded(ctx)
			fresh, rerr := c.refresh(rctx, e, st)
			budgetGone := rctx.Err() != nil // before cancel sets it
			cancel()
			switch {
			case rerr != nil && ctx.Err() == nil && budgetGone:
				return r.attempt, err // the budget ran out asking
			case rerr != nil:
				// The target is gone, or the coordinator cannot say.
				c.forgetChanged(e, rerr)
				return r.attempt, markGone(rerr)
			}
			// A table created again with fewer buckets has no such
			// bucket: the next round reports the target changed.
			immediate = bucket >= len(fresh.buckets) || fresh.buckets[bucket] != loc
		case backoff:
			// The leader may be restoring, overloaded or gone (a crashed
			// server's address answers UNAVAILABLE or not at all): wait,
			// then ask the coordinator where the bucket is now.
			if !r.next(ctx, false) {
				return r.attempt, err
			}
			rctx, cancel := r.bounded(ctx)
			_, rerr := c.refresh(rctx, e, st)
			cancel()
			if rerr != nil && tierpb.ReasonOf(rerr) == tierpb.ReasonNotFound {
				c.forgetChanged(e, rerr)
				return r.attempt, markGone(rerr)
			}
			st = e.state.Load()
			c.opts.logger.Debug("tierclient: retry", "target", e.target.String(), "bucket", bucket, "attempt", r.attempt, "err", err)
			continue
		default:
			return r.attempt, err
		}
		if !r.next(ctx, immediate) {
			return r.attempt, err
		}
		st = e.state.Load()
		c.opts.logger.Debug("tierclient: retry", "target", e.target.String(), "bucket", bucket, "attempt", r.attempt, "err", err)
	}
}

// goneError is the coordinator's NOT_FOUND for a target a call had
// located: it was dropped meanwhile (its text and reason are the error's).
type goneError struct{ error }

func (e goneError) Unwrap() error { return e.error }

// markGone marks a refresh's NOT_FOUND as a goneError.
func markGone(err error) error {
	if tierpb.ReasonOf(err) == tierpb.ReasonNotFound {
		return goneError{err}
	}
	return err
}

// partitionGone reports whether err, of a call to e's bucket with keys
// encoded for enc, says that e's partition was dropped while the table it
// belongs to is still that one: then the partition holds no row, as one
// that never existed. A table dropped and created again meanwhile is
// ErrTargetChanged.
func (c *Client) partitionGone(ctx context.Context, e *targetEntry, enc *targetState, err error) (bool, error) {
	if !errors.As(err, new(goneError)) || e.target.Partition == "" {
		return false, nil
	}
	cur, rerr := c.RefreshTable(ctx, e.target.Database, e.target.Table)
	switch {
	case rerr != nil:
		return false, rerr
	case cur.ID != enc.id.GetTableId():
		return false, fmt.Errorf("%w: table %s.%s was dropped and created again (id %d, now %d)",
			ErrTargetChanged, e.target.Database, e.target.Table, enc.id.GetTableId(), cur.ID)
	}
	return true, nil
}

// forgetChanged forgets what the client cached about e's table when the
// coordinator no longer locates e as cached: the target is gone, or the
// table under its name is another (created again partitioned, say: "name a
// partition"). The next call describes the table afresh instead of
// failing the same way for good.
func (c *Client) forgetChanged(e *targetEntry, err error) {
	if r := tierpb.ReasonOf(err); r == tierpb.ReasonNotFound || r == tierpb.ReasonInvalidArgument || connect.CodeOf(err) == connect.CodeInvalidArgument {
		c.forgetTable(e.target.path(), 0)
	}
}
