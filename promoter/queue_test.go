package promoter

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestPromotionID(t *testing.T) {
	id := PromotionID("default", "lake.events", "db.events", "2024-01-05", 7)
	if err := validID(id); err != nil {
		t.Fatalf("PromotionID %q is not valid: %v", id, err)
	}
	if again := PromotionID("default", "lake.events", "db.events", "2024-01-05", 7); again != id {
		t.Fatalf("not deterministic: %s, %s", id, again)
	}
	// Every part of the identity matters, and the parts cannot run into
	// each other.
	seen := map[string]string{id: "base"}
	for name, other := range map[string]string{
		"catalog":   PromotionID("other", "lake.events", "db.events", "2024-01-05", 7),
		"table":     PromotionID("default", "lake.events2", "db.events", "2024-01-05", 7),
		"target":    PromotionID("default", "lake.events", "db.events2", "2024-01-05", 7),
		"partition": PromotionID("default", "lake.events", "db.events", "2024-01-06", 7),
		"snapshot":  PromotionID("default", "lake.events", "db.events", "2024-01-05", 8),
		"shifted":   PromotionID("default", "lake.event", "db.events", "s2024-01-05", 7),
		"empty":     PromotionID("default", "lake.events", "db.events", "", 7),
	} {
		if prev, dup := seen[other]; dup {
			t.Errorf("%s: id %s equals %s's", name, other, prev)
		}
		seen[other] = name
	}
	if tok := CallerToken(id, 3); tok != "thaw-promoter/"+id+"/3" {
		t.Errorf("caller token %q", tok)
	}
	for _, bad := range []string{"", "p-", "p-0123456789abcdeg", "p-0123456789ABCDEF", "x-0123456789abcdef", "p-0123456789abcdef0", "p-../../../leader"} {
		if validID(bad) == nil {
			t.Errorf("validID(%q) = nil", bad)
		}
	}
}

func TestPartitionRef(t *testing.T) {
	for _, s := range []string{"0/event_day=2024-01-05", "3/a=1/b=x%2Fy", "0/"} {
		r, err := parsePartitionRef(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if back := partitionRefString(r); back != s {
			t.Errorf("%q -> %+v -> %q", s, r, back)
		}
	}
	for _, s := range []string{"", "x/y", "event_day=1"} {
		if _, err := parsePartitionRef(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func TestQueueDedup(t *testing.T) {
	q := newQueue(func(string) int { return 0 })
	a, b := Key{Policy: "p", Partition: "a"}, Key{Policy: "p", Partition: "b"}
	if !q.add(a, item{}) || q.add(a, item{}) || !q.add(b, item{}) {
		t.Fatal("add: a new key must be added once")
	}
	q.add(a, item{forced: true, ids: []string{"p-1"}, rev: 7}) // merges into the pending entry
	q.add(a, item{requested: true, ids: []string{"p-2", "p-1"}, rev: 9})
	if p, r := q.depth(); p != 2 || r != 0 {
		t.Fatalf("depth %d/%d, want 2 pending", p, r)
	}
	if it, ok := q.queued(a); !ok || it.rev != 9 {
		t.Fatalf("queued(a) = %+v %t, want the latest stored request's revision 9", it, ok)
	}
	k, it, err := q.get(t.Context())
	if err != nil || k != a || !it.forced || !it.requested || !slices.Equal(it.ids, []string{"p-1", "p-2"}) || it.rev != 9 {
		t.Fatalf("get: %v %+v %v, want a (forced, requested, ids p-1 and p-2, revision 9)", k, it, err)
	}
	if _, ok := q.queued(a); ok {
		t.Fatal("a running key is not queued")
	}
	// a is running: adding it again marks it dirty, it is not handed out.
	if !q.add(a, item{rev: 11}) || q.add(a, item{}) {
		t.Fatal("add while running: first add must mark dirty, second must not")
	}
	if it, ok := q.queued(a); !ok || it.rev != 11 {
		t.Fatalf("queued(a) while it runs = %+v %t, want the dirty entry", it, ok)
	}
	k, _, err = q.get(t.Context())
	if err != nil || k != b {
		t.Fatalf("second get: %v %v, want b", k, err)
	}
	if p, r := q.depth(); p != 0 || r != 2 {
		t.Fatalf("depth %d/%d, want 2 running", p, r)
	}
	q.done(a) // dirty: pending again
	if p, _ := q.depth(); p != 1 {
		t.Fatalf("after done of a dirty key: %d pending, want 1", p)
	}
	k, _, _ = q.get(t.Context())
	if k != a {
		t.Fatalf("got %v, want a again", k)
	}
	q.done(a)
	q.done(b)
	if p, r := q.depth(); p != 0 || r != 0 {
		t.Fatalf("depth %d/%d, want idle", p, r)
	}
}

// TestQueueExclusion checks per-key exclusion and the per-policy limit with
// synctest: acquire blocks while the key runs and proceeds when it is done;
// a second key of a policy limited to one waits for the first.
func TestQueueExclusion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limits := map[string]int{"one": 1, "many": 0}
		q := newQueue(func(p string) int { return limits[p] })
		ctx := t.Context()
		a1, a2 := Key{Policy: "one", Partition: "1"}, Key{Policy: "one", Partition: "2"}
		m1 := Key{Policy: "many", Partition: "1"}
		q.add(a1, item{})
		q.add(a2, item{})
		q.add(m1, item{})
		k, _, _ := q.get(ctx)
		if k != a1 {
			t.Fatalf("first: %v", k)
		}
		// a2's policy is at its limit: m1 comes next.
		k, _, _ = q.get(ctx)
		if k != m1 {
			t.Fatalf("second: %v, want %v (a2 waits for its policy)", k, m1)
		}
		got := make(chan Key)
		go func() {
			k, _, err := q.get(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
		synctest.Wait()
		select {
		case k := <-got:
			t.Fatalf("get returned %v while the policy is at its limit", k)
		default:
		}
		q.done(a1)
		if k := <-got; k != a2 {
			t.Fatalf("after done: %v, want a2", k)
		}

		// acquire of a running key waits until it is done.
		var acquired sync.WaitGroup
		acquired.Add(1)
		var order []string
		var mu sync.Mutex
		go func() {
			defer acquired.Done()
			if err := q.acquire(ctx, m1); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, "acquired")
			mu.Unlock()
		}()
		synctest.Wait()
		mu.Lock()
		order = append(order, "done")
		mu.Unlock()
		q.done(m1)
		acquired.Wait()
		if strings.Join(order, ",") != "done,acquired" {
			t.Fatalf("order %v: acquire did not wait for the running key", order)
		}
		q.done(m1)
		q.done(a2)

		// waitIdle returns once nothing is pending or running; a deadline
		// ends it otherwise.
		q.add(a1, item{})
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := q.waitIdle(dctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waitIdle with a pending key: %v", err)
		}
		k, _, _ = q.get(ctx)
		q.done(k)
		if err := q.waitIdle(ctx); err != nil {
			t.Fatal(err)
		}
		q.close()
		if _, _, err := q.get(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("get after close: %v", err)
		}
	})
}

// TestBackoff checks the retry schedule and that sleep honours the context
// (synctest's fake clock: no real waiting).
func TestBackoff(t *testing.T) {
	p := &Promoter{cfg: Config{Retry: RetryPolicy{Initial: time.Second, Max: 5 * time.Second, Attempts: 5}}}
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, p.backoff(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff %v, want %v", got, want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := sleep(t.Context(), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("slept %v", d)
		}
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		if err := sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled sleep: %v", err)
		}
	})
}

