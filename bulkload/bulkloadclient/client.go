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
	"github.com/thawdb/thaw/internal/coordlist"
	"github.com/thawdb/thaw/internal/tlsfail"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/tierpb"
)

// CommitRetryInterval is the pause between two attempts of a Commit whose
// outcome is retriable or unknown.
const CommitRetryInterval = 200 * time.Millisecond

// MaxLeaderRedirects bounds how many NOT_LEADER answers naming another
// coordinator one call follows. Two coordinators that keep naming each
// other (each with a stale view of the election) end the call with an
// error wrapping bulkload.ErrUnavailable instead of a loop.
const MaxLeaderRedirects = coordlist.MaxRedirects

// Client talks to the BulkLoadService of a tier's active coordinator. It
// is safe for concurrent use.
//
// It remembers the coordinator it last reached. A coordinator that is not
// the active one answers NOT_LEADER, usually naming the active one; the
// client then repeats the call there at once (at most MaxLeaderRedirects
// times per call) and sends later calls there too. This is safe for every
// call, Begin and Commit included: NOT_LEADER means the coordinator could
// not act as the active one, and Begin (same token), Commit and Abort are
// idempotent besides. NOT_LEADER naming no coordinator (an election in
// progress) is bulkload.ErrUnavailable, like any other unavailable
// coordinator.
type Client struct {
	coords *coordlist.List[tierv1connect.BulkLoadServiceClient]
	log    *slog.Logger
	store  *objstore.Store // optional, not owned
	hc     connect.HTTPClient
	// storeHC sends signed uploads straight to the object store: never
	// hc, whose TLS trust, client certificate and transport are the tier's.
	storeHC connect.HTTPClient
	scoped  bool // manifests through the upload gateway
}

// coordinator is one coordinator's BulkLoadService.
type coordinator = coordlist.Coordinator[tierv1connect.BulkLoadServiceClient]

// Opt configures New.
type Opt func(*options)

type options struct {
	hc      connect.HTTPClient
	storeHC connect.HTTPClient
	logger  *slog.Logger
	store   *objstore.Store
	conn    []connect.ClientOption
	scoped  bool
	bearer  string
}

// WithHTTPClient sets the HTTP client (default http.DefaultClient).
func WithHTTPClient(hc connect.HTTPClient) Opt { return func(o *options) { o.hc = hc } }

// WithStoreHTTPClient sets the HTTP client of signed uploads, which go
// from the builder straight to the object store (an S3 endpoint; see
// ScopedStore), not to the tier. Default: http.DefaultClient (the system's
// CA roots, proxies from the environment), never the WithHTTPClient
// client: the tier's CA bundle, client certificate or transport do not
// belong on requests to the store.
func WithStoreHTTPClient(hc connect.HTTPClient) Opt { return func(o *options) { o.storeHC = hc } }

// WithLogger sets the logger of retries and coordinator changes (default:
// discard).
func WithLogger(l *slog.Logger) Opt { return func(o *options) { o.logger = l } }

// WithObjectStore makes Commit write manifests through s instead of a store
// opened from the build context's remote data dir. The client does not close
// it.
func WithObjectStore(s *objstore.Store) Opt { return func(o *options) { o.store = s } }

// WithBearerToken makes every call carry "Authorization: Bearer token":
// the credential of a coordinator that requires callers to authenticate
// (coordinator.Config.Callers). The client never logs it.
func WithBearerToken(token string) Opt {
	return func(o *options) { o.bearer = token }
}

// WithScopedUploads makes Commit write manifests through the upload
// gateway of the active coordinator (see ScopedStore), with credentials
// scoped to the transaction, instead of through an object store of its
// own. WithObjectStore takes precedence.
func WithScopedUploads() Opt { return func(o *options) { o.scoped = true } }

// WithConnectOptions adds options to the underlying connect client.
func WithConnectOptions(opts ...connect.ClientOption) Opt {
	return func(o *options) { o.conn = append(o.conn, opts...) }
}

// New returns a client of the tier whose coordinators listen at
// coordinatorAddress: one address ("host:port" or a URL) or a
// comma-separated list of them ("a:7070,b:7070"). Any coordinator will do,
// active or standby: a standby names the active one (see Client). With a
// list, a coordinator that cannot be reached (for Status and
// GetInProgress: that is unavailable) is passed over for the next one
// within the call, and a call that found its coordinator not serving
// leaves the next call to start at the next one in the list. New does not
// contact the coordinator.
func New(ctx context.Context, coordinatorAddress string, opts ...Opt) (*Client, error) {
	_ = ctx
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	seeds, err := coordlist.Parse(coordinatorAddress)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: %w: %w", bulkload.ErrInvalidRequest, err)
	}
	if o.hc == nil {
		o.hc = http.DefaultClient
	}
	if o.storeHC == nil {
		o.storeHC = http.DefaultClient
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	hc, conn := o.hc, o.conn
	if o.bearer != "" {
		if err := bulkload.ValidateBearerToken(o.bearer); err != nil {
			return nil, fmt.Errorf("bulkloadclient: %w", err)
		}
		conn = append(conn[:len(conn):len(conn)], connect.WithInterceptors(Bearer(o.bearer)))
	}
	dial := func(url string) tierv1connect.BulkLoadServiceClient {
		return tierv1connect.NewBulkLoadServiceClient(hc, url, conn...)
	}
	return &Client{coords: coordlist.New(seeds, dial), log: o.logger, store: o.store, hc: hc, storeHC: o.storeHC, scoped: o.scoped}, nil
}

