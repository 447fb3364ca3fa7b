package tablet

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
)

// Defaults of Config.
const (
	DefaultSnapshotInterval   = 10 * time.Minute
	DefaultLeaseTTL           = 10 * time.Second
	DefaultRestoreConcurrency = 4
	DefaultScanPageRows       = 1000
	DefaultScanIdleTimeout    = time.Minute
	DefaultMaxScans           = 1024
	DefaultRetryMin           = 200 * time.Millisecond
	DefaultRetryMax           = 30 * time.Second
	DefaultChangelogSweep     = 10 * time.Minute
)

// Config configures a tablet server. Zero values take the defaults above
// or those of package replica.
type Config struct {
	// ID is the server's id, [a-z0-9-], 1..63 characters.
	ID string
	// AdvertiseAddress is the base URL under which the server's
	// TabletService is reachable, e.g. "http://10.0.0.5:7400/t/ts-1"; it is
	// registered in etcd for the coordinator and for leader hints.
	AdvertiseAddress string
	// ChangelogIdentity names the changelog Deps.Changelog keeps the bucket
	// logs in (changelog.LocalProvider.Identity, kafkalog.Provider.Identity);
	// it is registered, and the coordinator places a bucket's replicas only
	// on servers of one identity. "" registers as a server of an older
	// release would, which placement lets hold any bucket.
	ChangelogIdentity string
	// DataDir holds the server's replicas (one Pebble database each). It is
	// a cache: everything in it is rebuilt from snapshots and the changelog.
	DataDir string
	// SnapshotInterval is how often a leader replica snapshots itself if it
	// changed since its last snapshot; negative disables periodic
	// snapshots (TakeSnapshot still works).
	SnapshotInterval time.Duration
	// BlockCacheBytes is the block cache all replicas share.
	BlockCacheBytes int64
	// MemtableBudgetBytes bounds all replicas' memtables together.
	MemtableBudgetBytes int64
	// ExpectedReplicas sizes memtables as if at least this many replicas
	// were open (replica.WithExpectedReplicas).
	ExpectedReplicas int
	// MaxBatchMutations bounds the mutations of a Write, the keys of a
	// Lookup, the rows of a PrefixLookup and of a Scan page.
	MaxBatchMutations int
	// MaxBatchBytes bounds the encoded changelog bytes of a Write, the
	// key and value bytes of a PrefixLookup result or a Scan page, and the
	// value bytes of a Lookup answer holding more than one value.
	MaxBatchBytes int
	// RestoreConcurrency bounds the replicas restoring at once.
	RestoreConcurrency int
	// TransferConcurrency bounds the files one restore or snapshot moves
	// at once (replica.WithTransferConcurrency).
	TransferConcurrency int
	// LeaseTTL is the TTL of the registration lease.
	LeaseTTL time.Duration
	// ScanPageRows is the page size of a Scan that asks for none.
	ScanPageRows int
	// ScanIdleTimeout releases a consistent scan's pinned view idle this
	// long; MaxScans bounds the pinned views held at once.
	ScanIdleTimeout time.Duration
	MaxScans        int
	// ChangelogSweepInterval is how often the server looks for changelogs
	// of dropped tables and partitions and deletes them (also once at
	// start); negative disables the sweep.
	ChangelogSweepInterval time.Duration
	// RetryMin and RetryMax bound the backoff of a replica whose restore
	// or changelog tailing failed, and of registration.
	RetryMin, RetryMax time.Duration
}

// Deps are the parts a tablet server uses; the daemon wires them.
type Deps struct {
	// Meta is the tier's metadata store.
	Meta *meta.Store
	// Etcd is the client behind Meta. The server reads the coordinator
	// election with it (to seed its epoch gate and to allocate snapshot
	// ids under the current coordinator's guard) and watches the table
	// and partition records.
	Etcd *clientv3.Client
	// Changelog provides the bucket logs; one serves the whole host.
	Changelog changelog.Provider
	// Objects is the object store holding snapshots.
	Objects *objstore.Store
	// Coordinator reaches the active coordinator, for ReportSnapshot.
	Coordinator tierv1connect.CoordinatorServiceClient
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the server's metrics, labelled with its id; nil
	// registers nowhere.
	Registerer prometheus.Registerer
}

var serverIDPattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.BlockCacheBytes == 0 {
		c.BlockCacheBytes = replica.DefaultCacheSize
	}
	if c.MemtableBudgetBytes == 0 {
		c.MemtableBudgetBytes = replica.DefaultMemTableBudget
	}
	if c.MaxBatchMutations == 0 {
		c.MaxBatchMutations = replica.DefaultMaxRequestRows
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = replica.DefaultMaxRequestBytes
	}
	if c.RestoreConcurrency == 0 {
		c.RestoreConcurrency = DefaultRestoreConcurrency
	}
	if c.TransferConcurrency == 0 {
		c.TransferConcurrency = replica.DefaultTransferConcurrency
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.ScanPageRows == 0 {
		c.ScanPageRows = min(DefaultScanPageRows, c.MaxBatchMutations)
	}
	if c.ScanIdleTimeout == 0 {
		c.ScanIdleTimeout = DefaultScanIdleTimeout
	}
	if c.MaxScans == 0 {
		c.MaxScans = DefaultMaxScans
	}
	if c.ChangelogSweepInterval == 0 {
		c.ChangelogSweepInterval = DefaultChangelogSweep
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	return c
}

// validate checks a config with defaults applied.
func (c Config) validate() error {
	var errs []error
	if !serverIDPattern.MatchString(c.ID) {
		errs = append(errs, fmt.Errorf("id %q is not 1..63 characters [a-z0-9-]", c.ID))
	}
	if u, err := url.Parse(c.AdvertiseAddress); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("advertise address %q is not an http(s) URL", c.AdvertiseAddress))
	}
	if err := meta.CheckChangelogIdentity(c.ChangelogIdentity); err != nil {
		errs = append(errs, err)
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("no data dir"))
	}
	switch {
	case c.MaxBatchMutations < 1, c.MaxBatchBytes < 1:
		errs = append(errs, fmt.Errorf("batch limits %d mutations, %d bytes: both must be positive", c.MaxBatchMutations, c.MaxBatchBytes))
	case c.ScanPageRows < 1 || c.ScanPageRows > c.MaxBatchMutations:
		errs = append(errs, fmt.Errorf("scan page rows %d not in [1, %d]", c.ScanPageRows, c.MaxBatchMutations))
	}
	if c.RestoreConcurrency < 1 || c.TransferConcurrency < 1 || c.MaxScans < 1 || c.ExpectedReplicas < 0 {
		errs = append(errs, fmt.Errorf("restore concurrency %d, transfer concurrency %d, max scans %d, expected replicas %d: out of range",
			c.RestoreConcurrency, c.TransferConcurrency, c.MaxScans, c.ExpectedReplicas))
	}
	if c.LeaseTTL < time.Second || c.ScanIdleTimeout <= 0 || c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		errs = append(errs, fmt.Errorf("lease ttl %v (min 1s), scan idle timeout %v, retry %v..%v: out of range",
			c.LeaseTTL, c.ScanIdleTimeout, c.RetryMin, c.RetryMax))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tablet: invalid config: %w", err)
	}
	return nil
}

func (d Deps) validate() error {
	if d.Meta == nil || d.Etcd == nil || d.Changelog == nil || d.Objects == nil || d.Coordinator == nil {
		return errors.New("tablet: invalid deps: meta store, etcd client, changelog provider, object store and coordinator client are required")
	}
	return nil
}
