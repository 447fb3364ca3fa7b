package promoter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/snapshotbuild"
)

// detachedTimeout bounds the calls that must not be cancelled by shutdown:
// Abort, Status and the ledger writes that record an outcome.
const detachedTimeout = 30 * time.Second

// rebeginTimeout bounds the Begin that learns the transaction of a token
// whose first Begin had an unknown outcome (see abortUnrecorded).
const rebeginTimeout = 10 * time.Second

// committedWrites is how many times the write that records a commit is
// tried (re-reading the record between tries) before the record is left
// committing for Resume.
const committedWrites = 3

// crashError is a Hooks.AfterPhase or Hooks.BeforeBuild failure: the
// promotion stops at once, as if the process had died (no abort, no ledger
// write).
type crashError struct{ err error }

func (e *crashError) Error() string { return "promoter: crashed by hook: " + e.err.Error() }
func (e *crashError) Unwrap() error { return e.err }

// errPending reports a promotion left in committing: the commit decision may
// have been taken and its outcome is not known yet. Resume (or the next
// reconcile) settles it through Status; nothing else may touch the target.
var errPending = errors.New("promoter: commit outcome pending")

// errDecisionPending is the (retriable) cause with which a record is
// awaited whose transaction Status reports BEGUN with its manifest frozen:
// a Commit reached the coordinator, which is still deciding it, and an
// Abort would end a commit that may succeed.
var errDecisionPending = errors.New("promoter: the commit is being decided (BEGUN, manifest frozen)")

// errOutcomeExpired reports a committing record whose transaction the tier
// forgot (its result retention passed) while its target is empty: the
// transaction did not commit, and the attempt is recorded aborted
// (retriable).
var errOutcomeExpired = errors.New("promoter: commit outcome expired")

// errAbortFailed reports a promotion whose transaction could not be
// aborted: the record keeps its phase, so that it is resumed (rebuilt and
// committed, or aborted again) later.
var errAbortFailed = errors.New("promoter: abort failed")

// halts reports errors that must stop the promotion without any further
// write: a hook's crash, or a fenced ledger write (the term is over).
func halts(err error) bool {
	var c *crashError
	return errors.As(err, &c) || fencing.IsFenced(err)
}

// deposed reports whether the work of ctx stopped because the term ended
// (Run's context cancelled by the Leadership or by halt).
func (p *Promoter) deposed(ctx context.Context) bool {
	p.mu.Lock()
	h := p.mu.halted
	p.mu.Unlock()
	return h != nil || (ctx.Err() != nil && fencing.IsFenced(context.Cause(ctx)))
}

// IsRetriable reports whether a promotion that failed with err may succeed
// when tried again unchanged. Errors of the data, the schema, the policy and
// the target's state are terminal; everything else (the tier or the lake
// unavailable, timeouts, conflicts) is retriable, the default.
func IsRetriable(err error) bool {
	for _, terminal := range []error{
		ErrSchema, ErrTargetNotEmpty, ErrUnknownPolicy, ErrNotAllowed, ErrUnorderedDuplicates, ErrInterrupted,
		lake.ErrUnmappable, lake.ErrNoTierPartition, lake.ErrConfig,
		snapshotbuild.ErrInvalidRow, snapshotbuild.ErrDuplicateKey, snapshotbuild.ErrSchemaMismatch,
		snapshotbuild.ErrUnsupportedArrowType, snapshotbuild.ErrWrongPartition, snapshotbuild.ErrRecordTooLarge,
		snapshotbuild.ErrInvalidOptions,
		bulkload.ErrTargetNotEmpty, bulkload.ErrNotPrimaryKeyTable, bulkload.ErrInvalidRequest, bulkload.ErrManifestConflict,
	} {
		if errors.Is(err, terminal) {
			return false
		}
	}
	return !errors.Is(err, context.Canceled)
}

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), detachedTimeout)
}

func (p *Promoter) logger(r Record) *slog.Logger {
	return p.log.With("promotion", r.ID, "policy", r.Policy, "target", r.Target().String(), "attempt", r.Attempt)
}

// write stores r (CAS on its revision) and updates r's revision.
func (p *Promoter) write(ctx context.Context, r *Record) error {
	r.UpdatedAt = p.now()
	nr, err := p.cfg.Ledger.Update(ctx, *r)
	if err != nil {
		if fencing.IsFenced(err) {
			p.halt(err)
		}
		return err
	}
	*r = nr
	p.publish(nr)
	return nil
}

