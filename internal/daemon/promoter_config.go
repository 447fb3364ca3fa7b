package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
)

// Defaults of the promoter's configuration; docs/promoter.md lists every
// key.
const (
	DefaultPromoterListen      = "127.0.0.1:7080"
	DefaultPromoterPrefix      = "/thaw/promoter"
	DefaultPromoterWorkers     = 2
	DefaultReconcileInterval   = time.Minute
	DefaultLakePollInterval    = 30 * time.Second
	DefaultCommitBudget        = 5 * time.Minute
	DefaultLedgerRetention     = promoter.DefaultLedgerRetention
	DefaultPromoterTierTablets = 3
)

// PromoterConfig configures `thaw promoter`: the promoter daemon. By default
// it runs the tier in the same process (embedded etcd, a coordinator and
// tablet servers under {data_dir}/tier), keeps its ledger in that etcd and
// serves its API on listen.
//
// Credentials (catalog passwords, tokens, object-store keys) may be given
// in catalogs; they are held in memory only and never written to the
// ledger, logs, metrics or API answers. The etcd password of an external
// etcd comes from THAW_ETCD_PASSWORD, Kafka's SASL password from
// THAW_KAFKA_PASSWORD.
type PromoterConfig struct {
	// ID names this promoter among candidates for leadership (default
	// HOST-PID).
	ID string `yaml:"id"`
	// Listen is the HTTP listener: /v1/..., /metrics, /healthz, /readyz
	// (default 127.0.0.1:7080).
	Listen string `yaml:"listen"`
	// DataDir holds tier/ (the embedded tier) and tmp/ (build spill files).
	// Required with the embedded tier. Like every file path of the config
	// (ResolvePaths), a relative one is relative to the config file's
	// directory.
	DataDir string `yaml:"data_dir"`
	// Policies are policy files or directories of them (*.yaml, *.yml).
	// Relative paths are relative to the config file's directory. They
	// are read at start only; a running promoter logs a warning when they
	// change (policyWatch).
	Policies []string `yaml:"policies"`
	// Catalogs are the lake catalogs policies read from, by the name their
	// source.catalog uses.
	Catalogs map[string]lake.Config `yaml:"catalogs"`
	// Tier is the tier the promoter loads into.
	Tier PromoterTierConfig `yaml:"tier"`
	// Prefix is the etcd key prefix of the promoter: its leader election
	// ({prefix}/leader) and ledger ({prefix}/promotions/{id}). Default
	// /thaw/promoter.
	Prefix string `yaml:"prefix"`
	// LeaseTTL bounds how long a crashed leader keeps the leadership
	// (default 10s, at least 1s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Workers is how many promotions run at once over every policy
	// (default 2).
	Workers int `yaml:"workers"`
	// ReconcileInterval is the period of the reconcile of every policy
	// (default 1m; negative disables it: then only schedules, lake commits
	// and requests promote).
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// LakePollInterval is how often policies with on_lake_commit look for
	// new lake snapshots (default 30s).
	LakePollInterval time.Duration `yaml:"lake_poll_interval"`
	// LedgerRetention is how long finished promotion records stay in the
	// ledger (default 720h; negative keeps every record). The newest
	// committed record of each target, and without one its newest
	// non-retriable failure, stay whatever their age (promoter.PruneLedger).
	LedgerRetention time.Duration `yaml:"ledger_retention"`
	// CommitBudget bounds one bulk-load commit with its retries (default
	// 5m).
	CommitBudget time.Duration `yaml:"commit_budget"`
	// ShutdownTimeout bounds a graceful shutdown (default 30s).
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TLS, when present, makes the API listener serve HTTPS only
	// (cert_file and key_file; the tier's CA bundle is tier.ca_file).
	TLS *ListenerTLS `yaml:"tls"`
	// APICallersFile, when set, names a YAML file of the API's callers
	// (`callers: [{name, token_sha256, role: read|promote}]`), read at
	// start and again when it changes: every /v1/ request then needs the
	// bearer token of one of them (reads: read or promote; requesting
	// promotions: promote). Unset: the API is open.
	APICallersFile string `yaml:"api_callers_file"`
	// Kafka, if set, makes the leading promoter consume control events
	// from a Kafka topic.
	Kafka *KafkaConfig `yaml:"kafka"`
	Log   LogConfig    `yaml:"log"`
}

