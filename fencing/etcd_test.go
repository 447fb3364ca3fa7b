package fencing_test

import (
	"context"
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

// endpoint is the client URL of the embedded etcd shared by all tests of
// this binary; each test works under its own prefix.
var endpoint string

func TestMain(m *testing.M) {
	stop, err := startEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded etcd:", err)
		os.Exit(1)
	}
	defer stop()
	m.Run()
}

// startEtcd starts a single-member etcd on random loopback ports.
func startEtcd() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "fencing-etcd-")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	loopback := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg.ListenClientUrls, cfg.ListenPeerUrls = loopback, loopback
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	// The minimum lease TTL is 1.5 election timeouts rounded up to seconds:
	// 2s with the default 1000ms, 1s with 200ms.
	cfg.TickMs, cfg.ElectionMs = 20, 200
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	stop = func() {
		e.Close()
		os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stop()
		return nil, err
	case <-time.After(30 * time.Second):
		stop()
		return nil, errors.New("not ready after 30s")
	}
	endpoint = "http://" + e.Clients[0].Addr().String()
	return stop, nil
}

// newClient returns a client of the shared etcd, closed at the end of the
// test unless the test closes it first.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// wait fails the test if ch does not deliver within d.
func wait[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
	var zero T
	return zero
}

// ctxTimeout returns the test's context bounded by d.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
