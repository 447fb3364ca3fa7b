package changelog

import (
	"bytes"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var crashSeed = flag.Uint64("crash-seed", 0, "seed of TestCrashAtRandomCut (0: pick one and log it)")

// TestCrashAtRandomCut simulates crashes during an Append. Because Append
// returns only after its fsync, a crash leaves every acknowledged batch on
// disk plus any part of the batch in flight, and possibly pages of junk or
// zeros where the rest of that batch would have been. The helper copies the
// log as it was when batch k was in flight, cuts the last segment at a
// random byte after the acknowledged size, maybe fills up with junk, and
// reopens: every acknowledged record must be there, the in-flight batch all
// or nothing, and the log must go on.
func TestCrashAtRandomCut(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash-seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	type state struct {
		end  int64  // end offset after the append
		seg  string // last segment
		size int64  // its size
	}
	dir := t.TempDir()
	l, err := OpenSegmentLog(dir, small...)
	if err != nil {
		t.Fatal(err)
	}
	states := []state{{end: 0, seg: segmentFiles(t, dir)[0], size: segHeaderLen}}
	var all [][]byte
	for range 80 {
		n := 1 + rng.IntN(4)
		all = append(all, appendBatches(t, l, []int{n}, rng.IntN(150))...)
		files := segmentFiles(t, dir)
		last := files[len(files)-1]
		states = append(states, state{end: int64(len(all)), seg: last, size: fileSize(t, last)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	for range 60 {
		k := 1 + rng.IntN(len(states)-1) // batch k in flight
		acked, inflight := states[k-1], states[k]
		crash := copyDir(t, dir)
		for _, f := range segmentFiles(t, crash) {
			if filepath.Base(f) > filepath.Base(inflight.seg) {
				if err := os.Remove(f); err != nil { // not created yet
					t.Fatal(err)
				}
			}
		}
		lo := int64(0) // batch k rolled: nothing in its segment was acknowledged
		if acked.seg == inflight.seg {
			lo = acked.size
		}
		cut := lo + rng.Int64N(inflight.size-lo+1)
		junk := rng.IntN(3)
		last := filepath.Join(crash, filepath.Base(inflight.seg))
		// complete: the cut and the junk after it left the in-flight
		// batch whole (a cut at its end, or zeros where it had zeros).
		complete := false
		mutateFile(t, last, func(b []byte) []byte {
			whole := bytes.Clone(b[:inflight.size])
			b = b[:cut]
			for len(b) < int(inflight.size) && junk > 0 {
				if junk == 1 {
					b = append(b, 0)
				} else {
					b = append(b, byte(rng.Uint32()))
				}
			}
			complete = bytes.Equal(b, whole)
			return b
		})

		l, err := OpenSegmentLog(crash, small...)
		if err != nil {
			t.Fatalf("batch %d in flight, cut at %d of [%d, %d], junk %d: open: %v", k, cut, lo, inflight.size, junk, err)
		}
		_, end, err := l.Offsets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if end != acked.end && !(complete && end == inflight.end) {
			t.Fatalf("batch %d in flight, cut at %d of [%d, %d], junk %d: end %d, want %d (or %d if complete)",
				k, cut, lo, inflight.size, junk, end, acked.end, inflight.end)
		}
		checkRecords(t, readAll(t, l, 0, 1<<20), 0, all[:end])
		if first, err := l.Append(t.Context(), [][]byte{payload(end, 20)}); err != nil || first != end {
			t.Fatalf("append after recovery: %d, %v", first, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResetDownCrashedCreate: a crash inside a ResetTo below the log's end
// while it creates its segment (which sorts before the old, empty one)
// leaves the log as it was: the segment gets its name only with its whole
// header on disk, and an unnamed leftover is removed at open. A named
// segment with a torn header before the last one made the log unopenable.
func TestResetDownCrashedCreate(t *testing.T) {
	for _, cut := range []int{0, 5, segHeaderLen - 1, segHeaderLen} {
		for _, linked := range []bool{false, true} {
			if linked && cut != segHeaderLen {
				continue // the name is linked only to a whole header
			}
			dir := t.TempDir()
			l, err := OpenSegmentLog(dir, small...)
			if err != nil {
				t.Fatal(err)
			}
			appendBatches(t, l, []int{50}, 10)
			if err := l.TruncateBefore(t.Context(), 50); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// The crash inside ResetTo(7): its segment's file is written up
			// to cut bytes (and linked to its name, or not yet).
			hdr := encodeSegmentHeader(7)[:cut]
			tmp := filepath.Join(dir, segmentName(7)+tmpSuffix)
			if err := os.WriteFile(tmp, hdr, 0o644); err != nil {
				t.Fatal(err)
			}
			if linked {
				if err := os.Link(tmp, filepath.Join(dir, segmentName(7))); err != nil {
					t.Fatal(err)
				}
			}
			l2, err := OpenSegmentLog(dir, small...)
			if err != nil {
				t.Fatalf("cut %d linked %v: reopen after a crash inside ResetTo: %v", cut, linked, err)
			}
			checkOffsets(t, l2, 50, 50)
			if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("cut %d linked %v: the unfinished segment is still there: %v", cut, linked, err)
			}
			// And the reset works afterwards.
			if err := l2.ResetTo(t.Context(), 7); err != nil {
				t.Fatal(err)
			}
			checkOffsets(t, l2, 7, 7)
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