// PromoterTierConfig selects the tier: embedded in the promoter's process
// (the default), or an external tier reached at address, with its etcd
// (which also holds the promoter's ledger).
type PromoterTierConfig struct {
	// Embedded runs the tier in-process on {data_dir}/tier. Default: true
	// unless address is set.
	Embedded *bool `yaml:"embedded"`
	// Listen is the embedded tier's own listener (default 127.0.0.1:0, a
	// free port).
	Listen string `yaml:"listen"`
	// Tablets is the embedded tier's number of tablet servers (default 3).
	Tablets int `yaml:"tablets"`
	// ObjectStore is the embedded tier's snapshot storage (default
	// file://{data_dir}/tier/remote).
	ObjectStore string `yaml:"object_store"`
	// Address is an external tier's coordinator, HOST:PORT or URL, or a
	// comma-separated list of its coordinators (both the tier client and the
	// bulk-load client take it).
	Address string `yaml:"address"`
	// CAFile is a PEM bundle of the CA certificates to trust when address
	// is https:// (default: the system's roots).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key the
	// promoter presents to a tier that requires them (tls.client_ca_file);
	// both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Etcd is the external tier's etcd (endpoints required with address).
	Etcd EtcdConfig `yaml:"etcd"`
	// ScopedUploads makes builds write their snapshot files and manifests
	// through the active coordinator's upload gateway, with credentials
	// scoped to each transaction, instead of into the object store
	// directly: the promoter then needs no object store credentials.
	ScopedUploads bool `yaml:"scoped_uploads"`
}

// IsEmbedded reports whether the tier runs in the promoter's process.
func (c PromoterTierConfig) IsEmbedded() bool {
	if c.Embedded != nil {
		return *c.Embedded
	}
	return c.Address == ""
}

// Defaults implements Config.
func (c *PromoterConfig) Defaults() {
	*c = PromoterConfig{
		Listen:            DefaultPromoterListen,
		Prefix:            DefaultPromoterPrefix,
		LeaseTTL:          DefaultLeaseTTL,
		Workers:           DefaultPromoterWorkers,
		ReconcileInterval: DefaultReconcileInterval,
		LakePollInterval:  DefaultLakePollInterval,
		CommitBudget:      DefaultCommitBudget,
		LedgerRetention:   DefaultLedgerRetention,
		ShutdownTimeout:   DefaultShutdownTimeout,
	}
	c.Tier.Listen = "127.0.0.1:0"
	c.Tier.Tablets = DefaultPromoterTierTablets
	c.Tier.Etcd.defaults()
	c.Log.defaults()
}

// Validate implements Config. It checks the form of every key; whether
// policy files parse and catalogs answer is checked when the promoter
// starts.
func (c *PromoterConfig) Validate() error {
	var errs []error
	if c.ID != "" {
		errs = append(errs, validateID("id", c.ID))
	}
	errs = append(errs, validateHostPort("listen", c.Listen), validatePrefix("prefix", c.Prefix), c.TLS.validate())
	if c.TLS != nil && c.TLS.CAFile != "" {
		errs = append(errs, errors.New("tls.ca_file: not used by the promoter; the CA bundle of an https:// tier is tier.ca_file"))
	}
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("policies: at least one policy file or directory is required"))
	}
	for i, p := range c.Policies {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, fmt.Errorf("policies[%d] is empty", i))
		}
	}
	if len(c.Catalogs) == 0 {
		errs = append(errs, errors.New("catalogs: at least one catalog is required"))
	}
	for _, name := range sortedKeys(c.Catalogs) {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, errors.New("catalogs: empty catalog name"))
			continue
		}
		if err := c.Catalogs[name].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("catalogs.%s: %w", name, err))
		}
	}
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("lease_ttl %v is shorter than 1s", c.LeaseTTL))
	}
	if c.Workers < 1 || c.Workers > 256 {
		errs = append(errs, fmt.Errorf("workers %d not in 1..256", c.Workers))
	}
	if c.ReconcileInterval == 0 {
		errs = append(errs, errors.New("reconcile_interval must not be 0 (negative disables the periodic reconcile)"))
	}
	if c.LedgerRetention == 0 {
		errs = append(errs, errors.New("ledger_retention must not be 0 (negative keeps every record)"))
	}
	for _, f := range []struct {
		key string
		v   time.Duration
	}{{"lake_poll_interval", c.LakePollInterval}, {"commit_budget", c.CommitBudget}, {"shutdown_timeout", c.ShutdownTimeout}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %v must be positive", f.key, f.v))
		}
	}
	errs = append(errs, c.Tier.validate(c.DataDir), c.Log.validate())
	if c.Kafka != nil {
		errs = append(errs, c.Kafka.validate())
	}
	return errors.Join(errs...)
}