// hook runs Hooks.AfterPhase.
func (p *Promoter) hook(ctx context.Context, r Record) error {
	if h := p.cfg.Hooks.AfterPhase; h != nil {
		if err := h(ctx, r); err != nil {
			return &crashError{err: err}
		}
	}
	return nil
}

// setPhase persists r in phase, logs it and runs the hook.
func (p *Promoter) setPhase(ctx context.Context, r *Record, phase Phase) error {
	r.Phase = phase
	if err := p.write(ctx, r); err != nil {
		return err
	}
	p.logger(*r).Info("promotion phase", "phase", string(phase), "txn", r.TxnID)
	if lp := p.liveOf(r.ID); lp != nil {
		lp.setPhase(phase)
	}
	return p.hook(ctx, *r)
}

// startRecord records the promotion of a plan item before anything touches
// the tier: a new record (attempt 1), or the next attempt of an identity
// whose last attempt was aborted or failed, whose interrupted-build count
// it keeps unless restart (a request made since).
func (p *Promoter) startRecord(ctx context.Context, ps *planState, it PlanItem, restart bool) (Record, error) {
	p.clearSkip(it.PromotionID)
	now := p.now()
	var existing *Record
	for _, r := range ps.records[it.Key.Partition] {
		if r.ID == it.PromotionID {
			existing = &r
			break
		}
	}
	var r Record
	if existing == nil {
		r = Record{
			ID: it.PromotionID, Policy: ps.plan.Policy, Catalog: ps.plan.Catalog, LakeTable: ps.plan.LakeTable,
			Partition: it.Key.Partition, LakePartitions: it.LakePartitions,
			SourceSnapshotID: it.SourceSnapshotID, ScanSnapshotID: ps.plan.LakeSnapshotID,
			Database: ps.plan.Database, Table: ps.plan.Table, Attempt: 1, Phase: PhasePlanned,
			Buckets: ps.plan.Buckets, CreatedAt: now, UpdatedAt: now,
		}
		r.CallerToken = CallerToken(r.ID, r.Attempt)
		var err error
		if r, err = p.cfg.Ledger.Create(ctx, r); err != nil {
			if fencing.IsFenced(err) {
				p.halt(err)
			}
			return Record{}, err
		}
		p.publish(r)
	} else {
		r = *existing
		r.Policy = ps.plan.Policy
		r.LakePartitions, r.ScanSnapshotID, r.Buckets = it.LakePartitions, ps.plan.LakeSnapshotID, ps.plan.Buckets
		if restart {
			r.InterruptedBuilds = 0
		}
		r.Attempt++
		resetAttempt(&r)
		if err := p.write(ctx, &r); err != nil {
			return Record{}, err
		}
	}
	p.logger(r).Info("promotion phase", "phase", string(PhasePlanned), "lake_snapshot", r.ScanSnapshotID)
	return r, p.hook(ctx, r)
}

// MaxInterruptedBuilds is how many builds of one promotion may begin and
// never end (Record.InterruptedBuilds: each promoter running one stopped
// mid-build without recording it) before the promotion is failed with
// ErrInterrupted instead of built again. A promotion whose every build
// brings its promoter down (arrow-go panics on some damaged Parquet files
// on goroutines where no recover reaches, or aborts the process on a
// huge allocation; a partition too large for the process's memory) would
// otherwise be resumed by every start and keep the promoter and each
// standby that takes over in a crash loop.
const MaxInterruptedBuilds = 3

// interruptedError is why a promotion with MaxInterruptedBuilds is not
// built again.
func interruptedError(r Record) error {
	return fmt.Errorf("%w: %d builds of it began and never ended: every promoter that ran one stopped mid-build "+
		"(a crash, e.g. on a damaged lake data file, or a kill, e.g. out of memory: see those promoters' logs); "+
		"not built again: request the partition to promote it again", ErrInterrupted, r.InterruptedBuilds)
}

// uncount takes back the count of a build that did not begin because the
// write recording it failed. A write that landed all the same (its answer
// lost) is found by reading the record again: its revision is adopted, so
// that the abort's write takes the count back in the ledger too.
func (p *Promoter) uncount(ctx context.Context, r *Record) {
	dctx, cancel := detached(ctx)
	defer cancel()
	cur, err := p.cfg.Ledger.Get(dctx, r.ID)
	if err == nil && cur.Attempt == r.Attempt && cur.TxnID == r.TxnID && cur.Phase == PhaseBuilding && cur.InterruptedBuilds == r.InterruptedBuilds {
		r.Revision = cur.Revision
	}
	r.InterruptedBuilds--
}

