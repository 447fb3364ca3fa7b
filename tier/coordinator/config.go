package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"

	"github.com/thawdb/thaw/tier/tierpb"
)

// Config configures a Coordinator. Zero durations and counts take the
// defaults documented on each field.
type Config struct {
	// ID names this coordinator: its election value and the key of its
	// published address. Required, [a-z0-9-], at most 63 characters.
	ID string
	// AdvertiseAddress is the address clients reach this coordinator's
	// CoordinatorService at; standbys hand the leader's out in NOT_LEADER.
	// Required.
	AdvertiseAddress string
	// Prefix is the etcd key prefix; it must equal the meta.Store's
	// (default: the store's).
	Prefix string
	// RemoteDataDir is the remote data directory (a URI without a trailing
	// slash, snapshot.Target.RemoteDir) recorded for new tables. Required.
	RemoteDataDir string
	// LeaseTTL is the TTL of the election lease and of the published
	// address: how long a crashed leader holds on (default 10s, at least 1s).
	LeaseTTL time.Duration
	// DefaultReplicationFactor is used by CreateTable when the request asks
	// for 0 (default 3).
	DefaultReplicationFactor int
	// SnapshotRetention is how many registered snapshots of a bucket
	// ReportSnapshot keeps (default 3).
	SnapshotRetention int
	// MaxMovesPerRound bounds the replicas a reconcile round moves for
	// balance (default 16).
	MaxMovesPerRound int
	// RebalanceInterval is the pause between reconcile rounds while they
	// still move replicas (default 2s).
	RebalanceInterval time.Duration
	// ResyncInterval is how often a reconcile round runs without any event
	// (default 30s).
	ResyncInterval time.Duration
	// ServerGrace is how long a new term keeps the replicas and
	// leaderships of the tablet servers its assignments name that are not
	// registered when the term begins, waiting for them to register again
	// instead of replacing them (default 10s; negative: replace at once).
	// After a restart of the whole tier the coordinator usually leads
	// before the tablet servers have registered; without the grace its
	// first rounds would move every replica away from them and back, and
	// leave every bucket led by the first server back.
	ServerGrace time.Duration
	// TabletTimeout bounds one coordinator → tablet call (default 30s;
	// TakeSnapshot gets ten times as long).
	TabletTimeout time.Duration
	// Fanout bounds concurrent coordinator → tablet calls and object
	// deletions of one operation (default 8).
	Fanout int
	// DroppedDataCleanInterval is how often the leader deletes the
	// object-store data of dropped tables and partitions (default 1m; also
	// at the start of each term; negative disables it). DroppedDataGrace
	// is how long after a drop it keeps looking for late snapshot uploads
	// before it forgets the target (default 1m).
	DroppedDataCleanInterval time.Duration
	DroppedDataGrace         time.Duration
	// BulkLoad configures bulk-load transactions (zero fields: defaults).
	BulkLoad BulkLoadConfig
	// Callers, when set, are the only callers of the BulkLoadService:
	// every call must carry the bearer token of one of them, and Begin,
	// GetInProgress, Status, Commit, Abort and GetUploadCredentials need a
	// caller allowed to bulk load the target (List shows only such
	// transactions). Empty: no authentication (every caller may do
	// everything). The CoordinatorService authenticates only its DDL, and
	// only with AuthorizeDDL; the tablet servers' reads and writes only
	// with AuthorizeData. Mutual TLS on the listeners covers every
	// service.
	Callers []Caller
	// AuthorizeDDL extends Callers to the CoordinatorService's DDL:
	// creating and dropping databases, tables and partitions then needs
	// the bearer token of a caller whose DDL patterns cover the target.
	// Reads and the tablet servers' calls stay open. Needs Callers.
	AuthorizeDDL bool
	// AuthorizeData extends Callers to the tablet servers' reads and
	// writes: a Lookup, PrefixLookup or Scan then needs the bearer token
	// of a caller whose Read patterns cover the table, a Write one whose
	// Write patterns do. The CoordinatorService's metadata reads then
	// need a caller too (one with some grant on the table for GetTable,
	// ListPartitions and GetTargetLocations; DDL or Write for
	// TriggerSnapshot); GetLeader and ListServers stay open. The leading coordinator publishes the policy
	// (meta.DataAccess: callers' names, token hashes and Read and Write
	// patterns, or that nothing is enforced) at the start of every term;
	// the tablet servers follow it, and again after SetCallers. Needs a
	// caller with Read or Write.
	AuthorizeData bool
}

// Deps are the parts a Coordinator uses; all but Logger and Registerer are
// required.
type Deps struct {
	// Etcd is the client of the metadata etcd; the coordinator campaigns and
	// publishes its address with it. Closing it ends leadership.
	Etcd *clientv3.Client
	// Meta is the metadata store over Etcd.
	Meta *meta.Store
	// Tablets returns a TabletService client for a tablet server's
	// registered address.
	Tablets func(address string) tierv1connect.TabletServiceClient
	// Objects is the object store holding snapshots (retention reads
	// _METADATA documents and deletes files).
	Objects ObjectStore
	// Logger receives the coordinator's logs (default: discard).
	Logger *slog.Logger
	// Registerer receives the coordinator's metrics (default: none).
	Registerer prometheus.Registerer
	// Clock is the time of bulk-load transactions (default: the wall
	// clock).
	Clock Clock
	// BulkLoadHook, when set, is called at named steps of bulk-load
	// transactions; an error stops the step as a crash would (its effect is
	// not performed, or its result not fed back). For tests that inject
	// failures. The steps: "persist:{op}" before a record write and
	// "persisted:{op}" after it landed (op: begin, fence-ready, freeze,
	// decide, adopt, activate, finish-commit, begin-abort, finish-abort;
	// and "persisted:expire" after the result GC), "delete" before the
	// result GC, "prove-empty", "allocate", "validate" before and
	// "validated" after a validation, "send:{fence,restore,publish,unfence}"
	// before a round command to one server. It may be called from several
	// goroutines at once.
	BulkLoadHook func(step string) error
	// UploadKey is the upload gateway's signing key (uploadcap.KeySize
	// bytes); default: a random key of this process, so that only this
	// coordinator verifies the capabilities it mints (a builder asks the
	// next active coordinator for new ones). Coordinators given the same
	// key accept each other's capabilities.
	UploadKey []byte
}

