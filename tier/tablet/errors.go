package tablet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/tier/tierpb"
)

// errNotRunning is what a control RPC gets while Run is not running.
var errNotRunning = errors.New("tablet: server is not running")

func rpcErr(reason tierpb.Reason, md map[string]string, format string, args ...any) *connect.Error {
	return tierpb.NewError(reason, "tablet: "+fmt.Sprintf(format, args...), md)
}

func errInvalid(format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonInvalidArgument, nil, format, args...)
}

// errInvalidAt is INVALID_ARGUMENT naming the offending item of a
// repeated request field.
func errInvalidAt(index int, format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonInvalidArgument, map[string]string{tierpb.KeyIndex: strconv.Itoa(index)},
		"item %d: "+format, append([]any{index}, args...)...)
}

func errNotFound(format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonNotFound, nil, format, args...)
}

func errUnavailable(format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonUnavailable, nil, format, args...)
}

func errInternal(format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonInternal, nil, format, args...)
}

func errTooLarge(limit int, format string, args ...any) *connect.Error {
	return rpcErr(tierpb.ReasonBatchTooLarge, map[string]string{tierpb.KeyLimit: strconv.Itoa(limit)}, format, args...)
}

func errLoading(ds dataState, format string, args ...any) *connect.Error {
	return tierpb.NewTargetLoadingError("tablet: "+fmt.Sprintf(format, args...), ds.proto(), ds.bulkLoadID)
}

// errStaleCoordinator is STALE_EPOCH for a coordinator request the gate
// refused.
func errStaleCoordinator(err error) *connect.Error {
	var se *fencing.StaleEpochError
	highest := int64(0)
	if errors.As(err, &se) {
		highest = int64(se.Highest)
	}
	return tierpb.NewStaleEpochError("tablet: "+err.Error(), highest)
}

// leaderHint returns the metadata naming a bucket's leader, as far as known.
func leaderHint(h tierpb.LeaderHint) map[string]string {
	md := map[string]string{}
	if h.ID != "" {
		md[tierpb.KeyLeaderID] = h.ID
	}
	if h.Address != "" {
		md[tierpb.KeyLeaderAddress] = h.Address
	}
	if h.Epoch != 0 {
		md[tierpb.KeyLeaderEpoch] = strconv.FormatInt(h.Epoch, 10)
	}
	return md
}

// errStaleLeaderEpoch is STALE_EPOCH for a client request routed with an
// older bucket leader epoch; besides the current epoch it names the leader.
func errStaleLeaderEpoch(h tierpb.LeaderHint, got int32, format string, args ...any) *connect.Error {
	md := leaderHint(h)
	md[tierpb.KeyEpoch] = strconv.FormatInt(h.Epoch, 10)
	return rpcErr(tierpb.ReasonStaleEpoch, md, format+": leader epoch %d is older than %d", append(args, got, h.Epoch)...)
}

// replicaErr maps an error of a replica call to an RPC error.
func replicaErr(what string, err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("tablet: %s: %w", what, err))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("tablet: %s: %w", what, err))
	case errors.Is(err, replica.ErrTooLarge), errors.Is(err, changelog.ErrTooLarge):
		return rpcErr(tierpb.ReasonBatchTooLarge, nil, "%s: %v", what, err)
	case errors.Is(err, replica.ErrInvalidRequest), errors.Is(err, replica.ErrEmptyKey):
		return errInvalid("%s: %v", what, err)
	case errors.Is(err, replica.ErrClosed), errors.Is(err, changelog.ErrClosed):
		return errUnavailable("%s: the replica closed: %v", what, err)
	case errors.Is(err, changelog.ErrConflict):
		return errUnavailable("%s: another writer appended to the bucket's changelog first (its leadership is changing); nothing of this batch was written: %v", what, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return rpcErr(tierpb.ReasonStorageFull, nil, "%s: out of disk space: %v", what, err)
	}
	return errInternal("%s: %v", what, err)
}

// resultOf is the result label of a request's metrics.
func resultOf(err error) string {
	if err == nil {
		return "ok"
	}
	switch connect.CodeOf(err) {
	case connect.CodeCanceled:
		return "canceled"
	case connect.CodeDeadlineExceeded:
		return "deadline_exceeded"
	}
	return strings.ToLower(string(tierpb.ReasonOf(err)))
}

// failureLog puts requests that failed on the server's side (a full disk,
// a broken invariant) in the server's log, where the operator who has to
// act looks; the client's error alone would leave the log silent. It logs
// at most one line per failureLogEvery, counting the failures it left out
// since the line before, so that a full disk under load does not flood it.
type failureLog struct {
	mu      sync.Mutex
	next    time.Time
	skipped int
}

const failureLogEvery = 10 * time.Second

func (f *failureLog) report(log *slog.Logger, now time.Time, msg string, args ...any) {
	f.mu.Lock()
	if now.Before(f.next) {
		f.skipped++
		f.mu.Unlock()
		return
	}
	skipped := f.skipped
	f.skipped, f.next = 0, now.Add(failureLogEvery)
	f.mu.Unlock()
	log.Error(msg, append(args, "not_logged_since_last", skipped)...)
}
