package cli

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServerRestartAfterKill kills `thaw server` with SIGKILL and starts
// it again on the same data directory. The leases of the killed run (the
// coordinator's election, its address, every tablet server's registration)
// would hold the restart up until they expire (here a minute); the new run
// revokes them at start, so the tier serves the row written before the
// kill within the 30 seconds a client waits.
func TestServerRestartAfterKill(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "data")+"\nlisten: 127.0.0.1:0\ntablets: 2\n"+
		"coordinator: {lease_ttl: 60s}\ntablet: {lease_ttl: 60s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(thawBinary(t), "server", "--config", cfg)
		cmd.Env = childEnv(t)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("thaw server's log:\n%s", stderr.String())
			}
		})
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		serving := regexp.MustCompile(`serving on (http://\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				go func() { // keep draining
					for sc.Scan() {
					}
				}()
				return cmd, m[1]
			}
		}
		t.Fatalf("thaw server ended without serving: %v", cmd.Wait())
		return nil, ""
	}
	client := func(addr string, args ...string) string {
		t.Helper()
		start := time.Now()
		code, out, errOut := run(t, append(args, "--server", addr, "--timeout", "30s")...)
		if code != 0 {
			t.Fatalf("thaw %s: code %d after %v\n%s%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), out, errOut)
		}
		return out
	}

	cmd, addr := start()
	client(addr, "table", "create", "r.t", "--column", "id BIGINT", "--column", "v STRING", "--primary-key", "id", "--buckets", "2", "--replication", "2")
	client(addr, "put", "r.t", `{"id":7,"v":"before the kill"}`)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Exited() {
		t.Fatalf("thaw server was not killed: %v", err)
	}

	_, addr = start()
	if out := client(addr, "get", "r.t", `{"id":7}`); !strings.Contains(out, "before the kill") {
		t.Fatalf("get after the restart:\n%s", out)
	}
	if out := client(addr, "servers"); strings.Count(out, "local:") != 2 {
		t.Fatalf("servers after the restart:\n%s", out)
	}
}
