package tierpb

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/tlsfail"
)

// Reason is the stable, machine-readable cause of a tier RPC error.
type Reason string

// The reasons. Their strings are part of the API: never rename or reuse one.
const (
	// ReasonUnknown is what ReasonOf reports for an error that carries no
	// reason and whose code does not identify one.
	ReasonUnknown Reason = "UNKNOWN"
	// ReasonNotFound: a database, table, partition or target does not exist,
	// or the server hosts no replica of the addressed bucket.
	ReasonNotFound Reason = "NOT_FOUND"
	// ReasonAlreadyExists: a database, table or partition already exists.
	ReasonAlreadyExists Reason = "ALREADY_EXISTS"
	// ReasonInvalidArgument: the request is malformed (names, schema, key or
	// value bytes); metadata may name the offending "index".
	ReasonInvalidArgument Reason = "INVALID_ARGUMENT"
	// ReasonSchemaMismatch: a value's schema id is not the table's current
	// one; metadata "schema_id" is the current one.
	ReasonSchemaMismatch Reason = "SCHEMA_MISMATCH"
	// ReasonBatchTooLarge: a request holds more items, or a result more
	// bytes, than the server accepts; metadata "limit".
	ReasonBatchTooLarge Reason = "BATCH_TOO_LARGE"
	// ReasonTargetLoading: a bulk load holds the target; metadata
	// "data_state" and "bulk_load_id".
	ReasonTargetLoading Reason = "TARGET_LOADING"
	// ReasonNotEmpty: the target (bulk load) or database (drop without
	// cascade) is not empty.
	ReasonNotEmpty Reason = "NOT_EMPTY"
	// ReasonStaleEpoch: the request's coordinator or leader epoch is older
	// than the server's; metadata "epoch" is the server's.
	ReasonStaleEpoch Reason = "STALE_EPOCH"
	// ReasonNotLeader: the server is not the active coordinator or the
	// bucket's leader; metadata "leader_id", "leader_address" and
	// "leader_epoch" name the leader when known.
	ReasonNotLeader Reason = "NOT_LEADER"
	// ReasonScanExpired: a consistent scan's pinned view was released; start
	// the scan again.
	ReasonScanExpired Reason = "SCAN_EXPIRED"
	// ReasonUnavailable: the server cannot serve now (restoring, overloaded,
	// shutting down, not caught up to the request's epoch); retry with
	// backoff.
	ReasonUnavailable Reason = "UNAVAILABLE"
	// ReasonUnauthenticated: the caller did not authenticate.
	ReasonUnauthenticated Reason = "UNAUTHENTICATED"
	// ReasonPermissionDenied: the caller may not do this.
	ReasonPermissionDenied Reason = "PERMISSION_DENIED"
	// ReasonInternal: a bug or a broken invariant on the server.
	ReasonInternal Reason = "INTERNAL"
	// ReasonStorageFull: a tablet server is out of disk space or quota
	// (ENOSPC, EDQUOT) for a bucket's changelog or replica; the request
	// changed nothing. Not retried: someone has to make room. A refinement
	// of resource_exhausted, whose code alone stays BATCH_TOO_LARGE.
	ReasonStorageFull Reason = "STORAGE_FULL"

	// Bulk-load reasons (BulkLoadService). Their metadata holds KeyTxnID
	// and KeyState when a transaction is concerned, and KeyAbortReason for
	// an aborted one.

	// ReasonTargetOccupied: another transaction (another caller token)
	// holds the target, or the target is not ACTIVE.
	ReasonTargetOccupied Reason = "TARGET_OCCUPIED"
	// ReasonTokenAborted: the transaction of this caller token was
	// aborted; begin again with a new token.
	ReasonTokenAborted Reason = "TOKEN_ABORTED"
	// ReasonInvalidState: the request is not allowed in the transaction's
	// state (Abort after COMMITTING, Commit after an abort or before Begin
	// completed).
	ReasonInvalidState Reason = "INVALID_STATE"
	// ReasonManifestConflict: Commit names a manifest other than the one
	// the transaction froze.
	ReasonManifestConflict Reason = "MANIFEST_CONFLICT"
	// ReasonInvalidManifest: the manifest, a _METADATA or a data file it
	// names breaks a validation rule; metadata KeyRules lists the rules.
	// The transaction stays BEGUN and can be aborted.
	ReasonInvalidManifest Reason = "INVALID_MANIFEST"
	// ReasonBulkLoadDeadline: the build or commit-decision deadline passed;
	// the transaction is (being) aborted.
	ReasonBulkLoadDeadline Reason = "BULK_LOAD_DEADLINE_EXCEEDED"
	// ReasonTooManyTransactions: the cluster's limit of active bulk loads,
	// or the target's limit of retained ones, is reached; retry later.
	ReasonTooManyTransactions Reason = "TOO_MANY_TRANSACTIONS"
	// ReasonNotPrimaryKey: the target's table has no primary key.
	ReasonNotPrimaryKey Reason = "NOT_PRIMARY_KEY"
	// ReasonTargetNotFound: the table or partition a Begin or
	// GetInProgress names does not exist (or is being dropped); NOT_FOUND
	// from the bulk-load service otherwise means no such transaction.
	ReasonTargetNotFound Reason = "TARGET_NOT_FOUND"
)

