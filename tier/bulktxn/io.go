package bulktxn

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/snapshot"
)

// Errors Step returns for an input it refuses. The driver logs the input
// and drops it; the machine's state is unchanged.
var (
	// ErrUnexpected: the input is not valid in the current state (the
	// result of an operation that is not outstanding, a report naming a
	// replica outside its round, a request id already pending, holders of
	// the wrong bucket count). It points at a driver bug.
	ErrUnexpected = errors.New("bulktxn: unexpected input")
	// ErrStaleReport: a replica report for a round that has ended or was
	// restarted. Expected after holder changes; harmless.
	ErrStaleReport = errors.New("bulktxn: stale replica report")
	// ErrHalted: the machine halted (a write's precondition failed); build
	// a new one with Recover from what etcd holds.
	ErrHalted = errors.New("bulktxn: machine halted, recover it")
	// ErrInconsistent: Recover found a record and a registration that no
	// sequence of the machine's writes produces.
	ErrInconsistent = errors.New("bulktxn: transaction record and registration are inconsistent")
)

// RequestID identifies one caller request (Begin, Commit, Abort) to the
// driver; the machine answers each with exactly one Reply.
type RequestID uint64

// Registration is what the target's registration (the table record of a
// non-partitioned table, else the partition record) says about this
// transaction.
type Registration uint8

const (
	// RegActive: ACTIVE without this transaction's id (never held, or
	// released; another transaction's id counts as this).
	RegActive Registration = iota
	// RegLoading: LOADING with this transaction's id, the fence. Tablets
	// reject reads and writes.
	RegLoading
	// RegActiveWithID: ACTIVE still carrying this transaction's id, while
	// a commit publishes or an abort lifts the fence.
	RegActiveWithID
)

func (r Registration) String() string {
	switch r {
	case RegActive:
		return "ACTIVE"
	case RegLoading:
		return "LOADING"
	case RegActiveWithID:
		return "ACTIVE(id)"
	}
	return "Registration(?)"
}

// Holders are the replica holders of the target, as the driver last saw
// them: the assignment and the incarnation of every tablet server. Any
// change restarts a running convergence round.
type Holders struct {
	Replicas     [][]string       // bucket → servers holding a replica (from the assignment)
	Incarnations map[string]int64 // server → incarnation, e.g. the create revision of its registration
}

// Equal reports whether h and o are the same holders.
func (h Holders) Equal(o Holders) bool {
	return slices.EqualFunc(h.Replicas, o.Replicas, slices.Equal) && maps.Equal(h.Incarnations, o.Incarnations)
}

// Clone returns a deep copy of h.
func (h Holders) Clone() Holders {
	c := Holders{Replicas: make([][]string, len(h.Replicas)), Incarnations: maps.Clone(h.Incarnations)}
	for i, r := range h.Replicas {
		c.Replicas[i] = slices.Clone(r)
	}
	return c
}

// Op names an operation the machine asks the driver to perform and whose
// result it awaits: an etcd write, or a check. At most one is outstanding.
type Op uint8

// Operations, in the order a transaction performs them.
const (
	OpNone         Op = iota
	OpBegin           // create the record; registration → LOADING
	OpProveEmpty      // ProveEmpty
	OpAllocate        // AllocateSnapshotIDs
	OpFenceReady      // persist the snapshot ids
	OpFreeze          // persist the manifest and the commit-decision deadline
	OpValidate        // ValidateManifest
	OpDecide          // persist COMMITTING, the irreversible decision
	OpAdopt           // register a batch of bucket snapshots; persist the cursor
	OpActivate        // registration → ACTIVE with the id
	OpFinishCommit    // COMMITTED; registration → ACTIVE
	OpBeginAbort      // persist the abort reason; registration → ACTIVE with the id
	OpFinishAbort     // ABORTED; registration → ACTIVE
	OpExpire          // delete the record (result GC)
)

var opNames = [...]string{"none", "begin", "prove-empty", "allocate", "fence-ready", "freeze", "validate",
	"decide", "adopt", "activate", "finish-commit", "begin-abort", "finish-abort", "expire"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Op(?)"
}

