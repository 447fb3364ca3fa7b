package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/testetcd"
)

// startRole starts `thaw ROLE --config cfg` and returns once it serves
// (its "serving on" line), failing the test if it does not within a
// minute. The process is killed at the end of the test; its log is printed
// if the test failed.
func startRole(t *testing.T, role, cfg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(thawBinary(t), role, "--config", cfg)
	cmd.Env = childEnv(t)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("thaw %s's log:\n%s", role, stderr.String())
		}
	})
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving on ") {
				serving <- true
				for sc.Scan() { // keep draining
				}
				return
			}
		}
		serving <- false
	}()
	select {
	case ok := <-serving:
		if !ok {
			t.Fatalf("thaw %s ended without serving: %v", role, cmd.Wait())
		}
	case <-time.After(time.Minute):
		t.Fatalf("thaw %s did not serve within a minute", role) // the cleanup kills it and prints its log
	}
	return cmd
}

// kill9 kills cmd with SIGKILL and waits for it.
func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.Exited() {
		t.Fatalf("not killed: %v", err)
	}
}

// freePort returns a loopback host:port that nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func writeConfig(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tierClient runs a client command against addr, waiting up to 30 s for
// the tier, and requires success.
func tierClient(t *testing.T, addr string, args ...string) string {
	t.Helper()
	start := time.Now()
	code, out, errOut := run(t, append(args, "--server", addr, "--timeout", "30s")...)
	if code != 0 {
		t.Fatalf("thaw %s: code %d after %v\n%s%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), out, errOut)
	}
	return out
}

// TestServerRestartAfterKill kills `thaw server` with SIGKILL and starts
// it again on the same data directory. The leases of the killed run (the
// coordinator's election, its address, every tablet server's registration)
// would hold the restart up until they expire (here a minute); the new run
// revokes them at start, so the tier serves the row written before the
// kill within the 30 seconds a client waits.
func TestServerRestartAfterKill(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	cfg := writeConfig(t, dir, "server.yaml", "data_dir: "+filepath.Join(dir, "data")+"\nlisten: "+addr+"\ntablets: 2\n"+
		"coordinator: {lease_ttl: 60s}\ntablet: {lease_ttl: 60s}\n")
	cmd := startRole(t, "server", cfg)
	tierClient(t, addr, "table", "create", "r.t", "--column", "id BIGINT", "--column", "v STRING", "--primary-key", "id", "--buckets", "2", "--replication", "2")
	tierClient(t, addr, "put", "r.t", `{"id":7,"v":"before the kill"}`)
	kill9(t, cmd)

	startRole(t, "server", cfg)
	if out := tierClient(t, addr, "get", "r.t", `{"id":7}`); !strings.Contains(out, "before the kill") {
		t.Fatalf("get after the restart:\n%s", out)
	}
	if out := tierClient(t, addr, "servers"); strings.Count(out, "local:") != 2 {
		t.Fatalf("servers after the restart:\n%s", out)
	}
}

// TestTabletRestartAfterKill: a `thaw tablet` killed with SIGKILL
// registers again as soon as it restarts on its data_dir, not when its
// old registration's lease (here a minute) expires; a second `thaw tablet`
// on a data_dir in use is refused.
func TestTabletRestartAfterKill(t *testing.T) {
	dir := t.TempDir()
	addr, etcd := freePort(t), freePort(t)
	startRole(t, "server", writeConfig(t, dir, "server.yaml", "data_dir: "+filepath.Join(dir, "srv")+"\nlisten: "+addr+"\ntablets: 1\n"+
		"etcd: {listen: "+etcd+"}\n"))
	tabletCfg := writeConfig(t, dir, "tablet.yaml", "id: ts-9\nlisten: 127.0.0.1:0\ndata_dir: "+filepath.Join(dir, "ts9")+"\n"+
		"object_store: file://"+filepath.ToSlash(filepath.Join(dir, "srv", "remote"))+"\netcd: {endpoints: [http://"+etcd+"]}\ntablet: {lease_ttl: 60s}\n")
	registered := func() int64 {
		t.Helper()
		var servers []struct {
			Server    string `json:"server"`
			StartedMs int64  `json:"started_ms"`
		}
		if err := json.Unmarshal([]byte(tierClient(t, addr, "servers", "--output", "json")), &servers); err != nil {
			t.Fatal(err)
		}
		for _, s := range servers {
			if s.Server == "ts-9" {
				return s.StartedMs
			}
		}
		return 0
	}
	cmd := startRole(t, "tablet", tabletCfg)
	var first int64
	for deadline := time.Now().Add(30 * time.Second); first == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		first = registered()
	}
	if first == 0 {
		t.Fatal("ts-9 did not register")
	}
	if code, _, errOut := run(t, "tablet", "--config", tabletCfg); code == 0 || !strings.Contains(errOut, "is another thaw tablet using it?") {
		t.Fatalf("a second thaw tablet on the data_dir: code %d, %s", code, errOut)
	}
	kill9(t, cmd)

	startRole(t, "tablet", tabletCfg)
	again := first
	for deadline := time.Now().Add(30 * time.Second); again <= first && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		again = registered()
	}
	if again <= first {
		t.Fatalf("ts-9 registered at %d before the kill and %d 30 s after its restart: the killed run's lease held it up", first, again)
	}
}

// TestCoordinatorRestartAfterKill: a lone `thaw coordinator` with a
// data_dir, killed with SIGKILL, leads again as soon as it restarts, not
// when its old election lease (here a minute) expires; a second
// coordinator on the data_dir in use is refused.
func TestCoordinatorRestartAfterKill(t *testing.T) {
	dir := t.TempDir()
	endpoints, stop, err := testetcd.Start("coordinator-restart", testetcd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addr := freePort(t)
	cfg := writeConfig(t, dir, "coord.yaml", "id: coord-9\nlisten: "+addr+"\ndata_dir: "+filepath.Join(dir, "coord")+"\n"+
		"object_store: file://"+filepath.ToSlash(filepath.Join(dir, "remote"))+"\netcd: {endpoints: ["+strings.Join(endpoints, ", ")+"]}\n"+
		"coordinator: {lease_ttl: 60s}\n")
	cmd := startRole(t, "coordinator", cfg)
	tierClient(t, addr, "database", "create", "before")
	if code, _, errOut := run(t, "coordinator", "--config", cfg, "--listen", "127.0.0.1:0"); code == 0 || !strings.Contains(errOut, "is another thaw coordinator using it?") {
		t.Fatalf("a second thaw coordinator on the data_dir: code %d, %s", code, errOut)
	}
	kill9(t, cmd)

	startRole(t, "coordinator", cfg)
	start := time.Now()
	tierClient(t, addr, "database", "create", "after")
	t.Logf("the restarted coordinator led within %v", time.Since(start).Round(time.Millisecond))
}
