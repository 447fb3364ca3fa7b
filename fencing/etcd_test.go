package fencing_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/thawdb/thaw/internal/testetcd"
)

// endpoints are the client URLs of the embedded etcd shared by all tests
// of this binary (short elections: one-second leases); each test works
// under its own prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "fencing", testetcd.Options{FastElections: true}, &endpoints))
}

// newClient returns a client of the shared etcd, closed at the end of the
// test unless the test closes it first.
func newClient(t *testing.T) *clientv3.Client {
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