// Input is an event the driver feeds to Machine.Step: one of the types
// below, a closed set.
type Input interface{ input() }

// BeginRequested: Begin named this transaction's caller token (the driver
// found the transaction by token). New handles the first Begin.
type BeginRequested struct {
	Req         RequestID
	CallerToken string
	Principal   bulkload.Principal
	Now         time.Time
}

// CommitRequested: Commit with a manifest.
type CommitRequested struct {
	Req      RequestID
	Manifest bulkload.ManifestRef
	Now      time.Time
}

// AbortRequested: Abort.
type AbortRequested struct {
	Req RequestID
	Now time.Time
}

// Tick: time passed. The driver ticks at least at every ScheduleTick.At;
// extra ticks are harmless.
type Tick struct{ Now time.Time }

// HoldersChanged: the assignment or a holder's incarnation changed (a
// tablet server restarted or lost its lease). Unchanged holders are a no-op.
type HoldersChanged struct{ Holders Holders }

// FenceReport: a server confirmed LOADING on some of its replicas (round
// of SendFence). Empty is false if any of them holds data; NotEmpty names
// those buckets when the server said which (for the abort's message);
// LogEnd is their highest log end offset.
type FenceReport struct {
	Round    uint64
	Server   string
	Buckets  []int
	Empty    bool
	NotEmpty []int
	LogEnd   int64
}

// RestoreReport: a server restored some of its replicas from the adopted
// snapshots (round of SendRestore), or failed to (Err non-empty: the
// command is sent again after the resend interval).
type RestoreReport struct {
	Round   uint64
	Server  string
	Buckets []int
	Err     string
}

// ActiveReport: a server applied ACTIVE (with the id) to some of its
// replicas (round of SendPublish or SendUnfence).
type ActiveReport struct {
	Round   uint64
	Server  string
	Buckets []int
}

// EmptinessChecked answers ProveEmpty.
type EmptinessChecked struct {
	Empty  bool
	Detail string // what was found, when not empty
}

// SnapshotIDsAllocated answers AllocateSnapshotIDs: one id per bucket.
type SnapshotIDsAllocated struct{ IDs []int64 }

// ValidationFinished answers ValidateManifest: the violations (the
// *snapshot.Violation values, as errors), or none and every bucket's
// log_offset from its _METADATA. Storage errors are Failed, not this.
type ValidationFinished struct {
	Violations []error
	LogOffsets []int64
}

// Persisted answers a PersistRecord or DeleteRecord: the write applied at
// etcd revision Rev (the new mod revision of every key it wrote).
type Persisted struct {
	Op  Op
	Rev int64
}

// Failed answers any operation that did not succeed. Precondition is true
// when a comparison of the write failed (a revision moved, or the
// coordinator lost leadership: fencing.ErrPreconditionFailed,
// fencing.ErrNotLeader): the machine halts. Otherwise the outcome is
// unknown and the machine retries the same operation after the retry
// interval; a write that did land makes the retry's comparison fail.
type Failed struct {
	Op           Op
	Err          error
	Precondition bool
}

func (BeginRequested) input()       {}
func (CommitRequested) input()      {}
func (AbortRequested) input()       {}
func (Tick) input()                 {}
func (HoldersChanged) input()       {}
func (FenceReport) input()          {}
func (RestoreReport) input()        {}
func (ActiveReport) input()         {}
func (EmptinessChecked) input()     {}
func (SnapshotIDsAllocated) input() {}
func (ValidationFinished) input()   {}
func (Persisted) input()            {}
func (Failed) input()               {}

// Effect is work the machine asks of the driver: one of the types below, a
// closed set. The driver performs them in order; an operation's result
// comes back as an Input.
type Effect interface{ effect() }

// PersistRecord: write Record to the transaction's etcd key in one guarded
// etcd transaction, comparing the key's mod revision with ExpectRecordRev
// (0: the key must not exist). With Registration, change the target's
// registration in the same transaction (meta.DataStateChange with the
// record write as If/Then), comparing its revision with ExpectRev. With
// Adopt, first register each bucket snapshot (create-only; an identical
// existing entry counts as created), possibly in that same transaction
// (at most MaxAdoptBatch). Answer with Persisted{Op, rev} or Failed.
type PersistRecord struct {
	Op              Op
	Record          bulkload.Record
	ExpectRecordRev int64
	Registration    *RegistrationWrite
	Adopt           []Adoption
}

