package bulkloadclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/tierpb"
)

// CommitRetryInterval is the pause between two attempts of a Commit whose
// outcome is retriable or unknown.
const CommitRetryInterval = 200 * time.Millisecond

// Client talks to the BulkLoadService of a tier's coordinator. It is safe
// for concurrent use.
type Client struct {
	svc   tierv1connect.BulkLoadServiceClient
	log   *slog.Logger
	store *objstore.Store // optional, not owned
}

// Opt configures New.
type Opt func(*options)

type options struct {
	hc     connect.HTTPClient
	logger *slog.Logger
	store  *objstore.Store
	conn   []connect.ClientOption
}

// WithHTTPClient sets the HTTP client (default http.DefaultClient).
func WithHTTPClient(hc connect.HTTPClient) Opt { return func(o *options) { o.hc = hc } }

// WithLogger sets the logger of retries (default: discard).
func WithLogger(l *slog.Logger) Opt { return func(o *options) { o.logger = l } }

// WithObjectStore makes Commit write manifests through s instead of a store
// opened from the build context's remote data dir. The client does not close
// it.
func WithObjectStore(s *objstore.Store) Opt { return func(o *options) { o.store = s } }

// WithConnectOptions adds options to the underlying connect client.
func WithConnectOptions(opts ...connect.ClientOption) Opt {
	return func(o *options) { o.conn = append(o.conn, opts...) }
}

// New returns a client of the coordinator at coordinatorAddress ("host:port"
// or a URL). It does not contact the coordinator.
func New(ctx context.Context, coordinatorAddress string, opts ...Opt) (*Client, error) {
	_ = ctx
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if coordinatorAddress == "" {
		return nil, fmt.Errorf("bulkloadclient: %w: empty coordinator address", bulkload.ErrInvalidRequest)
	}
	if o.hc == nil {
		o.hc = http.DefaultClient
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	addr := coordinatorAddress
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	addr = strings.TrimRight(addr, "/")
	return &Client{
		svc:   tierv1connect.NewBulkLoadServiceClient(o.hc, addr, o.conn...),
		log:   o.logger,
		store: o.store,
	}, nil
}

// BeginOptions tune Begin.
type BeginOptions struct {
	// BuildTimeout is the build window requested; zero takes the server's
	// default. The server caps it.
	BuildTimeout time.Duration
}

// Begin begins (or, for the same caller token, resumes) the bulk load of
// target and returns its build context. A transaction of this token that is
// past BEGUN is reported as an error wrapping bulkload.ErrInvalidState.
// Begin is sent once; it is idempotent, so a caller may repeat it when
// IsRetriable(err).
func (c *Client) Begin(ctx context.Context, target bulkload.Target, callerToken string, opts BeginOptions) (*BuildContext, error) {
	if err := bulkload.ValidateCallerToken(callerToken); err != nil {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w", target, err)
	}
	if opts.BuildTimeout < 0 {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w: negative build timeout", target, bulkload.ErrInvalidRequest)
	}
	resp, err := c.svc.Begin(ctx, connect.NewRequest(&tierv1.BeginBulkLoadRequest{
		Target: targetProto(target), CallerToken: callerToken, BuildTimeoutMs: opts.BuildTimeout.Milliseconds(),
	}))
	if err != nil {
		return nil, mapErr(ctx, "begin "+target.String(), err)
	}
	st := statusFromProto(resp.Msg.GetStatus())
	if resp.Msg.GetTargetInfo() == nil || st.State != bulkload.Begun {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w: transaction %s is %s", target, bulkload.ErrInvalidState, st.Handle.TxnID, st.State)
	}
	return fromTargetInfo(resp.Msg.GetTargetInfo())
}

// GetInProgress returns the transaction in progress (not terminal) on
// target and, while it is BEGUN with its fence ready, its build context (nil
// otherwise). With none in progress the error wraps bulkload.ErrNotFound.
func (c *Client) GetInProgress(ctx context.Context, target bulkload.Target) (bulkload.Status, *BuildContext, error) {
	resp, err := c.svc.GetInProgress(ctx, connect.NewRequest(&tierv1.GetInProgressBulkLoadRequest{Target: targetProto(target)}))
	if err != nil {
		return bulkload.Status{}, nil, mapErr(ctx, "get in progress "+target.String(), err)
	}
	if resp.Msg.GetStatus() == nil {
		return bulkload.Status{}, nil, fmt.Errorf("bulkloadclient: get in progress %s: %w: no transaction in progress", target, bulkload.ErrNotFound)
	}
	st := statusFromProto(resp.Msg.GetStatus())
	if resp.Msg.GetTargetInfo() == nil {
		return st, nil, nil
	}
	bc, err := fromTargetInfo(resp.Msg.GetTargetInfo())
	return st, bc, err
}

// Status returns the state of the transaction of handle (only its TxnID is
// required).
func (c *Client) Status(ctx context.Context, handle bulkload.Handle) (bulkload.Status, error) {
	resp, err := c.svc.Status(ctx, connect.NewRequest(&tierv1.BulkLoadStatusRequest{Handle: handleProto(handle)}))
	if err != nil {
		return bulkload.Status{}, mapErr(ctx, "status of "+handle.TxnID, err)
	}
	return statusFromProto(resp.Msg.GetStatus()), nil
}

// Abort aborts the transaction of handle. It is sent exactly once.
func (c *Client) Abort(ctx context.Context, handle bulkload.Handle) (bulkload.Status, error) {
	resp, err := c.svc.Abort(ctx, connect.NewRequest(&tierv1.AbortBulkLoadRequest{Handle: handleProto(handle)}))
	if err != nil {
		return bulkload.Status{}, mapErr(ctx, "abort "+handle.TxnID, err)
	}
	return statusFromProto(resp.Msg.GetStatus()), nil
}

// IsRetriable reports whether repeating the same request may succeed: the
// server was unavailable, the outcome is unknown (transport failure, server
// deadline) or the transaction limit was reached.
func IsRetriable(err error) bool { return bulkload.IsRetriable(err) }

// mapErr turns an RPC error into one wrapping the bulkload sentinel of its
// reason (and the RPC error). A failure after ctx ended wraps ctx's error
// and is not retriable.
func mapErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("bulkloadclient: %s: %w (%w)", op, ctx.Err(), err)
	}
	var sentinel error
	switch r := tierpb.ReasonOf(err); r {
	case tierpb.ReasonNotEmpty:
		sentinel = bulkload.ErrTargetNotEmpty
	case tierpb.ReasonTokenAborted:
		sentinel = bulkload.ErrTokenAborted
	case tierpb.ReasonTargetOccupied:
		sentinel = bulkload.ErrTargetOccupied
	case tierpb.ReasonInvalidState:
		sentinel = bulkload.ErrInvalidState
	case tierpb.ReasonManifestConflict:
		sentinel = bulkload.ErrManifestConflict
	case tierpb.ReasonInvalidManifest, tierpb.ReasonInvalidArgument:
		sentinel = bulkload.ErrInvalidRequest
	case tierpb.ReasonBulkLoadDeadline:
		sentinel = bulkload.ErrDeadlineExceeded
	case tierpb.ReasonNotFound:
		sentinel = bulkload.ErrNotFound
	case tierpb.ReasonTooManyTransactions:
		sentinel = bulkload.ErrTooManyTransactions
	case tierpb.ReasonNotPrimaryKey:
		sentinel = bulkload.ErrNotPrimaryKeyTable
	case tierpb.ReasonUnavailable, tierpb.ReasonNotLeader:
		// Unknown outcome: the request may or may not have taken effect.
		sentinel = bulkload.ErrUnavailable
	default:
		// No reason of the bulk-load protocol (ReasonOf reports UNKNOWN for
		// any code no reason has, such as UNIMPLEMENTED from a server that
		// is not a coordinator): the code decides whether the outcome is
		// unknown.
		switch connect.CodeOf(err) {
		case connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnavailable, connect.CodeUnknown, connect.CodeAborted:
			sentinel = bulkload.ErrUnavailable
		default:
			return fmt.Errorf("bulkloadclient: %s: %w", op, err)
		}
	}
	return fmt.Errorf("bulkloadclient: %s: %w: %w", op, sentinel, err)
}

