package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/tierpb"
)

// bulkService implements the BulkLoadService over the current term's
// bulkManager. Begin, Commit and Abort wait for the transaction's machine
// to answer; an answer that says the machine halted to recover (a
// precondition moved) is retried transparently, so callers see the
// outcome, not the recovery.
type bulkService struct{ c *Coordinator }

var _ tierv1connect.BulkLoadServiceHandler = (*bulkService)(nil)

// retryPause is how long a request waits before it is repeated after a
// recovering machine answered it.
const retryPause = 20 * time.Millisecond

func (s *bulkService) count(rpc string, err error) {
	result := "OK"
	if err != nil {
		result = string(tierpb.ReasonOf(err))
	}
	s.c.m.bulk.requests.WithLabelValues(rpc, result).Inc()
}

// manager returns the current term's bulk-load manager, or NOT_LEADER.
func (s *bulkService) manager(ctx context.Context) (*bulkManager, error) {
	t, err := s.c.leading(ctx)
	if err != nil {
		return nil, err
	}
	if s.c.bulkObjects == nil {
		return nil, unavailable("bulk load: the coordinator's object store cannot serve bulk loads")
	}
	return t.bulk, nil
}

func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(retryPause):
		return nil
	}
}

// targetNotFound turns resolveTarget's NOT_FOUND into TARGET_NOT_FOUND:
// from the bulk-load service, NOT_FOUND means no such transaction.
func targetNotFound(err error) error {
	var ce *connect.Error
	if tierpb.ReasonOf(err) != tierpb.ReasonNotFound || !errors.As(err, &ce) {
		return err
	}
	return tierpb.NewError(tierpb.ReasonTargetNotFound, ce.Message(), nil)
}

func (s *bulkService) Begin(ctx context.Context, req *connect.Request[tierv1.BeginBulkLoadRequest]) (_ *connect.Response[tierv1.BeginBulkLoadResponse], err error) {
	defer func() { s.count("begin", err) }()
	m := req.Msg
	if err := bulkload.ValidateCallerToken(m.GetCallerToken()); err != nil {
		return nil, bulkError(err, nil)
	}
	if ms := m.GetBuildTimeoutMs(); ms < 0 || ms > int64(math.MaxInt64/time.Millisecond) {
		// Beyond that the Duration would wrap (2^58 ms + 30 min read as
		// 30 minutes); the machine refuses what is above the maximum.
		return nil, invalid("bulk load: build timeout %d ms out of range", ms)
	}
	timeout := time.Duration(m.GetBuildTimeoutMs()) * time.Millisecond
	if err := s.c.allowed(ctx, targetOfPath(m.GetTarget())); err != nil {
		return nil, err
	}
	for {
		mgr, err := s.manager(ctx)
		if err != nil {
			return nil, err
		}
		ts, err := s.c.resolveTarget(ctx, m.GetTarget())
		if err != nil {
			return nil, targetNotFound(err)
		}
		rep, _, err := mgr.begin(ctx, ts, m.GetCallerToken(), timeout)
		if err != nil {
			return nil, bulkError(err, nil)
		}
		if rep.retry {
			if err := pause(ctx); err != nil {
				return nil, bulkError(err, &rep.view)
			}
			continue
		}
		if rep.rep.Err != nil {
			return nil, bulkError(rep.rep.Err, &rep.view)
		}
		resp := &tierv1.BeginBulkLoadResponse{Status: statusProto(rep.view)}
		if rep.rep.Info != nil {
			if resp.TargetInfo, err = targetInfoProto(rep.rep.Info); err != nil {
				return nil, bulkError(err, &rep.view)
			}
		}
		return connect.NewResponse(resp), nil
	}
}

