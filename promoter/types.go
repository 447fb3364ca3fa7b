package promoter

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/snapshotbuild"
)

// Errors callers branch on (test with errors.Is).
var (
	// ErrNotFound: no such promotion record (or partition, for a Request).
	ErrNotFound = errors.New("promoter: not found")
	// ErrExists: a ledger record with this id already exists.
	ErrExists = errors.New("promoter: record exists")
	// ErrConflict: a ledger record changed since it was read (CAS on its
	// revision failed); re-read and retry.
	ErrConflict = errors.New("promoter: record changed concurrently")
	// ErrUnknownPolicy: no policy of that name (or for that table).
	ErrUnknownPolicy = errors.New("promoter: unknown policy")
	// ErrNotAllowed: the policy does not allow the request (no onRequest
	// trigger), or the configuration asks for something unsupported.
	ErrNotAllowed = errors.New("promoter: not allowed")
	// ErrTargetNotEmpty: the tier target holds rows that no promotion of
	// this ledger put there.
	ErrTargetNotEmpty = errors.New("promoter: target not empty")
	// ErrSchema: the lake table does not map to the tier schema the policy
	// asks for, or the existing tier table's schema differs. The message
	// names the field.
	ErrSchema = errors.New("promoter: schema")
	// ErrSkipped: Promote was asked for a key the planner skips; the error
	// carries the plan's reason.
	ErrSkipped = errors.New("promoter: skipped")
	// ErrClosed: the promoter is shutting down and takes no more work.
	ErrClosed = errors.New("promoter: shutting down")
	// ErrResuming: a request or cancel's context ended while it waited for
	// Run to resume the ledger (the stored requests are not loaded before);
	// retry in a moment.
	ErrResuming = errors.New("promoter: resuming its ledger")
	// ErrUnorderedDuplicates: a build kept the last row of duplicate keys
	// (duplicateKeys: last) while the lake had rewritten data files of the
	// scan (a copy-on-write delete, update or merge, a compaction), so
	// which row of a key is newest cannot be told.
	ErrUnorderedDuplicates = errors.New("promoter: duplicate keys in rewritten lake files")
	// ErrInterrupted: MaxInterruptedBuilds builds of a promotion began and
	// never ended (each promoter running one stopped mid-build: a crash
	// reading damaged lake data, an out-of-memory kill). It is failed, not
	// built again, so one promotion that brings the process down does not
	// keep the promoter and its standbys in a crash loop (terminal: a
	// request of the partition, or a lake change to it, promotes it again).
	ErrInterrupted = errors.New("promoter: builds interrupted by promoter crashes")
	// ErrNotQueued: Cancel was asked for a promotion that does not wait
	// in the queue (it runs, has run, or was never requested).
	ErrNotQueued = errors.New("promoter: not queued")
)

// Lake is what the promoter reads of a lake catalog. *lake.Lake satisfies it.
type Lake interface {
	Describe(ctx context.Context, name string) (*lake.TableInfo, error)
	Partitions(ctx context.Context, name string, snapshotID *int64) ([]lake.PartitionStats, error)
	Scan(ctx context.Context, name string, opts lake.ScanOptions) (*arrow.Schema, iter.Seq2[arrow.RecordBatch, error], error)
	// RewrittenFiles counts the data files of a scan that a rewrite
	// added (lake.Lake.RewrittenFiles): duplicate keys among their rows
	// have no known order.
	RewrittenFiles(ctx context.Context, name string, opts lake.ScanOptions) (int, error)
}

// Tier is what the promoter needs of the tier's metadata and reads
// (internal/tieradapter.New satisfies it over a tierclient.Client).
type Tier interface {
	// TableSchema returns the table's schema; ok=false when the table does
	// not exist.
	TableSchema(ctx context.Context, database, table string) (schema kv.TableSchema, ok bool, err error)
	// CreateTable creates the database if missing and the table; an
	// existing table with an equal schema is success, a different one an
	// error.
	CreateTable(ctx context.Context, database, table string, schema kv.TableSchema, replicationFactor int) error
	// CreatePartition creates a partition; an existing one is success.
	CreatePartition(ctx context.Context, database, table, partition string) error
	// Partitions lists the partitions of a partitioned table.
	Partitions(ctx context.Context, database, table string) ([]string, error)
	// IsEmpty reports whether the target (partition "" = the whole table)
	// holds no rows. A missing partition is empty.
	IsEmpty(ctx context.Context, database, table, partition string) (bool, error)
}

