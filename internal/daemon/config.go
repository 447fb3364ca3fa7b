package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/changelog/kafkalog"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet/replica"
	"github.com/thawdb/thaw/triggers/kafka"
)

// Config is implemented by *ServerConfig, *CoordinatorConfig and
// *TabletConfig: Defaults sets every field to its default, Validate
// reports every invalid field (errors.Join), naming it by its YAML key.
type Config interface {
	Defaults()
	Validate() error
}

// LoadConfig reads the YAML file at path into cfg over its defaults and
// validates the result. Decoding is strict: an unknown or misspelt key, a
// value of the wrong type, a duplicate key or a second YAML document is an
// error that names the line.
func LoadConfig(path string, cfg Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("daemon: read config: %w", err)
	}
	if err := DecodeConfig(bytes.NewReader(b), path, cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("daemon: config %s: %w", path, err)
	}
	return nil
}

// DecodeConfig sets cfg to its defaults and decodes the YAML document in r
// over them, strictly (see LoadConfig). It does not validate, so that
// flags can override the file first; name labels errors. An empty document
// leaves the defaults.
func DecodeConfig(r io.Reader, name string, cfg Config) error {
	cfg.Defaults()
	if err := decodeStrict(r, cfg); err != nil {
		return fmt.Errorf("daemon: config %s: %w", name, err)
	}
	return nil
}

// decodeStrict decodes the one YAML document in r into v: unknown keys,
// duplicate keys and a second document are errors (with line numbers); an
// empty document leaves v as it is.
func decodeStrict(r io.Reader, v any) error {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	err := dec.Decode(v)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return describeYAMLError(err, v)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("after the document: %w", err)
	default:
		return fmt.Errorf("more than one YAML document (line %d)", extra.Line)
	}
}

// Defaults of the configuration; docs/tier.md lists every key.
const (
	DefaultListen            = "127.0.0.1:7070"
	DefaultTabletListen      = "127.0.0.1:7071"
	DefaultTabletServers     = 3
	DefaultPrefix            = "/thaw"
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultEtcdDialTimeout   = 5 * time.Second
	DefaultEmbeddedEtcd      = "127.0.0.1:0"
	DefaultEtcdCompaction    = time.Hour
	DefaultLeaseTTL          = 10 * time.Second
	DefaultSnapshotInterval  = 10 * time.Minute
	DefaultChangelogSweep    = 10 * time.Minute
	DefaultReplication       = 3
	DefaultSnapshotRetention = 3
	DefaultCacheSize         = 256 << 20
	DefaultMemTableBudget    = 256 << 20
	DefaultSegmentBytes      = 64 << 20
	DefaultMaxBatchBytes     = 8 << 20
	DefaultMaxBatchRows      = 10_000
	DefaultMaxRequestBytes   = 4 << 20

	// MaxEmbeddedTabletServers bounds `tablets` of the embedded mode.
	MaxEmbeddedTabletServers = 64
)

// ByteSize is a size in bytes. In YAML it is an integer or a string with a
// unit: "512", "64KiB", "256MiB", "2GiB" (also KB, MB, GB as powers of
// 1000).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize parses "256MiB", "64KB" or "1024".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (mult > 1 && n > (1<<62)/mult) {
		return 0, fmt.Errorf("size %q is not a byte count like 1024, 64KiB or 256MiB", s)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalYAML accepts an integer or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a size must be a number or a string like 256MiB", n.Line)
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// MarshalYAML writes the size with the largest binary unit that divides it.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// String returns the size with the largest binary unit that divides it:
// "256MiB", "1536KiB", "1000".
func (b ByteSize) String() string {
	if b != 0 {
		for i := 3; i >= 0; i-- {
			if u := byteUnits[i]; int64(b)%u.mult == 0 {
				return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// LogConfig configures the process's slog logger.
type LogConfig struct {
	// Level is debug, info, warn or error (default info).
	Level string `yaml:"level"`
	// Format is text or json (default text).
	Format string `yaml:"format"`
}

func (c *LogConfig) defaults() { *c = LogConfig{Level: "info", Format: "text"} }

func (c LogConfig) validate() error {
	var errs []error
	switch c.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level %q is not debug, info, warn or error", c.Level))
	}
	switch c.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format %q is not text or json", c.Format))
	}
	return errors.Join(errs...)
}

// EtcdConfig reaches an external etcd cluster (thaw coordinator, thaw
// tablet). The password comes from the environment variable
// THAW_ETCD_PASSWORD, never from the file.
type EtcdConfig struct {
	// Endpoints are the cluster's client URLs (required), e.g.
	// ["http://10.0.0.1:2379"].
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key prefix of the tier's metadata (default /thaw).
	Prefix string `yaml:"prefix"`
	// DialTimeout bounds connecting (default 5s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Username for etcd authentication (optional).
	Username string `yaml:"username"`
	// TLS reaches https:// endpoints: CAFile is the PEM bundle the
	// client trusts (default: the system's roots), CertFile and KeyFile
	// the client certificate for a cluster that requires one (changed
	// files are picked up without a restart, by the next connection).
	TLS EtcdTLS `yaml:"tls"`
}

// EtcdTLS is the `etcd.tls:` section.
type EtcdTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// set reports whether any file is named.
func (t EtcdTLS) set() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// secure reports whether the endpoints are reached over TLS: all https://
// or any etcd.tls file named.
func (c EtcdConfig) secure() bool {
	return c.TLS.set() || slices.ContainsFunc(c.Endpoints, func(e string) bool { return strings.HasPrefix(e, "https://") })
}

func (c *EtcdConfig) defaults() {
	*c = EtcdConfig{Prefix: DefaultPrefix, DialTimeout: DefaultEtcdDialTimeout}
}

func (c EtcdConfig) validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("etcd.endpoints: at least one endpoint is required"))
	}
	secure := c.secure()
	for _, e := range c.Endpoints {
		switch {
		case strings.TrimSpace(e) == "":
			errs = append(errs, errors.New("etcd.endpoints: empty endpoint"))
		case secure && !strings.HasPrefix(e, "https://"):
			errs = append(errs, fmt.Errorf("etcd.endpoints: %q: with etcd.tls (or another https:// endpoint) every endpoint is https://", e))
		}
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("etcd.tls: cert_file and key_file go together"))
	}
	errs = append(errs, validatePrefix("etcd.prefix", c.Prefix))
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("etcd.dial_timeout %v must be positive", c.DialTimeout))
	}
	return errors.Join(errs...)
}

