package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// ttl is the session TTL of every candidate; the shared etcd's minimum lease
// TTL is 1s (see startEtcd).
const ttl = time.Second

type elected struct {
	l   *fencing.Leadership
	err error
}

func electAsync(ctx context.Context, cli *clientv3.Client, prefix, id string) <-chan elected {
	ch := make(chan elected, 1)
	go func() {
		l, err := fencing.Elect(ctx, cli, prefix, id, ttl)
		ch <- elected{l, err}
	}()
	return ch
}

func mustElect(t *testing.T, cli *clientv3.Client, prefix, id string) *fencing.Leadership {
	t.Helper()
	r := wait(t, electAsync(ctxTimeout(t, 10*time.Second), cli, prefix, id), 15*time.Second, "elect "+id)
	if r.err != nil {
		t.Fatalf("elect %s: %v", id, r.err)
	}
	return r.l
}

// waitCandidates waits until n candidate keys exist under prefix.
func waitCandidates(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	for {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("count candidates: %v", err)
		}
		if resp.Count == n {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		<-cli.Watch(wctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("want %d candidates under %s, have %d", n, prefix, resp.Count)
		}
	}
}

func TestElectSingleCandidate(t *testing.T) {
	cli := newClient(t)
	prefix := "/" + t.Name()
	l := mustElect(t, cli, prefix, "a")

	if l.Epoch() <= 0 || l.ID() != "a" || !strings.HasPrefix(l.Key(), prefix+"/") || l.Err() != nil {
		t.Fatalf("epoch %d, id %q, key %q, err %v", l.Epoch(), l.ID(), l.Key(), l.Err())
	}
	resp, err := cli.Get(t.Context(), l.Key())
	if err != nil {
		t.Fatal(err)
	}
	if kv := resp.Kvs[0]; fencing.Epoch(kv.CreateRevision) != l.Epoch() || string(kv.Value) != "a" || kv.Lease == 0 {
		t.Fatalf("leader key: create revision %d, value %q, lease %x; epoch %d", kv.CreateRevision, kv.Value, kv.Lease, l.Epoch())
	}
	want := fencing.Leader{ID: "a", Key: l.Key(), Epoch: l.Epoch()}
	if got, err := fencing.CurrentLeader(t.Context(), cli, prefix); err != nil || got != want {
		t.Fatalf("current leader %+v, %v; want %+v", got, err, want)
	}

	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if err := l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ttl, err := cli.TimeToLive(t.Context(), lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("the term's lease after resign: %+v, %v; want it revoked", ttl, err)
	}
	if !errors.Is(l.Err(), fencing.ErrLeadershipLost) || !errors.Is(context.Cause(l.Context()), fencing.ErrLeadershipLost) {
		t.Fatalf("after resign: err %v, cause %v", l.Err(), context.Cause(l.Context()))
	}
	if err := l.Resign(t.Context()); err != nil {
		t.Fatalf("second resign: %v", err)
	}
	if got, err := fencing.CurrentLeader(t.Context(), cli, prefix); err != nil || got != (fencing.Leader{}) {
		t.Fatalf("current leader after resign %+v, %v; want none", got, err)
	}
}

func TestElectRejectsBadArguments(t *testing.T) {
	cli := newClient(t)
	for _, tc := range []struct {
		name, prefix, id string
		ttl              time.Duration
	}{
		{"empty prefix", "", "a", ttl},
		{"empty id", "/p", "", ttl},
		{"ttl below 1s", "/p", "a", 999 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := fencing.Elect(t.Context(), cli, tc.prefix, tc.id, tc.ttl); err == nil || l != nil {
				t.Fatalf("got %v, %v; want an error", l, err)
			}
		})
	}
}

func TestStandbyTakesOverAfterResign(t *testing.T) {
	cliA, cliB := newClient(t), newClient(t)
	prefix := "/" + t.Name()
	a := mustElect(t, cliA, prefix, "a")
	b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
	waitCandidates(t, cliA, prefix, 2)
	select {
	case r := <-b:
		t.Fatalf("b elected while a leads: %+v", r)
	default:
	}

	if err := a.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := wait(t, b, 5*time.Second, "b takes over")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Epoch() <= a.Epoch() {
		t.Fatalf("epoch went from %d to %d", a.Epoch(), r.l.Epoch())
	}
	if !errors.Is(a.Err(), fencing.ErrLeadershipLost) || r.l.Err() != nil {
		t.Fatalf("a: %v, b: %v", a.Err(), r.l.Err())
	}
}

// TestLeaderCrashStandbyTakesOver closes the leader's client without
// resigning or revoking: its lease expires on its own.
func TestLeaderCrashStandbyTakesOver(t *testing.T) {
	cliA, cliB := newClient(t), newClient(t)
	prefix := "/" + t.Name()
	a := mustElect(t, cliA, prefix, "a")
	b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
	waitCandidates(t, cliB, prefix, 2)

	start := time.Now()
	cliA.Close()
	wait(t, a.Done(), ttl, "crashed leader's context cancelled")
	if !errors.Is(a.Err(), fencing.ErrLeadershipLost) {
		t.Fatalf("cause %v", a.Err())
	}
	t.Logf("after %v: %v", time.Since(start), a.Err())
	r := wait(t, b, ttl+3*time.Second, "b takes over")
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("b took over %v after the crash", time.Since(start))
	if r.l.Epoch() <= a.Epoch() {
		t.Fatalf("epoch went from %d to %d", a.Epoch(), r.l.Epoch())
	}
}