// call sends a request to the runner of a handle's transaction, repeating
// it while the machine recovers, and returns the reply.
func (s *bulkService) call(ctx context.Context, h *tierv1.BulkLoadHandle, build func(bulktxn.RequestID, time.Time) bulktxn.Input) (reply, error) {
	for {
		mgr, err := s.manager(ctx)
		if err != nil {
			return reply{}, err
		}
		r, err := mgr.lookup(ctx, h)
		if err != nil {
			return reply{}, bulkError(err, nil)
		}
		if err := s.c.allowed(ctx, r.view().rec.Target); err != nil {
			return reply{}, err
		}
		rep, err := r.request(ctx, build)
		if err != nil {
			v := r.view()
			return reply{}, bulkError(err, &v)
		}
		if rep.retry {
			if err := pause(ctx); err != nil {
				return reply{}, bulkError(err, &rep.view)
			}
			continue
		}
		if rep.rep.Err != nil {
			return reply{}, bulkError(rep.rep.Err, &rep.view)
		}
		return rep, nil
	}
}

func (s *bulkService) Commit(ctx context.Context, req *connect.Request[tierv1.CommitBulkLoadRequest]) (_ *connect.Response[tierv1.CommitBulkLoadResponse], err error) {
	defer func() { s.count("commit", err) }()
	m := req.Msg
	ref := bulkload.ManifestRef{Path: m.GetManifestPath(), Length: m.GetManifestLength(), SHA256: m.GetManifestSha256()}
	rep, err := s.call(ctx, m.GetHandle(), func(id bulktxn.RequestID, now time.Time) bulktxn.Input {
		return bulktxn.CommitRequested{Req: id, Manifest: ref, Now: now}
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.CommitBulkLoadResponse{Status: statusProto(rep.view)}), nil
}

func (s *bulkService) Abort(ctx context.Context, req *connect.Request[tierv1.AbortBulkLoadRequest]) (_ *connect.Response[tierv1.AbortBulkLoadResponse], err error) {
	defer func() { s.count("abort", err) }()
	rep, err := s.call(ctx, req.Msg.GetHandle(), func(id bulktxn.RequestID, now time.Time) bulktxn.Input {
		return bulktxn.AbortRequested{Req: id, Now: now}
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.AbortBulkLoadResponse{Status: statusProto(rep.view)}), nil
}

func (s *bulkService) Status(ctx context.Context, req *connect.Request[tierv1.BulkLoadStatusRequest]) (_ *connect.Response[tierv1.BulkLoadStatusResponse], err error) {
	defer func() { s.count("status", err) }()
	mgr, err := s.manager(ctx)
	if err != nil {
		return nil, err
	}
	r, err := mgr.lookup(ctx, req.Msg.GetHandle())
	if err != nil {
		return nil, bulkError(err, nil)
	}
	v := r.view()
	if err := s.c.allowed(ctx, v.rec.Target); err != nil {
		return nil, err
	}
	return connect.NewResponse(&tierv1.BulkLoadStatusResponse{Status: statusProto(v)}), nil
}

func (s *bulkService) GetInProgress(ctx context.Context, req *connect.Request[tierv1.GetInProgressBulkLoadRequest]) (_ *connect.Response[tierv1.GetInProgressBulkLoadResponse], err error) {
	defer func() { s.count("get_in_progress", err) }()
	if err := s.c.allowed(ctx, targetOfPath(req.Msg.GetTarget())); err != nil {
		return nil, err
	}
	mgr, err := s.manager(ctx)
	if err != nil {
		return nil, err
	}
	ts, err := s.c.resolveTarget(ctx, req.Msg.GetTarget())
	if err != nil {
		return nil, targetNotFound(err)
	}
	if err := mgr.awaitReady(ctx); err != nil {
		return nil, bulkError(err, nil)
	}
	tgt := ts.target()
	resp := &tierv1.GetInProgressBulkLoadResponse{}
	for _, r := range mgr.runnersOf(&tgt) {
		v := r.view()
		if v.rec.State.Terminal() {
			continue
		}
		resp.Status = statusProto(v)
		if v.info != nil && v.rec.State == bulkload.Begun {
			if resp.TargetInfo, err = targetInfoProto(v.info); err != nil {
				return nil, bulkError(err, &v)
			}
		}
		break
	}
	return connect.NewResponse(resp), nil
}

func (s *bulkService) List(ctx context.Context, req *connect.Request[tierv1.ListBulkLoadsRequest]) (_ *connect.Response[tierv1.ListBulkLoadsResponse], err error) {
	defer func() { s.count("list", err) }()
	mgr, err := s.manager(ctx)
	if err != nil {
		return nil, err
	}
	keep := func(bulkload.Record) bool { return true }
	if p := req.Msg.GetTarget(); p != nil {
		tv, err := s.c.liveTable(ctx, &tierv1.TablePath{Database: p.GetDatabase(), Table: p.GetTable()})
		if err != nil {
			return nil, err
		}
		id := tv.Value.ID
		keep = func(r bulkload.Record) bool { return r.TableID == id }
		if p.Partition != nil {
			// By id, as the table: a partition dropped and created again
			// under its name is another one (its records named it too).
			what := "partition " + p.GetPartition() + " of table " + tv.Value.Database + "." + tv.Value.Name
			pv, err := s.c.store.GetPartition(ctx, id, p.GetPartition())
			if err != nil {
				return nil, s.c.readError(ctx, what, err)
			}
			if pv.Value.Dropping {
				return nil, notFound("%s does not exist", what)
			}
			pid := pv.Value.ID
			keep = func(r bulkload.Record) bool { return r.TableID == id && r.PartitionID == pid }
		}
	}
	if err := mgr.awaitReady(ctx); err != nil {
		return nil, bulkError(err, nil)
	}
	resp := &tierv1.ListBulkLoadsResponse{}
	for _, r := range mgr.runnersOf(nil) {
		v := r.view()
		if keep(v.rec) && (req.Msg.GetIncludeTerminal() || !v.rec.State.Terminal()) && s.c.mayBulkLoad(ctx, v.rec.Target) == nil {
			resp.Transactions = append(resp.Transactions, statusProto(v))
		}
	}
	return connect.NewResponse(resp), nil
}

// bulkError turns an error of the bulk-load protocol into an RPC error with
// the reason a client acts on (see the BulkLoadService documentation),
// naming the transaction v describes when known.
func bulkError(err error, v *runnerView) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	md := map[string]string{}
	if v != nil && v.rec.TxnID != "" {
		md[tierpb.KeyTxnID] = v.rec.TxnID
		md[tierpb.KeyState] = v.rec.State.String()
		if v.rec.State == bulkload.Aborted && v.rec.AbortReason != nil {
			md[tierpb.KeyAbortReason] = v.rec.AbortReason.String()
		}
	}
	var reason tierpb.Reason
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		reason = tierpb.ReasonUnavailable
	case errors.Is(err, bulkload.ErrTargetNotEmpty):
		reason = tierpb.ReasonNotEmpty
	case errors.Is(err, bulkload.ErrTokenAborted):
		reason = tierpb.ReasonTokenAborted
	case errors.Is(err, bulkload.ErrInvalidState):
		reason = tierpb.ReasonInvalidState
	case errors.Is(err, bulkload.ErrManifestConflict):
		reason = tierpb.ReasonManifestConflict
	case errors.Is(err, bulkload.ErrDeadlineExceeded):
		reason = tierpb.ReasonBulkLoadDeadline
	case errors.Is(err, snapshot.ErrInvalidBulkLoad):
		reason = tierpb.ReasonInvalidManifest
		var rules []string
		for _, x := range violationsOf(err) {
			if !slices.Contains(rules, string(x.Rule)) {
				rules = append(rules, string(x.Rule))
			}
		}
		md[tierpb.KeyRules] = strings.Join(rules, ",")
	case errors.Is(err, bulkload.ErrInvalidRequest), errors.Is(err, bulkload.ErrInvalidRecord):
		reason = tierpb.ReasonInvalidArgument
	case errors.Is(err, bulkload.ErrNotFound):
		reason = tierpb.ReasonNotFound
	case errors.Is(err, bulkload.ErrTargetOccupied):
		reason = tierpb.ReasonTargetOccupied
	case errors.Is(err, bulkload.ErrTooManyTransactions):
		reason = tierpb.ReasonTooManyTransactions
	case errors.Is(err, bulkload.ErrNotPrimaryKeyTable):
		reason = tierpb.ReasonNotPrimaryKey
	default: // bulkload.ErrUnavailable, etcd, a term that ended: the outcome is unknown
		reason = tierpb.ReasonUnavailable
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "coordinator: ") {
		msg = "coordinator: " + msg
	}
	return tierpb.NewError(reason, msg, md)
}