// EmbeddedEtcdConfig configures the etcd that thaw server runs in the
// process, on {data_dir}/etcd.
type EmbeddedEtcdConfig struct {
	// Listen is the client address of the embedded etcd (default
	// 127.0.0.1:0, a free loopback port chosen at start and logged).
	Listen string `yaml:"listen"`
	// Advertise is the host:port other processes (a promoter's
	// tier.etcd.endpoints) reach it at: logged at start and published in
	// etcd's member list (default: the listener's address).
	Advertise string `yaml:"advertise"`
	// Prefix is the key prefix of the tier's metadata (default /thaw).
	Prefix string `yaml:"prefix"`
	// CompactionRetention is how much history etcd keeps (default 1h).
	CompactionRetention time.Duration `yaml:"compaction_retention"`
	// TLS makes etcd serve its clients over TLS (EmbeddedEtcdTLS).
	TLS EmbeddedEtcdTLS `yaml:"tls"`
}

// EmbeddedEtcdTLS is thaw server's `etcd.tls:` section: etcd serves
// https:// with the key pair of CertFile and KeyFile (read at each
// handshake, so a renewal applies without a restart), and with
// ClientCAFile it requires client certificates signed by a CA of that PEM
// bundle. The server's own clients trust exactly that certificate and,
// with ClientCAFile, present it, so it must then also allow client
// authentication and be signed by a CA of the bundle (checked at start).
type EmbeddedEtcdTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

func (t EmbeddedEtcdTLS) validate(section string) error {
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return fmt.Errorf("%s: cert_file and key_file go together", section)
	case t.ClientCAFile != "" && t.CertFile == "":
		return fmt.Errorf("%s: client_ca_file needs cert_file and key_file", section)
	}
	return nil
}

func (c *EmbeddedEtcdConfig) defaults() {
	*c = EmbeddedEtcdConfig{Listen: DefaultEmbeddedEtcd, Prefix: DefaultPrefix, CompactionRetention: DefaultEtcdCompaction}
}

func (c EmbeddedEtcdConfig) validate() error {
	var errs []error
	if err := validateHostPort("etcd.listen", c.Listen); err != nil {
		errs = append(errs, err)
	}
	if c.Advertise != "" {
		errs = append(errs, validateEtcdAdvertise("etcd.advertise", c.Advertise))
	}
	errs = append(errs, validatePrefix("etcd.prefix", c.Prefix), c.TLS.validate("etcd.tls"))
	if c.CompactionRetention <= 0 {
		errs = append(errs, fmt.Errorf("etcd.compaction_retention %v must be positive", c.CompactionRetention))
	}
	return errors.Join(errs...)
}

