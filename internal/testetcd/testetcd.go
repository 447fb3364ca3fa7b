// Package testetcd runs the one embedded etcd that the tests of a package
// share (each test works under its own key prefix): a real single-member
// etcd on a random loopback port, without fsync, removed when the tests
// end. It starts etcd through go.etcd.io/etcd/server/v3/embed itself, not
// through tier/meta, so that the tests of packages below meta (fencing)
// can use it too.
package testetcd

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options shape the shared etcd.
type Options struct {
	// FastElections sets a 20 ms tick and 200 ms election timeout, which
	// makes etcd's minimum lease TTL one second instead of two (tests of
	// leases and leadership).
	FastElections bool
}

// readyWithin bounds etcd's start.
const readyWithin = 30 * time.Second

// Main is a TestMain body: it starts the etcd (its data directory named
// after name), sets *endpoints to its client URLs, runs the tests and
// stops etcd. It returns the exit code for os.Exit; when etcd does not
// start it prints why and returns 1 without running any test.
func Main(m *testing.M, name string, opts Options, endpoints *[]string) int {
	eps, stop, err := Start(name, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start embedded etcd for the %s tests: %v\n", name, err)
		return 1
	}
	defer stop()
	*endpoints = eps
	return m.Run()
}

// Start starts an etcd in a new temporary directory and returns its
// client URLs and a stop function that closes it and removes the
// directory.
func Start(name string, opts Options) (endpoints []string, stop func(), err error) {
	dir, err := os.MkdirTemp("", name+"-etcd-")
	if err != nil {
		return nil, nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	loopback := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg.ListenClientUrls, cfg.ListenPeerUrls = loopback, loopback
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	if opts.FastElections {
		// The minimum lease TTL is 1.5 election timeouts rounded up to
		// seconds: 2s with the default 1000ms, 1s with 200ms.
		cfg.TickMs, cfg.ElectionMs = 20, 200
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	stop = func() {
		e.Close()
		os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return nil, nil, err
	case <-time.After(readyWithin):
		stop()
		return nil, nil, fmt.Errorf("not ready after %v", readyWithin)
	}
	for _, l := range e.Clients {
		endpoints = append(endpoints, "http://"+l.Addr().String())
	}
	return endpoints, stop, nil
}

// Client returns a client of the etcd at endpoints, closed when the test
// ends unless the test closes it first.
func Client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
