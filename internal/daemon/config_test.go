package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "thaw.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadServerConfig(t *testing.T) {
	p := writeFile(t, `
data_dir: /var/lib/thaw
listen: 0.0.0.0:7070
advertise: db1.example:7070
tablets: 5
etcd:
  prefix: /prod
  listen: 0.0.0.0:2379
  advertise: db1.example:2379
  tls:
    cert_file: /etc/thaw/etcd.pem
    key_file: /etc/thaw/etcd-key.pem
    client_ca_file: /etc/thaw/clients.pem
coordinator:
  lease_ttl: 3s
  snapshot_retention: 5
  bulk_load:
    max_build_timeout: 2h
    max_manifest_bytes: 8MiB
    upload_credential_ttl: 5m
    max_upload_bytes: 1GiB
    upload_concurrency: 3
    upload_temp_dir: /var/tmp/thaw
    signed_upload_ttl: 2m
tablet:
  snapshot_interval: 90s
  changelog_sweep_interval: 1h
  cache_size: 1GiB
  memtable_budget: 64MiB
changelog:
  segment_bytes: 128MiB
log:
  level: debug
  format: json
`)
	var cfg ServerConfig
	if err := LoadConfig(p, &cfg); err != nil {
		t.Fatal(err)
	}
	var def ServerConfig
	def.Defaults()
	checks := []struct {
		what      string
		got, want any
	}{
		{"data_dir", cfg.DataDir, "/var/lib/thaw"},
		{"listen", cfg.Listen, "0.0.0.0:7070"},
		{"tablets", cfg.Tablets, 5},
		{"etcd.prefix", cfg.Etcd.Prefix, "/prod"},
		{"etcd.listen", cfg.Etcd.Listen, "0.0.0.0:2379"},
		{"etcd.advertise", cfg.Etcd.Advertise, "db1.example:2379"},
		{"etcd.tls", cfg.Etcd.TLS, EmbeddedEtcdTLS{CertFile: "/etc/thaw/etcd.pem", KeyFile: "/etc/thaw/etcd-key.pem", ClientCAFile: "/etc/thaw/clients.pem"}},
		{"coordinator.lease_ttl", cfg.Coordinator.LeaseTTL, 3 * time.Second},
		{"coordinator.snapshot_retention", cfg.Coordinator.SnapshotRetention, 5},
		{"coordinator.fanout (default)", cfg.Coordinator.Fanout, 8},
		{"coordinator.bulk_load.max_build_timeout", cfg.Coordinator.BulkLoad.MaxBuildTimeout, 2 * time.Hour},
		{"coordinator.bulk_load.max_manifest_bytes", cfg.Coordinator.BulkLoad.MaxManifestBytes, ByteSize(8 << 20)},
		{"coordinator.bulk_load.result_retention (default)", cfg.Coordinator.BulkLoad.ResultRetention, time.Duration(0)},
		{"tablet.snapshot_interval", cfg.Tablet.SnapshotInterval, 90 * time.Second},
		{"tablet.changelog_sweep_interval", cfg.Tablet.ChangelogSweepInterval, time.Hour},
		{"tablet.cache_size", cfg.Tablet.CacheSize, ByteSize(1 << 30)},
		{"tablet.memtable_budget", cfg.Tablet.MemTableBudget, ByteSize(64 << 20)},
		{"tablet.lease_ttl (default)", cfg.Tablet.LeaseTTL, DefaultLeaseTTL},
		{"changelog.segment_bytes", cfg.Changelog.SegmentBytes, ByteSize(128 << 20)},
		{"changelog.max_batch_bytes (default)", cfg.Changelog.MaxBatchBytes, ByteSize(DefaultMaxBatchBytes)},
		{"log.level", cfg.Log.Level, "debug"},
		{"shutdown_timeout (default)", cfg.ShutdownTimeout, DefaultShutdownTimeout},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	cc := cfg.Coordinator.coordinatorConfig("c1", "127.0.0.1:1", "/p", "file:///r", 3)
	if cc.BulkLoad.MaxBuildTimeout != 2*time.Hour || cc.BulkLoad.MaxManifestBytes != 8<<20 || cc.SnapshotRetention != 5 ||
		cc.BulkLoad.UploadCredentialTTL != 5*time.Minute || cc.BulkLoad.MaxUploadBytes != 1<<30 || cc.BulkLoad.UploadConcurrency != 3 ||
		cc.BulkLoad.UploadTempDir != "/var/tmp/thaw" || cc.BulkLoad.SignedUploadTTL != 2*time.Minute {
		t.Errorf("coordinatorConfig = %+v", cc)
	}
	ec := cfg.Embedded()
	if ec.TabletServers != 5 || ec.Prefix != "/prod" || ec.Tablet.CacheSize != 1<<30 || ec.EtcdAdvertise != "db1.example:2379" {
		t.Errorf("Embedded() = %+v", ec)
	}
}