// CoordinatorOptions tune a coordinator (the `coordinator:` section).
type CoordinatorOptions struct {
	// LeaseTTL is the election lease: how long a crashed leader holds on
	// before a standby takes over (default 10s, at least 1s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// DefaultReplicationFactor is used when a table is created with
	// replication 0 (default 3; thaw server lowers it to the number of
	// tablet servers when that is smaller).
	DefaultReplicationFactor int `yaml:"default_replication_factor"`
	// SnapshotRetention is how many completed snapshots of a bucket are
	// kept (default 3).
	SnapshotRetention int `yaml:"snapshot_retention"`
	// MaxMovesPerRound bounds the replicas one rebalance round moves
	// (default 16).
	MaxMovesPerRound int `yaml:"max_moves_per_round"`
	// RebalanceInterval is the pause between rounds that still move
	// replicas (default 2s).
	RebalanceInterval time.Duration `yaml:"rebalance_interval"`
	// ResyncInterval is how often the coordinator reconciles without an
	// event (default 30s).
	ResyncInterval time.Duration `yaml:"resync_interval"`
	// ServerGrace is how long a coordinator that begins to lead waits for
	// the tablet servers its assignments name to register before it
	// replaces their replicas and leaderships (default 10s; negative: at
	// once).
	ServerGrace time.Duration `yaml:"server_grace"`
	// TabletTimeout bounds one coordinator → tablet call (default 30s).
	TabletTimeout time.Duration `yaml:"tablet_timeout"`
	// Fanout bounds concurrent coordinator → tablet calls (default 8).
	Fanout int `yaml:"fanout"`
	// DroppedDataCleanInterval is how often the leading coordinator
	// deletes the object-store data of dropped tables and partitions
	// (default 1m, at least 1s; negative disables it).
	DroppedDataCleanInterval time.Duration `yaml:"dropped_data_clean_interval"`
	// DroppedDataGrace is how long after a drop the coordinator keeps
	// looking for late snapshot uploads into the dropped target's
	// directory before it forgets the target (default 1m).
	DroppedDataGrace time.Duration `yaml:"dropped_data_grace"`
	// BulkLoad tunes bulk-load transactions (the `coordinator.bulk_load:`
	// section); a zero or absent key keeps the coordinator's default.
	BulkLoad BulkLoadOptions `yaml:"bulk_load"`
	// Callers, when set, are the only callers of the BulkLoadService, each
	// known by the SHA-256 of its bearer token (coordinator.Config.Callers;
	// clients send the token from THAW_TOKEN).
	Callers []CallerOptions `yaml:"callers"`
	// CallersFile, instead of Callers, names a YAML file holding them
	// (`callers: [...]`, the same shape), read at start and again when it
	// changes: callers, their tokens and grants change without a restart.
	// It must name at least one caller.
	CallersFile string `yaml:"callers_file"`
	// AuthorizeDDL makes creating and dropping databases, tables and
	// partitions need a caller whose ddl patterns cover the target
	// (coordinator.Config.AuthorizeDDL; needs callers).
	AuthorizeDDL bool `yaml:"authorize_ddl"`
	// AuthorizeData makes the tablet servers' reads and writes need a
	// caller whose read or write patterns cover the table
	// (coordinator.Config.AuthorizeData; needs a caller with read or
	// write patterns). The leading coordinator publishes the policy in
	// etcd; every tablet server follows it.
	AuthorizeData bool `yaml:"authorize_data"`
}

// CallerOptions are one caller of the tier (the `coordinator.callers:`
// list).
type CallerOptions struct {
	Name        string   `yaml:"name"`
	TokenSHA256 string   `yaml:"token_sha256"`
	Tables      []string `yaml:"tables"`
	// DDL are the tables the caller may create and drop with
	// authorize_ddl (coordinator.Caller.DDL).
	DDL []string `yaml:"ddl"`
	// Read and Write are the tables whose rows the caller may read and
	// write with authorize_data (coordinator.Caller.Read, .Write).
	Read  []string `yaml:"read"`
	Write []string `yaml:"write"`
}

// BulkLoadOptions tune bulk-load transactions; see docs/bulkload.md for
// what each limit guards. Zero keeps the default.
type BulkLoadOptions struct {
	DefaultBuildTimeout   time.Duration `yaml:"default_build_timeout"`
	MaxBuildTimeout       time.Duration `yaml:"max_build_timeout"`
	CommitDecisionTimeout time.Duration `yaml:"commit_decision_timeout"`
	ResultRetention       time.Duration `yaml:"result_retention"`
	MaxActive             int           `yaml:"max_active"`
	MaxPerTarget          int           `yaml:"max_per_target"`
	MaxManifestBytes      ByteSize      `yaml:"max_manifest_bytes"`
	MaxMetadataBytes      ByteSize      `yaml:"max_metadata_bytes"`
	MaxInputBytes         ByteSize      `yaml:"max_input_bytes"`
	// OrphanCleanInterval: negative disables the periodic sweep.
	OrphanCleanInterval time.Duration `yaml:"orphan_clean_interval"`
	// The upload gateway of scoped build uploads (docs/bulkload.md,
	// "Scoped uploads"): a minted capability's lifetime (default 15m,
	// 1s..24h), the largest object (default 8GiB), uploads stored at once
	// (default 8) and where bodies are received (default the system's
	// temporary directory).
	UploadCredentialTTL time.Duration `yaml:"upload_credential_ttl"`
	MaxUploadBytes      ByteSize      `yaml:"max_upload_bytes"`
	UploadConcurrency   int           `yaml:"upload_concurrency"`
	UploadTempDir       string        `yaml:"upload_temp_dir"`
	// The lifetime of a signed upload straight to an S3 store (default 5m,
	// 1s..1h; negative: builders send everything through the gateway).
	SignedUploadTTL time.Duration `yaml:"signed_upload_ttl"`
}

