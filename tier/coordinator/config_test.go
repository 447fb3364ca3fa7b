package coordinator

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/meta"
)

func TestNewValidatesConfig(t *testing.T) {
	e := newEnv(t)
	deps := Deps{
		Etcd: e.cli,
		Meta: e.store,
		Tablets: func(a string) tierv1connect.TabletServiceClient {
			return tierv1connect.NewTabletServiceClient(http.DefaultClient, a)
		},
		Objects: e.objects,
	}
	good := Config{ID: "c-1", AdvertiseAddress: "127.0.0.1:1", RemoteDataDir: e.remote}
	c, err := New(good, deps)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Prefix != e.prefix || c.cfg.DefaultReplicationFactor != 3 || c.cfg.SnapshotRetention != 3 || c.cfg.LeaseTTL != DefaultLeaseTTL {
		t.Fatalf("defaults: %+v", c.cfg)
	}
	other, err := meta.New(e.cli, "/elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tweak func(*Config, *Deps)
		want  string
	}{
		{"bad id", func(c *Config, _ *Deps) { c.ID = "C_1" }, "id"},
		{"no address", func(c *Config, _ *Deps) { c.AdvertiseAddress = "" }, "advertise address"},
		{"foreign prefix", func(c *Config, _ *Deps) { c.Prefix = "/elsewhere" }, "prefix"},
		{"bad remote dir", func(c *Config, _ *Deps) { c.RemoteDataDir = "file:///x/" }, "remote data dir"},
		{"short ttl", func(c *Config, _ *Deps) { c.LeaseTTL = 100e6 }, "lease ttl"},
		{"replication factor", func(c *Config, _ *Deps) { c.DefaultReplicationFactor = 17 }, "replication factor"},
		{"retention", func(c *Config, _ *Deps) { c.SnapshotRetention = -1 }, "snapshot retention"},
		{"upload ttl", func(c *Config, _ *Deps) { c.BulkLoad.UploadCredentialTTL = 25 * time.Hour }, "upload credential ttl"},
		{"short upload ttl", func(c *Config, _ *Deps) { c.BulkLoad.UploadCredentialTTL = time.Millisecond }, "upload credential ttl"},
		{"signed upload ttl", func(c *Config, _ *Deps) { c.BulkLoad.SignedUploadTTL = 2 * time.Hour }, "signed upload ttl"},
		{"short signed upload ttl", func(c *Config, _ *Deps) { c.BulkLoad.SignedUploadTTL = time.Millisecond }, "signed upload ttl"},
		{"upload concurrency", func(c *Config, _ *Deps) { c.BulkLoad.UploadConcurrency = -1 }, "upload concurrency"},
		{"max upload bytes", func(c *Config, _ *Deps) { c.BulkLoad.MaxUploadBytes = -1 }, "max upload bytes"},
		{"upload key", func(_ *Config, d *Deps) { d.UploadKey = []byte("short") }, "signing key"},
		{"no store", func(_ *Config, d *Deps) { d.Meta = nil }, "metadata store"},
		{"no objects", func(_ *Config, d *Deps) { d.Objects = nil }, "object store"},
		{"store of another prefix", func(c *Config, d *Deps) { c.Prefix = e.prefix; d.Meta = other }, "prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, d := good, deps
			tt.tweak(&cfg, &d)
			_, err := New(cfg, d)
			if err == nil || !strings.HasPrefix(err.Error(), "coordinator: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error about %s", err, tt.want)
			}
		})
	}
}