var codes = map[Reason]connect.Code{
	ReasonUnknown:          connect.CodeUnknown,
	ReasonNotFound:         connect.CodeNotFound,
	ReasonAlreadyExists:    connect.CodeAlreadyExists,
	ReasonInvalidArgument:  connect.CodeInvalidArgument,
	ReasonSchemaMismatch:   connect.CodeFailedPrecondition,
	ReasonBatchTooLarge:    connect.CodeResourceExhausted,
	ReasonTargetLoading:    connect.CodeFailedPrecondition,
	ReasonNotEmpty:         connect.CodeFailedPrecondition,
	ReasonStaleEpoch:       connect.CodeAborted,
	ReasonNotLeader:        connect.CodeFailedPrecondition,
	ReasonScanExpired:      connect.CodeFailedPrecondition,
	ReasonUnavailable:      connect.CodeUnavailable,
	ReasonUnauthenticated:  connect.CodeUnauthenticated,
	ReasonPermissionDenied: connect.CodePermissionDenied,
	ReasonInternal:         connect.CodeInternal,
	ReasonStorageFull:      connect.CodeResourceExhausted,

	ReasonTargetOccupied:      connect.CodeFailedPrecondition,
	ReasonTokenAborted:        connect.CodeFailedPrecondition,
	ReasonInvalidState:        connect.CodeFailedPrecondition,
	ReasonManifestConflict:    connect.CodeFailedPrecondition,
	ReasonInvalidManifest:     connect.CodeFailedPrecondition,
	ReasonBulkLoadDeadline:    connect.CodeFailedPrecondition,
	ReasonTooManyTransactions: connect.CodeFailedPrecondition,
	ReasonNotPrimaryKey:       connect.CodeFailedPrecondition,
	ReasonTargetNotFound:      connect.CodeNotFound,
}

// refinements are reasons that share their code with a broader reason
// (NOT_FOUND, BATCH_TOO_LARGE) and are only ever sent with their name: an
// error without a reason is never taken for one of them.
var refinements = map[Reason]bool{ReasonTargetNotFound: true, ReasonStorageFull: true}

// byCode maps a code to the one reason that has it, for errors that carry no
// reason (a transport failure, a non-thaw server). Codes shared by several
// reasons (refinements aside) are absent.
var byCode = func() map[connect.Code]Reason {
	m := make(map[connect.Code]Reason)
	shared := make(map[connect.Code]bool)
	for r, c := range codes {
		if refinements[r] {
			continue
		}
		if _, dup := m[c]; dup {
			shared[c] = true
		}
		m[c] = r
	}
	for c := range shared {
		delete(m, c)
	}
	return m
}()

