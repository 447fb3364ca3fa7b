package daemon

import (
	"bytes"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type badConfig struct {
	name string
	kind uint8
	doc  string
	want []string // in the decode error, or else in the validation error
}

func badConfigs() []badConfig {
	return []badConfig{
		{"unknown key", 0, "data_dir: /d\nlisen: x\n", []string{"line 2", "lisen"}},
		{"key in another case", 0, "data_dir: /d\nLog: {level: info}\n", []string{"line 2", "Log"}},
		{"nested key in another case", 3, "log: {level: debug, Level: info}\n", []string{"line 1", "Level"}},
		{"unknown catalog key", 3, "catalogs:\n  default: {uri: /c.db, passwd: x}\n", []string{"line 2", "passwd"}},
		{"duplicate key", 0, "tablets: 3\ntablets: 4\n", []string{"line 2", `"tablets" already defined`}},
		{"two documents", 1, "id: a\n---\nid: b\n", []string{"more than one YAML document (line 2)"}},
		{"garbage after the document", 0, "data_dir: /d\n...\ngarbage: [\n", []string{"after the document", "did not find expected <document start>"}},
		{"not a mapping", 2, "[id, ts-1]\n", []string{"line 1: a list is not a mapping of keys to values"}},
		{"scalar", 3, "workers\n", []string{"line 1: a string is not a mapping of keys to values"}},
		{"wrong type", 0, "tablets: many\n", []string{"line 1", "many"}},
		{"string for an int", 0, "tablets: '3'\n", []string{"line 1: the string `3` is not a whole number (a quoted value is a string: write it without quotes)"}},
		{"integer duration", 0, "data_dir: /d\ncoordinator:\n  lease_ttl: 5\n", []string{"line 3: `5` is not a duration (such as 30s, 15m or 720h)"}},
		{"bad size", 2, "tablet:\n  cache_size: -1MiB\n", []string{"line 2", `"-1MiB"`}},
		{"size overflow", 2, "tablet:\n  cache_size: 99999999999TiB\n", []string{"line 2", "99999999999TiB"}},
		{"redacted secret", 3, "catalogs:\n  default: {uri: /c.db, password: '[redacted]'}\n", []string{"printed config"}},
		{"redacted header", 3, "catalogs:\n  default: {type: rest, uri: 'http://c', headers: {X-A: '[redacted]'}}\n", []string{"printed config"}},
		{"out of range", 0, "data_dir: /d\ntablets: 65\n", []string{"tablets 65 not in 1..64"}},
		{"enum", 1, "log: {level: loud, format: xml}\n", []string{`log.level "loud"`, `log.format "xml"`}},
		{"zero duration", 3, "reconcile_interval: 0s\n", []string{"reconcile_interval must not be 0"}},
		{"missing required", 1, "listen: 0.0.0.0:1\n", []string{`id ""`, "object_store is required", "etcd.endpoints"}},
		{"bad catalog", 3, "catalogs:\n  default: {type: nessie}\n", []string{`catalogs.default:`, `unknown catalog type "nessie"`}},
	}
}

func TestDecodeConfigRejects(t *testing.T) {
	for _, tc := range badConfigs() {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig(tc.kind)
			err := DecodeConfig(strings.NewReader(tc.doc), "bad.yaml", cfg)
			if err == nil {
				if err = cfg.Validate(); err == nil {
					t.Fatalf("accepted %q: %+v", tc.doc, cfg)
				}
			} else if !strings.HasPrefix(err.Error(), "daemon: config bad.yaml: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestDecodeConfigCompatible: the documented configs decode and validate,
// and a decoded config's YAML decodes to the same config.
func TestDecodeConfigCompatible(t *testing.T) {
	for i, s := range seedConfigs[:6] {
		cfg := newConfig(s.kind)
		if err := DecodeConfig(strings.NewReader(s.doc), "ok.yaml", cfg); err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config %d: %v", i, err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte("[redacted]")) {
			continue // a secret does not print
		}
		again := newConfig(s.kind)
		if err := DecodeConfig(bytes.NewReader(out), "again.yaml", again); err != nil {
			t.Fatalf("config %d again: %v", i, err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("config %d again: %v", i, err)
		}
	}
}