func targetProto(t bulkload.Target) *tierv1.TargetPath {
	p := &tierv1.TargetPath{Database: t.Database, Table: t.Table}
	if t.Partition != "" {
		part := t.Partition
		p.Partition = &part
	}
	return p
}

func handleProto(h bulkload.Handle) *tierv1.BulkLoadHandle {
	return &tierv1.BulkLoadHandle{Target: targetProto(h.Target), TableId: h.TableID, PartitionId: h.PartitionID, TxnId: h.TxnID}
}

func handleFromProto(h *tierv1.BulkLoadHandle) bulkload.Handle {
	return bulkload.Handle{
		Target:  bulkload.Target{Database: h.GetTarget().GetDatabase(), Table: h.GetTarget().GetTable(), Partition: h.GetTarget().GetPartition()},
		TableID: h.GetTableId(), PartitionID: h.GetPartitionId(), TxnID: h.GetTxnId(),
	}
}

func statusFromProto(s *tierv1.BulkLoadStatus) bulkload.Status {
	st := bulkload.Status{Handle: handleFromProto(s.GetHandle()), AbortMessage: s.GetAbortMessage()}
	switch s.GetState() {
	case tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN:
		st.State = bulkload.Begun
	case tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTING:
		st.State = bulkload.Committing
	case tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED:
		st.State = bulkload.Committed
	case tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED:
		st.State = bulkload.Aborted
	default:
		st.State = bulkload.State(255) // unknown; State.Valid reports false
	}
	if r := s.GetAbortReason(); r != tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_UNSPECIFIED {
		ar := bulkload.AbortReason(int32(r) - 1)
		st.AbortReason = &ar
	}
	return st
}

// abortedErr describes a transaction found ABORTED while committing.
func abortedErr(st bulkload.Status) error {
	sentinel := bulkload.ErrInvalidState
	if st.AbortReason != nil && (*st.AbortReason == bulkload.BuildDeadlineExceeded || *st.AbortReason == bulkload.CommitDecisionDeadlineExceeded) {
		sentinel = bulkload.ErrDeadlineExceeded
	}
	reason := "unknown reason"
	if st.AbortReason != nil {
		reason = st.AbortReason.String()
	}
	return fmt.Errorf("bulkloadclient: commit %s: %w: transaction aborted (%s): %s", st.Handle.TxnID, sentinel, reason, st.AbortMessage)
}

var errNoContext = errors.New("bulkloadclient: nil build context")