// RegistrationWrite changes the registration: RegLoading is LOADING with
// the id, RegActiveWithID ACTIVE with the id, RegActive ACTIVE without.
type RegistrationWrite struct {
	To        Registration
	ExpectRev int64
}

// Adoption is one bucket snapshot to add to the snapshot registry
// (meta.BucketSnapshot{SnapshotID, LogOffset, MetadataPath}).
type Adoption struct {
	Bucket       int
	SnapshotID   int64
	LogOffset    int64
	MetadataPath string
}

// DeleteRecord (OpExpire): the result retention passed. Delete the
// manifest object at ManifestPath if present, then the record if its mod
// revision is still ExpectRecordRev. Snapshot data is not deleted.
type DeleteRecord struct {
	ExpectRecordRev int64
	ManifestPath    string
}

// ProveEmpty (OpProveEmpty): check that the snapshot registry holds no
// snapshot of any bucket of the target. Answer with EmptinessChecked.
type ProveEmpty struct{}

// AllocateSnapshotIDs (OpAllocate): allocate one snapshot id for each of
// buckets 0..Buckets-1 (meta.AllocateSnapshotIDs, 64 buckets per etcd
// transaction). Answer with SnapshotIDsAllocated.
type AllocateSnapshotIDs struct{ Buckets int }

// ValidateManifest (OpValidate): run the snapshot.Validator stages for
// Request against Plan, reading the objects each stage names, and decode
// the valid _METADATA for their log offsets. Answer with
// ValidationFinished, or Failed on a storage error.
type ValidateManifest struct {
	Plan    snapshot.Plan
	Request snapshot.CommitRequest
}

// SendFence: push LOADING (with the id) to Server's replicas of Buckets
// and have each confirm, reporting whether it is empty (FenceReport).
type SendFence struct {
	Round   uint64
	Server  string
	Buckets []int
}

// SendRestore: have Server restore its replicas of Buckets from the
// adopted snapshots (snapshot id Record.SnapshotIDs[b]) and report
// (RestoreReport).
type SendRestore struct {
	Round   uint64
	Server  string
	Buckets []int
}

// SendPublish: push ACTIVE (with the id) to Server's replicas of Buckets
// after a commit; each confirms once it serves the restored data
// (ActiveReport).
type SendPublish struct {
	Round   uint64
	Server  string
	Buckets []int
}

// SendUnfence: push ACTIVE (with the id) to Server's replicas of Buckets
// after an abort; each confirms (ActiveReport).
type SendUnfence struct {
	Round   uint64
	Server  string
	Buckets []int
}

// Reply answers request Req. Info is set when Begin returns the frozen
// target facts. Err is nil or wraps a bulkload sentinel; Status is the
// transaction's status at the time.
type Reply struct {
	Req    RequestID
	Status bulkload.Status
	Info   *bulkload.TargetInfo
	Err    error
}

// ScheduleTick: deliver a Tick at At (replacing any earlier schedule).
type ScheduleTick struct{ At time.Time }

// Halt: the machine stopped (Err says why); every pending request was
// answered with bulkload.ErrUnavailable. Read the record and registration
// again and Recover.
type Halt struct{ Err error }

// Forget: the transaction's record is gone (result GC); drop the machine.
type Forget struct{}

func (PersistRecord) effect()       {}
func (DeleteRecord) effect()        {}
func (ProveEmpty) effect()          {}
func (AllocateSnapshotIDs) effect() {}
func (ValidateManifest) effect()    {}
func (SendFence) effect()           {}
func (SendRestore) effect()         {}
func (SendPublish) effect()         {}
func (SendUnfence) effect()         {}
func (Reply) effect()               {}
func (ScheduleTick) effect()        {}
func (Halt) effect()                {}
func (Forget) effect()              {}
