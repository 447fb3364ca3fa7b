package promoter_test

import (
	"slices"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter"
)

// TestRequestBeforeRun: the daemon installs the API, then starts Run. A
// request served in between did not wait for the resume (it waited only
// once Run had begun it): it replaced the previous leader's stored request
// of its key, dropping its promotion ids, whose waiters then waited for
// ever. With ExpectRun called first, it waits, and the ids are kept.
func TestRequestBeforeRun(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-02")
	k := promoter.Key{Policy: pol.Name(), Partition: part}
	oldID := promoter.PromotionID("default", "x.older", "shop.events", part, 1)
	if _, err := cfg.Ledger.PutRequests(ctx, []promoter.StoredRequest{{Key: k, Forced: true, IDs: []string{oldID}, At: e.clock()}}); err != nil {
		t.Fatal(err)
	}
	p := e.promoter(cfg)
	p.ExpectRun()
	done := make(chan error, 1)
	go func() {
		_, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a request before Run was answered at once: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	run(t, p)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("request: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request still waits after Run resumed the ledger")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		kept := false
		for _, s := range storedRequests(ctx, t, cfg.Ledger) {
			kept = kept || s.Key == k && slices.Contains(s.IDs, oldID)
		}
		if _, skipped := p.Skipped(oldID); kept || skipped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the previous leader's promotion %s was dropped: neither stored nor ended", oldID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
