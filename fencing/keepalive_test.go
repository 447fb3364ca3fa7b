package fencing_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// drain runs DrainKeepAlive on kch; silent receives the time onSilent was
// called (and onSilent closes kch, as a cancelled keep-alive does); done is
// closed when DrainKeepAlive returns.
func drain(kch chan *clientv3.LeaseKeepAliveResponse, ttl time.Duration, since time.Time) (silent chan time.Time, done chan struct{}) {
	silent, done = make(chan time.Time, 2), make(chan struct{})
	go func() {
		defer close(done)
		fencing.DrainKeepAlive(kch, ttl, since, func() {
			silent <- time.Now()
			close(kch)
		})
	}()
	return silent, done
}

// TestDrainKeepAliveNoAnswer: with no answer at all the lease counts as
// lost ttl after since, not at clientv3's first-keep-alive timeout.
func TestDrainKeepAliveNoAnswer(t *testing.T) {
	const ttl = 300 * time.Millisecond
	since := time.Now()
	silent, done := drain(make(chan *clientv3.LeaseKeepAliveResponse), ttl, since)
	select {
	case at := <-silent:
		if d := at.Sub(since); d < ttl || d > ttl+2*time.Second {
			t.Fatalf("silent after %v, want about %v", d, ttl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onSilent not called 10s after the grant")
	}
	<-done
	if len(silent) != 0 {
		t.Fatal("onSilent called twice")
	}
}

// TestDrainKeepAliveSinceInThePast: a grant already a TTL old when the
// observer starts (a slow start) is silent at once.
func TestDrainKeepAliveSinceInThePast(t *testing.T) {
	silent, done := drain(make(chan *clientv3.LeaseKeepAliveResponse), time.Second, time.Now().Add(-2*time.Second))
	select {
	case <-silent:
	case <-time.After(500 * time.Millisecond):
		t.Fatal("a lease silent for twice its TTL not reported within 0.5s")
	}
	<-done
}

// TestDrainKeepAliveAnswersExtend: each answer moves the deadline to a TTL
// after it; silence after the last answer is reported a TTL later.
func TestDrainKeepAliveAnswersExtend(t *testing.T) {
	const ttl = 400 * time.Millisecond
	kch := make(chan *clientv3.LeaseKeepAliveResponse)
	silent, done := drain(kch, ttl, time.Now())
	var last time.Time
	for range 8 { // 8 answers 150 ms apart: 1.2 s, three TTLs
		time.Sleep(150 * time.Millisecond)
		select {
		case kch <- &clientv3.LeaseKeepAliveResponse{TTL: 1}:
			last = time.Now()
		case at := <-silent:
			t.Fatalf("silent at %v although answers came every 150ms (ttl %v)", at, ttl)
		}
	}
	select {
	case at := <-silent:
		if d := at.Sub(last); d < ttl {
			t.Fatalf("silent %v after the last answer, before its TTL %v", d, ttl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("onSilent not called 10s after the last answer")
	}
	<-done
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