func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(1000)
		start := time.Now()
		// The first second's worth is the burst; 3000 more bytes take 3s.
		for range 4 {
			if err := l.wait(t.Context(), 1000); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("4000 bytes at 1000 B/s took %v, want 3s", d)
		}
	})
}

// TestQueueIDs: ids lists the queued promotion ids in queue order with
// the keys ahead of each, then those queued again while their key runs
// (-1).
func TestQueueIDs(t *testing.T) {
	q := newQueue(func(string) int { return 0 })
	a, b := Key{Policy: "p", Partition: "a"}, Key{Policy: "p", Partition: "b"}
	q.add(a, item{ids: []string{"p-a"}})
	q.add(b, item{ids: []string{"p-b", "p-b2"}})
	q.add(Key{Policy: "p", Partition: "c"}, item{}) // a reconcile's: no id
	if got, want := q.ids(), []queuedID{{"p-a", a, 0}, {"p-b", b, 1}, {"p-b2", b, 1}}; !slices.Equal(got, want) {
		t.Fatalf("ids() = %v, want %v", got, want)
	}
	if _, _, err := q.get(t.Context()); err != nil {
		t.Fatal(err)
	}
	q.add(a, item{ids: []string{"p-a2"}})
	if got, want := q.ids(), []queuedID{{"p-b", b, 0}, {"p-b2", b, 0}, {"p-a2", a, -1}}; !slices.Equal(got, want) {
		t.Fatalf("ids() after a started and was queued again = %v, want %v", got, want)
	}
}

// TestAcquireKeepsAQueuedRequest: a synchronous Promote (or a resume) of a
// key whose request waits in the queue leaves the request queued, to run
// (and be settled: its stored request deleted, its waiters told) after
// it. acquire dropped it: nobody settled it, and the next start queued
// the stored request again.
func TestAcquireKeepsAQueuedRequest(t *testing.T) {
	q := newQueue(func(string) int { return 0 })
	k := Key{Policy: "p", Partition: "2024-01-01"}
	q.add(k, item{requested: true, ids: []string{"p-req"}, rev: 7})
	if err := q.acquire(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	q.done(k)
	it, ok := q.queued(k)
	if !ok || !it.requested || it.rev != 7 || len(it.ids) != 1 {
		t.Fatalf("the request queued before the acquire: %+v %t", it, ok)
	}
}
