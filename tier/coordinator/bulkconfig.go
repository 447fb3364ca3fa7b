package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/bulktxn"
	"github.com/thawdb/thaw/tier/uploadcap"
)

// BulkLoadConfig configures bulk-load transactions. Zero fields take the
// defaults of bulktxn.DefaultConfig and snapshot.DefaultLimits, except
// ResendInterval (DefaultBulkResendInterval: a round command is a cheap
// RPC), RetryInterval (DefaultBulkRetryInterval) and
// DefaultOrphanCleanInterval.
type BulkLoadConfig struct {
	DefaultBuildTimeout   time.Duration // Begin without a build timeout
	MaxBuildTimeout       time.Duration // the longest build timeout Begin accepts
	CommitDecisionTimeout time.Duration // from freezing a manifest to the COMMITTING decision
	ResultRetention       time.Duration // a terminal transaction is kept this long
	ResendInterval        time.Duration // unconfirmed replica commands (and restore polls) are repeated after this
	RetryInterval         time.Duration // a failed etcd write, check or validation is retried after this
	AdoptBatch            int           // buckets adopted per etcd transaction, 1..64
	MaxActive             int           // non-terminal transactions in the cluster
	MaxPerTarget          int           // transactions retained per target, terminal ones included
	MaxManifestBytes      int64         // manifest size limit
	MaxMetadataBytes      int64         // one _METADATA's size limit
	MaxInputBytes         int64         // manifest + every _METADATA + every data file
	// OrphanCleanInterval is how often the leader deletes what aborted
	// transactions left in their snapshot directories; negative disables
	// the periodic sweep (result garbage collection still cleans).
	OrphanCleanInterval time.Duration
	// The upload gateway (scoped build uploads, see GetUploadCredentials):
	// UploadCredentialTTL is how long a minted capability lasts (default
	// DefaultUploadCredentialTTL, 1s..24h; never past the build deadline),
	// MaxUploadBytes bounds one object (default DefaultMaxUploadBytes),
	// UploadConcurrency bounds the uploads stored at once (default
	// DefaultUploadConcurrency; more wait), UploadTempDir is where a body is
	// received and checked before it reaches the store (default
	// os.TempDir()).
	UploadCredentialTTL time.Duration
	MaxUploadBytes      int64
	UploadConcurrency   int
	UploadTempDir       string
	// SignedUploadTTL is the lifetime of a signed upload the gateway hands
	// out (POST; stores that sign uploads, S3): default
	// DefaultSignedUploadTTL, 1s..1h, never past the capability's expiry;
	// negative: the gateway signs nothing and builders send every object
	// through it.
	SignedUploadTTL time.Duration
}

// Defaults of BulkLoadConfig that differ from bulktxn.DefaultConfig.
const (
	DefaultOrphanCleanInterval = 10 * time.Minute
	// DefaultBulkResendInterval repeats a round command a replica has not
	// confirmed: short, since a command sent while a new target's replicas
	// are still opening (Begin right after the partition was created) is
	// otherwise repeated only this much later, and a restore report comes
	// back as soon as the restore ends anyway (RestoreSnapshot waits for it).
	DefaultBulkResendInterval = 250 * time.Millisecond
	DefaultBulkRetryInterval  = time.Second
)