func (c PromoterTierConfig) validate(dataDir string) error {
	var errs []error
	if c.IsEmbedded() {
		if c.Address != "" {
			errs = append(errs, errors.New("tier: address is set but embedded is true; set one"))
		}
		if len(c.Etcd.Endpoints) > 0 {
			errs = append(errs, errors.New("tier.etcd.endpoints: the embedded tier runs its own etcd; remove them or set tier.address"))
		}
		// Settings of an external tier the embedded one would ignore.
		if e := c.Etcd; e.Prefix != "" && e.Prefix != DefaultPrefix || e.DialTimeout != 0 && e.DialTimeout != DefaultEtcdDialTimeout ||
			e.Username != "" || e.TLS != (EtcdTLS{}) {
			errs = append(errs, errors.New("tier.etcd: the embedded tier runs its own etcd (prefix /thaw, no TLS, no user); tier.etcd is for an external tier (tier.address)"))
		}
		for _, f := range []struct{ key, v string }{{"ca_file", c.CAFile}, {"cert_file", c.CertFile}, {"key_file", c.KeyFile}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("tier.%s: for an external tier (tier.address); the embedded tier is reached in-process", f.key))
			}
		}
		if dataDir == "" {
			errs = append(errs, errors.New("data_dir is required with the embedded tier"))
		}
		errs = append(errs, validateHostPort("tier.listen", c.Listen))
		if c.ObjectStore != "" {
			if err := validateObjectStore(c.ObjectStore); err != nil {
				errs = append(errs, fmt.Errorf("tier.%w", err))
			}
		}
		if c.Tablets < 1 || c.Tablets > MaxEmbeddedTabletServers {
			errs = append(errs, fmt.Errorf("tier.tablets %d not in 1..%d", c.Tablets, MaxEmbeddedTabletServers))
		}
		return errors.Join(errs...)
	}
	if c.Address == "" {
		errs = append(errs, errors.New("tier.address is required when tier.embedded is false"))
	}
	if c.ObjectStore != "" {
		errs = append(errs, errors.New("tier.object_store is for the embedded tier only"))
	}
	if err := c.Etcd.validate(); err != nil {
		errs = append(errs, fmt.Errorf("tier.%w", err))
	}
	return errors.Join(errs...)
}

// ResolvePaths makes the relative paths of files and directories the
// config names relative to dir (the config file's directory): data_dir,
// policies, api_callers_file, tls, tier.ca_file, tier.cert_file,
// tier.key_file, tier.etcd.tls and kafka.tls. Catalog URIs and
// warehouses are the catalog's, used as written.
func (c *PromoterConfig) ResolvePaths(dir string) {
	abs := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	for i := range c.Policies {
		abs(&c.Policies[i])
	}
	for _, p := range []*string{&c.DataDir, &c.APICallersFile, &c.Tier.CAFile, &c.Tier.CertFile, &c.Tier.KeyFile,
		&c.Tier.Etcd.TLS.CAFile, &c.Tier.Etcd.TLS.CertFile, &c.Tier.Etcd.TLS.KeyFile} {
		abs(p)
	}
	if t := c.TLS; t != nil {
		for _, p := range []*string{&t.CertFile, &t.KeyFile, &t.CAFile, &t.ClientCAFile} {
			abs(p)
		}
	}
	if c.Kafka != nil {
		c.Kafka.resolvePaths(dir)
	}
}

// LoadPromoterConfig reads a promoter config file strictly over the
// defaults, resolves its policy paths against the file's directory and
// validates it.
func LoadPromoterConfig(path string) (PromoterConfig, error) {
	var cfg PromoterConfig
	f, err := os.Open(path)
	if err != nil {
		return cfg, fmt.Errorf("daemon: read config: %w", err)
	}
	defer f.Close()
	if err := DecodeConfig(f, path, &cfg); err != nil {
		return cfg, err
	}
	cfg.ResolvePaths(filepath.Dir(path))
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("daemon: config %s: %w", path, err)
	}
	return cfg, nil
}

// promoterID is the default candidate id: the host name and process id,
// lowered to [a-z0-9-].
func promoterID() string {
	host, _ := os.Hostname()
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	id := strings.Trim(b.String(), "-")
	if id == "" {
		id = "promoter"
	}
	if len(id) > 50 {
		id = id[:50]
	}
	return id + "-" + strconv.Itoa(os.Getpid())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
