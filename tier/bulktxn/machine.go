package bulktxn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
)

// Begin is the first Begin of a transaction, after Admit accepted it.
type Begin struct {
	Req             RequestID
	TxnID           string // a new bulkload.NewTxnID
	CallerToken     string
	Principal       bulkload.Principal
	Now             time.Time
	Target          bulkload.Target
	TableID         int64
	PartitionID     int64 // 0 for a non-partitioned table
	RemoteDataDir   string
	Schema          json.RawMessage // the table's kv.TableSchema JSON
	BuildTimeout    time.Duration   // requested; 0 = Config.DefaultBuildTimeout
	RegistrationRev int64           // mod revision of the registration Admit read
	Holders         Holders
}

// Observed is what a coordinator read from etcd to Recover a transaction:
// the record's mod revision, the registration (see Registration) and its
// mod revision, and the current holders.
type Observed struct {
	RecordRev       int64
	Registration    Registration
	RegistrationRev int64
	Holders         Holders
	Now             time.Time
}

// Machine is one bulk-load transaction's pure state machine; see the
// package documentation. It is not safe for concurrent use.
type Machine struct {
	cfg     Config
	rec     bulkload.Record // as persisted; before OpBegin lands, as it will be created
	recRev  int64           // 0 until OpBegin lands
	reg     Registration
	regRev  int64
	holders Holders
	now     int64 // Unix ms, the latest time an input carried

	op      Op     // the outstanding operation, OpNone if none
	opEff   Effect // its effect, issued again on retry
	retryAt int64  // > 0: op failed and is issued again at this time

	round     *round
	lastRound uint64

	// Progress that is not persisted: a successor redoes it.
	fenced     bool                  // every holder confirmed the fence
	proven     bool                  // the registry holds no snapshot of the target
	proofVoid  bool                  // the outstanding proof began before a holder change
	restored   bool                  // every holder restored the adopted snapshots
	published  bool                  // every holder serves ACTIVE after the commit
	unfenced   bool                  // every holder is ACTIVE again after the abort
	ids        []int64               // allocated snapshot ids, until persisted
	logOffsets []int64               // per bucket, from the last successful validation
	invalid    error                 // the frozen manifest's violations
	freeze     *bulkload.ManifestRef // manifest a Commit asked to freeze
	abort      *abortIntent          // abort decided, not yet persisted

	pending   []pendingReq
	scheduled int64
	halted    error
	gone      bool
	out       []Effect
}

type reqKind uint8

const (
	reqBegin reqKind = iota
	reqCommit
	reqAbort
)

type pendingReq struct {
	id   RequestID
	kind reqKind
}

type abortIntent struct {
	reason bulkload.AbortReason
	msg    string
}

