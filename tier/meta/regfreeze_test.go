package meta_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/testproxy"
	"github.com/thawdb/thaw/tier/meta"
)

// TestRegistrationEndsWithLeaseAfterFreeze: a registration whose
// connection goes silent right after RegisterServer returns ends (Done)
// about its TTL after the lease was last renewed, not when clientv3 gives
// up on the unanswered keep-alive (its dial timeout plus a second: up to
// 3.5 s after etcd had expired the lease).
func TestRegistrationEndsWithLeaseAfterFreeze(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	p := testproxy.New(t, endpoints[0])
	s, err := meta.New(newClient(t, []string{"http://" + p.Addr()}), e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	r, err := s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-1", Address: "127.0.0.1:1"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	start := time.Now()
	// The key goes when etcd expires the lease.
	key := e.prefix + "/servers/ts-1"
	var gone time.Duration
	for {
		resp, err := e.cli.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			gone = time.Since(start)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-r.Done():
		t.Logf("key gone after %v, Done after %v", gone, time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatalf("key gone after %v, Done not closed 10s later", gone)
	}
	if late := time.Since(start) - gone; late > 1500*time.Millisecond {
		t.Fatalf("registration believed live %v after etcd expired its lease (key gone after %v)", late, gone)
	}
}