// resetAttempt clears what belongs to one attempt and names the new one.
func resetAttempt(r *Record) {
	r.Phase = PhasePlanned
	r.CallerToken = CallerToken(r.ID, r.Attempt)
	r.TxnID, r.Error, r.Retriable = "", "", false
	r.BegunAt, r.CommittedAt = nil, nil
	r.Rows, r.Bytes, r.Duplicates = 0, 0, 0
}

// nextAttempt starts attempt r.Attempt+1 of r's identity.
func (p *Promoter) nextAttempt(ctx context.Context, r Record) (Record, error) {
	r.Attempt++
	resetAttempt(&r)
	if err := p.write(ctx, &r); err != nil {
		return r, err
	}
	p.logger(r).Info("promotion phase", "phase", string(PhasePlanned))
	return r, p.hook(ctx, r)
}

// backoff returns the wait before retry n (1-based).
func (p *Promoter) backoff(n int) time.Duration {
	d := p.cfg.Retry.Initial
	for i := 1; i < n && d < p.cfg.Retry.Max; i++ {
		d *= 2
	}
	return min(d, p.cfg.Retry.Max)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// maxSpentTokens bounds the attempts drive skips because the tier
// remembers their tokens as aborted (see drive): more than the retries of
// many pruned records of one promotion.
const maxSpentTokens = 1000

// drive runs attempts of r until it is committed, fails terminally, runs
// out of retries, or must stop (shutdown, crash, fencing, pending commit).
// resumed says that r comes from the ledger, not from this process: a
// Begin with its token may have reached the tier unrecorded.
func (p *Promoter) drive(ctx context.Context, src *source, r Record, resumed bool) (Record, error) {
	retries, spent := 0, 0
	for {
		start := time.Now()
		var err error
		r, err = p.attempt(ctx, src, r, resumed)
		resumed = false
		policy := src.pol.Name()
		if err == nil {
			return r, nil // committed counted it
		}
		if halts(err) || errors.Is(err, errPending) || errors.Is(err, errAbortFailed) || ctx.Err() != nil {
			return r, err
		}
		if errors.Is(err, bulkload.ErrTokenAborted) && !errors.Is(err, bulkload.ErrTargetNotEmpty) && spent < maxSpentTokens {
			// The tier remembers this attempt's token as aborted: a Begin
			// of it that was never recorded, or an earlier record of this
			// promotion, pruned from the ledger while the tier still kept
			// its transactions (which reset the attempt count). Nothing
			// failed: the next attempt starts at once, not as a retry. (A
			// Begin that found data spent its token too, but a new one
			// would find the same data.)
			spent++
			p.logger(r).Info("caller token spent by an aborted transaction; next attempt", "token", r.CallerToken)
			if r, err = p.nextAttempt(ctx, r); err != nil {
				return r, err
			}
			continue
		}
		retriable := IsRetriable(err)
		if retriable && retries+1 < p.cfg.Retry.Attempts {
			retries++
			p.m.promotions.WithLabelValues(policy, outcomeRetried).Inc()
			wait := p.backoff(retries)
			p.logger(r).Warn("promotion attempt failed, retrying", "err", err, "retry_in", wait)
			if serr := sleep(ctx, wait); serr != nil {
				return r, err
			}
			if r, err = p.nextAttempt(ctx, r); err != nil {
				return r, err
			}
			continue
		}
		r.Phase, r.Error, r.Retriable = PhaseFailed, err.Error(), retriable
		dctx, cancel := detached(ctx)
		werr := p.write(dctx, &r)
		cancel()
		p.m.promotions.WithLabelValues(policy, outcomeFailed).Inc()
		p.m.seconds.WithLabelValues(policy, outcomeFailed).Observe(time.Since(start).Seconds())
		p.logger(r).Error("promotion failed", "err", err, "retriable", retriable)
		if werr != nil {
			return r, errors.Join(err, werr)
		}
		if herr := p.hook(ctx, r); herr != nil {
			return r, herr
		}
		return r, err
	}
}

// attempt runs one attempt of r: ensure the target, Begin (or resume) with
// r's token, build, Commit. Before the commit decision every failure aborts
// the transaction and records the attempt as aborted. A failure before
// Begin answered aborts the transaction r records, or the one r's token
// may have begun (resumed, or a Begin of unknown outcome): see
// abortUnrecorded.
func (p *Promoter) attempt(ctx context.Context, src *source, r Record, resumed bool) (Record, error) {
	if err := p.ensureTarget(ctx, src, r); err != nil {
		if resumed && r.TxnID == "" {
			return p.abortUnrecorded(ctx, r, err)
		}
		return p.abortAttempt(ctx, r, recordedTxn(r), err)
	}
	bc, err := p.begin(ctx, r)
	if errors.Is(err, bulkload.ErrInvalidState) && r.TxnID != "" {
		// The token's transaction is past BEGUN: a commit was decided.
		return p.awaitCommit(ctx, r, bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}, err)
	}
	if err != nil {
		if beginUnknown(err) {
			return p.abortUnrecorded(ctx, r, err)
		}
		return p.abortAttempt(ctx, r, recordedTxn(r), err)
	}
	h := bc.Handle()
	if r.Phase == PhasePlanned || r.TxnID != h.TxnID {
		now := p.now()
		r.TxnID, r.Buckets, r.BegunAt = h.TxnID, bc.Buckets(), &now
		if err := p.setPhase(ctx, &r, PhaseBegun); err != nil {
			return p.abortAttempt(ctx, r, &h, err)
		}
	}
	if r.InterruptedBuilds >= MaxInterruptedBuilds {
		return p.abortAttempt(ctx, r, &h, interruptedError(r))
	}
	// The build is counted in the ledger while it runs: a count left by
	// builds that never returned is what stops a crash loop.
	r.InterruptedBuilds++
	if r.Phase != PhaseBuilding {
		if err := p.setPhase(ctx, &r, PhaseBuilding); err != nil {
			p.uncount(ctx, &r)
			return p.abortAttempt(ctx, r, &h, err)
		}
	} else if err := p.write(ctx, &r); err != nil {
		p.uncount(ctx, &r)
		return p.abortAttempt(ctx, r, &h, err)
	}
	if hb := p.cfg.Hooks.BeforeBuild; hb != nil {
		if err := hb(ctx, r); err != nil {
			return r, &crashError{err: err}
		}
	}
	results, err := p.build(ctx, src, r, bc)
	r.InterruptedBuilds-- // it returned: the abort's or the next phase's write records that
	if err != nil {
		return p.abortBuilt(ctx, r, &h, err)
	}
	r.Rows, r.Bytes, r.Duplicates = 0, 0, 0
	for _, res := range results {
		r.Bytes += res.Bytes
		r.Duplicates += res.Duplicates
	}
	if lp := p.liveOf(r.ID); lp != nil {
		r.Rows = lp.rowsRead.Load()
	}
	if err := p.setPhase(ctx, &r, PhaseCommitting); err != nil {
		return p.abortBuilt(ctx, r, &h, err)
	}
	// The commit is not cancelled by shutdown (it is the decision); it has
	// its own budget.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CommitBudget+detachedTimeout)
	defer cancel()
	st, err := p.cfg.BulkLoad.Commit(cctx, bc, results, p.cfg.CommitBudget)
	if err == nil && st.State == bulkload.Committed {
		return p.committed(ctx, r)
	}
	if err == nil {
		err = fmt.Errorf("promoter: commit of %s returned %s", h.TxnID, st.State)
	}
	return p.awaitCommit(ctx, r, h, err)
}