// BulkLoader drives the tier's bulk-load transaction.
// *bulkloadclient.Client satisfies it.
type BulkLoader interface {
	Begin(ctx context.Context, t bulkload.Target, token string, o bulkloadclient.BeginOptions) (*bulkloadclient.BuildContext, error)
	GetInProgress(ctx context.Context, t bulkload.Target) (bulkload.Status, *bulkloadclient.BuildContext, error)
	Status(ctx context.Context, h bulkload.Handle) (bulkload.Status, error)
	Commit(ctx context.Context, bc *bulkloadclient.BuildContext, r []snapshotbuild.BucketResult, budget time.Duration) (bulkload.Status, error)
	Abort(ctx context.Context, h bulkload.Handle) (bulkload.Status, error)
}

var (
	_ Lake       = (*lake.Lake)(nil)
	_ BulkLoader = (*bulkloadclient.Client)(nil)
)

// RetryPolicy is the backoff of retriable failures of one promotion:
// the n-th retry waits Initial·2ⁿ⁻¹, at most Max, and a promotion is
// tried at most Attempts times in a row before it is recorded as failed
// (retriable: a later reconcile tries again).
type RetryPolicy struct {
	Initial, Max time.Duration
	Attempts     int
}

// Config configures a Promoter. Policies, Lakes, Tier, BulkLoad and Ledger
// are required.
type Config struct {
	Policies []*policies.Policy
	// Lakes by catalog name (policy.Source().Catalog).
	Lakes    map[string]Lake
	Tier     Tier
	BulkLoad BulkLoader
	// Store, optional, is where snapshots are written (default: opened per
	// build context from its remote data dir).
	Store *objstore.Store
	// Stores, optional, returns the store a build context's snapshots are
	// written through; it takes precedence over Store. The daemon gives
	// bulkloadclient.Client.ScopedStore for scoped uploads (tier.scoped_uploads):
	// the builds then hold no object store credentials.
	Stores func(*bulkloadclient.BuildContext) snapshotbuild.Store
	Ledger Ledger
	// Logger, default: discard.
	Logger *slog.Logger
	// Registry, optional, receives the promoter's metrics.
	Registry prometheus.Registerer
	// Now, default time.Now: the clock of windows and ledger timestamps.
	Now func() time.Time
	// Workers is how many promotions run at once over all policies
	// (default 2).
	Workers int
	// ReconcileInterval is the period of Run's reconcile (default 1m; < 0
	// disables it).
	ReconcileInterval time.Duration
	// LakePollInterval is how often Run polls the current snapshot of each
	// onLakeCommit policy's table (default 30s; < 0 disables it).
	LakePollInterval time.Duration
	// LedgerRetention is how long finished promotion records stay in the
	// ledger (default DefaultLedgerRetention; < 0 keeps every record). Run
	// prunes at its start and every hour; see PruneLedger for the records
	// kept whatever their age.
	LedgerRetention time.Duration
	// CommitBudget bounds one Commit call's retries (default 5m).
	CommitBudget time.Duration
	// BuildTimeout is the build window asked of Begin (0: the server's
	// default).
	BuildTimeout time.Duration
	// Retry is the backoff of retriable failures (default 1s, 1m, 5).
	Retry RetryPolicy
	// TempDir holds the builders' spill and SST files (default os.TempDir).
	TempDir string
	// Status, optional, receives a StatusEvent after every write of a
	// promotion's ledger record (triggers/kafka's Publisher, in the
	// daemon).
	Status StatusSink
	// Hooks inject faults in tests.
	Hooks Hooks
}

// Hooks are test fault injection points.
type Hooks struct {
	// AfterPhase runs after a record reached phase (persisted). An error
	// stops the promotion at once as a crash would: no abort, no ledger
	// write (tests use it to kill the promoter at each phase).
	AfterPhase func(ctx context.Context, r Record) error
	// BeforeBuild runs before every build of an attempt, a resumed one's
	// too (AfterPhase does not run again for the phase a record resumes
	// in), once the build is counted in the ledger (InterruptedBuilds).
	// An error stops the promotion at once as a crash would (tests use it
	// to crash every run of a build).
	BeforeBuild func(ctx context.Context, r Record) error
}

// Key identifies what the queue works on: one tier target of one policy.
type Key struct {
	Policy    string `json:"policy"`
	Partition string `json:"partition"` // tier partition name; "" = whole non-partitioned table
}