// TestLeadershipLost ends a term from outside the leader: its context must
// be cancelled at once and the next candidate must take over.
func TestLeadershipLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(ctx context.Context, cli *clientv3.Client, key string) error
	}{
		{"lease revoked", func(ctx context.Context, cli *clientv3.Client, key string) error {
			resp, err := cli.Get(ctx, key)
			if err != nil {
				return err
			}
			_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			return err
		}},
		{"key deleted", func(ctx context.Context, cli *clientv3.Client, key string) error {
			_, err := cli.Delete(ctx, key)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin, cliA, cliB := newClient(t), newClient(t), newClient(t)
			prefix := "/" + t.Name()
			a := mustElect(t, cliA, prefix, "a")
			b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
			waitCandidates(t, admin, prefix, 2)

			if err := tc.end(t.Context(), admin, a.Key()); err != nil {
				t.Fatal(err)
			}
			wait(t, a.Done(), ttl, "context cancelled")
			if !errors.Is(a.Err(), fencing.ErrLeadershipLost) {
				t.Fatalf("cause %v", a.Err())
			}
			t.Logf("cause: %v", a.Err())
			r := wait(t, b, 5*time.Second, "b takes over")
			if r.err != nil || r.l.Epoch() <= a.Epoch() {
				t.Fatalf("b: %v, epoch %d after %d", r.err, r.l.Epoch(), a.Epoch())
			}
		})
	}
}

// TestStandbyRequeuesAfterLosingLease covers etcd's Campaign returning
// success for a standby whose own key expired while it waited: Elect must
// notice and queue again instead of claiming a term it does not hold.
func TestStandbyRequeuesAfterLosingLease(t *testing.T) {
	admin, cliA, cliB := newClient(t), newClient(t), newClient(t)
	prefix := "/" + t.Name()
	a := mustElect(t, cliA, prefix, "a")
	b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
	waitCandidates(t, admin, prefix, 2)

	resp, err := admin.Get(t.Context(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var lostKey string
	for _, kv := range resp.Kvs {
		if string(kv.Key) != a.Key() {
			lostKey = string(kv.Key)
			if _, err := admin.Revoke(t.Context(), clientv3.LeaseID(kv.Lease)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitCandidates(t, admin, prefix, 1)

	if err := a.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := wait(t, b, 5*time.Second, "b elected on a new lease")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Key() == lostKey || r.l.Epoch() <= a.Epoch() || r.l.Err() != nil {
		t.Fatalf("b: key %s (lost %s), epoch %d after %d, err %v", r.l.Key(), lostKey, r.l.Epoch(), a.Epoch(), r.l.Err())
	}
	if got, err := fencing.CurrentLeader(t.Context(), admin, prefix); err != nil || got.Key != r.l.Key() {
		t.Fatalf("current leader %+v, %v; want b's key %s", got, err, r.l.Key())
	}
}

func TestElectCancelledLeavesNoCandidate(t *testing.T) {
	cli := newClient(t)
	prefix := "/" + t.Name()
	a := mustElect(t, cli, prefix, "a")
	ctx, cancel := context.WithCancel(t.Context())
	b := electAsync(ctx, cli, prefix, "b")
	waitCandidates(t, cli, prefix, 2)

	cancel()
	r := wait(t, b, 5*time.Second, "cancelled campaign returns")
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("got %v, %v; want context.Canceled", r.l, r.err)
	}
	waitCandidates(t, cli, prefix, 1)

	// Nothing of b's is left in line: c follows a at once.
	c := electAsync(ctxTimeout(t, 10*time.Second), cli, prefix, "c")
	waitCandidates(t, cli, prefix, 2)
	if err := a.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c, 5*time.Second, "c takes over"); r.err != nil {
		t.Fatal(r.err)
	}
}

func TestObserveReportsLeaderChanges(t *testing.T) {
	cliObs, cliA, cliB := newClient(t), newClient(t), newClient(t)
	prefix := "/" + t.Name()
	ctx, cancel := context.WithCancel(t.Context())
	leaders := fencing.Observe(ctx, cliObs, prefix)
	expect := func(want fencing.Leader) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case got, ok := <-leaders:
				if !ok {
					t.Fatalf("observe closed; want %+v", want)
				}
				if got == want {
					return
				}
			case <-timeout:
				t.Fatalf("leader %+v not observed", want)
			}
		}
	}

	expect(fencing.Leader{})
	a := mustElect(t, cliA, prefix, "a")
	expect(fencing.Leader{ID: "a", Key: a.Key(), Epoch: a.Epoch()})

	b := electAsync(ctxTimeout(t, 10*time.Second), cliB, prefix, "b")
	waitCandidates(t, cliA, prefix, 2)
	if err := a.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	rb := wait(t, b, 5*time.Second, "b takes over")
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	expect(fencing.Leader{ID: "b", Key: rb.l.Key(), Epoch: rb.l.Epoch()})

	if err := rb.l.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	expect(fencing.Leader{})

	cancel()
	for range leaders { // drained and closed once ctx is done
	}
}