// abortBuilt aborts the attempt of r, whose build returned (its count
// taken back in r), for cause. When the abort fails, the promotion is left
// building for Resume all the same, and written so, with the count taken
// back: this build was not interrupted. (A write of the next phase that
// landed although it answered an error keeps the ledger as it is: this
// write, at the older revision, is refused.)
func (p *Promoter) abortBuilt(ctx context.Context, r Record, h *bulkload.Handle, cause error) (Record, error) {
	ar, err := p.abortAttempt(ctx, r, h, cause)
	if errors.Is(err, errAbortFailed) {
		ar.Phase = PhaseBuilding
		dctx, cancel := detached(ctx)
		defer cancel()
		if werr := p.write(dctx, &ar); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return ar, err
}

// ensureTarget creates the tier table (createIfMissing) and partition, and
// checks an existing table's schema.
func (p *Promoter) ensureTarget(ctx context.Context, src *source, r Record) error {
	t := src.pol.Target()
	have, ok, err := p.cfg.Tier.TableSchema(ctx, r.Database, r.Table)
	if err != nil {
		return fmt.Errorf("promoter: target %s.%s: %w", r.Database, r.Table, err)
	}
	switch {
	case ok:
		if d := kv.SchemaDiff(have, src.schema); d != "" {
			return fmt.Errorf("%w: target %s.%s exists with another schema: %s", ErrSchema, r.Database, r.Table, d)
		}
	case !t.CreateIfMissing:
		return fmt.Errorf("%w: target table %s.%s does not exist and createIfMissing is false", ErrNotAllowed, r.Database, r.Table)
	default:
		if err := p.cfg.Tier.CreateTable(ctx, r.Database, r.Table, src.schema, t.ReplicationFactor); err != nil {
			return fmt.Errorf("promoter: create target %s.%s: %w", r.Database, r.Table, err)
		}
		p.logger(r).Info("target table created", "buckets", src.schema.Buckets)
	}
	if r.Partition != "" {
		if err := p.cfg.Tier.CreatePartition(ctx, r.Database, r.Table, r.Partition); err != nil {
			return fmt.Errorf("promoter: create target partition %s: %w", r.Target(), err)
		}
	}
	return nil
}

// begin calls Begin with r's token, repeating it while the tier answers
// that it may succeed later (a new table's replicas not ready yet).
func (p *Promoter) begin(ctx context.Context, r Record) (*bulkloadclient.BuildContext, error) {
	wait := 50 * time.Millisecond
	for tries := 1; ; tries++ {
		bc, err := p.cfg.BulkLoad.Begin(ctx, r.Target(), r.CallerToken, bulkloadclient.BeginOptions{BuildTimeout: p.cfg.BuildTimeout})
		if err == nil {
			return bc, nil
		}
		if errors.Is(err, bulkload.ErrTargetNotEmpty) {
			return nil, fmt.Errorf("%w: %s: %w", ErrTargetNotEmpty, r.Target(), err)
		}
		if !bulkloadclient.IsRetriable(err) || tries >= 40 {
			return nil, fmt.Errorf("promoter: begin %s: %w", r.Target(), err)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("promoter: begin %s: %w", r.Target(), err)
		}
		wait = min(2*wait, time.Second)
	}
}

// recordedTxn returns the handle of the transaction r records, nil when
// it records none.
func recordedTxn(r Record) *bulkload.Handle {
	if r.TxnID == "" {
		return nil
	}
	return &bulkload.Handle{Target: r.Target(), TxnID: r.TxnID}
}

// beginUnknown reports whether a failed Begin may have begun a transaction
// all the same: the call ended with its context, the tier was unavailable,
// or the error is not one of the tier's definite refusals.
func beginUnknown(err error) bool {
	for _, definite := range []error{
		bulkload.ErrTargetNotFound, bulkload.ErrTargetOccupied, bulkload.ErrTokenAborted,
		bulkload.ErrTargetNotEmpty, bulkload.ErrInvalidRequest, bulkload.ErrNotPrimaryKeyTable,
		bulkload.ErrPermissionDenied, bulkload.ErrTooManyTransactions, bulkload.ErrDeadlineExceeded,
	} {
		if errors.Is(err, definite) {
			return false
		}
	}
	return true
}

// abortUnrecorded ends a failed attempt whose token may have begun a
// transaction that r does not record (a Begin of unknown outcome, in this
// process or in an earlier one). It asks Begin again with r's token, with
// a short deadline that shutdown does not cancel: Begin resumes a token's
// transaction, so a transaction it returns is the one to abort; a definite
// refusal (the token's transaction aborted, the target occupied by another
// or not empty) means there is none. When even that Begin has an unknown
// outcome, the record keeps its phase and token (errAbortFailed): Resume
// begins with the same token again.
func (p *Promoter) abortUnrecorded(ctx context.Context, r Record, cause error) (Record, error) {
	if halts(cause) || p.deposed(ctx) {
		return r, cause
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rebeginTimeout)
	defer cancel()
	bc, err := p.cfg.BulkLoad.Begin(bctx, r.Target(), r.CallerToken, bulkloadclient.BeginOptions{BuildTimeout: p.cfg.BuildTimeout})
	switch {
	case err == nil:
		h := bc.Handle()
		r.TxnID = h.TxnID
		return p.abortAttempt(ctx, r, &h, cause)
	case beginUnknown(err):
		p.logger(r).Error("the transaction of the token is unknown; the promotion is left for resume", "err", err, "cause", cause)
		return r, errors.Join(cause, fmt.Errorf("%w: transaction of token %s: %w", errAbortFailed, r.CallerToken, err))
	}
	return p.abortAttempt(ctx, r, nil, cause)
}

// abortAttempt ends a failed attempt before the commit decision: it aborts
// the transaction (h, when known) with a context that shutdown does not
// cancel and records the attempt as aborted with the cause. A crash or
// fencing stops everything at once instead.
func (p *Promoter) abortAttempt(ctx context.Context, r Record, h *bulkload.Handle, cause error) (Record, error) {
	if halts(cause) || p.deposed(ctx) {
		return r, cause
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	if h != nil {
		st, err := p.cfg.BulkLoad.Abort(dctx, *h)
		if err != nil && !errors.Is(err, bulkload.ErrNotFound) {
			p.logger(r).Error("abort failed; the promotion is left for resume", "txn", h.TxnID, "err", err, "cause", cause)
			return r, errors.Join(cause, fmt.Errorf("%w: %s: %w", errAbortFailed, h.TxnID, err))
		}
		_ = st
	}
	r.Phase, r.Error, r.Retriable = PhaseAborted, cause.Error(), IsRetriable(cause)
	if ctx.Err() != nil {
		r.Error, r.Retriable = shutdownPrefix+cause.Error(), true
	}
	if err := p.write(dctx, &r); err != nil {
		return r, errors.Join(cause, err)
	}
	p.m.promotions.WithLabelValues(r.Policy, outcomeAborted).Inc()
	p.logger(r).Warn("promotion aborted", "txn", r.TxnID, "err", cause)
	if err := p.hook(ctx, r); err != nil {
		return r, err
	}
	return r, cause
}

// committed records the commit (the tier reported COMMITTED). The write is
// not cancelled by shutdown; it is tried committedWrites times, re-reading
// the record between tries (a write that timed out may have landed). When
// it cannot be recorded the record stays committing and the error wraps
// errPending: the attempt did not fail, and no new attempt may start (the
// target holds its data); Resume or the next reconcile settles it through
// Status.
func (p *Promoter) committed(ctx context.Context, r Record) (Record, error) {
	now := p.now()
	c := r
	c.Phase, c.CommittedAt, c.Error, c.Retriable = PhaseCommitted, &now, "", false
	c.InterruptedBuilds = 0 // done with; and a version 1 record again (see LedgerRecordVersion)
	dctx, cancel := detached(ctx)
	defer cancel()
	if err := p.writeCommitted(dctx, &c); err != nil {
		if halts(err) {
			return r, err
		}
		p.logger(r).Error("the commit could not be recorded; the promotion is left committing for resume", "txn", r.TxnID, "err", err)
		return r, fmt.Errorf("%w: record the commit of %s: %w", errPending, r.TxnID, err)
	}
	// Counted here, where every path that records a commit passes (a
	// resume, an expired outcome, a released policy's record too), once.
	p.m.promotions.WithLabelValues(c.Policy, outcomeCommitted).Inc()
	if c.BegunAt != nil {
		p.m.seconds.WithLabelValues(c.Policy, outcomeCommitted).Observe(now.Sub(*c.BegunAt).Seconds())
	}
	p.m.rows.WithLabelValues(c.Policy).Add(float64(c.Rows))
	p.logger(c).Info("promotion phase", "phase", string(PhaseCommitted), "txn", c.TxnID, "rows", c.Rows, "bytes", c.Bytes)
	return c, p.hook(ctx, c)
}

// writeCommitted writes c, the committed record of an attempt, retrying a
// failed write after re-reading the record: still that attempt committing,
// the write is tried again at the new revision; already committed, an
// earlier try landed. Anything else (fenced, another writer) ends it.
func (p *Promoter) writeCommitted(ctx context.Context, c *Record) error {
	var err error
	for try := 1; ; try++ {
		if err = p.write(ctx, c); err == nil || fencing.IsFenced(err) || try >= committedWrites {
			return err
		}
		if serr := sleep(ctx, time.Duration(try)*200*time.Millisecond); serr != nil {
			return err
		}
		cur, gerr := p.cfg.Ledger.Get(ctx, c.ID)
		switch {
		case gerr != nil:
			if fencing.IsFenced(gerr) {
				return gerr
			}
		case cur.Attempt != c.Attempt || cur.TxnID != c.TxnID:
			return fmt.Errorf("%w: %s is at attempt %d (%s) now: %w", ErrConflict, c.ID, cur.Attempt, cur.Phase, err)
		case cur.Phase == PhaseCommitted:
			*c = cur
			p.publish(cur)
			return nil
		case cur.Phase == PhaseCommitting:
			c.Revision = cur.Revision
		default:
			return fmt.Errorf("%w: %s is %s now: %w", ErrConflict, c.ID, cur.Phase, err)
		}
	}
}

// awaitCommit settles a promotion whose Commit failed or whose outcome is
// unknown, through Status: COMMITTED → committed; COMMITTING → wait for it
// (errPending when the budget runs out: Resume settles it later); ABORTED →
// the attempt is aborted (retriable); BEGUN → the commit was rejected: abort.
func (p *Promoter) awaitCommit(ctx context.Context, r Record, h bulkload.Handle, cause error) (Record, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CommitBudget)
	defer cancel()
	for {
		st, err := p.cfg.BulkLoad.Status(wctx, h)
		if err != nil {
			if wctx.Err() != nil || !bulkloadclient.IsRetriable(err) {
				return r, errors.Join(cause, fmt.Errorf("%w: status of %s: %w", errPending, h.TxnID, err))
			}
		} else {
			switch st.State {
			case bulkload.Committed:
				return p.committed(ctx, r)
			case bulkload.Aborted:
				reason := "aborted by the tier"
				if st.AbortReason != nil {
					reason = fmt.Sprintf("aborted by the tier: %s %s", st.AbortReason, st.AbortMessage)
				}
				return p.abortAttempt(ctx, r, nil, fmt.Errorf("promoter: %s: %s: %w", h.TxnID, reason, cause))
			case bulkload.Begun:
				if !st.ManifestFrozen || !(bulkloadclient.IsRetriable(cause) || errors.Is(cause, errDecisionPending)) {
					return p.abortAttempt(ctx, r, &h, cause)
				}
				// The Commit's budget ran out while the coordinator still
				// decides it (validating), or Resume found it deciding:
				// wait, do not abort it.
			}
		}
		if serr := sleep(wctx, bulkloadclient.CommitRetryInterval); serr != nil {
			return r, errors.Join(cause, fmt.Errorf("%w: %s still committing", errPending, h.TxnID))
		}
	}
}

// build scans the record's lake partitions at its scan snapshot and builds
// every bucket of the transaction in one build session of the SDK (the
// promoter reaches the tier only through bulkloadclient).
func (p *Promoter) build(ctx context.Context, src *source, r Record, bc *bulkloadclient.BuildContext) (_ []snapshotbuild.BucketResult, err error) {
	lim := src.pol.Limits()
	// store stays nil (the session opens the context's remote data dir)
	// unless the configuration gives one or uploads are rate-limited.
	var store snapshotbuild.Store
	switch {
	case p.cfg.Stores != nil:
		store = p.cfg.Stores(bc)
	case p.cfg.Store != nil:
		store = p.cfg.Store
	}
	if lim.UploadBytesPerSecond > 0 {
		if store == nil {
			st, err := objstore.Open(ctx, bc.RemoteDataDir())
			if err != nil {
				return nil, fmt.Errorf("promoter: open remote data dir: %w", err)
			}
			defer func() { err = errors.Join(err, st.Close()) }()
			store = st
		}
		store = limitedStore{Store: store, lim: newLimiter(lim.UploadBytesPerSecond)}
	}
	lp := p.liveOf(r.ID)
	lp.reset(bc.Buckets())
	dups := snapshotbuild.DuplicatesLastWins
	if src.pol.DuplicateKeys() == policies.DuplicateKeysError {
		dups = snapshotbuild.DuplicatesError
	}
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		Workers: lim.BuildWorkers, MemoryBudget: lim.MemoryBytes, TempDir: p.cfg.TempDir,
		Duplicates: dups, Progress: lp.onBucket, Store: store, Logger: p.logger(r),
	})
	if err != nil {
		return nil, fmt.Errorf("promoter: build %s: %w", r.Target(), err)
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	refs, err := parsePartitionRefs(r.LakePartitions)
	if err != nil {
		return nil, err
	}
	scan := r.ScanSnapshotID
	_, seq, err := src.lk.Scan(ctx, r.LakeTable, lake.ScanOptions{SnapshotID: &scan, Partitions: refs, RequirePartitions: true, Mapping: &src.mapping})
	if err != nil {
		return nil, fmt.Errorf("promoter: scan %s at %d: %w", r.LakeTable, scan, err)
	}
	// Decoding the lake's Parquet overlaps with encoding and sorting.
	for rec, err := range bulkloadclient.ReadAhead(ctx, scanReadAhead, seq) {
		if err != nil {
			return nil, fmt.Errorf("promoter: scan %s at %d: %w", r.LakeTable, scan, err)
		}
		n, size := rec.NumRows(), recordBytes(rec)
		err = s.Add(ctx, rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("promoter: build %s: %w", r.Target(), err)
		}
		lp.rowsRead.Add(n)
		lp.bytesRead.Add(size)
	}
	results, err := s.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("promoter: build %s: %w", r.Target(), err)
	}
	if err := p.checkDuplicateOrder(ctx, src, r, refs, results); err != nil {
		return nil, err
	}
	return results, nil
}