func msOf(t time.Time) int64    { return t.UnixMilli() }
func timeOf(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func snapTarget(r *bulkload.Record) snapshot.Target {
	return snapshot.Target{
		RemoteDir: r.RemoteDataDir, Database: r.Target.Database, Table: r.Target.Table,
		TableID: r.TableID, Partition: r.Target.Partition, PartitionID: r.PartitionID,
	}
}

// New starts a transaction for its first Begin. The first effect creates
// the record and sets the registration LOADING in one etcd transaction;
// Begin is answered once the fence is ready (or the transaction aborted).
// Invalid facts are an error wrapping bulkload.ErrInvalidRequest.
func New(cfg Config, b Begin) (*Machine, []Effect, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	rec, err := b.record(cfg)
	if err != nil {
		return nil, nil, err
	}
	if len(b.Holders.Replicas) != rec.Buckets {
		return nil, nil, fmt.Errorf("%w: holders of %d buckets for %d", ErrUnexpected, len(b.Holders.Replicas), rec.Buckets)
	}
	m := &Machine{cfg: cfg, rec: rec, regRev: b.RegistrationRev, holders: b.Holders.Clone(), now: rec.CreatedMs}
	m.pending = []pendingReq{{b.Req, reqBegin}}
	m.issue(OpBegin, PersistRecord{
		Op: OpBegin, Record: rec.Clone(),
		Registration: &RegistrationWrite{To: RegLoading, ExpectRev: b.RegistrationRev},
	})
	return m, m.finish(), nil
}

func (b *Begin) record(cfg Config) (bulkload.Record, error) {
	invalid := func(err error) (bulkload.Record, error) {
		return bulkload.Record{}, fmt.Errorf("%w: begin: %w", bulkload.ErrInvalidRequest, err)
	}
	if err := bulkload.ValidateTxnID(b.TxnID); err != nil {
		return bulkload.Record{}, err
	}
	if err := bulkload.ValidateCallerToken(b.CallerToken); err != nil {
		return bulkload.Record{}, err
	}
	timeout, err := cfg.BuildTimeout(b.BuildTimeout)
	if err != nil {
		return bulkload.Record{}, err
	}
	schema, err := decodeSchema(b.Schema)
	if err != nil {
		return invalid(err)
	}
	if (len(schema.PartitionKeys) > 0) != (b.Target.Partition != "") {
		return invalid(errors.New("a partitioned table's targets are its partitions, and only they"))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b.Schema); err != nil {
		return invalid(err)
	}
	now := msOf(b.Now)
	rec := bulkload.Record{
		TxnID: b.TxnID, State: bulkload.Begun, CallerToken: b.CallerToken,
		Target: b.Target, TableID: b.TableID, PartitionID: b.PartitionID, Creator: b.Principal,
		RemoteDataDir: b.RemoteDataDir, SchemaID: schema.SchemaID, Schema: compact.Bytes(),
		Buckets: schema.Buckets, Bucketing: schema.Bucketing.String(),
		CreatedMs: now, UpdatedMs: now, BuildDeadlineMs: now + timeout.Milliseconds(),
	}
	if err := snapTarget(&rec).Validate(); err != nil {
		return invalid(err)
	}
	if err := rec.Validate(); err != nil {
		return invalid(err)
	}
	return rec, nil
}

// Recover resumes a transaction from its persisted record and what etcd
// shows of its registration, after a coordinator failover or a halt. The
// machine continues from the persisted point: BEGUN re-runs the fence
// round (or aborts past a deadline, or validates and decides a frozen
// manifest), an abort in progress is finished, COMMITTING continues
// adopting, restoring or publishing, a terminal transaction waits for its
// result expiry. A record and registration no sequence of writes produces
// is ErrInconsistent; a record that is not valid, or whose table schema is
// not the canonical JSON of a valid schema that agrees with the record's
// schema id, bucket count, bucketing and target, is
// bulkload.ErrInvalidRecord.
func Recover(cfg Config, rec bulkload.Record, obs Observed) (*Machine, []Effect, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if err := rec.Validate(); err != nil {
		return nil, nil, err
	}
	if err := snapTarget(&rec).Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", bulkload.ErrInvalidRecord, err)
	}
	if err := checkRecordSchema(&rec); err != nil {
		return nil, nil, fmt.Errorf("%w: transaction %s: %w", bulkload.ErrInvalidRecord, rec.TxnID, err)
	}
	if obs.RecordRev <= 0 {
		return nil, nil, fmt.Errorf("%w: record revision %d", ErrUnexpected, obs.RecordRev)
	}
	if !rec.State.Terminal() && len(obs.Holders.Replicas) != rec.Buckets {
		return nil, nil, fmt.Errorf("%w: holders of %d buckets for %d", ErrUnexpected, len(obs.Holders.Replicas), rec.Buckets)
	}
	want := RegLoading
	switch {
	case rec.Aborting():
		want = RegActiveWithID
	case rec.State == bulkload.Committing && obs.Registration == RegActiveWithID && rec.AdoptedBuckets == rec.Buckets:
		want = RegActiveWithID // activated, publishing
	case rec.State.Terminal():
		want = RegActive
	}
	if obs.Registration != want {
		return nil, nil, fmt.Errorf("%w: transaction %s is %s (aborting %t, %d of %d buckets adopted) but its registration is %s",
			ErrInconsistent, rec.TxnID, rec.State, rec.Aborting(), rec.AdoptedBuckets, rec.Buckets, obs.Registration)
	}
	m := &Machine{
		cfg: cfg, rec: rec.Clone(), recRev: obs.RecordRev,
		reg: obs.Registration, regRev: obs.RegistrationRev, holders: obs.Holders.Clone(),
		// This coordinator's clock, even if behind the record's (written
		// by another coordinator's): resends and retries are timed by it
		// (from the record's time they came late by the skew); records
		// stay stamped monotonically (persist).
		now: msOf(obs.Now),
	}
	m.advance()
	return m, m.finish(), nil
}