// coordinatorConfig is the coordinator.Config these options give
// coordinator id, advertised at addr, under the etcd prefix.
func (c CoordinatorOptions) coordinatorConfig(id, addr, prefix, remoteDir string, replication int) coordinator.Config {
	b := c.BulkLoad
	return coordinator.Config{
		Callers:                  toCallers(c.Callers),
		AuthorizeDDL:             c.AuthorizeDDL,
		AuthorizeData:            c.AuthorizeData,
		ID:                       id,
		AdvertiseAddress:         addr,
		Prefix:                   prefix,
		RemoteDataDir:            remoteDir,
		LeaseTTL:                 c.LeaseTTL,
		DefaultReplicationFactor: replication,
		SnapshotRetention:        c.SnapshotRetention,
		MaxMovesPerRound:         c.MaxMovesPerRound,
		RebalanceInterval:        c.RebalanceInterval,
		ResyncInterval:           c.ResyncInterval,
		ServerGrace:              c.ServerGrace,
		TabletTimeout:            c.TabletTimeout,
		Fanout:                   c.Fanout,
		DroppedDataCleanInterval: c.DroppedDataCleanInterval,
		DroppedDataGrace:         c.DroppedDataGrace,
		BulkLoad: coordinator.BulkLoadConfig{
			DefaultBuildTimeout:   b.DefaultBuildTimeout,
			MaxBuildTimeout:       b.MaxBuildTimeout,
			CommitDecisionTimeout: b.CommitDecisionTimeout,
			ResultRetention:       b.ResultRetention,
			MaxActive:             b.MaxActive,
			MaxPerTarget:          b.MaxPerTarget,
			MaxManifestBytes:      int64(b.MaxManifestBytes),
			MaxMetadataBytes:      int64(b.MaxMetadataBytes),
			MaxInputBytes:         int64(b.MaxInputBytes),
			OrphanCleanInterval:   b.OrphanCleanInterval,
			UploadCredentialTTL:   b.UploadCredentialTTL,
			MaxUploadBytes:        int64(b.MaxUploadBytes),
			UploadConcurrency:     b.UploadConcurrency,
			UploadTempDir:         b.UploadTempDir,
			SignedUploadTTL:       b.SignedUploadTTL,
		},
	}
}

func (c *CoordinatorOptions) defaults() {
	*c = CoordinatorOptions{
		LeaseTTL:                 DefaultLeaseTTL,
		DefaultReplicationFactor: DefaultReplication,
		SnapshotRetention:        DefaultSnapshotRetention,
		MaxMovesPerRound:         16,
		RebalanceInterval:        2 * time.Second,
		ResyncInterval:           30 * time.Second,
		ServerGrace:              coordinator.DefaultServerGrace,
		TabletTimeout:            30 * time.Second,
		Fanout:                   8,
		DroppedDataCleanInterval: coordinator.DefaultDroppedDataCleanInterval,
		DroppedDataGrace:         coordinator.DefaultDroppedDataGrace,
	}
}

func (c CoordinatorOptions) validate() error {
	var errs []error
	if err := c.coordinatorConfig("c", "a", "/p", "file:///r", 1).BulkLoad.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("coordinator.bulk_load: %w", err))
	}
	if err := coordinator.ValidateCallers(c.coordinatorConfig("c", "a", "/p", "file:///r", 1).Callers); err != nil {
		errs = append(errs, fmt.Errorf("coordinator.callers: %w", err))
	}
	if c.CallersFile != "" && len(c.Callers) > 0 {
		errs = append(errs, errCallersTwice)
	}
	// With a callers file these are checked when it is read.
	if c.AuthorizeDDL && len(c.Callers) == 0 && c.CallersFile == "" {
		errs = append(errs, errors.New("coordinator.authorize_ddl needs coordinator.callers"))
	}
	if c.AuthorizeData && !slices.ContainsFunc(c.Callers, func(cl CallerOptions) bool { return len(cl.Read)+len(cl.Write) > 0 }) && c.CallersFile == "" {
		errs = append(errs, errors.New("coordinator.authorize_data needs a caller in coordinator.callers with read or write patterns"))
	}
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("coordinator.lease_ttl %v is shorter than 1s", c.LeaseTTL))
	}
	if c.DroppedDataCleanInterval >= 0 && c.DroppedDataCleanInterval < time.Second {
		errs = append(errs, fmt.Errorf("coordinator.dropped_data_clean_interval %v is shorter than 1s (negative disables it)", c.DroppedDataCleanInterval))
	}
	// A zero in the file would become the default when the coordinator
	// starts: refused rather than quietly replaced.
	if c.DroppedDataGrace <= 0 {
		errs = append(errs, fmt.Errorf("coordinator.dropped_data_grace %v must be positive (default %v)", c.DroppedDataGrace, coordinator.DefaultDroppedDataGrace))
	}
	if c.ServerGrace == 0 {
		errs = append(errs, fmt.Errorf("coordinator.server_grace 0s would mean the default %v; a negative value replaces the absent servers at once", coordinator.DefaultServerGrace))
	}
	if c.DefaultReplicationFactor < 1 || c.DefaultReplicationFactor > 16 {
		errs = append(errs, fmt.Errorf("coordinator.default_replication_factor %d not in 1..16", c.DefaultReplicationFactor))
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"snapshot_retention", c.SnapshotRetention}, {"max_moves_per_round", c.MaxMovesPerRound}, {"fanout", c.Fanout}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("coordinator.%s %d is below 1", f.key, f.v))
		}
	}
	for _, f := range []struct {
		key string
		v   time.Duration
	}{{"rebalance_interval", c.RebalanceInterval}, {"resync_interval", c.ResyncInterval}, {"tablet_timeout", c.TabletTimeout}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("coordinator.%s %v must be positive", f.key, f.v))
		}
	}
	return errors.Join(errs...)
}