// checkDuplicateOrder fails a build that kept the last row of duplicate
// keys when the scan read data files a rewrite added: Iceberg gives the
// rows a copy-on-write delete, update or merge (or a compaction) carries
// over the rewrite's sequence number, so an older version of a key may
// come after a newer one appended before the rewrite, and would win. The
// lake is asked only when there were duplicates.
func (p *Promoter) checkDuplicateOrder(ctx context.Context, src *source, r Record, refs []lake.PartitionRef, results []snapshotbuild.BucketResult) error {
	var dups int64
	for _, res := range results {
		dups += res.Duplicates
	}
	if dups == 0 || src.pol.DuplicateKeys() == policies.DuplicateKeysError {
		return nil
	}
	scan := r.ScanSnapshotID
	n, err := src.lk.RewrittenFiles(ctx, r.LakeTable, lake.ScanOptions{SnapshotID: &scan, Partitions: refs, RequirePartitions: true})
	if err != nil {
		return fmt.Errorf("promoter: order of duplicate keys in %s at %d: %w", r.LakeTable, scan, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %d rows of %s shared a key with a later row, and %d of the data files read were rewritten "+
			"(copy-on-write delete, update or merge, or compaction), which gives the rows they carry over the rewrite's "+
			"sequence number: which row of a key is newest cannot be told. Remove the duplicates in the lake, write with "+
			"merge-on-read (write.delete.mode, write.update.mode, write.merge.mode), or set duplicateKeys: error",
			ErrUnorderedDuplicates, dups, r.LakeTable, n)
	}
	return nil
}

