package daemon

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/thawdb/thaw/lake"
)

// configKinds are the configs DecodeConfig reads: thaw server,
// coordinator, tablet and promoter.
func newConfig(kind uint8) Config {
	switch kind % 4 {
	case 0:
		return &ServerConfig{}
	case 1:
		return &CoordinatorConfig{}
	case 2:
		return &TabletConfig{}
	default:
		return &PromoterConfig{}
	}
}

// seedConfigs are configs as operators write them: the examples of
// docs/tier.md and docs/promoter.md and the test configs, by kind.
var seedConfigs = []struct {
	kind uint8
	doc  string
}{
	{0, "data_dir: /var/lib/thaw\nlisten: 0.0.0.0:7070\nadvertise: db1.example:7070\ntablets: 3\ncoordinator:\n  snapshot_retention: 5\n" +
		"tablet:\n  snapshot_interval: 5m\n  cache_size: 1GiB\nlog:\n  format: json\n"},
	{0, "data_dir: /var/lib/thaw\netcd:\n  prefix: /prod\n  compaction_retention: 2h\ncoordinator:\n  lease_ttl: 3s\n  bulk_load:\n" +
		"    max_build_timeout: 2h\n    max_manifest_bytes: 8MiB\n    orphan_clean_interval: -1s\ntablet:\n  memtable_budget: 64MiB\n" +
		"  max_batch_bytes: 1MiB\nchangelog:\n  segment_bytes: 128MiB\n  max_batch_bytes: 16MiB\n"},
	{1, "id: coord-1\nlisten: 0.0.0.0:7070\nobject_store: s3://bucket/thaw?region=eu-west-1\netcd:\n  endpoints: [http://10.0.0.1:2379, http://10.0.0.2:2379]\n" +
		"  username: thaw\n  dial_timeout: 2s\ncoordinator:\n  fanout: 16\n  resync_interval: 1m\n"},
	{2, "id: ts-1\ndata_dir: /var/lib/thaw\nobject_store: file:///srv/remote\netcd:\n  endpoints: [http://e:2379]\nchangelog:\n  dir: /fast/changelog\n" +
		"tablet:\n  restore_concurrency: 8\n  expected_replicas: 100\n"},
	{3, "listen: 127.0.0.1:7080\ndata_dir: /var/lib/thaw\npolicies: [policies/]\ncatalogs:\n  default:\n    type: sql\n    uri: /data/lake/catalog.db\n" +
		"    warehouse: file:///data/lake/warehouse\ntier:\n  embedded: true\n  tablets: 3\nprefix: /thaw/promoter\nworkers: 2\nreconcile_interval: 1m\n" +
		"lake_poll_interval: 30s\ncommit_budget: 5m\nlease_ttl: 10s\nshutdown_timeout: 30s\nlog: {level: info, format: text}\n"},
	{3, "policies: [a.yaml, /etc/thaw/b.yaml]\ncatalogs:\n  lake:\n    type: rest\n    uri: https://catalog.example/api\n    token: t0k3n\n" +
		"    headers: {X-Tenant: acme}\n    storage: {s3: {endpoint: 'http://minio:9000', region: us-east-1, path_style: true}}\n" +
		"tier: {address: 'coord:7070', etcd: {endpoints: ['http://e:2379']}}\nid: promoter-a\n"},
	{3, "catalogs:\n  default: {uri: /c.db, password: '[redacted]'}\n"},
	{0, ""},
	{0, "data_dir: /a\n---\ndata_dir: /b\n"},
	{0, "data_dir: /d\n...\ngarbage: [\n"},
	{0, "a: &x [*x]\n"},
}

// FuzzDecodeConfig: decoding a config file never panics, and neither does
// validating what decoded; an error names the file and what is wrong; a
// decoded config written back as YAML decodes again to a config that
// writes the same YAML and validates the same way — except that a config
// holding secrets, which print as "[redacted]", does not decode again.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range seedConfigs {
		f.Add(s.kind, []byte(s.doc))
	}
	for _, tc := range badConfigs() {
		f.Add(tc.kind, []byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, kind uint8, doc []byte) {
		cfg := newConfig(kind)
		if err := DecodeConfig(bytes.NewReader(doc), "fuzz.yaml", cfg); err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "daemon: config fuzz.yaml: ") || len(msg) == len("daemon: config fuzz.yaml: ") {
				t.Fatalf("error %q does not name the file and the problem", msg)
			}
			return
		}
		verr := cfg.Validate()
		if verr != nil && strings.TrimSpace(verr.Error()) == "" {
			t.Fatalf("validation error without a message for %q", doc)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal of decoded %q: %v", doc, err)
		}
		cfg2 := newConfig(kind)
		err = DecodeConfig(bytes.NewReader(out), "fuzz.yaml", cfg2)
		if holdsSecret(reflect.ValueOf(cfg)) {
			if err == nil || !strings.Contains(err.Error(), "printed config") {
				t.Fatalf("a printed config with redacted secrets decoded again: %v\n%s", err, out)
			}
			return
		}
		if err != nil {
			t.Fatalf("decode of the YAML of decoded %q: %v\n%s", doc, err, out)
		}
		out2, err := yaml.Marshal(cfg2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip of %q changed\n%s\ninto\n%s(%v)", doc, out, out2, err)
		}
		if verr2 := cfg2.Validate(); fmt.Sprint(verr) != fmt.Sprint(verr2) {
			t.Fatalf("round trip of %q changed validation from %v to %v", doc, verr, verr2)
		}
	})
}

// holdsSecret reports whether v holds a non-empty lake.Secret anywhere.
func holdsSecret(v reflect.Value) bool {
	if v.Type() == reflect.TypeFor[lake.Secret]() {
		return v.String() != ""
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && holdsSecret(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if holdsSecret(v.Field(i)) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if holdsSecret(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if holdsSecret(it.Value()) {
				return true
			}
		}
	}
	return false
}