// withDefaults fills the gateway's zero fields with their defaults (the
// state machine's are filled by machineConfig).
func (b BulkLoadConfig) withDefaults() BulkLoadConfig {
	if b.UploadCredentialTTL == 0 {
		b.UploadCredentialTTL = DefaultUploadCredentialTTL
	}
	if b.UploadConcurrency == 0 {
		b.UploadConcurrency = DefaultUploadConcurrency
	}
	if b.MaxUploadBytes == 0 {
		b.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if b.SignedUploadTTL == 0 {
		b.SignedUploadTTL = DefaultSignedUploadTTL
	}
	return b
}

// Validate checks b (zero fields: their defaults) as New does, so that a
// daemon can refuse a configuration before it starts anything.
func (b BulkLoadConfig) Validate() error {
	b = b.withDefaults()
	var errs []error
	if b.UploadConcurrency < 1 {
		errs = append(errs, fmt.Errorf("upload concurrency %d is below 1", b.UploadConcurrency))
	}
	if t := b.UploadCredentialTTL; t < time.Second || t > uploadcap.MaxTTL {
		errs = append(errs, fmt.Errorf("upload credential ttl %v not in 1s..%v", t, uploadcap.MaxTTL))
	}
	if t := b.SignedUploadTTL; t > 0 && (t < time.Second || t > MaxSignedUploadTTL) {
		errs = append(errs, fmt.Errorf("signed upload ttl %v not in 1s..%v (negative: off)", t, MaxSignedUploadTTL))
	}
	if b.MaxUploadBytes < 1 {
		errs = append(errs, fmt.Errorf("max upload bytes %d is below 1", b.MaxUploadBytes))
	}
	if _, err := b.machineConfig(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// machineConfig returns the state machine's configuration.
func (b BulkLoadConfig) machineConfig() (bulktxn.Config, error) {
	c := bulktxn.DefaultConfig()
	c.ResendInterval, c.RetryInterval = DefaultBulkResendInterval, DefaultBulkRetryInterval
	dur := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	num := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	num64 := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	dur(&c.DefaultBuildTimeout, b.DefaultBuildTimeout)
	dur(&c.MaxBuildTimeout, b.MaxBuildTimeout)
	dur(&c.CommitDecisionTimeout, b.CommitDecisionTimeout)
	dur(&c.ResultRetention, b.ResultRetention)
	dur(&c.ResendInterval, b.ResendInterval)
	dur(&c.RetryInterval, b.RetryInterval)
	num(&c.AdoptBatch, b.AdoptBatch)
	num(&c.MaxActive, b.MaxActive)
	num(&c.MaxPerTarget, b.MaxPerTarget)
	num64(&c.Limits.MaxManifestSize, b.MaxManifestBytes)
	num64(&c.Limits.MaxMetadataSize, b.MaxMetadataBytes)
	num64(&c.Limits.MaxInputSize, b.MaxInputBytes)
	if c.MaxBuildTimeout < c.DefaultBuildTimeout && b.MaxBuildTimeout == 0 {
		c.MaxBuildTimeout = c.DefaultBuildTimeout
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("bulk load: %w", err)
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"max manifest bytes", c.Limits.MaxManifestSize}, {"max metadata bytes", c.Limits.MaxMetadataSize}} {
		if l.v < 1 || l.v > snapshot.MaxDocumentSize {
			return c, fmt.Errorf("bulk load: %s %d not in 1..%d", l.name, l.v, snapshot.MaxDocumentSize)
		}
	}
	if c.Limits.MaxInputSize < 1 {
		return c, fmt.Errorf("bulk load: max input bytes %d below 1", c.Limits.MaxInputSize)
	}
	return c, nil
}

// Clock is the time source of bulk-load transactions: deadlines, retries,
// resends and result expiry. Tests inject one they can move forward.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless
	// the returned timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a Clock's pending call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did.
	Stop() bool
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// BulkObjectStore is what bulk load needs of the object store on top of
// ObjectStore: bounded reads of the manifest and _METADATA documents,
// verified reads of the data files, and listings for the orphan cleaner. *objstore.Store satisfies it; an ObjectStore without it makes
// bulk load unavailable.
type BulkObjectStore interface {
	ObjectStore
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	OpenVerified(ctx context.Context, key string, size int64, sha string) (io.ReadCloser, error)
	List(ctx context.Context, prefix string) iter.Seq2[objstore.Attrs, error]
}

var _ BulkObjectStore = (*objstore.Store)(nil)

// bulkMetrics are the bulk-load metrics.
type bulkMetrics struct {
	txns        *prometheus.GaugeVec     // state
	phase       *prometheus.HistogramVec // phase
	requests    *prometheus.CounterVec   // rpc, result
	halts       prometheus.Counter
	validations *prometheus.CounterVec // result
	restoring   prometheus.Gauge
	orphans     prometheus.Counter
	uploads     *prometheus.CounterVec // op, result
	uploadBytes prometheus.Counter
}

func newBulkMetrics(f promauto.Factory) *bulkMetrics {
	return &bulkMetrics{
		txns: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "thaw_coordinator_bulkload_transactions",
			Help: "Bulk-load transactions the active coordinator holds, by state (BEGUN, COMMITTING, COMMITTED, ABORTED; terminal ones until their result expires).",
		}, []string{"state"}),
		phase: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "thaw_coordinator_bulkload_phase_seconds",
			Help:    "Time bulk-load transactions spent in each phase (fencing, building, validating, adopting, restoring, publishing, aborting, ...).",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}, []string{"phase"}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_bulkload_requests_total",
			Help: "BulkLoadService requests, by RPC and result reason (OK on success).",
		}, []string{"rpc", "result"}),
		halts: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_bulkload_recoveries_total",
			Help: "Bulk-load transactions recovered from etcd after a write's precondition failed (a halt).",
		}),
		validations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_bulkload_validations_total",
			Help: "Manifest validations, by result (valid, invalid, error).",
		}, []string{"result"}),
		restoring: f.NewGauge(prometheus.GaugeOpts{
			Name: "thaw_coordinator_bulkload_restoring_replicas",
			Help: "Replicas that have not yet confirmed the restore of a committing bulk load's snapshots.",
		}),
		orphans: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_bulkload_orphan_files_deleted_total",
			Help: "Objects deleted from the snapshot directories of aborted bulk loads.",
		}),
		uploads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "thaw_coordinator_upload_requests_total",
			Help: "Upload gateway requests, by operation (put, delete) and result (ok or the refusal's class).",
		}, []string{"op", "result"}),
		uploadBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "thaw_coordinator_upload_bytes_total",
			Help: "Bytes the upload gateway stored (adopted objects included).",
		}),
	}
}
