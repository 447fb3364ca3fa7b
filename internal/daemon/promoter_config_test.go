package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func decodePromoter(t *testing.T, text string) (PromoterConfig, error) {
	t.Helper()
	var cfg PromoterConfig
	err := DecodeConfig(strings.NewReader(text), "promoter.yaml", &cfg)
	return cfg, err
}

// TestPromoterConfigDefaults decodes a minimal config: the embedded tier,
// the default listener, prefix, workers and intervals.
func TestPromoterConfigDefaults(t *testing.T) {
	cfg, err := decodePromoter(t, `
data_dir: /var/lib/thaw
policies: [policies]
catalogs:
  default: {type: sql, uri: /data/catalog.db, warehouse: "file:///data/wh"}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !cfg.Tier.IsEmbedded() || cfg.Listen != DefaultPromoterListen || cfg.Prefix != "/thaw/promoter" || cfg.Workers != 2 ||
		cfg.ReconcileInterval != time.Minute || cfg.LakePollInterval != 30*time.Second || cfg.Tier.Tablets != 3 || cfg.Log.Level != "info" ||
		cfg.LedgerRetention != 30*24*time.Hour {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.Catalogs["default"].URI != "/data/catalog.db" {
		t.Fatalf("catalog: %+v", cfg.Catalogs)
	}
	cfg.ResolvePaths("/etc/thaw")
	if cfg.Policies[0] != filepath.Join("/etc/thaw", "policies") {
		t.Fatalf("resolved: %v", cfg.Policies)
	}
}

// TestPromoterConfigExternal: an address selects the external tier.
func TestPromoterConfigExternal(t *testing.T) {
	cfg, err := decodePromoter(t, `
policies: [p.yaml]
catalogs: {default: {uri: /c.db}}
tier:
  address: 10.0.0.1:7070
  etcd: {endpoints: ["http://10.0.0.1:2379"], username: thaw}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Tier.IsEmbedded() {
		t.Fatal("address set but embedded")
	}
}

// TestPromoterConfigErrors: strict decoding names the line; validation
// names every bad key.
func TestPromoterConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "data_dir: /d\nworkerz: 3\n", "line 2: unknown key \"workerz\" (did you mean workers?)"},
		{"unknown catalog key", "catalogs:\n  default: {uri: /c.db, passwd: x}\n", "unknown key \"passwd\" (did you mean password?)"},
		{"wrong type", "workers: many\n", "line 1: the string `many` is not a whole number"},
		{"two documents", "data_dir: /d\n---\ndata_dir: /e\n", "more than one YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodePromoter(t, tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", []string{"policies: at least one", "catalogs: at least one", "data_dir is required"}},
		{"bad values", `
data_dir: /d
policies: [p]
catalogs: {default: {type: rest, uri: "not a url"}, "": {uri: /c.db}}
listen: nowhere
prefix: thaw/
workers: 0
reconcile_interval: 0s
lake_poll_interval: -1s
ledger_retention: 0s
lease_ttl: 100ms
log: {level: loud}
`, []string{"catalogs.default:", "rest catalog needs an http(s) uri", "empty catalog name", `listen "nowhere"`, "prefix", "workers 0",
			"reconcile_interval must not be 0", "lake_poll_interval", "ledger_retention must not be 0", "lease_ttl", "log.level"}},
		{"both tiers", `
data_dir: /d
policies: [p]
catalogs: {default: {uri: /c.db}}
tier: {embedded: true, address: "h:1"}
`, []string{"address is set but embedded is true"}},
		{"embedded tier object store", `
data_dir: /d
policies: [p]
catalogs: {default: {uri: /c.db}}
tier: {object_store: "s3:///remote"}
`, []string{`tier.object_store: objstore: store url "s3:///remote": the host must name the s3 bucket`}},
		{"external without address", `
policies: [p]
catalogs: {default: {uri: /c.db}}
tier: {embedded: false}
`, []string{"tier.address is required", "endpoints"}},
		{"embedded with endpoints", `
data_dir: /d
policies: [p]
catalogs: {default: {uri: /c.db}}
tier: {etcd: {endpoints: ["http://x:2379"]}}
`, []string{"runs its own etcd"}},
		// An external tier's settings, which the embedded tier ignored.
		{"embedded with external settings", `
data_dir: /d
policies: [p]
catalogs: {default: {uri: /c.db}}
tier: {ca_file: /ca.pem, key_file: /k.pem, etcd: {prefix: /other, tls: {ca_file: /ca.pem}}}
`, []string{"tier.etcd: the embedded tier runs its own etcd", "tier.ca_file: for an external tier", "tier.key_file: for an external tier"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := decodePromoter(t, tc.text)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if err == nil {
				t.Fatal("valid")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestLoadPromoterConfig resolves policy paths against the file's
// directory.
func TestLoadPromoterConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "promoter.yaml")
	if err := os.WriteFile(path, []byte("data_dir: /d\npolicies: [pol, /abs/p.yaml]\ncatalogs: {default: {uri: /c.db}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadPromoterConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policies[0] != filepath.Join(dir, "pol") || cfg.Policies[1] != "/abs/p.yaml" {
		t.Fatalf("policies %v", cfg.Policies)
	}
}