// scanReadAhead is how many scanned batches may wait for the build.
const scanReadAhead = 2

// recordBytes is the size of a batch's buffers.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		for _, buf := range col.Data().Buffers() {
			if buf != nil {
				n += int64(buf.Len())
			}
		}
	}
	return n
}

// liveProgress is the in-memory progress of a running promotion.
type liveProgress struct {
	id                  string
	started             time.Time
	rowsRead, bytesRead atomic.Int64

	mu struct {
		sync.Mutex
		phase   Phase
		buckets []BucketProgress
	}
}

func (lp *liveProgress) setPhase(ph Phase) {
	lp.mu.Lock()
	lp.mu.phase = ph
	lp.mu.Unlock()
}

func (lp *liveProgress) reset(buckets int) {
	lp.rowsRead.Store(0)
	lp.bytesRead.Store(0)
	lp.mu.Lock()
	lp.mu.buckets = make([]BucketProgress, buckets)
	for i := range lp.mu.buckets {
		lp.mu.buckets[i].Bucket = i
	}
	lp.mu.Unlock()
}

func (lp *liveProgress) onBucket(bp snapshotbuild.BucketProgress) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if bp.Bucket < 0 || bp.Bucket >= len(lp.mu.buckets) {
		return
	}
	b := &lp.mu.buckets[bp.Bucket]
	b.Rows, b.Bytes, b.Done = bp.Rows, bp.Bytes, bp.Phase == snapshotbuild.PhaseDone
}

func (lp *liveProgress) snapshot() Progress {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return Progress{
		ID: lp.id, Phase: lp.mu.phase, RowsRead: lp.rowsRead.Load(), BytesRead: lp.bytesRead.Load(),
		Buckets: append([]BucketProgress(nil), lp.mu.buckets...), Started: lp.started,
	}
}