// String returns "policy" or "policy/partition".
func (k Key) String() string {
	if k.Partition == "" {
		return k.Policy
	}
	return k.Policy + "/" + k.Partition
}

// Request is an on-demand promotion request.
type Request struct {
	Policy    string `json:"policy,omitempty"`    // optional when Table identifies one policy
	Table     string `json:"table,omitempty"`     // tier target "db.table" (or the lake table "ns.table")
	Partition string `json:"partition,omitempty"` // "" = every partition the policy selects
}

// Phase is a promotion record's phase.
type Phase string

// Phases in order; the last three are terminal (for the attempt: see doc.go).
const (
	PhasePlanned    Phase = "planned"
	PhaseBegun      Phase = "begun"
	PhaseBuilding   Phase = "building"
	PhaseCommitting Phase = "committing"
	PhaseCommitted  Phase = "committed"
	PhaseAborted    Phase = "aborted"
	PhaseFailed     Phase = "failed"
)

// Terminal reports whether p is committed, aborted or failed.
func (p Phase) Terminal() bool {
	return p == PhaseCommitted || p == PhaseAborted || p == PhaseFailed
}

// Record is one promotion identity in the ledger: (catalog, lake table, tier
// partition, source snapshot id), with the state of its latest attempt.
// It holds no credential by construction: names, ids, counts, times and
// error messages only.
type Record struct {
	// ID is "p-" + 16 hex digits of sha256(catalog, lake table, partition,
	// source snapshot id); see PromotionID.
	ID        string `json:"id"`
	Policy    string `json:"policy"`
	Catalog   string `json:"catalog"`
	LakeTable string `json:"lake_table"`
	Partition string `json:"partition"` // tier partition name
	// LakePartitions are the "spec/path" names of the lake partitions mapped
	// to Partition.
	LakePartitions []string `json:"lake_partitions,omitempty"`
	// SourceSnapshotID is the identity's snapshot: the one that last changed
	// the partition. ScanSnapshotID is the snapshot scanned.
	SourceSnapshotID int64  `json:"source_snapshot_id"`
	ScanSnapshotID   int64  `json:"scan_snapshot_id"`
	Database         string `json:"database"`
	Table            string `json:"table"`
	// CallerToken is "thaw-promoter/" + ID + "/" + Attempt: deterministic,
	// not a secret.
	CallerToken string `json:"caller_token"`
	Attempt     int    `json:"attempt"`
	// InterruptedBuilds counts the builds of this promotion that began and
	// never ended: their promoter stopped mid-build without recording it
	// (a crash, a kill, a lost lease; a build that returns, even with an
	// error or cut by a graceful stop, is not counted). A build is
	// counted when it begins (so that a crash leaves it counted) and
	// taken back when it returns: the record of a build running now
	// holds one more than the builds interrupted before it (`thaw
	// status ID` subtracts it when the promoter it asks runs the build).
	// A promotion with MaxInterruptedBuilds is failed (ErrInterrupted)
	// instead of built again. A request of it clears it (one stored before the record's
	// last change does not: a crash leaves its request stored), and so
	// does its commit; a lake change to the partition is a new promotion
	// (count 0). Any other new attempt (a retry, a retriable failure
	// planned again) keeps it.
	InterruptedBuilds int    `json:"interrupted_builds,omitempty"`
	Phase             Phase  `json:"phase"`
	TxnID             string `json:"txn_id,omitempty"`
	Buckets           int    `json:"buckets"`
	// Rows read from the lake, snapshot Bytes written, Duplicates dropped.
	Rows       int64  `json:"rows"`
	Bytes      int64  `json:"bytes"`
	Duplicates int64  `json:"duplicates"`
	Error      string `json:"error,omitempty"`
	// Retriable is set with Error when a later attempt may succeed.
	Retriable   bool       `json:"retriable,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	BegunAt     *time.Time `json:"begun_at,omitempty"`
	CommittedAt *time.Time `json:"committed_at,omitempty"`
	// Revision is the ledger's version of the record (etcd mod revision),
	// the CAS token of Update.
	Revision int64 `json:"-"`
}

// shutdownPrefix starts the error of an attempt aborted because the
// promoter stopped.
const shutdownPrefix = "shutdown: "

// Interrupted reports whether r's attempt was aborted because the promoter
// stopped (its error starts "shutdown: "; it is retriable): the next
// promoter promotes it again as attempt+1 when a stored request or its
// policy's selection asks for it.
func (r Record) Interrupted() bool {
	return r.Phase == PhaseAborted && r.Retriable && strings.HasPrefix(r.Error, shutdownPrefix)
}

// Target returns the record's tier target.
func (r Record) Target() bulkload.Target {
	return bulkload.Target{Database: r.Database, Table: r.Table, Partition: r.Partition}
}

// Plan is what a policy would promote now.
type Plan struct {
	Policy         string `json:"policy"`
	Catalog        string `json:"catalog"`
	LakeTable      string `json:"lake_table"`
	LakeSnapshotID int64  `json:"lake_snapshot_id"` // 0: the table has no snapshot
	Database       string `json:"database"`
	Table          string `json:"table"`
	TableExists    bool   `json:"table_exists"`
	WillCreate     bool   `json:"will_create"`
	// Schema is the tier schema mapped from the lake table.
	Schema  kv.TableSchema `json:"schema"`
	Buckets int            `json:"buckets"`
	Items   []PlanItem     `json:"items"`
	// Unmapped lists lake partitions ("spec/path: reason") that map to no
	// tier partition (a null partition value, or an older spec without a
	// tier partition key's field); they are never promoted.
	Unmapped []string `json:"unmapped,omitempty"`
}

// PlanItem is one tier target of a plan.
type PlanItem struct {
	Key              Key      `json:"key"`
	LakePartitions   []string `json:"lake_partitions,omitempty"`
	SourceSnapshotID int64    `json:"source_snapshot_id"`
	Rows             int64    `json:"rows"`
	Bytes            int64    `json:"bytes"`
	// Action is "promote" or "skip".
	Action string `json:"action"`
	// Reason, for skip: "not selected: ..." (ending in "(promoted by
	// p-..)" when the tier holds the target all the same), "already
	// promoted by p-..", "target not empty", "in progress: p-..",
	// "stale: ...", "failed: ...".
	Reason string `json:"reason,omitempty"`
	// EstimatedBuild is a rough estimate from the lake bytes (see doc.go).
	EstimatedBuild time.Duration `json:"estimated_build"`
	// PromotionID is the ledger id the item has or will have.
	PromotionID string `json:"promotion_id"`
	// Attempt is, for promote, the attempt of that id the promotion will
	// run as (1, or one after the ledger's last attempt): a waiter tells
	// its own promotion from an earlier attempt by it.
	Attempt int `json:"attempt,omitempty"`
}

// Plan actions.
const (
	ActionPromote = "promote"
	ActionSkip    = "skip"
)

// ReasonInProgress starts the reason of an item skipped because a
// promotion of its target is running; the promotion's id follows it.
const ReasonInProgress = "in progress: "

// InProgressOf returns the id of the running promotion a skip reason
// names, and whether it names one.
func InProgressOf(reason string) (id string, ok bool) {
	id, ok = strings.CutPrefix(reason, ReasonInProgress)
	return id, ok && id != ""
}

// Skip is a requested promotion skipped when its turn came
// (Promoter.Skipped).
type Skip struct {
	// Reason is the plan's reason for the skip ("target not empty", ...).
	Reason string `json:"reason"`
	// At is when the promotion's turn came.
	At time.Time `json:"at"`
}

// Text words the skip of promotion id, as the API and the CLI say it.
func (s Skip) Text(id string) string {
	return fmt.Sprintf("promotion %s was requested and then skipped when its turn came (%s): %s",
		id, s.At.UTC().Format(time.RFC3339), s.Reason)
}

// Progress is the live progress of a running promotion (Promoter.Progress).
type Progress struct {
	ID        string           `json:"id"`
	Phase     Phase            `json:"phase"`
	RowsRead  int64            `json:"rows_read"`
	BytesRead int64            `json:"bytes_read"`
	Buckets   []BucketProgress `json:"buckets"`
	Started   time.Time        `json:"started"`
}

// BucketProgress is one bucket of a running build: rows written and bytes
// uploaded so far.
type BucketProgress struct {
	Bucket int   `json:"bucket"`
	Rows   int64 `json:"rows"`
	Bytes  int64 `json:"bytes"`
	Done   bool  `json:"done"`
}

// ReconcileReport says what one reconcile of a policy did.
type ReconcileReport struct {
	Policy   string `json:"policy"`
	Selected int    `json:"selected"` // items the policy selects
	Enqueued int    `json:"enqueued"` // of those, queued for promotion
	Promoted int    `json:"promoted"` // of those, already promoted (committed)
	Running  int    `json:"running"`  // of those, being promoted now
	Skipped  int    `json:"skipped"`  // items not promoted for another reason
}
