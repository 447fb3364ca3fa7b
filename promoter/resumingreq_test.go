package promoter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter"
)

// blockFirstList blocks the first List (Resume's) until release is closed.
type blockFirstList struct {
	promoter.Ledger
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

func (l *blockFirstList) List(ctx context.Context) ([]promoter.Record, error) {
	first := false
	l.once.Do(func() { first = true })
	if first {
		close(l.blocked)
		<-l.release
	}
	return l.Ledger.List(ctx)
}

// TestRequestDuringResume: a request served while a new leader resumes its
// ledger (the previous leader's stored requests not loaded yet) replaced
// the stored request of its key and dropped its promotion ids: the old
// id's waiter saw 404 ("queued") for ever. Request and Cancel wait for the
// resume now (ErrResuming if their context ends first: 503, retriable);
// the stored request is loaded, merged with the request that waited, and
// its old id ends with a skip note.
func TestRequestDuringResume(t *testing.T) {
	e, pol, cfg := requestEnv(t)
	ctx := t.Context()
	part := e.partitionOf("2024-01-02") // outside the window
	k := promoter.Key{Policy: pol.Name(), Partition: part}
	oldID := promoter.PromotionID("default", "x.older", "shop.events", part, 1) // an earlier snapshot's id
	if _, err := cfg.Ledger.PutRequests(ctx, []promoter.StoredRequest{{Key: k, Forced: true, IDs: []string{oldID}, At: e.clock()}}); err != nil {
		t.Fatal(err)
	}
	bl := &blockFirstList{Ledger: cfg.Ledger, blocked: make(chan struct{}), release: make(chan struct{})}
	cfg.Ledger = bl
	p := e.promoter(cfg)
	run(t, p)
	<-bl.blocked // Resume runs
	// A request and a cancel wait for it; given up, they fail with
	// ErrResuming.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := p.Request(short, promoter.Request{Policy: pol.Name(), Partition: part}); !errors.Is(err, promoter.ErrResuming) {
		t.Fatalf("request during resume: %v, want ErrResuming", err)
	}
	if _, err := p.Cancel(short, oldID); !errors.Is(err, promoter.ErrResuming) {
		t.Fatalf("cancel during resume: %v, want ErrResuming", err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := p.Request(ctx, promoter.Request{Policy: pol.Name(), Partition: part})
		waited <- err
	}()
	time.Sleep(100 * time.Millisecond)
	close(bl.release)
	if err := <-waited; err != nil {
		t.Fatalf("request that waited for the resume: %v", err)
	}
	waitFor(t, "the previous leader's requested promotion ended (a skip note: the lake moved on)", func() bool {
		_, ok := p.Skipped(oldID)
		return ok
	})
}
