package tierclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/tier/tierpb"
)

var (
	// ErrClosed: the Client or Writer was closed.
	ErrClosed = errors.New("tierclient: closed")
	// ErrNoLeader: a bucket has no leader at the moment (retriable).
	ErrNoLeader = errors.New("tierclient: bucket has no leader")
	// ErrTargetChanged: the target was dropped and created again, or its
	// schema changed, while rows encoded for it were being sent; they were
	// not written to the new target.
	ErrTargetChanged = errors.New("tierclient: target changed")
	// ErrInvalidArgument: the call's arguments are invalid (target, key row,
	// prefix); rows that do not fit the schema wrap kv.ErrInvalidRow instead.
	ErrInvalidArgument = errors.New("tierclient: invalid argument")
)

// BucketError is the failure of the requests of one bucket of one target,
// after the client gave up retrying them. Operations over many buckets
// return the errors.Join of one BucketError per failed bucket; the
// tierpb classifiers (IsTargetLoading, ReasonOf, ...) see through it to the
// server's error.
type BucketError struct {
	Op       string // "write", "lookup", "prefix lookup", "scan"
	Target   Target // with the partition resolved
	Bucket   int
	Rows     int // rows (mutations, keys) of the requests that failed
	Attempts int // attempts of the last failed request
	Err      error
}

func (e *BucketError) Error() string {
	return fmt.Sprintf("tierclient: %s %v bucket %d (%d rows, %d attempts): %v", e.Op, e.Target, e.Bucket, e.Rows, e.Attempts, e.Err)
}

func (e *BucketError) Unwrap() error { return e.Err }

// RowError is the failure of an Upsert, Delete, Get or PrefixGet at one
// row (key, prefix) of its input, which could not be encoded or routed (it
// does not fit the schema, the partition of an upserted row does not
// exist, a key of another partition than the call's target, ...); nothing
// of the call was written or read.
type RowError struct {
	Op     string // "upsert", "delete", "get", "prefix get"
	Target Target
	Index  int // the row's position in the call's input, from 0
	Err    error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("tierclient: %s %v: row %d: %v", e.Op, e.Target, e.Index, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// IsRetriable reports whether err is worth retrying later as it is: the
// server was unavailable or overloaded, a bucket or the coordinator had no
// leader or was moving, or one attempt timed out. The client already
// retried such errors under its RetryPolicy; getting one back means the
// policy ran out. TARGET_LOADING is not retriable in this sense (it lasts
// as long as a bulk load; detect it with IsTargetLoading), nor are invalid
// rows or requests, missing targets or a cancelled context.
func IsRetriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrNoLeader) {
		return true
	}
	switch tierpb.ReasonOf(err) {
	case tierpb.ReasonUnavailable, tierpb.ReasonNotLeader, tierpb.ReasonStaleEpoch, tierpb.ReasonScanExpired:
		return true
	}
	// A response cut off mid-way is retried like a broken connection
	// (classify): getting it back means the policy ran out.
	return connect.CodeOf(err) == connect.CodeDeadlineExceeded || cutOff(err)
}

// IsTargetLoading reports whether err is (or holds) TARGET_LOADING: a bulk
// load holds the target; tierpb.MetadataOf(err) names it. It is
// tierpb.IsTargetLoading, repeated here for discoverability.
func IsTargetLoading(err error) bool { return tierpb.IsTargetLoading(err) }

// action is what the retry loop does with an attempt's error.
type action uint8

const (
	giveUp   action = iota
	backoff         // wait, then retry
	relocate        // refresh the bucket's location, then retry
	split           // the request was too large: halve it
)

// classify decides what to do after an attempt failed with err. Reads and
// writes classify alike: both are idempotent.
func classify(err error) action {
	if errors.Is(err, ErrNoLeader) {
		return relocate
	}
	switch tierpb.ReasonOf(err) {
	case tierpb.ReasonNotLeader, tierpb.ReasonStaleEpoch, tierpb.ReasonNotFound:
		// A tablet server's NOT_FOUND: it hosts no replica of the bucket
		// (moved away); the refresh tells a dropped target apart.
		return relocate
	case tierpb.ReasonUnavailable:
		return backoff
	case tierpb.ReasonBatchTooLarge:
		return split
	}
	if connect.CodeOf(err) == connect.CodeDeadlineExceeded || cutOff(err) {
		return backoff
	}
	return giveUp
}

// cutOff reports whether err is a response the connection cut short (after
// its headers): UNKNOWN with no thaw error, which only the transport makes
// ("read message: unexpected EOF"). The request may have been applied;
// reads and writes are idempotent, so it is sent again.
func cutOff(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ce *connect.Error
	return connect.CodeOf(err) == connect.CodeUnknown && errors.As(err, &ce) && tierpb.DetailOf(err) == nil &&
		ce.Meta().Get(tierpb.HeaderReason) == "" && strings.Contains(ce.Message(), "unexpected EOF")
}