// Defaults.
const (
	DefaultLeaseTTL          = 10 * time.Second
	DefaultReplicationFactor = 3
	DefaultSnapshotRetention = 3
	DefaultMaxMovesPerRound  = 16
	DefaultRebalanceInterval = 2 * time.Second
	DefaultResyncInterval    = 30 * time.Second
	DefaultServerGrace       = 10 * time.Second
	DefaultTabletTimeout     = 30 * time.Second
	DefaultFanout            = 8
	// DefaultDroppedDataCleanInterval and DefaultDroppedDataGrace: see
	// Config.
	DefaultDroppedDataCleanInterval = time.Minute
	DefaultDroppedDataGrace         = time.Minute

	// MaxReplicationFactor bounds a table's replication factor.
	MaxReplicationFactor = tierpb.MaxReplicationFactor

	maxServerIDLen = 63
	// takeSnapshotFactor stretches TabletTimeout for TakeSnapshot, which
	// uploads a whole bucket.
	takeSnapshotFactor = 10
)

// withDefaults returns cfg with defaults filled in, or why it is invalid.
func (cfg Config) withDefaults(store *meta.Store) (Config, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = store.Prefix()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	def(&cfg.LeaseTTL, DefaultLeaseTTL)
	def(&cfg.RebalanceInterval, DefaultRebalanceInterval)
	def(&cfg.ResyncInterval, DefaultResyncInterval)
	def(&cfg.ServerGrace, DefaultServerGrace)
	def(&cfg.TabletTimeout, DefaultTabletTimeout)
	def(&cfg.DroppedDataCleanInterval, DefaultDroppedDataCleanInterval)
	def(&cfg.DroppedDataGrace, DefaultDroppedDataGrace)
	defInt(&cfg.DefaultReplicationFactor, DefaultReplicationFactor)
	defInt(&cfg.SnapshotRetention, DefaultSnapshotRetention)
	defInt(&cfg.MaxMovesPerRound, DefaultMaxMovesPerRound)
	defInt(&cfg.Fanout, DefaultFanout)
	cfg.BulkLoad = cfg.BulkLoad.withDefaults()

	var errs []error
	if !isServerID(cfg.ID) {
		errs = append(errs, fmt.Errorf("id %q is not 1..%d characters [a-z0-9-]", cfg.ID, maxServerIDLen))
	}
	if cfg.AdvertiseAddress == "" {
		errs = append(errs, errors.New("no advertise address"))
	}
	if cfg.Prefix != store.Prefix() {
		errs = append(errs, fmt.Errorf("prefix %q is not the metadata store's %q", cfg.Prefix, store.Prefix()))
	}
	if err := (snapshot.Target{RemoteDir: cfg.RemoteDataDir, Database: "d", Table: "t"}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("remote data dir: %w", err))
	}
	if cfg.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("lease ttl %v is shorter than 1s", cfg.LeaseTTL))
	}
	if cfg.DefaultReplicationFactor < 1 || cfg.DefaultReplicationFactor > MaxReplicationFactor {
		errs = append(errs, fmt.Errorf("default replication factor %d not in 1..%d", cfg.DefaultReplicationFactor, MaxReplicationFactor))
	}
	for _, c := range []struct {
		what string
		v    int
	}{{"snapshot retention", cfg.SnapshotRetention}, {"max moves per round", cfg.MaxMovesPerRound}, {"fanout", cfg.Fanout}} {
		if c.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d is below 1", c.what, c.v))
		}
	}
	for _, d := range []struct {
		what string
		v    time.Duration
	}{{"rebalance interval", cfg.RebalanceInterval}, {"resync interval", cfg.ResyncInterval}, {"tablet timeout", cfg.TabletTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.what, d.v))
		}
	}
	if cfg.DroppedDataGrace < 0 {
		errs = append(errs, fmt.Errorf("dropped data grace %v is negative", cfg.DroppedDataGrace))
	}
	if _, err := newAuthn(cfg.Callers); err != nil {
		errs = append(errs, err)
	}
	if cfg.AuthorizeDDL && len(cfg.Callers) == 0 {
		errs = append(errs, errors.New("authorize ddl needs callers"))
	}
	if err := CheckDataCallers(cfg.AuthorizeData, cfg.Callers); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.BulkLoad.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, fmt.Errorf("coordinator: config: %w", err)
	}
	if cfg.BulkLoad.OrphanCleanInterval == 0 {
		cfg.BulkLoad.OrphanCleanInterval = DefaultOrphanCleanInterval
	}
	return cfg, nil
}

// isServerID reports whether id is 1..63 characters [a-z0-9-].
func isServerID(id string) bool {
	if id == "" || len(id) > maxServerIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
