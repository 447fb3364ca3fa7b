package fencing_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/testetcd"
)

// endpoints are the client URLs of the embedded etcd shared by all tests
// of this binary (short elections: one-second leases); each test works
// under its own prefix.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(testetcd.Main(m, "fencing", testetcd.Options{FastElections: true}, &endpoints))
}

// newClient returns a client of the shared etcd (see testetcd.Client).
func newClient(t *testing.T) *clientv3.Client { return testetcd.Client(t, endpoints) }

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