// TabletOptions tune a tablet server (the `tablet:` section).
type TabletOptions struct {
	// LeaseTTL is the registration lease: how long after a crash the
	// coordinator notices and moves the server's replicas (default 10s, at
	// least 1s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// SnapshotInterval is how often a bucket leader snapshots a bucket that
	// changed (default 10m; negative disables periodic snapshots).
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
	// CacheSize is the block cache shared by all replicas of the server
	// (default 256MiB, at least 1MiB).
	CacheSize ByteSize `yaml:"cache_size"`
	// MemTableBudget is the memory all replicas' memtables share (default
	// 256MiB, at least 768KiB: replica.MinMemTableBudget).
	MemTableBudget ByteSize `yaml:"memtable_budget"`
	// ExpectedReplicas sizes memtables as if at least this many replicas
	// were open (default 0: as they open).
	ExpectedReplicas int `yaml:"expected_replicas"`
	// MaxBatchRows bounds the mutations of one write, the keys of one
	// lookup and the rows of one scan page (default 10000).
	MaxBatchRows int `yaml:"max_batch_rows"`
	// MaxBatchBytes bounds the encoded bytes of one write and of one scan
	// page (default 4MiB; below changelog.max_batch_bytes).
	MaxBatchBytes ByteSize `yaml:"max_batch_bytes"`
	// RestoreConcurrency bounds the replicas restoring at once (default 4).
	RestoreConcurrency int `yaml:"restore_concurrency"`
	// TransferConcurrency bounds the files one restore or snapshot moves
	// at once (default 4).
	TransferConcurrency int `yaml:"transfer_concurrency"`
	// ChangelogSweepInterval is how often the server deletes changelogs of
	// dropped tables and partitions that their replicas did not (default
	// 10m, at least 1s; negative disables the sweep).
	ChangelogSweepInterval time.Duration `yaml:"changelog_sweep_interval"`
}

func (c *TabletOptions) defaults() {
	*c = TabletOptions{
		LeaseTTL:               DefaultLeaseTTL,
		SnapshotInterval:       DefaultSnapshotInterval,
		CacheSize:              DefaultCacheSize,
		MemTableBudget:         DefaultMemTableBudget,
		MaxBatchRows:           DefaultMaxBatchRows,
		MaxBatchBytes:          DefaultMaxRequestBytes,
		RestoreConcurrency:     4,
		TransferConcurrency:    4,
		ChangelogSweepInterval: DefaultChangelogSweep,
	}
}

func (c TabletOptions) validate() error {
	var errs []error
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("tablet.lease_ttl %v is shorter than 1s", c.LeaseTTL))
	}
	if c.SnapshotInterval == 0 {
		errs = append(errs, errors.New("tablet.snapshot_interval must not be 0 (negative disables periodic snapshots)"))
	}
	if c.ChangelogSweepInterval >= 0 && c.ChangelogSweepInterval < time.Second {
		errs = append(errs, fmt.Errorf("tablet.changelog_sweep_interval %v is shorter than 1s (negative disables the sweep)", c.ChangelogSweepInterval))
	}
	if c.CacheSize < 1<<20 {
		errs = append(errs, fmt.Errorf("tablet.cache_size %v is below 1MiB", c.CacheSize))
	}
	if c.MemTableBudget < replica.MinMemTableBudget {
		errs = append(errs, fmt.Errorf("tablet.memtable_budget %v is below %v", c.MemTableBudget, ByteSize(replica.MinMemTableBudget)))
	}
	if c.ExpectedReplicas < 0 {
		errs = append(errs, fmt.Errorf("tablet.expected_replicas %d is negative", c.ExpectedReplicas))
	}
	for _, f := range []struct {
		key string
		v   int64
	}{{"max_batch_rows", int64(c.MaxBatchRows)}, {"max_batch_bytes", int64(c.MaxBatchBytes)},
		{"restore_concurrency", int64(c.RestoreConcurrency)}, {"transfer_concurrency", int64(c.TransferConcurrency)}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("tablet.%s %d is below 1", f.key, f.v))
		}
	}
	return errors.Join(errs...)
}

// validateBatchBytes checks that a write batch fits a changelog append.
func validateBatchBytes(t TabletOptions, l ChangelogOptions) error {
	// A single row as large as a write may be is one record: it must fit a
	// changelog batch with its headers.
	if room := changelog.RecordRoom(int64(l.MaxBatchBytes)); int64(t.MaxBatchBytes) > room {
		return fmt.Errorf("tablet.max_batch_bytes %v must be at most changelog.max_batch_bytes %v less %d bytes of headers (%d)",
			t.MaxBatchBytes, l.MaxBatchBytes, int64(l.MaxBatchBytes)-room, room)
	}
	return nil
}

// ChangelogOptions tune the local segment log (the `changelog:` section).
type ChangelogOptions struct {
	// Dir is the root of the local changelog (thaw tablet only; default
	// {data_dir}/changelog; thaw server always uses {data_dir}/changelog).
	// One process at a time may use a root.
	Dir string `yaml:"dir"`
	// SegmentBytes is the size at which a bucket log rolls to a new segment
	// (default 64MiB).
	SegmentBytes ByteSize `yaml:"segment_bytes"`
	// MaxBatchBytes bounds one append (default 8MiB; at most segment_bytes
	// minus the segment header). Never lower it across a restart after a
	// crash.
	MaxBatchBytes ByteSize `yaml:"max_batch_bytes"`
	// Kafka, when set, keeps every bucket log in Kafka (one single-partition
	// topic per bucket log, tier/changelog/kafkalog) instead of the local
	// segment log, so that tablet servers on different hosts replicate
	// through it. Dir and SegmentBytes then do not apply; MaxBatchBytes
	// does.
	Kafka *KafkaChangelogOptions `yaml:"kafka"`
}

