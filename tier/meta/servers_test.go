package meta_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/thawdb/thaw/internal/testproxy"
	"github.com/thawdb/thaw/tier/meta"
)

// ids returns the ids of a server set.
func ids(set meta.ServerSet) []string {
	var out []string
	for _, s := range set.Servers {
		out = append(out, s.ID)
	}
	return out
}

// awaitServers receives server sets until one has exactly want.
func awaitServers(t *testing.T, ch <-chan meta.ServerSet, d time.Duration, want ...string) meta.ServerSet {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case set, ok := <-ch:
			if !ok {
				t.Fatal("server watch closed")
			}
			if slices.Equal(ids(set), want) {
				return set
			}
		case <-deadline:
			t.Fatalf("live servers never became %v within %v", want, d)
		}
	}
}

func TestServerRegistration(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	e := newEnv(t, meta.WithClock(func() time.Time { return now }))
	ctx := t.Context()
	const ttl = 2 * time.Second // the shared etcd's minimum lease TTL

	watch := e.s.WatchServers(ctx)
	awaitServers(t, watch, 5*time.Second)

	r1, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-1", Address: "127.0.0.1:7001"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// ts-2 registers through its own client, which will "crash".
	crashing := newClient(t, endpoints)
	s2, err := meta.New(crashing, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s2.RegisterServer(ctx, meta.ServerRecord{ID: "ts-2", Address: "127.0.0.1:7002", StartedMs: 5}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	set := awaitServers(t, watch, 5*time.Second, "ts-1", "ts-2")
	want := []meta.ServerRecord{
		{Version: 1, ID: "ts-1", Address: "127.0.0.1:7001", StartedMs: 1700000000000},
		{Version: 1, ID: "ts-2", Address: "127.0.0.1:7002", StartedMs: 5},
	}
	if !slices.Equal(set.Servers, want) {
		t.Fatalf("watched %+v, want %+v", set.Servers, want)
	}
	if got, err := e.s.ListServers(ctx); err != nil || !slices.Equal(got.Servers, want) || got.Rev < set.Rev {
		t.Fatalf("list %+v, %v", got, err)
	}
	// A registration that does not decode (a newer release's field, a
	// stray write) is left out of the list, as of the watch, instead of
	// failing the list (and with it the coordinator's placement).
	if _, err := e.cli.Put(ctx, e.prefix+"/servers/ts-9", `{"version":1,"id":"ts-9","address":"x:1","zone":"a"}`); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.ListServers(ctx); err != nil || !slices.Equal(got.Servers, want) {
		t.Fatalf("list with an undecodable registration: %+v, %v", got, err)
	}
	if _, err := e.cli.Delete(ctx, e.prefix+"/servers/ts-9"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.cli.Get(ctx, e.prefix+"/servers/ts-1")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != int64(r1.Lease()) {
		t.Fatalf("ts-1's key is not under its lease: %v, %v", resp, err)
	}

	before := e.dump()
	if _, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-1", Address: "127.0.0.1:7009"}, ttl); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("second registration of ts-1: %v", err)
	}
	for _, bad := range []meta.ServerRecord{{ID: "TS-1", Address: "x:1"}, {ID: "ts-3"}, {ID: "", Address: "x:1"}} {
		if _, err := e.s.RegisterServer(ctx, bad, ttl); !errors.Is(err, meta.ErrInvalid) {
			t.Errorf("register %+v: %v; want ErrInvalid", bad, err)
		}
	}
	e.unchanged(before, "rejected registrations")

	// Revoked from outside: the key goes at once and the holder learns it.
	if _, err := e.cli.Revoke(ctx, r1.Lease()); err != nil {
		t.Fatal(err)
	}
	closed(t, r1.Done(), 5*time.Second, "ts-1's registration ends")
	awaitServers(t, watch, 5*time.Second, "ts-2")

	// Crashed: nobody keeps the lease alive, so it expires after the TTL.
	start := time.Now()
	crashing.Close()
	closed(t, r2.Done(), 5*time.Second, "ts-2's registration ends")
	awaitServers(t, watch, ttl+5*time.Second)
	t.Logf("ts-2 gone %v after its client closed", time.Since(start))
	if err := r1.Close(ctx); err != nil {
		t.Fatalf("close an ended registration: %v", err)
	}

	// Close revokes: the key goes at once.
	r3, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-3", Address: "127.0.0.1:7003"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	awaitServers(t, watch, 5*time.Second, "ts-3")
	if err := r3.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed(t, r3.Done(), time.Second, "closed registration done")
	awaitServers(t, watch, 5*time.Second)
}

// TestWatchSurvivesDeadConnection: a watch whose connection goes silent
// (a host off the network: nothing answers, nothing is reset) resumes
// over a new one, found by Connect's keepalive, and sees what changed
// meanwhile. Without a keepalive the dead connection looks alive for ever.
func TestWatchSurvivesDeadConnection(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	p := testproxy.New(t, endpoints[0])
	watcher, err := meta.New(newClient(t, []string{"http://" + p.Addr()}), e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	watch := watcher.WatchServers(ctx)
	awaitServers(t, watch, 5*time.Second)
	p.Freeze()
	r, err := e.s.RegisterServer(ctx, meta.ServerRecord{ID: "ts-9", Address: "127.0.0.1:7009"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	// A hang guard: the keepalive finds the dead connection after
	// KeepAliveTime + KeepAliveTimeout, the reconnection takes a moment.
	awaitServers(t, watch, 3*(meta.KeepAliveTime+meta.KeepAliveTimeout), "ts-9")
}
