package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// etcdPortFileName is the file under an embedded tier's data directory that
// keeps the port its etcd listened on, when etcd.listen leaves the port to
// the system (the default, 127.0.0.1:0).
const etcdPortFileName = "ETCD_PORT"

// etcdPortFile keeps the embedded etcd's client port across restarts of a
// data directory. Other processes are given the endpoint a run logged (a
// promoter's tier.etcd.endpoints, a thaw coordinator's or thaw tablet's
// etcd.endpoints); a new free port at every start would strand them after
// a restart. With a listen address whose port is 0, the next start asks
// for the port of the previous run first, and takes another free one (with
// a warning) only when that one is taken. A listen address with a port of
// its own is used as it is, and the file is not read.
type etcdPortFile struct {
	path string
	log  *slog.Logger
}

func newEtcdPortFile(dataDir string, log *slog.Logger) etcdPortFile {
	return etcdPortFile{path: filepath.Join(dataDir, etcdPortFileName), log: log}
}

// zeroPortHost returns the host of an etcd listen address ("" for the
// default, or host:port as EmbeddedConfig checks it) whose port is 0.
func zeroPortHost(listen string) (string, bool) {
	if listen == "" {
		return "127.0.0.1", true
	}
	host, port, err := net.SplitHostPort(listen)
	return host, err == nil && port == "0"
}

// listen returns the address to start etcd on: listen itself, unless its
// port is 0 and the previous run's port is free: then that port, and the
// port (0 otherwise).
func (f etcdPortFile) listen(listen string) (string, int) {
	host, ok := zeroPortHost(listen)
	if !ok {
		return listen, 0
	}
	prev, err := f.read()
	switch {
	case errors.Is(err, os.ErrNotExist):
		return listen, 0
	case err != nil:
		f.log.Warn("cannot read the embedded etcd's port of the last run; it listens on a new free port", "file", f.path, "err", err)
		return listen, 0
	}
	addr := net.JoinHostPort(host, strconv.Itoa(prev))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.warnMoved(prev, err)
		return listen, 0
	}
	_ = ln.Close()
	return addr, prev
}

// warnMoved says that the previous run's port cannot be had again.
func (f etcdPortFile) warnMoved(prev int, err error) {
	f.log.Warn("the embedded etcd's port of the last run is not free; it listens on a new one: give processes that reach it (a promoter's tier.etcd.endpoints) the endpoint logged below, or set etcd.listen",
		"port", prev, "err", err)
}

// read parses the file: one port number and a newline.
func (f etcdPortFile) read() (int, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return 0, err
	}
	s, ok := strings.CutSuffix(string(b), "\n")
	port, err := strconv.Atoi(s)
	if !ok || err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != s {
		return 0, fmt.Errorf("%q is not a port number and a newline", b)
	}
	return port, nil
}

// write records the port etcd listens on (temporary file and rename); a
// failure is logged: the next start then takes a new free port.
func (f etcdPortFile) write(addrs []net.Addr) {
	if len(addrs) == 0 {
		return
	}
	ta, ok := addrs[0].(*net.TCPAddr)
	if !ok {
		return
	}
	tmp := f.path + ".tmp"
	err := os.WriteFile(tmp, []byte(strconv.Itoa(ta.Port)+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		f.log.Warn("cannot record the embedded etcd's port; the next start takes a new free one", "file", f.path, "err", err)
	}
}

// isAddrInUse reports a listener that could not bind its port.
func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