// KafkaChangelogOptions are the `changelog.kafka:` section.
type KafkaChangelogOptions struct {
	// Brokers are the seed brokers, host:port (required).
	Brokers []string `yaml:"brokers"`
	// TopicPrefix prefixes the topics (default thaw.changelog); tiers that
	// share a Kafka cluster need different ones.
	TopicPrefix string `yaml:"topic_prefix"`
	// ReplicationFactor of the topics the tier creates (default: the
	// brokers' default).
	ReplicationFactor int16 `yaml:"replication_factor"`
	// PollInterval is the longest pause between a follower's polls for new
	// records when none arrive (default 200ms).
	PollInterval time.Duration `yaml:"poll_interval"`
	// TLS and SASL as in the promoter's kafka section; the SASL password
	// is THAW_KAFKA_PASSWORD. TLS file paths are used as given.
	TLS  *KafkaTLSConfig  `yaml:"tls"`
	SASL *KafkaSASLConfig `yaml:"sasl"`
}

func (k *KafkaChangelogOptions) config(maxBatch ByteSize, log *slog.Logger) kafkalog.Config {
	return kafkalog.Config{
		Brokers: k.Brokers, TopicPrefix: k.TopicPrefix, ReplicationFactor: k.ReplicationFactor,
		PollInterval: k.PollInterval, MaxBatchBytes: int64(maxBatch), Logger: log,
	}
}

func (k *KafkaChangelogOptions) validate(maxBatch ByteSize) error {
	var errs []error
	if err := k.config(maxBatch, nil).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("changelog.kafka: %w", err))
	}
	var s *kafka.SASL
	if k.SASL != nil {
		s = &kafka.SASL{Mechanism: k.SASL.Mechanism, User: k.SASL.User}
	}
	if len(k.Brokers) > 0 {
		if err := kafka.CheckConnection(k.Brokers, s); err != nil {
			errs = append(errs, fmt.Errorf("changelog.kafka: %w", err))
		}
	}
	if t := k.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("changelog.kafka.tls: cert_file and key_file go together"))
	}
	return errors.Join(errs...)
}

// load is config with the TLS material read and the SASL password taken
// from the environment.
func (k *KafkaChangelogOptions) load(maxBatch ByteSize, log *slog.Logger, getenv func(string) string) (kafkalog.Config, error) {
	dial, s, err := kafkaConnection("changelog.kafka", k.TLS, k.SASL, getenv, log.With("component", "kafka-tls"))
	if err != nil {
		return kafkalog.Config{}, err
	}
	cfg := k.config(maxBatch, log)
	cfg.ClientOptions = kafka.ConnOptions(k.Brokers, "thaw-tablet", nil, dial, s, log)
	return cfg, nil
}

func (c *ChangelogOptions) defaults() {
	*c = ChangelogOptions{SegmentBytes: DefaultSegmentBytes, MaxBatchBytes: DefaultMaxBatchBytes}
}

func (c ChangelogOptions) validate() error {
	var errs []error
	if c.SegmentBytes < 1<<20 || c.SegmentBytes > 1<<31 {
		errs = append(errs, fmt.Errorf("changelog.segment_bytes %v not in 1MiB..2GiB", c.SegmentBytes))
	}
	if c.MaxBatchBytes < 64<<10 || c.MaxBatchBytes > c.SegmentBytes-4096 {
		errs = append(errs, fmt.Errorf("changelog.max_batch_bytes %v not in 64KiB..segment_bytes-4KiB", c.MaxBatchBytes))
	}
	if c.Kafka != nil {
		errs = append(errs, c.Kafka.validate(c.MaxBatchBytes))
		if c.Dir != "" {
			errs = append(errs, errors.New("changelog.dir: not used with changelog.kafka; remove one"))
		}
	}
	return errors.Join(errs...)
}

// ServerConfig configures `thaw server`: the embedded single-process tier
// (embedded etcd, one coordinator, N tablet servers, file:// object
// storage and the local changelog, all under DataDir).
type ServerConfig struct {
	// DataDir holds everything: etcd/, remote/ (unless object_store is
	// set), changelog/ and tablets/{id}/ (required).
	DataDir string `yaml:"data_dir"`
	// Listen is the one HTTP listener (default 127.0.0.1:7070): the
	// coordinator at /, tablet server {id} at /t/{id}/, /metrics, /healthz,
	// /readyz.
	Listen string `yaml:"listen"`
	// Advertise is the host:port clients reach Listen at (default: Listen,
	// with an unspecified host replaced by 127.0.0.1).
	Advertise string `yaml:"advertise"`
	// Tablets is the number of tablet servers, ts-1..ts-N (default 3).
	Tablets int `yaml:"tablets"`
	// ObjectStore is the URL of snapshot storage (default
	// file://{data_dir}/remote).
	ObjectStore string `yaml:"object_store"`
	// ShutdownTimeout bounds a graceful shutdown (default 30s).
	ShutdownTimeout time.Duration      `yaml:"shutdown_timeout"`
	Etcd            EmbeddedEtcdConfig `yaml:"etcd"`
	Coordinator     CoordinatorOptions `yaml:"coordinator"`
	Tablet          TabletOptions      `yaml:"tablet"`
	Changelog       ChangelogOptions   `yaml:"changelog"`
	Log             LogConfig          `yaml:"log"`
	// TLS, when present, makes the listener serve HTTPS only (see
	// ListenerTLS).
	TLS *ListenerTLS `yaml:"tls"`
}