// Reasons returns every defined reason, sorted.
func Reasons() []Reason {
	rs := make([]Reason, 0, len(codes))
	for r := range codes {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// Code returns the connect code the reason maps to; CodeUnknown for a reason
// this version does not define.
func (r Reason) Code() connect.Code {
	if c, ok := codes[r]; ok {
		return c
	}
	return connect.CodeUnknown
}

// Metadata keys used by the reasons (lower_snake_case).
const (
	KeyDataState     = "data_state"     // "ACTIVE" or "LOADING"
	KeyBulkLoadID    = "bulk_load_id"   // bulk-load transaction id
	KeyEpoch         = "epoch"          // the server's current epoch (STALE_EPOCH)
	KeyLeaderID      = "leader_id"      // coordinator or tablet server id of the leader
	KeyLeaderAddress = "leader_address" // "host:port" of the leader
	KeyLeaderEpoch   = "leader_epoch"   // the leader's coordinator or bucket leader epoch
	KeySchemaID      = "schema_id"      // the table's current schema id
	KeyIndex         = "index"          // offending position in a repeated request field
	KeyLimit         = "limit"          // the limit exceeded
	KeyTxnID         = "txn_id"         // bulk-load transaction id
	KeyState         = "state"          // bulk-load transaction state, e.g. "BEGUN"
	KeyAbortReason   = "abort_reason"   // why a bulk load was aborted, e.g. "TARGET_NOT_EMPTY"
	KeyRules         = "rules"          // comma-separated validation rules a manifest broke
)

// HeaderReason is the response header (a trailer in gRPC) that repeats an
// error's reason.
const HeaderReason = "Thaw-Error-Reason"

// NewError returns an error with reason's code, message msg and a
// tierv1.ErrorDetail holding reason, msg and a copy of metadata (which may be
// nil). Invalid UTF-8 in msg or metadata is replaced in the detail, which
// protobuf strings require.
func NewError(reason Reason, msg string, metadata map[string]string) *connect.Error {
	err := connect.NewError(reason.Code(), errors.New(msg))
	err.Meta().Set(HeaderReason, string(reason))
	d := &tierv1.ErrorDetail{Reason: validUTF8(string(reason)), Message: validUTF8(msg)}
	if len(metadata) > 0 {
		d.Metadata = make(map[string]string, len(metadata))
		for k, v := range metadata {
			d.Metadata[validUTF8(k)] = validUTF8(v)
		}
	}
	// Marshalling can fail only on invalid UTF-8, which validUTF8 removed.
	if detail, derr := connect.NewErrorDetail(d); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// DataStateName returns the short name of a data state as the tier's
// metadata records it: "ACTIVE", "LOADING", or "UNSPECIFIED".
func DataStateName(s tierv1.DataState) string {
	return strings.TrimPrefix(s.String(), "DATA_STATE_")
}

// NewTargetLoadingError returns a TARGET_LOADING error whose metadata holds
// the target's data state and bulk-load transaction id.
func NewTargetLoadingError(msg string, state tierv1.DataState, bulkLoadID string) *connect.Error {
	return NewError(ReasonTargetLoading, msg, map[string]string{
		KeyDataState:  DataStateName(state),
		KeyBulkLoadID: bulkLoadID,
	})
}

// NewStaleEpochError returns a STALE_EPOCH error whose metadata holds the
// server's current epoch.
func NewStaleEpochError(msg string, current int64) *connect.Error {
	return NewError(ReasonStaleEpoch, msg, map[string]string{KeyEpoch: strconv.FormatInt(current, 10)})
}

// LeaderHint names a leader: the active coordinator, or a bucket's leader.
// Zero fields are unknown.
type LeaderHint struct {
	ID      string // coordinator or tablet server id
	Address string // "host:port"
	Epoch   int64  // coordinator epoch, or bucket leader epoch
}

// NewNotLeaderError returns a NOT_LEADER error whose metadata holds the
// known fields of leader.
func NewNotLeaderError(msg string, leader LeaderHint) *connect.Error {
	md := make(map[string]string, 3)
	if leader.ID != "" {
		md[KeyLeaderID] = leader.ID
	}
	if leader.Address != "" {
		md[KeyLeaderAddress] = leader.Address
	}
	if leader.Epoch != 0 {
		md[KeyLeaderEpoch] = strconv.FormatInt(leader.Epoch, 10)
	}
	return NewError(ReasonNotLeader, msg, md)
}

var detailType = string((*tierv1.ErrorDetail)(nil).ProtoReflect().Descriptor().FullName())

// DetailOf returns the tierv1.ErrorDetail of err (a *connect.Error, or an
// error wrapping one), or nil if it has none.
func DetailOf(err error) *tierv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if d.Type() != detailType {
			continue
		}
		var ed tierv1.ErrorDetail
		if proto.Unmarshal(d.Bytes(), &ed) == nil {
			return &ed
		}
	}
	return nil
}

// ReasonOf returns the reason of err: "" for nil; the ErrorDetail's reason,
// else the HeaderReason header, for an error built by NewError, on the
// server or as a connect client receives it over the wire; otherwise the
// reason whose code err has when exactly one reason has that code (so a
// transport failure reports UNAVAILABLE), and ReasonUnknown.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	if d := DetailOf(err); d != nil && d.GetReason() != "" {
		return Reason(d.GetReason())
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if r := ce.Meta().Get(HeaderReason); r != "" {
			return Reason(r)
		}
	}
	if tlsfail.Untrusted(err) || tlsfail.PlainHTTP(err) {
		// The handshake failed verification, or an https:// URL reached a
		// plain HTTP server: transport codes would call it UNAVAILABLE,
		// but no repeat helps until the configuration changes, and no
		// request reached the server.
		return ReasonUnknown
	}
	if r, ok := byCode[connect.CodeOf(err)]; ok {
		return r
	}
	return ReasonUnknown
}

// MetadataOf returns the metadata of err's ErrorDetail; nil if it has none.
func MetadataOf(err error) map[string]string {
	return DetailOf(err).GetMetadata()
}

// IsTargetLoading reports whether err is TARGET_LOADING; MetadataOf(err)
// then holds KeyDataState and KeyBulkLoadID.
func IsTargetLoading(err error) bool { return ReasonOf(err) == ReasonTargetLoading }

// IsStaleEpoch reports whether err is STALE_EPOCH; MetadataOf(err) then
// holds the server's KeyEpoch.
func IsStaleEpoch(err error) bool { return ReasonOf(err) == ReasonStaleEpoch }

// IsNotLeader reports whether err is NOT_LEADER and returns the leader hint
// it carries; a field the server did not know is zero.
func IsNotLeader(err error) (LeaderHint, bool) {
	if ReasonOf(err) != ReasonNotLeader {
		return LeaderHint{}, false
	}
	md := MetadataOf(err)
	epoch, _ := strconv.ParseInt(md[KeyLeaderEpoch], 10, 64)
	return LeaderHint{ID: md[KeyLeaderID], Address: md[KeyLeaderAddress], Epoch: epoch}, true
}
