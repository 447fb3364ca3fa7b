package fencing_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/testproxy"
)

// TestStandbyKeepsItsPlaceAfterACompactedWatch: a standby waits in line
// by watching the candidate before it from the revision it read; when its
// connection blips after etcd compacted past that revision (auto-compaction
// while a standby waits for hours), the resumed watch fails with
// ErrCompacted. Elect returned that error (a standby promoter then exited);
// it campaigns again, keeps its place, and is elected when the leader
// resigns.
func TestStandbyKeepsItsPlaceAfterACompactedWatch(t *testing.T) {
	p := testproxy.New(t, endpoints[0])
	cliB, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cliB.Close()
	admin, cliA := newClient(t), newClient(t)
	prefix := "/" + t.Name()
	a, err := fencing.Elect(ctxTimeout(t, 10*time.Second), cliA, prefix, "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(t.Context())
	b := make(chan elected, 1)
	go func() {
		l, err := fencing.Elect(ctxTimeout(t, time.Minute), cliB, prefix, "b", 5*time.Second)
		b <- elected{l, err}
	}()
	waitCandidates(t, admin, prefix, 2)
	time.Sleep(300 * time.Millisecond) // b watches a's key
	var rev int64
	for i := range 5 {
		resp, err := admin.Put(t.Context(), fmt.Sprintf("/%s-other/%d", t.Name(), i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := admin.Compact(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	p.Pause(true) // a blip well within b's TTL
	time.Sleep(150 * time.Millisecond)
	p.Pause(false)
	select {
	case r := <-b:
		t.Fatalf("standby b left the line while a leads: leadership %v, err %v", r.l, r.err)
	case <-time.After(4 * time.Second):
	}
	if a.Err() != nil {
		t.Fatalf("a lost its term: %v", a.Err())
	}
	if err := a.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-b:
		if r.err != nil || r.l == nil {
			t.Fatalf("b after a resigned: %v, %v", r.l, r.err)
		}
		defer r.l.Resign(t.Context())
		if r.l.Epoch() <= a.Epoch() {
			t.Fatalf("b's epoch %d not after a's %d", r.l.Epoch(), a.Epoch())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b not elected after a resigned")
	}
}