// Defaults implements Config.
func (c *ServerConfig) Defaults() {
	*c = ServerConfig{Listen: DefaultListen, Tablets: DefaultTabletServers, ShutdownTimeout: DefaultShutdownTimeout}
	c.Etcd.defaults()
	c.Coordinator.defaults()
	c.Tablet.defaults()
	c.Changelog.defaults()
	c.Log.defaults()
}

// Validate implements Config.
func (c *ServerConfig) Validate() error {
	var errs []error
	errs = append(errs, c.TLS.validate())
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	errs = append(errs, validateHostPort("listen", c.Listen))
	if c.Advertise != "" {
		errs = append(errs, validateAdvertise("advertise", c.Advertise))
	}
	if c.ObjectStore != "" {
		errs = append(errs, validateObjectStore(c.ObjectStore))
	}
	if c.Tablets < 1 || c.Tablets > MaxEmbeddedTabletServers {
		errs = append(errs, fmt.Errorf("tablets %d not in 1..%d", c.Tablets, MaxEmbeddedTabletServers))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout %v must be positive", c.ShutdownTimeout))
	}
	errs = append(errs, c.Etcd.validate(), c.Coordinator.validate(), c.Tablet.validate(), c.Changelog.validate(), c.Log.validate(),
		validateBatchBytes(c.Tablet, c.Changelog))
	if c.Changelog.Dir != "" {
		errs = append(errs, errors.New("changelog.dir: thaw server keeps the changelog in {data_dir}/changelog; remove the key"))
	}
	return errors.Join(errs...)
}

// CoordinatorConfig configures `thaw coordinator`: one coordinator against
// an external etcd, on its own listener.
type CoordinatorConfig struct {
	// ID names the coordinator, [a-z0-9-] (required).
	ID string `yaml:"id"`
	// Listen is the HTTP listener (default 127.0.0.1:7070).
	Listen string `yaml:"listen"`
	// Advertise is the host:port clients and standbys reach this
	// coordinator at (default: Listen, with an unspecified host replaced
	// by 127.0.0.1).
	Advertise string `yaml:"advertise"`
	// ObjectStore is the URL of snapshot storage shared by every
	// coordinator and tablet server (required).
	ObjectStore string `yaml:"object_store"`
	// DataDir, optional, is a directory of this coordinator's own where
	// it lists the etcd leases it holds (LEASES, locked by LOCK: one
	// process per directory), so that a start after a kill revokes them
	// and campaigns at once instead of after coordinator.lease_ttl.
	DataDir         string             `yaml:"data_dir"`
	ShutdownTimeout time.Duration      `yaml:"shutdown_timeout"`
	Etcd            EtcdConfig         `yaml:"etcd"`
	Coordinator     CoordinatorOptions `yaml:"coordinator"`
	Log             LogConfig          `yaml:"log"`
	// TLS, when present, makes the listener serve HTTPS only and the
	// advertised address https:// (see ListenerTLS).
	TLS *ListenerTLS `yaml:"tls"`
	// InternalTokenFile, when set, holds the tier's internal token (one
	// per line; the first is sent, every one accepted; read again when it
	// changes): the tablet servers' snapshot reports need it, and the
	// coordinator presents it to them. Every coordinator and tablet server
	// of a tier must share it.
	InternalTokenFile string `yaml:"internal_token_file"`
}

// Defaults implements Config.
func (c *CoordinatorConfig) Defaults() {
	*c = CoordinatorConfig{Listen: DefaultListen, ShutdownTimeout: DefaultShutdownTimeout}
	c.Etcd.defaults()
	c.Coordinator.defaults()
	c.Log.defaults()
}

// validateObjectStore checks object_store before anything starts: a URL
// objstore takes, and not mem://, whose objects live in one process's
// memory and would be gone at the next start while etcd still names them.
func validateObjectStore(storeURL string) error {
	if err := objstore.CheckURL(storeURL); err != nil {
		return fmt.Errorf("object_store: %w", err)
	}
	if u, err := url.Parse(storeURL); err == nil && u.Scheme == "mem" {
		return fmt.Errorf("object_store %q: mem:// lives in this process's memory only; use file:// or s3://", storeURL)
	}
	return nil
}

// Validate implements Config.
func (c *CoordinatorConfig) Validate() error {
	var errs []error
	errs = append(errs, c.TLS.validate())
	errs = append(errs, validateID("id", c.ID), validateHostPort("listen", c.Listen))
	if c.Advertise != "" {
		errs = append(errs, validateAdvertise("advertise", c.Advertise))
	}
	if c.ObjectStore == "" {
		errs = append(errs, errors.New("object_store is required"))
	} else {
		errs = append(errs, validateObjectStore(c.ObjectStore))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout %v must be positive", c.ShutdownTimeout))
	}
	errs = append(errs, c.Etcd.validate(), c.Coordinator.validate(), c.Log.validate())
	return errors.Join(errs...)
}

