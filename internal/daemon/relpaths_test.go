package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/thawdb/thaw/tier/access"
)

// TestPromoterPathsRelativeToTheConfig: every file and directory a
// promoter config names is found relative to the config file, wherever the
// promoter is started (systemd starts it from /). Only policies and
// kafka.tls were: api_callers_file, tls, tier.* and data_dir were read
// from the working directory (the start failed, or a new, empty embedded
// tier was made there).
func TestPromoterPathsRelativeToTheConfig(t *testing.T) {
	cfg := promoterTestConfig(t)
	dir := filepath.Dir(cfg.Policies[0])
	if err := os.WriteFile(filepath.Join(dir, "api-callers.yaml"),
		[]byte("callers:\n  - {name: dash, token_sha256: "+access.TokenSHA256("tok")+", role: read}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cfg.Catalogs["default"]
	conf := "listen: 127.0.0.1:0\ndata_dir: data\npolicies: [policy.yaml]\napi_callers_file: api-callers.yaml\n" +
		"tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}\n" +
		"kafka: {brokers: [\"127.0.0.1:1\"], topic: t, tls: {ca_file: kafka-ca.pem}}\n" +
		"catalogs:\n  default: {type: " + c.Type + ", uri: \"" + c.URI + "\", warehouse: \"" + c.Warehouse + "\"}\n" +
		"tier: {address: \"127.0.0.1:7070\", ca_file: tier-ca.pem, cert_file: tc.pem, key_file: tk.pem, " +
		"etcd: {endpoints: [\"https://127.0.0.1:2379\"], tls: {ca_file: e-ca.pem, cert_file: e.pem, key_file: ek.pem}}}\n"
	path := filepath.Join(dir, "promoter.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	got, err := LoadPromoterConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{
		"data_dir": got.DataDir, "policies": got.Policies[0], "api_callers_file": got.APICallersFile,
		"tls.cert_file": got.TLS.CertFile, "tls.key_file": got.TLS.KeyFile, "tls.client_ca_file": got.TLS.ClientCAFile,
		"kafka.tls.ca_file": got.Kafka.TLS.CAFile, "tier.ca_file": got.Tier.CAFile, "tier.cert_file": got.Tier.CertFile,
		"tier.key_file": got.Tier.KeyFile, "tier.etcd.tls.ca_file": got.Tier.Etcd.TLS.CAFile,
		"tier.etcd.tls.cert_file": got.Tier.Etcd.TLS.CertFile, "tier.etcd.tls.key_file": got.Tier.Etcd.TLS.KeyFile,
	} {
		if filepath.Dir(p) != dir {
			t.Errorf("%s is %q, want it in %s", name, p, dir)
		}
	}
	if got.Catalogs["default"].URI != c.URI {
		t.Errorf("the catalog's uri changed: %q", got.Catalogs["default"].URI)
	}
	if _, err := parseAPICallers(got.APICallersFile); err != nil {
		t.Error(err)
	}
}
