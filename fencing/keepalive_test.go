package fencing_test

import (
	"testing"
	"testing/synctest"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// These tests run in synctest bubbles: time is virtual, so the bounds are
// exact and a loaded machine cannot break them.

// drain runs DrainKeepAlive on kch; silent receives the time onSilent was
// called; done is closed when DrainKeepAlive returns (after the test closes
// kch, as a cancelled keep-alive does).
func drain(kch chan *clientv3.LeaseKeepAliveResponse, ttl time.Duration, since time.Time) (silent chan time.Time, done chan struct{}) {
	silent, done = make(chan time.Time, 2), make(chan struct{})
	go func() {
		defer close(done)
		fencing.DrainKeepAlive(kch, ttl, since, func() { silent <- time.Now() })
	}()
	return silent, done
}

// TestDrainKeepAliveNoAnswer: with no answer at all the lease counts as
// lost ttl after since, not at clientv3's first-keep-alive timeout; the
// drain goes on until the keep-alive ends.
func TestDrainKeepAliveNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		since := time.Now()
		kch := make(chan *clientv3.LeaseKeepAliveResponse)
		silent, done := drain(kch, ttl, since)
		if d := (<-silent).Sub(since); d != ttl {
			t.Fatalf("silent after %v, want %v", d, ttl)
		}
		kch <- &clientv3.LeaseKeepAliveResponse{TTL: 2} // drained, not counted
		close(kch)
		<-done
		if len(silent) != 0 {
			t.Fatal("onSilent called twice")
		}
	})
}

// TestDrainKeepAliveSinceInThePast: a grant already a TTL old when the
// observer starts (a slow start) is silent at once.
func TestDrainKeepAliveSinceInThePast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		kch := make(chan *clientv3.LeaseKeepAliveResponse)
		silent, done := drain(kch, time.Second, start.Add(-2*time.Second))
		if d := (<-silent).Sub(start); d != 0 {
			t.Fatalf("a lease silent for twice its TTL reported after %v", d)
		}
		close(kch)
		<-done
	})
}

// TestDrainKeepAliveAnswersExtend: each answer moves the deadline to a TTL
// after it; silence after the last answer is reported exactly a TTL later.
func TestDrainKeepAliveAnswersExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 400 * time.Millisecond
		kch := make(chan *clientv3.LeaseKeepAliveResponse)
		silent, done := drain(kch, ttl, time.Now())
		var last time.Time
		for range 8 { // 8 answers 300 ms apart: 2.4 s, six TTLs
			time.Sleep(300 * time.Millisecond)
			select {
			case kch <- &clientv3.LeaseKeepAliveResponse{TTL: 1}:
				last = time.Now()
			case at := <-silent:
				t.Fatalf("silent at %v although answers came every 300ms (ttl %v)", at, ttl)
			}
		}
		if d := (<-silent).Sub(last); d != ttl {
			t.Fatalf("silent %v after the last answer, want %v", d, ttl)
		}
		close(kch)
		<-done
	})
}

// TestDrainKeepAliveClosed: a keep-alive that ends (Close, revoked lease)
// returns without calling onSilent.
func TestDrainKeepAliveClosed(t *testing.T) {
	kch := make(chan *clientv3.LeaseKeepAliveResponse)
	called := false
	close(kch)
	fencing.DrainKeepAlive(kch, time.Hour, time.Now(), func() { called = true })
	if called {
		t.Fatal("onSilent called for a closed keep-alive")
	}
}