// TabletConfig configures `thaw tablet`: one tablet server against an
// external etcd, on its own listener, with its own local changelog root.
type TabletConfig struct {
	// ID names the tablet server, [a-z0-9-] (required).
	ID string `yaml:"id"`
	// Listen is the HTTP listener (default 127.0.0.1:7071).
	Listen string `yaml:"listen"`
	// Advertise is the host:port the coordinator and clients reach this
	// server at (default: Listen, with an unspecified host replaced by
	// 127.0.0.1).
	Advertise string `yaml:"advertise"`
	// DataDir holds replicas/ and, unless changelog.dir is set,
	// changelog/ (required).
	DataDir string `yaml:"data_dir"`
	// ObjectStore is the URL of snapshot storage shared by every
	// coordinator and tablet server (required).
	ObjectStore     string           `yaml:"object_store"`
	ShutdownTimeout time.Duration    `yaml:"shutdown_timeout"`
	Etcd            EtcdConfig       `yaml:"etcd"`
	Tablet          TabletOptions    `yaml:"tablet"`
	Changelog       ChangelogOptions `yaml:"changelog"`
	Log             LogConfig        `yaml:"log"`
	// TLS, when present, makes the listener serve HTTPS only and the
	// registered address https:// (see ListenerTLS).
	TLS *ListenerTLS `yaml:"tls"`
	// InternalTokenFile, when set, holds the tier's internal token (see
	// CoordinatorConfig.InternalTokenFile): the coordinator's orders to
	// this server (assignments, data states, restores, snapshots, replica
	// status) need it, and this server presents it with its snapshot
	// reports.
	InternalTokenFile string `yaml:"internal_token_file"`
}

// Defaults implements Config.
func (c *TabletConfig) Defaults() {
	*c = TabletConfig{Listen: DefaultTabletListen, ShutdownTimeout: DefaultShutdownTimeout}
	c.Etcd.defaults()
	c.Tablet.defaults()
	c.Changelog.defaults()
	c.Log.defaults()
}

// Validate implements Config.
func (c *TabletConfig) Validate() error {
	var errs []error
	errs = append(errs, c.TLS.validate())
	errs = append(errs, validateID("id", c.ID), validateHostPort("listen", c.Listen))
	if c.Advertise != "" {
		errs = append(errs, validateAdvertise("advertise", c.Advertise))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	if c.ObjectStore == "" {
		errs = append(errs, errors.New("object_store is required"))
	} else {
		errs = append(errs, validateObjectStore(c.ObjectStore))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout %v must be positive", c.ShutdownTimeout))
	}
	errs = append(errs, c.Etcd.validate(), c.Tablet.validate(), c.Changelog.validate(), c.Log.validate(),
		validateBatchBytes(c.Tablet, c.Changelog))
	if c.Changelog.Dir != "" && c.DataDir != "" && within(c.Changelog.Dir, filepath.Join(c.DataDir, "replicas")) {
		// A bucket's log directory has its replica directory's name
		// (t7-b3): opening, replacing or dropping the replica, or the
		// start's cleanup of stale replicas, would delete the log.
		errs = append(errs, fmt.Errorf("changelog.dir %s is inside the replicas' directory {data_dir}/replicas", c.Changelog.Dir))
	}
	if c.Changelog.Dir != "" && c.DataDir != "" && within(c.Changelog.Dir, c.DataDir) && within(c.DataDir, c.Changelog.Dir) {
		// Both hold a LOCK file of their own: one directory cannot.
		errs = append(errs, fmt.Errorf("changelog.dir %s is data_dir; use a directory of its own (such as {data_dir}/changelog)", c.Changelog.Dir))
	}
	return errors.Join(errs...)
}

// within reports whether path is dir or lies under it (lexically, after
// making both absolute).
func within(path, dir string) bool {
	p, perr := filepath.Abs(path)
	d, derr := filepath.Abs(dir)
	if perr != nil || derr != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func validateHostPort(key, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port", key, s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%s %q: bad port", key, s)
	}
	if strings.ContainsAny(host, "/ ") {
		return fmt.Errorf("%s %q: bad host", key, s)
	}
	return nil
}

// validateAdvertise checks an advertised host:port: others dial it, so
// it needs a host (not an unspecified address) and a port.
func validateAdvertise(key, s string) error {
	if err := meta.CheckDialable(s); err != nil {
		return fmt.Errorf("%s %q: %w", key, s, err)
	}
	return nil
}

// validateEtcdAdvertise checks an embedded etcd's advertised host:port
// as its start will.
func validateEtcdAdvertise(key, s string) error {
	if err := meta.CheckAdvertise(s); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

func validatePrefix(key, p string) error {
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return fmt.Errorf("%s %q must start with / and not end with one", key, p)
	}
	return nil
}

// validateID checks a coordinator or tablet server id: 1..63 of [a-z0-9-].
func validateID(key, id string) error {
	if id == "" || len(id) > 63 {
		return fmt.Errorf("%s %q must be 1..63 characters [a-z0-9-]", key, id)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("%s %q must be 1..63 characters [a-z0-9-]", key, id)
		}
	}
	return nil
}

// advertised returns the address others reach a listener at: advertise if
// set, else the listener's address with an unspecified host replaced by
// 127.0.0.1.
func advertised(advertise string, ln net.Addr) string {
	if advertise != "" {
		return advertise
	}
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return ln.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
