package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/tier/access"
)

// TestCheckFlag: thaw server, coordinator and tablet --check read every
// file their config names and say which does not load, without starting
// anything (no listener, no etcd: the endpoints below do not exist).
func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	cert, key := testtls.Files(t)
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodCallers := write("callers.yaml", "callers:\n  - {name: app, token_sha256: "+access.TokenSHA256("token-0123456789abcdef")+", read: ['*']}\n")
	badCallers := write("bad-callers.yaml", "callers:\n  - {name: app, token_sha256: abc, read: ['*']}\n")
	token := write("token", strings.Repeat("t", 40)+"\n")
	missing := filepath.Join(dir, "missing.pem")
	tlsSection := "tls: {cert_file: " + cert + ", key_file: " + key + ", ca_file: " + cert + "}\n"
	etcd := "etcd: {endpoints: ['https://127.0.0.1:1'], tls: {ca_file: " + cert + "}}\n"

	for _, tc := range []struct {
		name, cmd, config, want string
	}{
		{"server ok", "server", "data_dir: " + dir + "/data\n" + tlsSection + "coordinator: {callers_file: " + goodCallers + ", authorize_data: true}\n", "is valid"},
		{"server bad callers file", "server", "data_dir: " + dir + "/data\ncoordinator: {callers_file: " + badCallers + "}\n", "bad-callers.yaml: caller app: token sha256"},
		{"server missing key pair", "server", "data_dir: " + dir + "/data\ntls: {cert_file: " + missing + ", key_file: " + key + "}\n", "missing.pem"},
		{"coordinator ok", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + tlsSection + "internal_token_file: " + token + "\ncoordinator: {callers_file: " + goodCallers + "}\n", "is valid"},
		{"coordinator missing token file", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + "internal_token_file: " + missing + "\n", "missing.pem"},
		{"coordinator callers file without data callers", "coordinator", "id: c1\nobject_store: file://" + dir + "/r\n" + etcd + "coordinator: {callers_file: " + write("ddl-only.yaml", "callers:\n  - {name: a, token_sha256: "+access.TokenSHA256("token-0123456789abcdef")+", ddl: ['*']}\n") + ", authorize_data: true}\n", "authorize_data needs a caller with read or write"},
		{"tablet ok", "tablet", "id: ts-1\ndata_dir: " + dir + "/t\nobject_store: file://" + dir + "/r\n" + etcd + "internal_token_file: " + token + "\n", "is valid"},
		{"tablet missing etcd CA", "tablet", "id: ts-1\ndata_dir: " + dir + "/t\nobject_store: file://" + dir + "/r\netcd: {endpoints: ['https://127.0.0.1:1'], tls: {ca_file: " + missing + "}}\n", "etcd.tls"},
	} {
		config := write(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.config)
		code, out, errOut := run(t, tc.cmd, "--check", "--config", config)
		if ok := strings.HasSuffix(tc.name, " ok"); ok != (code == 0) || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%s: code %d, stdout %q, stderr %q; want %q", tc.name, code, out, errOut, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("--check created the data directory: %v", err)
	}
}
