package snapshotbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// withMergeRuns lowers maxMergeRuns for the test.
func withMergeRuns(t *testing.T, n int) {
	old := maxMergeRuns
	maxMergeRuns = n
	t.Cleanup(func() { maxMergeRuns = old })
}

// TestCompactedRunsRoundTrip: when the final merge cannot read every
// spilled run at once, runs are merged into larger ones first; the
// snapshots restore to exactly the last value per key, with the same
// duplicate counts, and no spill file is left. Under DuplicatesError a
// duplicate found while merging runs fails the build.
func TestCompactedRunsRoundTrip(t *testing.T) {
	const nb = 5
	in, want, dups := genPairs(1, 30000, nb, 0.2)
	for _, workers := range []int{1, 2} {
		for _, limit := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("workers=%d/fan-in=%d", workers, limit), func(t *testing.T) {
				withMergeRuns(t, limit)
				s := newTestStore(t)
				res, st, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, target: 128 << 20, workers: workers})
				if err != nil {
					t.Fatal(err)
				}
				if st.Spills <= limit || st.CompactedRuns == 0 {
					t.Fatalf("%d spills, %d runs compacted: want more spills than %d, compacted", st.Spills, st.CompactedRuns, limit)
				}
				for b, r := range res {
					_, got := restoreBucket(t, s, r)
					equalPairs(t, b, got, want[b])
					if r.RowCount != int64(len(want[b])) || r.Duplicates != dups[b] {
						t.Fatalf("bucket %d: rows %d dups %d, want %d %d", b, r.RowCount, r.Duplicates, len(want[b]), dups[b])
					}
				}
			})
		}
	}
	t.Run("duplicates error", func(t *testing.T) {
		withMergeRuns(t, 2)
		_, st, err := buildPairs(t, newTestStore(t), in, buildCfg{nb: nb, budget: 256 << 10, target: 128 << 20, workers: 1, dups: DuplicatesError})
		var de *DuplicateKeyError
		if !errors.As(err, &de) || !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("build of duplicate keys: %v (%d spills)", err, st.Spills)
		}
	})
}