// decodeSchema decodes a table schema strictly: it must be the JSON that
// json.Marshal writes of a valid kv.TableSchema (which is what a record
// holds: Begin stores the compacted schema the coordinator encoded), so
// an unknown, repeated or misspelt member, trailing data and any other
// spelling are errors.
func decodeSchema(raw json.RawMessage) (kv.TableSchema, error) {
	var s kv.TableSchema
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return kv.TableSchema{}, fmt.Errorf("table schema: %w", err)
	}
	if err := s.Validate(); err != nil {
		return kv.TableSchema{}, err
	}
	canonical, err := json.Marshal(s)
	if err != nil {
		return kv.TableSchema{}, fmt.Errorf("table schema: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return kv.TableSchema{}, fmt.Errorf("table schema: %w", err)
	}
	if !bytes.Equal(compact.Bytes(), canonical) {
		return kv.TableSchema{}, fmt.Errorf("table schema %s is not in its canonical form %s", compact.Bytes(), canonical)
	}
	return s, nil
}

// checkRecordSchema checks that a persisted record's table schema is a
// valid schema (decodeSchema) that agrees with the record's schema id,
// bucket count, bucketing and target.
func checkRecordSchema(r *bulkload.Record) error {
	s, err := decodeSchema(r.Schema)
	if err != nil {
		return err
	}
	switch {
	case s.SchemaID != r.SchemaID:
		return fmt.Errorf("table_schema has schema id %d, the record %d", s.SchemaID, r.SchemaID)
	case s.Buckets != r.Buckets:
		return fmt.Errorf("table_schema has %d buckets, the record %d", s.Buckets, r.Buckets)
	case s.Bucketing.String() != r.Bucketing:
		return fmt.Errorf("table_schema has %s bucketing, the record %s", s.Bucketing, r.Bucketing)
	case (len(s.PartitionKeys) > 0) != (r.Target.Partition != ""):
		return fmt.Errorf("table_schema partitioned %t, but the target is %s", len(s.PartitionKeys) > 0, r.Target)
	}
	return nil
}

// Record returns a copy of the record as last persisted (before the first
// write lands: as it will be created).
func (m *Machine) Record() bulkload.Record { return m.rec.Clone() }

// Status returns the transaction's status.
func (m *Machine) Status() bulkload.Status { return m.rec.Status() }

// Registration returns the registration as last persisted.
func (m *Machine) Registration() Registration { return m.reg }

// Halted returns why the machine halted, or nil.
func (m *Machine) Halted() error { return m.halted }

// TargetInfo returns the frozen target facts once the fence is ready.
func (m *Machine) TargetInfo() (bulkload.TargetInfo, bool) {
	if !m.rec.FenceReady() {
		return bulkload.TargetInfo{}, false
	}
	return *m.targetInfo(), true
}

func (m *Machine) targetInfo() *bulkload.TargetInfo {
	r := &m.rec
	t := snapTarget(r)
	dirs := make([]string, r.Buckets)
	for b, id := range r.SnapshotIDs {
		dirs[b] = t.SnapshotDir(b, id)
	}
	return &bulkload.TargetInfo{
		Handle: r.Handle(), SchemaID: r.SchemaID, Schema: slices.Clone(r.Schema),
		Buckets: r.Buckets, Bucketing: r.Bucketing, RemoteDataDir: r.RemoteDataDir,
		SnapshotIDs: slices.Clone(r.SnapshotIDs), SnapshotDirs: dirs,
		ManifestPath: t.ManifestPath(r.TxnID), BuildDeadline: timeOf(r.BuildDeadlineMs),
	}
}

// Step applies one input and returns the effects to perform, in order. An
// input that is invalid in the current state returns an error (wrapping
// ErrUnexpected, ErrStaleReport or ErrHalted) and changes nothing.
// Requests are never refused this way: each gets a Reply, at once or
// later.
func (m *Machine) Step(in Input) ([]Effect, error) {
	if m.halted != nil || m.gone {
		return m.refuse(in)
	}
	var err error
	switch in := in.(type) {
	case BeginRequested:
		err = m.onBegin(in)
	case CommitRequested:
		err = m.onCommit(in)
	case AbortRequested:
		err = m.onAbort(in)
	case Tick:
		m.observe(in.Now)
		// The timer that sent it has fired: none is armed until the next
		// ScheduleTick. (Its time is the wall clock's; stepped back, the
		// tick may come before the wake-up asked for, which then must be
		// asked for again.)
		m.scheduled = 0
		m.onTick()
	case HoldersChanged:
		err = m.onHolders(in.Holders)
	case FenceReport:
		err = m.onFenceReport(in)
	case RestoreReport:
		err = m.onRestoreReport(in)
	case ActiveReport:
		err = m.onActiveReport(in)
	case EmptinessChecked:
		err = m.onEmptiness(in)
	case SnapshotIDsAllocated:
		err = m.onAllocated(in)
	case ValidationFinished:
		err = m.onValidation(in)
	case Persisted:
		err = m.onPersisted(in)
	case Failed:
		err = m.onFailed(in)
	default:
		err = fmt.Errorf("%w: input %T", ErrUnexpected, in)
	}
	if err != nil {
		m.out = nil
		return nil, err
	}
	m.advance()
	m.resend()
	return m.finish(), nil
}