// callKind says where a call may be sent again.
type callKind bool

const (
	// change: Begin, Commit, Abort. Sent again only where the attempt
	// certainly did nothing: a NOT_LEADER answer, or no connection made.
	change callKind = false
	// read: Status, GetInProgress. Also sent to the next configured
	// coordinator after any unavailable answer.
	read callKind = true
)

// call sends req to the active coordinator and returns its answer or its
// error as it is (for mapErr): one pass of coordlist.Route, which follows
// NOT_LEADER hints (at most MaxLeaderRedirects), moves a read on past an
// unavailable coordinator, never sends a change twice after an answer,
// and never waits.
func call[Req, Res any](ctx context.Context, c *Client, kind callKind, req *Req,
	method func(tierv1connect.BulkLoadServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
) (*Res, error) {
	var resp *connect.Response[Res]
	_, err := coordlist.Route(ctx, c.coords, kind == read, func(err error) bool { return sentinelOf(err) == bulkload.ErrUnavailable },
		c.log, "bulkloadclient", func(co *coordinator) (err error) {
			resp, err = method(co.Svc, ctx, connect.NewRequest(req))
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
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
// Begin is sent once (to the active coordinator: a NOT_LEADER answer is
// followed, see Client); it is idempotent, so a caller may repeat it when
// IsRetriable(err).
func (c *Client) Begin(ctx context.Context, target bulkload.Target, callerToken string, opts BeginOptions) (*BuildContext, error) {
	if err := bulkload.ValidateCallerToken(callerToken); err != nil {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w", target, err)
	}
	if opts.BuildTimeout < 0 {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w: negative build timeout", target, bulkload.ErrInvalidRequest)
	}
	resp, err := call(ctx, c, change, &tierv1.BeginBulkLoadRequest{
		Target: targetProto(target), CallerToken: callerToken, BuildTimeoutMs: opts.BuildTimeout.Milliseconds(),
	}, tierv1connect.BulkLoadServiceClient.Begin)
	if err != nil {
		return nil, mapErr(ctx, "begin "+target.String(), err)
	}
	st := statusFromProto(resp.GetStatus())
	if resp.GetTargetInfo() == nil || st.State != bulkload.Begun {
		return nil, fmt.Errorf("bulkloadclient: begin %s: %w: transaction %s is %s", target, bulkload.ErrInvalidState, st.Handle.TxnID, st.State)
	}
	return fromTargetInfo(resp.GetTargetInfo())
}

// GetInProgress returns the transaction in progress (not terminal) on
// target and, while it is BEGUN with its fence ready, its build context (nil
// otherwise). With none in progress the error wraps bulkload.ErrNotFound.
func (c *Client) GetInProgress(ctx context.Context, target bulkload.Target) (bulkload.Status, *BuildContext, error) {
	resp, err := call(ctx, c, read, &tierv1.GetInProgressBulkLoadRequest{Target: targetProto(target)},
		tierv1connect.BulkLoadServiceClient.GetInProgress)
	if err != nil {
		return bulkload.Status{}, nil, mapErr(ctx, "get in progress "+target.String(), err)
	}
	if resp.GetStatus() == nil {
		return bulkload.Status{}, nil, fmt.Errorf("bulkloadclient: get in progress %s: %w: no transaction in progress", target, bulkload.ErrNotFound)
	}
	st := statusFromProto(resp.GetStatus())
	if resp.GetTargetInfo() == nil {
		return st, nil, nil
	}
	bc, err := fromTargetInfo(resp.GetTargetInfo())
	return st, bc, err
}

// Status returns the state of the transaction of handle (only its TxnID is
// required).
func (c *Client) Status(ctx context.Context, handle bulkload.Handle) (bulkload.Status, error) {
	resp, err := call(ctx, c, read, &tierv1.BulkLoadStatusRequest{Handle: handleProto(handle)}, tierv1connect.BulkLoadServiceClient.Status)
	if err != nil {
		return bulkload.Status{}, mapErr(ctx, "status of "+handle.TxnID, err)
	}
	return statusFromProto(resp.GetStatus()), nil
}

// Abort aborts the transaction of handle. It is sent once (to the active
// coordinator: a NOT_LEADER answer is followed, see Client); it is
// idempotent, so a caller may repeat it when IsRetriable(err).
func (c *Client) Abort(ctx context.Context, handle bulkload.Handle) (bulkload.Status, error) {
	resp, err := call(ctx, c, change, &tierv1.AbortBulkLoadRequest{Handle: handleProto(handle)}, tierv1connect.BulkLoadServiceClient.Abort)
	if err != nil {
		return bulkload.Status{}, mapErr(ctx, "abort "+handle.TxnID, err)
	}
	return statusFromProto(resp.GetStatus()), nil
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
	sentinel := sentinelOf(err)
	if sentinel == nil {
		return fmt.Errorf("bulkloadclient: %s: %w", op, err)
	}
	return fmt.Errorf("bulkloadclient: %s: %w", op, &reasonError{sentinel: sentinel, also: alsoSentinels(err, sentinel), err: err})
}

// alsoSentinels returns the sentinels besides its reason's that an RPC
// error's transaction metadata implies: one reason crosses the wire, while
// a Begin whose transaction found data aborted it (NOT_EMPTY, state
// ABORTED: the token is spent too, ErrTokenAborted), and a transaction
// aborted at a deadline is ErrDeadlineExceeded whatever the reason.
func alsoSentinels(err, sentinel error) []error {
	md := tierpb.MetadataOf(err)
	if md[tierpb.KeyState] != bulkload.Aborted.String() {
		return nil
	}
	var also []error
	if sentinel == bulkload.ErrTargetNotEmpty {
		also = append(also, bulkload.ErrTokenAborted)
	}
	switch md[tierpb.KeyAbortReason] {
	case bulkload.BuildDeadlineExceeded.String(), bulkload.CommitDecisionDeadlineExceeded.String():
		if sentinel != bulkload.ErrDeadlineExceeded {
			also = append(also, bulkload.ErrDeadlineExceeded)
		}
	}
	return also
}

// reasonError is an RPC error that also is its reason's sentinel. Its text
// is the server's message without the RPC code (the sentinel says it),
// followed by the sentinel in parentheses when the message does not
// already name it (the coordinator's messages usually start with it).
type reasonError struct {
	sentinel, err error
	also          []error // more sentinels it is (alsoSentinels)
}

func (e *reasonError) Error() string {
	msg := e.err.Error()
	if ce, ok := e.err.(*connect.Error); ok { // not one wrapped with more to say
		msg = ce.Message()
	}
	if strings.Contains(msg, e.sentinel.Error()) {
		return msg
	}
	return msg + " (" + e.sentinel.Error() + ")"
}

func (e *reasonError) Unwrap() []error { return append([]error{e.sentinel, e.err}, e.also...) }

// sentinelOf returns the bulkload sentinel of an RPC error's reason, nil
// for none.
func sentinelOf(err error) error {
	switch r := tierpb.ReasonOf(err); r {
	case tierpb.ReasonNotEmpty:
		return bulkload.ErrTargetNotEmpty
	case tierpb.ReasonTokenAborted:
		return bulkload.ErrTokenAborted
	case tierpb.ReasonTargetOccupied:
		return bulkload.ErrTargetOccupied
	case tierpb.ReasonInvalidState:
		return bulkload.ErrInvalidState
	case tierpb.ReasonManifestConflict:
		return bulkload.ErrManifestConflict
	case tierpb.ReasonInvalidManifest, tierpb.ReasonInvalidArgument:
		return bulkload.ErrInvalidRequest
	case tierpb.ReasonBulkLoadDeadline:
		return bulkload.ErrDeadlineExceeded
	case tierpb.ReasonNotFound:
		return bulkload.ErrNotFound
	case tierpb.ReasonTargetNotFound:
		return bulkload.ErrTargetNotFound
	case tierpb.ReasonTooManyTransactions:
		return bulkload.ErrTooManyTransactions
	case tierpb.ReasonNotPrimaryKey:
		return bulkload.ErrNotPrimaryKeyTable
	case tierpb.ReasonUnauthenticated, tierpb.ReasonPermissionDenied:
		return bulkload.ErrPermissionDenied
	case tierpb.ReasonUnavailable, tierpb.ReasonNotLeader:
		// Unknown outcome: the request may or may not have taken effect
		// (NOT_LEADER reaches here only without a leader to follow: an
		// election in progress, or too many redirects).
		return bulkload.ErrUnavailable
	default:
		// No reason of the bulk-load protocol (ReasonOf reports UNKNOWN for
		// any code no reason has, such as UNIMPLEMENTED from a server that
		// is not a coordinator): the code decides whether the outcome is
		// unknown. A handshake that failed verification, or an https://
		// address a plain HTTP server answers, sent nothing: the outcome
		// is known, and a repeat would fail alike.
		if tlsfail.Untrusted(err) || tlsfail.PlainHTTP(err) {
			return nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnavailable, connect.CodeUnknown, connect.CodeAborted:
			return bulkload.ErrUnavailable
		default:
			return nil
		}
	}
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
	st := bulkload.Status{Handle: handleFromProto(s.GetHandle()), AbortMessage: s.GetAbortMessage(),
		ManifestFrozen: s.GetManifestPath() != ""}
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

// Bearer returns a connect client interceptor that sends token as
// "Authorization: Bearer token" (what WithBearerToken installs), for
// other connect clients of the coordinator.
func Bearer(token string) connect.Interceptor { return tierpb.Bearer(token) }
