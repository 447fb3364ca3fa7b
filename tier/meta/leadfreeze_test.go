package meta_test

import (
	"testing"
	"time"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testproxy"
)

// TestLeaderTermEndsWithLeaseAfterFreeze: a leader whose connection goes
// silent right after Elect returns sees its term end about TTL after its
// lease was last renewed, as a standby is elected once etcd expires that
// lease: the two do not both believe they lead for long. The term's watch
// was being set up when the connection froze, and Watch blocked until
// gRPC's keepalive gave up (about 15 s: two leaders for 13 s); and a lease
// never yet renewed was given up by clientv3 only after its first-keep-alive
// timeout (6 s: two leaders for 3.5 s, seen in CI).
func TestLeaderTermEndsWithLeaseAfterFreeze(t *testing.T) {
	e := newEnv(t) // elects coordinator-1 under the env's prefix; resign it
	ctx := t.Context()
	if err := e.lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	p := testproxy.New(t, endpoints[0])
	pcli := newClient(t, []string{"http://" + p.Addr()})
	const ttl = 2 * time.Second
	// Another lease kept alive on the client first: its keep-alive loop
	// then sends a new lease's first request on its next 500 ms tick, so
	// in most runs the freeze below comes before the term's lease was ever
	// renewed (what a loaded machine does to a fresh client too), and
	// clientv3 would give up on it only after its first-keep-alive timeout.
	warm, err := pcli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pcli.KeepAlive(ctx, warm.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	l, err := fencing.Elect(ctxTimeout(t, 10*time.Second), pcli, e.s.ElectionPrefix(), "old", ttl)
	if err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	start := time.Now()
	standby, err := fencing.Elect(ctxTimeout(t, 20*time.Second), e.cli, e.s.ElectionPrefix(), "new", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Resign(ctx)
	elected := time.Since(start)
	select {
	case <-l.Done():
		t.Logf("standby elected after %v, old term ended after %v: %v", elected, time.Since(start), l.Err())
	case <-time.After(15 * time.Second):
		t.Fatalf("old term still running 15s after the standby was elected")
	}
	if both := time.Since(start) - elected; both > 1500*time.Millisecond {
		t.Fatalf("two leaders for %v: standby (epoch %d) elected after %v, old leader (epoch %d) believed it led until %v",
			both, standby.Epoch(), elected, l.Epoch(), time.Since(start))
	}
}
