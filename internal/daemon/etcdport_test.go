package daemon

import (
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/thawdb/thaw/internal/testlog"
)

// TestEmbeddedEtcdKeepsItsPort: with the default etcd.listen (a free
// port) the embedded etcd listens on the same port after a restart on the
// same data directory, so that a promoter or thaw coordinator given the
// logged endpoint reaches it again; a port taken meanwhile, or a damaged
// ETCD_PORT file, gives a new free port and a warning, and a listen address
// with a port of its own is used as it is.
func TestEmbeddedEtcdKeepsItsPort(t *testing.T) {
	dir := t.TempDir()
	portOf := func(e *Embedded) int {
		t.Helper()
		eps := e.EtcdEndpoints()
		if len(eps) != 1 {
			t.Fatalf("etcd endpoints %v", eps)
		}
		u, err := url.Parse(eps[0])
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(u.Port())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(cfg EmbeddedConfig) (int, string) {
		t.Helper()
		var logs testlog.Buffer
		cfg.DataDir, cfg.TabletServers = dir, 1
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		e := startTest(t, cfg)
		p := portOf(e)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return p, logs.String()
	}
	file := filepath.Join(dir, etcdPortFileName)

	first, _ := run(EmbeddedConfig{})
	if b, err := os.ReadFile(file); err != nil || string(b) != strconv.Itoa(first)+"\n" {
		t.Fatalf("%s after the first run: %q %v, want %d", etcdPortFileName, b, err, first)
	}
	// (An ephemeral port another process of a loaded machine took between
	// the runs, say the tests of other packages run in parallel: the run
	// says so, and the check is made again from the port it recorded.)
	for try := 1; ; try++ {
		again, logs := run(EmbeddedConfig{})
		if again == first && !strings.Contains(logs, "port") {
			break
		}
		if try == 3 || !strings.Contains(logs, "address already in use") {
			t.Fatalf("restart: etcd on port %d, want %d (the last run's); warnings:\n%s", again, first, logs)
		}
		first = again
	}

	// The port taken by another process: a new one, said so, recorded.
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
	if err != nil {
		t.Fatal(err)
	}
	moved, logs := run(EmbeddedConfig{})
	_ = ln.Close()
	if moved == first || !strings.Contains(logs, "the embedded etcd's port of the last run is not free; it listens on a new one") ||
		!strings.Contains(logs, "port="+strconv.Itoa(first)) {
		t.Fatalf("port %d taken: etcd on %d; warnings:\n%s", first, moved, logs)
	}
	if again, _ := run(EmbeddedConfig{EtcdListen: "127.0.0.1:0"}); again != moved {
		t.Fatalf("restart after the move: etcd on port %d, want %d", again, moved)
	}

	// The port taken after the check that it is free, before etcd binds
	// it: etcd starts again on a new one, said so, recorded.
	var racer net.Listener
	raced, logs := run(EmbeddedConfig{etcdProbed: func(addr string) {
		if racer, err = net.Listen("tcp", addr); err != nil {
			t.Errorf("take %s: %v", addr, err)
		}
	}})
	if racer == nil {
		t.Fatal("the hook never ran")
	}
	_ = racer.Close()
	if raced == moved || !strings.Contains(logs, "the embedded etcd's port of the last run is not free; it listens on a new one") ||
		!strings.Contains(logs, "port="+strconv.Itoa(moved)) {
		t.Fatalf("port %d taken before etcd bound it: etcd on %d; warnings:\n%s", moved, raced, logs)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != strconv.Itoa(raced)+"\n" {
		t.Fatalf("%s after the race: %q %v, want %d", etcdPortFileName, b, err, raced)
	}

	// A damaged file: a new free port and a warning, then a good file.
	if err := os.WriteFile(file, []byte("70000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, logs := run(EmbeddedConfig{})
	if !strings.Contains(logs, "cannot read the embedded etcd's port of the last run") || !strings.Contains(logs, `70000`) {
		t.Fatalf("damaged %s: warnings:\n%s", etcdPortFileName, logs)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != strconv.Itoa(p)+"\n" {
		t.Fatalf("%s after the damaged one: %q %v, want %d", etcdPortFileName, b, err, p)
	}

	// A port of its own: used as it is; the file is neither read nor
	// written.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	own := free.Addr().(*net.TCPAddr).Port
	_ = free.Close()
	if got, _ := run(EmbeddedConfig{EtcdListen: "127.0.0.1:" + strconv.Itoa(own)}); got != own {
		t.Fatalf("etcd.listen 127.0.0.1:%d: etcd on %d", own, got)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != strconv.Itoa(p)+"\n" {
		t.Fatalf("%s after a run with a port of its own: %q %v, want %d", etcdPortFileName, b, err, p)
	}
}

func TestReadEtcdPortFile(t *testing.T) {
	f := newEtcdPortFile(t.TempDir(), slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		data string
		want int // 0: an error
	}{
		{"2379\n", 2379}, {"1\n", 1}, {"65535\n", 65535},
		{"2379", 0}, {"", 0}, {"\n", 0}, {"0\n", 0}, {"65536\n", 0}, {"-1\n", 0},
		{"02379\n", 0}, {"+2379\n", 0}, {" 2379\n", 0}, {"2379\n\n", 0}, {"2379\r\n", 0}, {"abc\n", 0},
	} {
		if err := os.WriteFile(f.path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := f.read()
		if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || got != tc.want) {
			t.Errorf("%q: %d %v, want %d", tc.data, got, err, tc.want)
		}
	}
}
