package bulkloadtest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"
)

// fakeClock runs with the wall clock and can be moved forward: Advance
// adds to its offset and fires the timers that fall due.
type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*fakeTimer]bool
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	real *time.Timer
	once sync.Once
}

var _ coordinator.Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock { return &fakeClock{timers: map[*fakeTimer]bool{}} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) coordinator.Timer {
	t := &fakeTimer{c: c, at: c.Now().Add(d), f: f}
	c.mu.Lock()
	c.timers[t] = true
	c.mu.Unlock()
	t.real = time.AfterFunc(d, t.fire)
	return t
}

func (t *fakeTimer) fire() {
	t.c.mu.Lock()
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	t.once.Do(func() { go t.f() })
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	_, pending := t.c.timers[t]
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	t.real.Stop()
	return pending
}

// Advance moves the clock forward by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	now := time.Now().Add(c.offset)
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.real.Stop()
		t.fire()
	}
}

// Deadlines abort abandoned transactions: without a frozen manifest at the
// build deadline (BUILD_DEADLINE_EXCEEDED), and with a frozen but
// undecided one at the commit-decision deadline
// (COMMIT_DECISION_DEADLINE_EXCEEDED). Results are garbage-collected after
// the retention: the record, the manifest and the aborted output go; a
// committed load's data stays.
func TestDeadlinesAndResultGC(t *testing.T) {
	clock := newFakeClock()
	h := newHarness(t, withClock(clock), withBulkConfig(func(c *coordinator.BulkLoadConfig) {
		c.DefaultBuildTimeout = time.Hour
		c.CommitDecisionTimeout = 10 * time.Minute
		c.ResultRetention = 24 * time.Hour
	}))
	n := h.standard()
	ctx := t.Context()
	rows := makeRows(40, "")

	// Build deadline.
	tpA := h.createTable(n, "a", 2, "")
	infoA := h.mustBegin(n, tpA, "a")
	mA := h.load(infoA, rows)
	clock.Advance(2 * time.Hour)
	st := h.awaitState(infoA.GetHandle().GetTxnId(), tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED)
	if st.GetAbortReason() != tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_BUILD_DEADLINE_EXCEEDED {
		t.Fatalf("status %v", st)
	}
	h.noFence(tpA)
	_, err := commit(ctx, n, infoA.GetHandle(), mA)
	md := wantReason(t, err, tierpb.ReasonInvalidState)
	if md[tierpb.KeyAbortReason] != "BUILD_DEADLINE_EXCEEDED" || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("commit after the build deadline: %v %v", err, md)
	}
	_, err = begin(ctx, n, tpA, "a")
	wantReason(t, err, tierpb.ReasonTokenAborted)

	// Commit-decision deadline: a frozen manifest that is invalid is never
	// decided.
	tpB := h.createTable(n, "b", 2, "")
	infoB := h.mustBegin(n, tpB, "b")
	res := h.build(infoB, rows)
	bad := manifestOf(t, infoB, res[:1]) // bucket 1 missing
	mB := h.writeManifest(infoB.GetManifestPath(), bad)
	_, err = commit(ctx, n, infoB.GetHandle(), mB)
	wantReason(t, err, tierpb.ReasonInvalidManifest)
	clock.Advance(11 * time.Minute)
	st = h.awaitState(infoB.GetHandle().GetTxnId(), tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED)
	if st.GetAbortReason() != tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_COMMIT_DECISION_DEADLINE_EXCEEDED {
		t.Fatalf("status %v", st)
	}
	h.noFence(tpB)

	// A committed load, for the garbage collection below.
	tpC := h.createTable(n, "c", 2, "")
	infoC := h.mustBegin(n, tpC, "c")
	mC := h.load(infoC, rows)
	if _, err := commit(ctx, n, infoC.GetHandle(), mC); err != nil {
		t.Fatal(err)
	}

	// Result GC: every record goes after the retention; the manifests go;
	// the aborted loads' snapshot files go; the committed load's stay.
	abortedFiles := h.objectsUnder(snapTarget(infoA).SnapshotDir(0, infoA.GetSnapshotIds()[0]))
	if len(abortedFiles) == 0 {
		t.Fatal("the aborted build wrote nothing")
	}
	clock.Advance(25 * time.Hour)
	for _, info := range []*tierv1.BulkLoadTargetInfo{infoA, infoB, infoC} {
		id := info.GetHandle().GetTxnId()
		eventually(t, "result of "+id+" garbage-collected", func() error {
			_, err := status(ctx, h.leader(), id)
			if tierpb.ReasonOf(err) != tierpb.ReasonNotFound {
				return fmt.Errorf("status: %v", err)
			}
			return nil
		})
		if _, err := h.objects.Stat(ctx, mustKey(t, h.objects, info.GetManifestPath())); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("manifest of %s still there: %v", id, err)
		}
	}
	for _, info := range []*tierv1.BulkLoadTargetInfo{infoA, infoB} {
		for b, id := range info.GetSnapshotIds() {
			if left := h.objectsUnder(snapTarget(info).SnapshotDir(b, id)); len(left) > 0 {
				t.Errorf("aborted output left in bucket %d: %v", b, left)
			}
		}
	}
	h.expectAll(tpC, table(t, infoC), rows)
	// The token of a collected transaction begins anew: the target now
	// has data, so it is refused as not empty.
	_, err = begin(ctx, n, tpC, "c")
	wantReason(t, err, tierpb.ReasonNotEmpty)
}

// objectsUnder lists the object URIs under a directory URI.
func (h *harness) objectsUnder(dir string) []string {
	h.t.Helper()
	prefix := mustKey(h.t, h.objects, dir) + "/"
	var out []string
	for a, err := range h.objects.List(h.t.Context(), prefix) {
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, h.objects.URI(a.Key))
	}
	return out
}

func mustKey(t *testing.T, s *objstore.Store, uri string) string {
	t.Helper()
	k, err := s.Key(uri)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