// violationsOf returns every *snapshot.Violation in err's tree.
func violationsOf(err error) []*snapshot.Violation {
	var out []*snapshot.Violation
	var walk func(error)
	walk = func(e error) {
		if v, ok := e.(*snapshot.Violation); ok {
			out = append(out, v)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

func stateProto(s bulkload.State) tierv1.BulkLoadState {
	switch s {
	case bulkload.Begun:
		return tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN
	case bulkload.Committing:
		return tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTING
	case bulkload.Committed:
		return tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED
	case bulkload.Aborted:
		return tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED
	}
	return tierv1.BulkLoadState_BULK_LOAD_STATE_UNSPECIFIED
}

func abortReasonProto(r bulkload.AbortReason) tierv1.BulkLoadAbortReason {
	switch r {
	case bulkload.TargetNotEmpty:
		return tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_TARGET_NOT_EMPTY
	case bulkload.BuildDeadlineExceeded:
		return tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_BUILD_DEADLINE_EXCEEDED
	case bulkload.CommitDecisionDeadlineExceeded:
		return tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_COMMIT_DECISION_DEADLINE_EXCEEDED
	case bulkload.AbortedByCaller:
		return tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_ABORTED_BY_CALLER
	}
	return tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_UNSPECIFIED
}

func handleProto(rec *bulkload.Record) *tierv1.BulkLoadHandle {
	p := &tierv1.TargetPath{Database: rec.Target.Database, Table: rec.Target.Table}
	if rec.Target.Partition != "" {
		part := rec.Target.Partition
		p.Partition = &part
	}
	return &tierv1.BulkLoadHandle{Target: p, TableId: rec.TableID, PartitionId: rec.PartitionID, TxnId: rec.TxnID}
}

// statusProto reports a runner's view.
func statusProto(v runnerView) *tierv1.BulkLoadStatus {
	rec := &v.rec
	st := &tierv1.BulkLoadStatus{
		Handle: handleProto(rec), State: stateProto(rec.State), Phase: v.phase,
		FenceReady: rec.FenceReady(), Aborting: rec.Aborting(),
		BucketCount: int32(rec.Buckets), AdoptedBuckets: int32(rec.AdoptedBuckets),
		CreatedMs: rec.CreatedMs, UpdatedMs: rec.UpdatedMs, BuildDeadlineMs: rec.BuildDeadlineMs,
		CommitDecisionDeadlineMs: rec.CommitDecisionDeadlineMs, ResultExpireMs: rec.ResultExpireMs,
		CallerToken: rec.CallerToken, Buckets: v.progress, Error: v.lastErr, Registration: v.reg.String(),
	}
	if rec.State == bulkload.Aborted && rec.AbortReason != nil {
		st.AbortReason, st.AbortMessage = abortReasonProto(*rec.AbortReason), rec.AbortMessage
	}
	if m := rec.Manifest; m != nil {
		st.ManifestPath, st.ManifestLength, st.ManifestSha256 = m.Path, m.Length, m.SHA256
	}
	return st
}

// targetInfoProto reports what Begin froze.
func targetInfoProto(info *bulkload.TargetInfo) (*tierv1.BulkLoadTargetInfo, error) {
	var schema kv.TableSchema
	if err := json.Unmarshal(info.Schema, &schema); err != nil {
		return nil, err
	}
	rec := bulkload.Record{Target: info.Handle.Target, TableID: info.Handle.TableID, PartitionID: info.Handle.PartitionID, TxnID: info.Handle.TxnID}
	return &tierv1.BulkLoadTargetInfo{
		Handle: handleProto(&rec), SchemaId: int32(info.SchemaID), TableSchemaJson: info.Schema,
		Schema: tierpb.SchemaToProto(schema), BucketCount: int32(info.Buckets), Bucketing: info.Bucketing,
		RemoteDataDir: info.RemoteDataDir, SnapshotIds: info.SnapshotIDs, SnapshotDirs: info.SnapshotDirs,
		ManifestPath: info.ManifestPath, BuildDeadlineMs: info.BuildDeadline.UnixMilli(),
	}, nil
}