// refuse answers inputs to a halted or forgotten machine.
func (m *Machine) refuse(in Input) ([]Effect, error) {
	sentinel, err := bulkload.ErrUnavailable, ErrHalted
	if m.gone {
		sentinel, err = bulkload.ErrNotFound, fmt.Errorf("%w: transaction %s is gone", ErrUnexpected, m.rec.TxnID)
	}
	var req RequestID
	switch in := in.(type) {
	case BeginRequested:
		req = in.Req
	case CommitRequested:
		req = in.Req
	case AbortRequested:
		req = in.Req
	default:
		return nil, err
	}
	m.reply(req, nil, fmt.Errorf("%w: transaction %s", sentinel, m.rec.TxnID))
	out := m.out
	m.out = nil
	return out, nil
}

func (m *Machine) observe(now time.Time) { m.now = max(m.now, msOf(now)) }

func (m *Machine) emit(e Effect) { m.out = append(m.out, e) }

func (m *Machine) finish() []Effect {
	m.schedule()
	out := m.out
	m.out = nil
	return out
}

func (m *Machine) isPending(id RequestID) bool {
	return slices.ContainsFunc(m.pending, func(p pendingReq) bool { return p.id == id })
}

func (m *Machine) reply(id RequestID, info *bulkload.TargetInfo, err error) {
	m.emit(Reply{Req: id, Status: m.rec.Status(), Info: info, Err: err})
}

// answer replies to every pending request of kind.
func (m *Machine) answer(kind reqKind, info *bulkload.TargetInfo, err error) {
	m.pending = slices.DeleteFunc(m.pending, func(p pendingReq) bool {
		if p.kind == kind {
			m.reply(p.id, info, err)
		}
		return p.kind == kind
	})
}

func (m *Machine) pend(id RequestID, kind reqKind) {
	m.pending = append(m.pending, pendingReq{id, kind})
}

func (m *Machine) issue(op Op, e Effect) {
	m.op, m.opEff, m.retryAt = op, e, 0
	m.emit(e)
}

// persist issues a write of the record changed by mutate, and of the
// registration if it must become to.
func (m *Machine) persist(op Op, to Registration, adopt []Adoption, mutate func(r *bulkload.Record)) {
	rec := m.rec.Clone()
	mutate(&rec)
	rec.UpdatedMs = max(rec.UpdatedMs, m.now)
	w := PersistRecord{Op: op, Record: rec, ExpectRecordRev: m.recRev, Adopt: adopt}
	if to != m.reg {
		w.Registration = &RegistrationWrite{To: to, ExpectRev: m.regRev}
	}
	m.issue(op, w)
}

func (m *Machine) halt(err error) {
	m.halted = err
	m.op, m.opEff, m.round = OpNone, nil, nil
	for _, p := range m.pending {
		m.reply(p.id, nil, fmt.Errorf("%w: %w", bulkload.ErrUnavailable, err))
	}
	m.pending = nil
	m.emit(Halt{Err: err})
}

// abortedErr is the error for a request that an abort of the transaction
// defeats: base, plus the sentinel of the abort reason, if any.
func (m *Machine) abortedErr(base error) error {
	r := *m.rec.AbortReason
	msg := fmt.Sprintf("transaction %s aborted: %s", m.rec.TxnID, r)
	if m.rec.AbortMessage != "" {
		msg += ": " + m.rec.AbortMessage
	}
	switch r {
	case bulkload.TargetNotEmpty:
		return fmt.Errorf("%w: %w: %s", base, bulkload.ErrTargetNotEmpty, msg)
	case bulkload.BuildDeadlineExceeded, bulkload.CommitDecisionDeadlineExceeded:
		return fmt.Errorf("%w: %w: %s", base, bulkload.ErrDeadlineExceeded, msg)
	}
	return fmt.Errorf("%w: %s", base, msg)
}

func (m *Machine) invalidState(format string, args ...any) error {
	return fmt.Errorf("%w: transaction %s is %s: %s", bulkload.ErrInvalidState, m.rec.TxnID, m.rec.State, fmt.Sprintf(format, args...))
}

