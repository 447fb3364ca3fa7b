package daemon

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSmallestValidConfigsStart: what Validate and CheckFiles (--check)
// take, a start takes: a changelog.max_batch_bytes below the local log's
// default record limit (1 MiB) and the smallest tablet.memtable_budget
// passed --check and failed every start.
func TestSmallestValidConfigsStart(t *testing.T) {
	for _, c := range []struct{ name, yaml string }{
		{"changelog max batch below 1MiB", "changelog:\n  max_batch_bytes: 512KiB\ntablet:\n  max_batch_bytes: 256KiB\n"},
		{"smallest memtable budget", "tablet:\n  memtable_budget: 768KiB\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg ServerConfig
			if err := DecodeConfig(strings.NewReader(c.yaml), "server.yaml", &cfg); err != nil {
				t.Fatal(err)
			}
			cfg.DataDir, cfg.Listen, cfg.Tablets = t.TempDir(), "127.0.0.1:0", 1
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if err := cfg.CheckFiles(); err != nil {
				t.Fatalf("CheckFiles: %v", err)
			}
			ec := cfg.Embedded()
			ec.EtcdUnsafeNoFsync = true
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			e, err := StartEmbedded(ctx, ec)
			if err != nil {
				t.Fatalf("a config --check takes does not start: %v", err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Below the smallest budget: refused by Validate, not at start.
	var cfg ServerConfig
	if err := DecodeConfig(strings.NewReader("tablet:\n  memtable_budget: 600KiB\n"), "server.yaml", &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "tablet.memtable_budget 600KiB is below 768KiB") {
		t.Fatalf("Validate of a 600KiB budget: %v", err)
	}
}