// TestMergeMemoryBounded: spilled runs of large records (a frame each)
// made the final merge hold a decoded frame per run on the heap, beyond
// the budget and growing with the input (160 runs of 1 MiB records: 264
// MiB of heap for a 4 MiB budget). Merged first into fewer runs, the heap
// grows by about 25 MiB whatever the input (40 to 320 records measured;
// mostly pebble's per-block buffers of 1 MiB values, garbage the collector
// has not taken yet), and every record is there.
func TestMergeMemoryBounded(t *testing.T) {
	const budget = 4 << 20
	const recs = 160
	s := newTestStore(t)
	b, err := New(s, Target{NumBuckets: 1, Snapshot: testTarget(s), SnapshotIDs: snapIDs(1)},
		Options{Workers: 1, MemoryBudget: budget, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()
	v := bytes.Repeat([]byte("x"), 1<<20) // compressible: the spill files stay small
	for i := range recs {
		if err := b.AddPair(t.Context(), 0, fmt.Appendf(nil, "k%05d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	res, err := b.Finish(t.Context())
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	grew := int64(peak.Load()) - int64(base)
	if grew > 64<<20 || st.CompactedRuns == 0 {
		t.Fatalf("Finish grew the heap by %d MiB with a %d MiB budget (%d spills, %d runs compacted)", grew>>20, budget>>20, st.Spills, st.CompactedRuns)
	}
	_, got := restoreBucket(t, s, res[0])
	if len(got) != recs {
		t.Fatalf("%d records restored, want %d", len(got), recs)
	}
	for i, p := range got {
		if string(p.k) != fmt.Sprintf("k%05d", i) || !bytes.Equal(p.v, v) {
			t.Fatalf("record %d: key %q, %d value bytes", i, p.k, len(p.v))
		}
	}
}

// TestCompactionCancelled: a Finish whose context has ended fails with
// the context's error without merging runs first (it merged all of them
// before noticing, checking its context every 65536 records of a bucket),
// and leaves no file behind once the builder is closed.
func TestCompactionCancelled(t *testing.T) {
	withMergeRuns(t, 2)
	in, _, _ := genPairs(4, 20000, 3, 0)
	s := newTestStore(t)
	tmp := t.TempDir()
	b, err := New(s, Target{NumBuckets: 3, Snapshot: testTarget(s), SnapshotIDs: snapIDs(3)},
		Options{Workers: 1, MemoryBudget: 256 << 10, TempDir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	feedPairs(t, b, in)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Finish(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Finish with its context ended: %v", err)
	}
	if st := b.Stats(); st.Spills <= 2 || st.CompactedRuns > 0 {
		t.Fatalf("%d spills, %d merged after the context ended", st.Spills, st.CompactedRuns)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, tmp); len(left) > 0 {
		t.Fatalf("temp files left behind: %v", left)
	}
	if len(s.objects(t)) != 0 {
		t.Fatalf("objects written: %v", s.metadataKeys(t))
	}
}

// TestMergedFramesFitTheFinalMerge: runs spilled with many buckets have
// small frames (a bucket's section is smaller than a frame), while the
// runs merged from them write full frames: the fan-in must be sized for
// those, or the final merge no longer gets its mapped buffers of at least
// 4 KiB within the budget (it fell back to heap buffers past the budget).
func TestMergedFramesFitTheFinalMerge(t *testing.T) {
	const nb = 300
	s := newTestStore(t)
	b, err := New(s, Target{NumBuckets: nb, Snapshot: testTarget(s), SnapshotIDs: snapIDs(nb)},
		Options{Workers: 1, MemoryBudget: 256 << 10, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	for i := range 60000 {
		if err := b.AddPair(t.Context(), i%nb, fmt.Appendf(nil, "key-%08d", i), fmt.Appendf(nil, "val-%08d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopSpillingLocked()
	tail := b.mu.fill
	tail.seq = b.mu.seq
	tail.partition(b.nb)
	tail.trim()
	mem := []*chunk{tail}
	runs := len(b.sp.runs)
	if runs <= b.mergeFanIn(mem, 0) {
		t.Fatalf("%d runs fit the merge: nothing to test", runs)
	}
	if err := b.compactRuns(t.Context(), mem); err != nil {
		t.Fatal(err)
	}
	if plan := b.planMerge(mem, 1); !plan.mapped() || b.compacted.Load() == 0 {
		t.Fatalf("runs %d -> %d: the final merge gets %d-byte buffers (frames %d), want mapped ones of at least 4 KiB", runs, len(b.sp.runs), plan.bufSize, plan.frame)
	}
}

// TestRunSourcesReadWithinTheBudget: every source of a spilled run, in
// the merges of runs and in the final merge, reads its frames through the
// buffer charged to the budget. Sources got 4 KiB buffers while stored
// frames are up to a frame's size (16 KiB at a 4 MiB budget, a record's at
// 16 KiB records), so each replaced its buffer with a heap one the budget
// never counted: 40 % over in the merges of runs and in the final merge
// after them.
func TestRunSourcesReadWithinTheBudget(t *testing.T) {
	half := func(rng *rand.Rand, n int) []byte { // half random: frames of ~55 %
		v := make([]byte, n)
		for j := range n / 2 {
			v[j] = byte(rng.Uint32())
		}
		return v
	}
	for _, tc := range []struct {
		name      string
		budget    int64
		recs, val int
		fanIn     int // maxMergeRuns; 0 keeps it
	}{
		{"merges of runs", 4 << 20, 30000, 400, 3},
		{"final merge after merges of runs", 1 << 20, 1000, 16 << 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fanIn > 0 {
				withMergeRuns(t, tc.fanIn)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			in := make([]inputPair, tc.recs)
			for i := range in {
				in[i] = inputPair{k: fmt.Appendf(nil, "key-%08d", i), v: half(rng, tc.val)}
			}
			grown := grownBufs.Load()
			s := newTestStore(t)
			res, st, err := buildPairs(t, s, in, buildCfg{nb: 1, budget: tc.budget, target: 128 << 20, workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			if st.CompactedRuns == 0 || st.PeakBudget > tc.budget {
				t.Fatalf("%d spills, %d runs compacted, peak budget %d of %d", st.Spills, st.CompactedRuns, st.PeakBudget, tc.budget)
			}
			if n := grownBufs.Load() - grown; n > 0 {
				t.Fatalf("%d run sources read a frame through a heap buffer outside the budget", n)
			}
			if _, got := restoreBucket(t, s, res[0]); len(got) != tc.recs {
				t.Fatalf("%d records restored, want %d", len(got), tc.recs)
			}
		})
	}
}