func (m *Machine) onBegin(in BeginRequested) error {
	if m.isPending(in.Req) {
		return fmt.Errorf("%w: request %d already pending", ErrUnexpected, in.Req)
	}
	m.observe(in.Now)
	r := &m.rec
	switch {
	case in.CallerToken != r.CallerToken || in.Principal != r.Creator:
		if r.State.Terminal() {
			m.reply(in.Req, nil, fmt.Errorf("%w: no transaction of this caller token and principal", bulkload.ErrNotFound))
		} else {
			m.reply(in.Req, nil, fmt.Errorf("%w: transaction %s of another caller token or principal holds the target", bulkload.ErrTargetOccupied, r.TxnID))
		}
	case r.State == bulkload.Aborted:
		m.reply(in.Req, nil, m.abortedErr(bulkload.ErrTokenAborted))
	case r.State == bulkload.Committing || r.State == bulkload.Committed:
		m.reply(in.Req, nil, nil)
	case r.FenceReady() && !r.Aborting():
		m.reply(in.Req, m.targetInfo(), nil)
	default: // fencing, or aborting: answered when the fence is ready or the abort ends
		m.pend(in.Req, reqBegin)
	}
	return nil
}

func (m *Machine) onCommit(in CommitRequested) error {
	if m.isPending(in.Req) {
		return fmt.Errorf("%w: request %d already pending", ErrUnexpected, in.Req)
	}
	m.observe(in.Now)
	r := &m.rec
	if err := in.Manifest.Validate(); err != nil {
		m.reply(in.Req, nil, err)
		return nil
	}
	frozen := r.Manifest
	if frozen == nil {
		frozen = m.freeze
	}
	conflict := frozen != nil && *frozen != in.Manifest
	switch {
	case r.State == bulkload.Aborted:
		m.reply(in.Req, nil, m.abortedErr(bulkload.ErrInvalidState))
	case r.Aborting():
		m.reply(in.Req, nil, m.invalidState("an abort is in progress"))
	case conflict:
		m.reply(in.Req, nil, fmt.Errorf("%w: transaction %s froze %s (length %d, sha256 %s)",
			bulkload.ErrManifestConflict, r.TxnID, frozen.Path, frozen.Length, frozen.SHA256))
	case r.State == bulkload.Committed:
		m.reply(in.Req, nil, nil)
	case r.State == bulkload.Committing:
		m.pend(in.Req, reqCommit)
	case !r.FenceReady():
		m.reply(in.Req, nil, m.invalidState("begin has not completed"))
	case m.invalid != nil:
		m.reply(in.Req, nil, m.invalid)
	case frozen != nil:
		m.pend(in.Req, reqCommit) // joins the commit of the frozen manifest
	case m.now >= r.BuildDeadlineMs:
		m.reply(in.Req, nil, fmt.Errorf("%w: transaction %s: build deadline %s passed",
			bulkload.ErrDeadlineExceeded, r.TxnID, timeOf(r.BuildDeadlineMs).Format(time.RFC3339Nano)))
	default: // an abort decided meanwhile wins in advance; the commit is then answered by it
		manifest := in.Manifest
		m.freeze = &manifest
		m.pend(in.Req, reqCommit)
	}
	return nil
}

func (m *Machine) onAbort(in AbortRequested) error {
	if m.isPending(in.Req) {
		return fmt.Errorf("%w: request %d already pending", ErrUnexpected, in.Req)
	}
	m.observe(in.Now)
	switch m.rec.State {
	case bulkload.Aborted:
		m.reply(in.Req, nil, nil)
	case bulkload.Committing, bulkload.Committed:
		m.reply(in.Req, nil, m.invalidState("abort requires BEGUN"))
	default:
		if !m.rec.Aborting() && m.abort == nil {
			m.abort = &abortIntent{bulkload.AbortedByCaller, "aborted by the caller"}
		}
		m.pend(in.Req, reqAbort)
	}
	return nil
}

func (m *Machine) onTick() {
	if m.op != OpNone && m.retryAt > 0 && m.now >= m.retryAt {
		if m.dropFailedRead() {
			return // advance begins the abort
		}
		m.retryAt = 0
		m.emit(m.opEff)
	}
}

// resend sends the running round's command again to the members that
// have not confirmed it within the resend interval.
func (m *Machine) resend() {
	if r := m.round; r != nil && r.left > 0 && m.now >= r.sentAt+m.cfg.ResendInterval.Milliseconds() {
		m.send(r)
	}
}