func TestLoadConfigStrict(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		cfg        Config
		want       []string
	}{
		{"unknown key", "data_dir: /d\nlisten: 127.0.0.1:1\ntablet:\n  cache_sise: 1MiB\n", &ServerConfig{}, []string{"line 4: unknown key \"cache_sise\" (did you mean cache_size?)"}},
		{"unknown top key", "data_dir: /d\nlisen: x\n", &ServerConfig{}, []string{"line 2", "lisen"}},
		{"wrong type", "tablets: many\n", &ServerConfig{}, []string{"line 1", "many"}},
		{"bad duration", "data_dir: /d\ncoordinator:\n  lease_ttl: soon\n", &ServerConfig{}, []string{"line 3"}},
		{"bad size", "data_dir: /d\ntablet:\n  cache_size: lots\n", &ServerConfig{}, []string{"line 3", `"lots"`}},
		{"duplicate key", "data_dir: /a\ndata_dir: /b\n", &ServerConfig{}, []string{"line 2", "already"}},
		{"bad caller", "data_dir: /d\ncoordinator:\n  callers:\n    - {name: etl, token_sha256: abc, tables: [shop.items, \"x*\"]}\n", &ServerConfig{},
			[]string{"coordinator.callers", "caller etl: token sha256 is not 64 lowercase hex digits", `table pattern "x*"`}},
		{"caller key", "data_dir: /d\ncoordinator:\n  callers:\n    - {name: etl, token: abc}\n", &ServerConfig{}, []string{"line 4", "token"}},
		{"two documents", "data_dir: /a\n---\ndata_dir: /b\n", &ServerConfig{}, []string{"more than one YAML document"}},
		{"invalid values", "data_dir: ''\ntablets: 0\nlog:\n  level: loud\n", &ServerConfig{}, []string{"data_dir is required", "tablets 0", "log.level \"loud\""}},
		{"coordinator needs etcd", "id: c1\nobject_store: file:///tmp/x\n", &CoordinatorConfig{}, []string{"etcd.endpoints"}},
		{"coordinator bad id", "id: C_1\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\n", &CoordinatorConfig{}, []string{`id "C_1"`}},
		{"tablet needs data dir", "id: ts-1\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\n", &TabletConfig{}, []string{"data_dir is required"}},
		{"tablet unknown section", "id: ts-1\ncoordinator:\n  lease_ttl: 1s\n", &TabletConfig{}, []string{"line 2", "coordinator"}},
		{"dropped data cleaned too often", "data_dir: /d\ncoordinator:\n  dropped_data_clean_interval: 1ms\n", &ServerConfig{}, []string{"coordinator.dropped_data_clean_interval 1ms is shorter than 1s"}},
		// A row as large as a write may be must fit a changelog batch with
		// its 24 bytes of headers (it was refused, for good, by the log).
		{"tablet batch too close to the changelog's", "data_dir: /d\nchangelog:\n  max_batch_bytes: 131072\ntablet:\n  max_batch_bytes: 131060\n", &ServerConfig{}, []string{"tablet.max_batch_bytes 131060 must be at most changelog.max_batch_bytes 128KiB less 24 bytes of headers (131048)"}},
		// A zero would become the default at the start (1m, 10s).
		{"zero dropped data grace", "data_dir: /d\ncoordinator:\n  dropped_data_grace: 0s\n", &ServerConfig{}, []string{"coordinator.dropped_data_grace 0s must be positive (default 1m0s)"}},
		{"zero server grace", "id: c1\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\ncoordinator:\n  server_grace: 0s\n", &CoordinatorConfig{}, []string{"coordinator.server_grace 0s would mean the default 10s"}},
		{"tls without a key", "data_dir: /d\ntls:\n  cert_file: /c.pem\n", &ServerConfig{}, []string{"tls: cert_file and key_file are required"}},
		{"tls unknown key", "id: ts-1\ntls:\n  cert: /c.pem\n", &TabletConfig{}, []string{"line 3", "cert"}},
		{"authorize ddl without callers", "data_dir: /d\ncoordinator:\n  authorize_ddl: true\n", &ServerConfig{}, []string{"coordinator.authorize_ddl needs coordinator.callers"}},
		{"authorize data without read or write", "data_dir: /d\ncoordinator:\n  authorize_data: true\n  callers:\n    - {name: etl, token_sha256: " + strings.Repeat("a", 64) + ", tables: [\"*\"], ddl: [\"*\"]}\n", &ServerConfig{},
			[]string{"coordinator.authorize_data needs a caller in coordinator.callers with read or write patterns"}},
		{"bad read pattern", "data_dir: /d\ncoordinator:\n  callers:\n    - {name: app, token_sha256: " + strings.Repeat("a", 64) + ", read: [shop], write: [\"*.x\"]}\n", &ServerConfig{},
			[]string{`caller app: table pattern "shop"`, `caller app: table pattern "*.x"`}},
		{"etcd tls over http", "id: c1\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\n  tls: {ca_file: /ca.pem, cert_file: /c.pem}\n", &CoordinatorConfig{},
			[]string{`etcd.endpoints: "http://e:2379": with etcd.tls`, "etcd.tls: cert_file and key_file go together"}},
		{"etcd endpoints mixed", "id: ts-1\ndata_dir: /d\nobject_store: file:///x\netcd:\n  endpoints: [https://e1:2379, http://e2:2379]\n", &TabletConfig{},
			[]string{`etcd.endpoints: "http://e2:2379"`}},
		{"etcd tls unknown key", "id: c1\netcd:\n  tls: {ca: /ca.pem}\n", &CoordinatorConfig{}, []string{"line 3", "ca"}},
		{"sweep too often", "data_dir: /d\ntablet:\n  changelog_sweep_interval: 10ms\n", &ServerConfig{}, []string{"tablet.changelog_sweep_interval 10ms is shorter than 1s"}},
		{"server has no changelog dir", "data_dir: /d\nchangelog:\n  dir: /x\n", &ServerConfig{}, []string{"changelog.dir"}},
		{"bad prefix", "data_dir: /d\netcd:\n  prefix: thaw/\n", &ServerConfig{}, []string{"etcd.prefix"}},
		{"etcd advertise unspecified", "data_dir: /d\netcd:\n  advertise: 0.0.0.0:2379\n", &ServerConfig{}, []string{`etcd.advertise: meta: invalid argument: embedded etcd advertise "0.0.0.0:2379": an unspecified address cannot be dialled`}},
		{"bulk load limits", "data_dir: /d\ncoordinator:\n  bulk_load:\n    max_active: -1\n    upload_credential_ttl: 48h\n    signed_upload_ttl: 5h\n", &ServerConfig{},
			[]string{"coordinator.bulk_load: ", "max active -1", "upload credential ttl 48h0m0s not in 1s..24h0m0s", "signed upload ttl 5h0m0s not in 1s..1h0m0s"}},
		{"advertise unspecified", "id: ts-1\ndata_dir: /d\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\nadvertise: 0.0.0.0:7071\n", &TabletConfig{},
			[]string{`advertise "0.0.0.0:7071": an unspecified address cannot be dialled`}},
		{"advertise without host", "data_dir: /d\nadvertise: ':7070'\n", &ServerConfig{}, []string{`advertise ":7070": want a host name or address`}},
		{"advertise port 0", "id: c1\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\nadvertise: db1.example:0\n", &CoordinatorConfig{},
			[]string{`advertise "db1.example:0": want a port in 1..65535`}},
		{"etcd advertise no port", "data_dir: /d\netcd:\n  advertise: db1.example\n", &ServerConfig{}, []string{`etcd.advertise`, "db1.example"}},
		{"kafka changelog", "id: ts-1\ndata_dir: /d\nobject_store: file:///x\netcd:\n  endpoints: [http://e:2379]\nchangelog:\n  dir: /x\n  kafka:\n    brokers: [k1, 'k2:9092']\n    topic_prefix: thaw/log\n    poll_interval: 1h\n    replication_factor: -3\n",
			&TabletConfig{}, []string{"changelog.dir: not used with changelog.kafka", `brokers: "k1": want HOST:PORT`, "topic prefix", "replication factor -3"}},
		{"object store not a url", "data_dir: /d\nobject_store: /srv/remote\n", &ServerConfig{}, []string{`object_store: objstore: store url "/srv/remote": unsupported scheme ""`}},
		{"object store without bucket", "data_dir: /d\nobject_store: 's3://'\n", &ServerConfig{}, []string{"the host must name the s3 bucket"}},
		{"object store in memory", "id: c1\nobject_store: MEM://snapshots\netcd:\n  endpoints: [http://e:2379]\n", &CoordinatorConfig{}, []string{"mem:// lives in this process's memory only"}},
		{"object store relative", "id: ts-1\ndata_dir: /d\nobject_store: file://remote/x\netcd:\n  endpoints: [http://e:2379]\n", &TabletConfig{}, []string{`object_store: objstore: store url "file://remote/x": host must be empty`}},
		{"kafka changelog needs brokers", "data_dir: /d\nchangelog:\n  kafka:\n    topic_prefix: t\n", &ServerConfig{}, []string{"no brokers"}},
		{"kafka changelog unknown key", "data_dir: /d\nchangelog:\n  kafka:\n    broker: [k:1]\n", &ServerConfig{}, []string{"line 4", "broker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := LoadConfig(writeFile(t, tc.body), tc.cfg)
			if err == nil {
				t.Fatalf("no error for %q", tc.body)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaultsValidate(t *testing.T) {
	var s ServerConfig
	s.Defaults()
	s.DataDir = "/d"
	if err := s.Validate(); err != nil {
		t.Errorf("server defaults + data_dir: %v", err)
	}
	var c CoordinatorConfig
	c.Defaults()
	c.ID, c.ObjectStore, c.Etcd.Endpoints = "coord-1", "file:///tmp/r", []string{"http://127.0.0.1:2379"}
	if err := c.Validate(); err != nil {
		t.Errorf("coordinator defaults + required: %v", err)
	}
	var tc TabletConfig
	tc.Defaults()
	tc.ID, tc.DataDir, tc.ObjectStore, tc.Etcd.Endpoints = "ts-1", "/d", "file:///tmp/r", []string{"http://127.0.0.1:2379"}
	if err := tc.Validate(); err != nil {
		t.Errorf("tablet defaults + required: %v", err)
	}
	tc.Changelog.Kafka = &KafkaChangelogOptions{Brokers: []string{"kafka-1:9092", "kafka-2:9092"}, TopicPrefix: "prod.thaw", ReplicationFactor: 3}
	if err := tc.Validate(); err != nil {
		t.Errorf("tablet on the Kafka changelog: %v", err)
	}
	// An empty file is all defaults (and fails only on required keys).
	var e ServerConfig
	err := LoadConfig(writeFile(t, ""), &e)
	if err == nil || !strings.Contains(err.Error(), "data_dir is required") || e.Listen != DefaultListen {
		t.Errorf("empty file: err %v, listen %q", err, e.Listen)
	}
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		str  string
	}{
		{"1024", 1024, "1KiB"},
		{"64KiB", 64 << 10, "64KiB"},
		{"256MiB", 256 << 20, "256MiB"},
		{"2GiB", 2 << 30, "2GiB"},
		{"1536KiB", 1536 << 10, "1536KiB"},
		{"10MB", 10_000_000, "10000000"},
		{"7", 7, "7"},
		{"0", 0, "0"},
	} {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParseByteSize(%q) = %d (%s), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.str)
		}
	}
	for _, bad := range []string{"", "-1", "1.5GiB", "MiB", "12XB", "99999999999TiB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", bad)
		}
	}
}

func TestUploadKey(t *testing.T) {
	t.Setenv(EnvUploadKey, "")
	if k, err := uploadKey(); k != nil || err != nil {
		t.Fatalf("unset: %x %v", k, err)
	}
	t.Setenv(EnvUploadKey, strings.Repeat("ab", 32)+"\n")
	if k, err := uploadKey(); err != nil || len(k) != 32 || k[0] != 0xab {
		t.Fatalf("64 hex digits: %x %v", k, err)
	}
	for _, bad := range []string{strings.Repeat("ab", 31), strings.Repeat("zz", 32), strings.Repeat("ab", 33)} {
		t.Setenv(EnvUploadKey, bad)
		if k, err := uploadKey(); err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %x %v (want an error that does not quote the key)", bad, k, err)
		}
	}
}
