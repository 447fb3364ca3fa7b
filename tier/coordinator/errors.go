package coordinator

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// invalid returns an INVALID_ARGUMENT error.
func invalid(format string, args ...any) *connect.Error {
	return tierpb.NewError(tierpb.ReasonInvalidArgument, "coordinator: "+fmt.Sprintf(format, args...), nil)
}

// notFound returns a NOT_FOUND error.
func notFound(format string, args ...any) *connect.Error {
	return tierpb.NewError(tierpb.ReasonNotFound, "coordinator: "+fmt.Sprintf(format, args...), nil)
}

// readError is the error of a read of what ("table shop.orders",
// "partition P of table shop.orders"): a record that is not there is
// NOT_FOUND "coordinator: what does not exist", named as the caller named
// it (meta names a partition's table by its id); anything else goes
// through rpcError.
func (c *Coordinator) readError(ctx context.Context, what string, err error) error {
	if errors.Is(err, meta.ErrNotFound) {
		return notFound("%s does not exist", what)
	}
	return c.rpcError(ctx, "read "+what, err)
}

// tableReadError is readError of a table: a table that is missing because
// its database is says so.
func (c *Coordinator) tableReadError(ctx context.Context, db, table string, err error) error {
	if errors.Is(err, meta.ErrNotFound) {
		if _, derr := c.store.GetDatabase(ctx, db); errors.Is(derr, meta.ErrNotFound) {
			return notFound("database %s does not exist", db)
		}
	}
	return c.readError(ctx, "table "+db+"."+table, err)
}

// unavailable returns an UNAVAILABLE error.
func unavailable(format string, args ...any) *connect.Error {
	return tierpb.NewError(tierpb.ReasonUnavailable, "coordinator: "+fmt.Sprintf(format, args...), nil)
}

// rpcError turns an error of the metadata store, fencing, etcd or the
// object store into a tier RPC error with the reason a client acts on:
//
//	meta.ErrNotFound                      NOT_FOUND
//	meta.ErrExists, meta.ErrConflict      ALREADY_EXISTS
//	meta.ErrInvalid, meta.ErrTooLarge     INVALID_ARGUMENT
//	meta.ErrNotEmpty                      NOT_EMPTY
//	meta.ErrLoading                       TARGET_LOADING
//	meta.ErrCorrupt                       INTERNAL
//	fencing.IsFenced                      NOT_LEADER (naming the active coordinator;
//	                                      UNAVAILABLE if etcd still names this one)
//	anything else (etcd, context, a
//	precondition that kept moving)        UNAVAILABLE: retry; a write's outcome is unknown
//
// An error that already is a *connect.Error (built here, or a tablet
// server's) is returned as it is. what says what was being done.
func (c *Coordinator) rpcError(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	msg := "coordinator: " + what + ": " + err.Error()
	switch {
	case fencing.IsFenced(err):
		return c.notLeaderError(msg, c.leaderHint(context.WithoutCancel(ctx)))
	case errors.Is(err, meta.ErrNotFound):
		return tierpb.NewError(tierpb.ReasonNotFound, msg, nil)
	case errors.Is(err, meta.ErrExists), errors.Is(err, meta.ErrConflict):
		return tierpb.NewError(tierpb.ReasonAlreadyExists, msg, nil)
	case errors.Is(err, meta.ErrInvalid), errors.Is(err, meta.ErrTooLarge):
		return tierpb.NewError(tierpb.ReasonInvalidArgument, msg, nil)
	case errors.Is(err, meta.ErrNotEmpty):
		return tierpb.NewError(tierpb.ReasonNotEmpty, msg, nil)
	case errors.Is(err, meta.ErrLoading):
		var le *meta.LoadingError
		if errors.As(err, &le) {
			return tierpb.NewTargetLoadingError(msg, dataStateProto(le.State), le.BulkLoadID)
		}
		return tierpb.NewError(tierpb.ReasonTargetLoading, msg, nil)
	case errors.Is(err, meta.ErrCorrupt):
		c.log.Error("coordinator read a corrupt metadata record", "what", what, "err", err)
		return tierpb.NewError(tierpb.ReasonInternal, msg, nil)
	}
	c.log.Warn("coordinator request failed", "what", what, "err", err)
	return tierpb.NewError(tierpb.ReasonUnavailable, msg, nil)
}