func (m *Machine) onHolders(h Holders) error {
	if !m.rec.State.Terminal() && len(h.Replicas) != m.rec.Buckets {
		return fmt.Errorf("%w: holders of %d buckets for %d", ErrUnexpected, len(h.Replicas), m.rec.Buckets)
	}
	if h.Equal(m.holders) {
		return nil
	}
	m.holders = h.Clone()
	// A completed fence round counts only for the holders it covered: a
	// new holder confirms the fence before the emptiness proof (again).
	// A new holder after the restore round is covered by the publish
	// round, whose confirmation implies serving the adopted snapshot.
	if r := &m.rec; r.State == bulkload.Begun && !r.FenceReady() {
		m.fenced, m.proven = false, false
		// A proof read before the new holder confirmed the fence does not
		// count (a snapshot it registered meanwhile would be missed).
		m.proofVoid = m.op == OpProveEmpty
	}
	if r := m.round; r != nil {
		m.startRound(r.kind) // the holders the round waits for changed
	}
	return nil
}

// outstanding checks that a result answers the outstanding operation.
func (m *Machine) outstanding(op Op) error {
	if m.op != op || m.retryAt != 0 {
		return fmt.Errorf("%w: result of %s, but %s is outstanding", ErrUnexpected, op, m.outstandingName())
	}
	return nil
}

func (m *Machine) outstandingName() string {
	if m.op != OpNone && m.retryAt != 0 {
		return m.op.String() + " (awaiting retry)"
	}
	return m.op.String()
}

func (m *Machine) onEmptiness(in EmptinessChecked) error {
	if err := m.outstanding(OpProveEmpty); err != nil {
		return err
	}
	m.op, m.opEff = OpNone, nil
	void := m.proofVoid
	m.proofVoid = false
	switch {
	case in.Empty && void:
		// Proven again once the new holders confirmed the fence.
	case in.Empty:
		m.proven = true
	default:
		m.wantAbort(bulkload.TargetNotEmpty, "snapshot registry: "+in.Detail)
	}
	return nil
}

func (m *Machine) onAllocated(in SnapshotIDsAllocated) error {
	if err := m.outstanding(OpAllocate); err != nil {
		return err
	}
	if len(in.IDs) != m.rec.Buckets || slices.ContainsFunc(in.IDs, func(id int64) bool { return id < 0 }) {
		return fmt.Errorf("%w: %d snapshot ids for %d buckets, or a negative one", ErrUnexpected, len(in.IDs), m.rec.Buckets)
	}
	m.op, m.opEff = OpNone, nil
	m.ids = slices.Clone(in.IDs)
	return nil
}

func (m *Machine) onValidation(in ValidationFinished) error {
	if err := m.outstanding(OpValidate); err != nil {
		return err
	}
	r := &m.rec
	if len(in.Violations) == 0 {
		if len(in.LogOffsets) != r.Buckets || slices.ContainsFunc(in.LogOffsets, func(o int64) bool { return o < 0 }) {
			return fmt.Errorf("%w: %d log offsets for %d buckets, or a negative one", ErrUnexpected, len(in.LogOffsets), r.Buckets)
		}
		m.op, m.opEff = OpNone, nil
		m.logOffsets = slices.Clone(in.LogOffsets)
		return nil
	}
	if r.State == bulkload.Committing {
		// Valid once, so the objects changed or vanished. There is no way
		// back after the decision: keep trying until they are restored.
		m.retryAt = m.now + m.cfg.RetryInterval.Milliseconds()
		return nil
	}
	m.op, m.opEff = OpNone, nil
	m.invalid = fmt.Errorf("%w: manifest %s of transaction %s: %w", bulkload.ErrInvalidRequest, r.Manifest.Path, r.TxnID, violations(slices.Clone(in.Violations)))
	m.answer(reqCommit, nil, m.invalid)
	return nil
}

func (m *Machine) onPersisted(in Persisted) error {
	if err := m.outstanding(in.Op); err != nil {
		return err
	}
	if in.Op == OpExpire {
		m.op, m.opEff, m.gone = OpNone, nil, true
		m.emit(Forget{})
		return nil
	}
	w := m.opEff.(PersistRecord)
	if in.Rev <= m.recRev || in.Rev <= m.regRev && w.Registration != nil {
		return fmt.Errorf("%w: %s persisted at revision %d, not after %d", ErrUnexpected, in.Op, in.Rev, max(m.recRev, m.regRev))
	}
	m.op, m.opEff = OpNone, nil
	m.rec, m.recRev = w.Record, in.Rev
	if w.Registration != nil {
		m.reg, m.regRev = w.Registration.To, in.Rev
	}
	switch in.Op {
	case OpFenceReady:
		m.ids = nil
		m.answer(reqBegin, m.targetInfo(), nil)
	case OpFreeze:
		m.freeze = nil
	case OpDecide:
		m.abort = nil
		m.answer(reqAbort, nil, m.invalidState("abort requires BEGUN"))
	case OpBeginAbort:
		m.abort, m.freeze = nil, nil
	case OpFinishCommit:
		m.answer(reqCommit, nil, nil)
	case OpFinishAbort:
		m.answer(reqAbort, nil, nil)
		m.answer(reqBegin, nil, m.abortedErr(bulkload.ErrTokenAborted))
		m.answer(reqCommit, nil, m.abortedErr(bulkload.ErrInvalidState))
	}
	return nil
}

func (m *Machine) onFailed(in Failed) error {
	if err := m.outstanding(in.Op); err != nil {
		return err
	}
	if in.Precondition {
		m.halt(fmt.Errorf("bulktxn: %s of transaction %s: %w", in.Op, m.rec.TxnID, in.Err))
		return nil
	}
	m.retryAt = m.now + m.cfg.RetryInterval.Milliseconds()
	return nil
}

func (m *Machine) wantAbort(reason bulkload.AbortReason, msg string) {
	if m.abort == nil {
		m.abort = &abortIntent{reason, msg}
	}
}

// deadlineAbort returns the abort a passed deadline calls for, or nil.
func (m *Machine) deadlineAbort() *abortIntent {
	r := &m.rec
	switch {
	case r.Manifest == nil && m.now >= r.BuildDeadlineMs:
		return &abortIntent{bulkload.BuildDeadlineExceeded,
			"no manifest frozen by the build deadline " + timeOf(r.BuildDeadlineMs).Format(time.RFC3339Nano)}
	case r.Manifest != nil && m.now >= r.CommitDecisionDeadlineMs:
		return &abortIntent{bulkload.CommitDecisionDeadlineExceeded,
			"no commit decided by the commit-decision deadline " + timeOf(r.CommitDecisionDeadlineMs).Format(time.RFC3339Nano)}
	}
	return nil
}

// dropFailedRead gives up an operation that writes nothing (a proof of
// emptiness, an id allocation, a validation) which failed and waits for
// its retry, when the transaction is to abort in BEGUN (the caller's
// Abort, or a deadline): a storage error that never clears would
// otherwise keep the target fenced past both deadlines and the Abort
// queued for ever. It reports whether it did.
func (m *Machine) dropFailedRead() bool {
	r := &m.rec
	if m.retryAt == 0 || r.State != bulkload.Begun || r.Aborting() {
		return false
	}
	switch m.op {
	case OpProveEmpty, OpAllocate, OpValidate:
	default:
		return false
	}
	if m.abort == nil {
		m.abort = m.deadlineAbort()
	}
	if m.abort == nil {
		return false
	}
	m.op, m.opEff, m.retryAt = OpNone, nil, 0
	return true
}

// advance starts the next step of the transaction when nothing is
// outstanding: one operation, or one convergence round, at a time. An
// abort cancels a round in BEGUN but waits for an outstanding operation.
func (m *Machine) advance() {
	if m.halted != nil || m.gone || m.op != OpNone && !m.dropFailedRead() {
		return
	}
	r := &m.rec
	switch {
	case r.State == bulkload.Begun && !r.Aborting():
		if m.abort == nil {
			m.abort = m.deadlineAbort()
		}
		if a := m.abort; a != nil {
			m.round, m.unfenced = nil, false
			m.persist(OpBeginAbort, RegActiveWithID, nil, func(r *bulkload.Record) {
				r.AbortReason, r.AbortMessage = &a.reason, a.msg
			})
			return
		}
		if m.round != nil {
			return
		}
		switch {
		case !m.fenced && !r.FenceReady():
			m.startRound(fenceRound)
		case !m.proven && !r.FenceReady():
			m.issue(OpProveEmpty, ProveEmpty{})
		case m.ids == nil && !r.FenceReady():
			m.issue(OpAllocate, AllocateSnapshotIDs{Buckets: r.Buckets})
		case !r.FenceReady():
			ids := m.ids
			m.persist(OpFenceReady, RegLoading, nil, func(r *bulkload.Record) { r.SnapshotIDs = slices.Clone(ids) })
		case r.Manifest == nil && m.freeze != nil:
			f := *m.freeze
			m.persist(OpFreeze, RegLoading, nil, func(r *bulkload.Record) {
				r.Manifest, r.CommitDecisionDeadlineMs = &f, m.now+m.cfg.CommitDecisionTimeout.Milliseconds()
			})
		case r.Manifest == nil || m.invalid != nil:
			// building, or a frozen manifest is invalid: wait for Commit,
			// Abort or a deadline
		case m.logOffsets == nil:
			m.issue(OpValidate, m.validateManifest())
		default:
			m.persist(OpDecide, RegLoading, nil, func(r *bulkload.Record) { r.State = bulkload.Committing })
		}
	case m.round != nil:
	case r.State == bulkload.Begun: // aborting
		if !m.unfenced {
			m.startRound(unfenceRound)
			return
		}
		m.persist(OpFinishAbort, RegActive, nil, func(r *bulkload.Record) {
			r.State, r.ResultExpireMs = bulkload.Aborted, m.now+m.cfg.ResultRetention.Milliseconds()
		})
	case r.State == bulkload.Committing:
		switch {
		case r.AdoptedBuckets < r.Buckets && m.logOffsets == nil:
			m.issue(OpValidate, m.validateManifest())
		case r.AdoptedBuckets < r.Buckets:
			from, to := r.AdoptedBuckets, min(r.AdoptedBuckets+m.cfg.AdoptBatch, r.Buckets)
			m.persist(OpAdopt, RegLoading, m.adoptions(from, to), func(r *bulkload.Record) { r.AdoptedBuckets = to })
		case m.reg == RegLoading && !m.restored:
			m.startRound(restoreRound)
		case m.reg == RegLoading:
			m.persist(OpActivate, RegActiveWithID, nil, func(*bulkload.Record) {})
		case !m.published:
			m.startRound(publishRound)
		default:
			m.persist(OpFinishCommit, RegActive, nil, func(r *bulkload.Record) {
				r.State, r.ResultExpireMs = bulkload.Committed, m.now+m.cfg.ResultRetention.Milliseconds()
			})
		}
	case m.now >= r.ResultExpireMs: // terminal
		m.issue(OpExpire, DeleteRecord{ExpectRecordRev: m.recRev, ManifestPath: snapTarget(r).ManifestPath(r.TxnID)})
	}
}

func (m *Machine) validateManifest() ValidateManifest {
	r := &m.rec
	limits := m.cfg.Limits
	if r.State == bulkload.Committing {
		// Decided: the sizes were checked under the limits of the
		// coordinator that decided. A successor with lower limits (a
		// configuration changed by a rolling restart) must still finish
		// the commit, not refuse the same manifest for ever while the
		// target stays fenced.
		limits = snapshot.Limits{MaxManifestSize: snapshot.MaxDocumentSize, MaxMetadataSize: snapshot.MaxDocumentSize, MaxInputSize: math.MaxInt64}
	}
	return ValidateManifest{
		Plan: snapshot.Plan{
			Target: snapTarget(r), TxnID: r.TxnID, Buckets: r.Buckets, SnapshotIDs: slices.Clone(r.SnapshotIDs),
			RequireRowCount: m.cfg.RequireRowCount, Limits: limits,
		},
		Request: snapshot.CommitRequest{ManifestPath: r.Manifest.Path, ManifestLength: r.Manifest.Length, ManifestSHA256: r.Manifest.SHA256},
	}
}

func (m *Machine) adoptions(from, to int) []Adoption {
	t := snapTarget(&m.rec)
	out := make([]Adoption, 0, to-from)
	for b := from; b < to; b++ {
		id := m.rec.SnapshotIDs[b]
		out = append(out, Adoption{Bucket: b, SnapshotID: id, LogOffset: m.logOffsets[b], MetadataPath: t.MetadataPath(b, id)})
	}
	return out
}

// schedule asks for a tick at the earliest time the machine must act
// without another input: an operation's retry, a round's resend, a
// deadline, the result expiry.
func (m *Machine) schedule() {
	if m.halted != nil || m.gone {
		return
	}
	var next int64
	at := func(t int64) {
		if next == 0 || t < next {
			next = t
		}
	}
	if m.op != OpNone && m.retryAt > 0 {
		at(m.retryAt)
	}
	if r := m.round; r != nil && r.left > 0 {
		at(r.sentAt + m.cfg.ResendInterval.Milliseconds())
	}
	switch r := &m.rec; {
	case r.State != bulkload.Begun || r.Aborting() || m.abort != nil:
		if r.State.Terminal() && m.op == OpNone {
			at(r.ResultExpireMs)
		}
	case r.Manifest == nil:
		at(r.BuildDeadlineMs)
	default:
		at(r.CommitDecisionDeadlineMs)
	}
	if next != 0 && next != m.scheduled {
		m.scheduled = next
		m.emit(ScheduleTick{At: timeOf(next)})
	}
}

// violations joins validation violations on one line; errors.Is and
// errors.As see each of them.
type violations []error

func (v violations) Error() string {
	parts := make([]string, len(v))
	for i, err := range v {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (v violations) Unwrap() []error { return v }
