package changelog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestWaitWakesFollower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := openLog(t, t.TempDir())
		type result struct {
			end int64
			err error
		}
		got := make(chan result, 1)
		go func() {
			end, err := l.Wait(t.Context(), 0)
			got <- result{end, err}
		}()
		synctest.Wait() // the follower is blocked
		select {
		case r := <-got:
			t.Fatalf("wait returned %+v before any append", r)
		default:
		}
		appendBatches(t, l, []int{3}, 10)
		synctest.Wait()
		select {
		case r := <-got:
			if r.err != nil || r.end != 3 {
				t.Fatalf("wait: %+v, want end 3", r)
			}
		default:
			t.Fatal("append did not wake the follower")
		}
		// Already readable: no blocking.
		if end, err := l.Wait(t.Context(), 2); err != nil || end != 3 {
			t.Fatalf("wait for a readable offset: %d, %v", end, err)
		}
	})
}

func TestWaitTimeoutAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := openLog(t, t.TempDir())
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := l.Wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait: %v, want DeadlineExceeded", err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := l.Wait(t.Context(), 0)
			got <- err
		}()
		synctest.Wait()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, ErrClosed) {
			t.Fatalf("wait across close: %v, want ErrClosed", err)
		}
	})
}

func TestWaitWokenByReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := openLog(t, t.TempDir())
		got := make(chan int64, 1)
		go func() {
			end, err := l.Wait(t.Context(), 500)
			if err != nil {
				t.Error(err)
			}
			got <- end
		}()
		synctest.Wait()
		if err := l.ResetTo(t.Context(), 1000); err != nil {
			t.Fatal(err)
		}
		if end := <-got; end != 1000 {
			t.Fatalf("wait: end %d, want 1000", end)
		}
	})
}

// TestConcurrentAppendersAndReaders runs appenders, tailing followers and
// random readers together (meant for -race) and checks that every follower
// sees the same dense sequence, each appender's batches contiguous and in
// its order.
func TestConcurrentAppendersAndReaders(t *testing.T) {
	const (
		writers   = 4
		batches   = 25
		followers = 3
	)
	l := openLog(t, t.TempDir(), small...)
	var total int64
	sizes := make([][]int, writers)
	rng := rand.New(rand.NewPCG(5, 6))
	for w := range sizes {
		for range batches {
			n := 1 + rng.IntN(4)
			sizes[w] = append(sizes[w], n)
			total += int64(n)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	firsts := make([][]int64, writers)
	for w := range writers {
		wg.Go(func() {
			for b, n := range sizes[w] {
				batch := make([][]byte, n)
				for i := range batch {
					batch[i] = fmt.Appendf(nil, "w%d-b%d-r%d", w, b, i)
				}
				first, err := l.Append(ctx, batch)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				firsts[w] = append(firsts[w], first)
			}
		})
	}
	seen := make([][]Record, followers)
	for f := range followers {
		wg.Go(func() {
			var next int64
			for next < total {
				if _, err := l.Wait(ctx, next); err != nil {
					t.Errorf("follower %d: wait %d: %v", f, next, err)
					return
				}
				recs, err := l.Read(ctx, next, 300)
				if err != nil {
					t.Errorf("follower %d: read %d: %v", f, next, err)
					return
				}
				for _, r := range recs {
					if r.Offset != next {
						t.Errorf("follower %d: offset %d, want %d", f, r.Offset, next)
						return
					}
					next++
				}
				seen[f] = append(seen[f], recs...)
			}
		})
	}
	wg.Go(func() { // random reads of what is there
		r := rand.New(rand.NewPCG(7, 8))
		for range 200 {
			_, end, err := l.Offsets(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if end == 0 {
				continue
			}
			from := r.Int64N(end)
			recs, err := l.Read(ctx, from, r.IntN(500))
			if err != nil || len(recs) == 0 || recs[0].Offset != from {
				t.Errorf("random read from %d: %d records, %v", from, len(recs), err)
				return
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		return
	}
	for f := 1; f < followers; f++ {
		if len(seen[f]) != len(seen[0]) {
			t.Fatalf("follower %d saw %d records, follower 0 %d", f, len(seen[f]), len(seen[0]))
		}
		for i := range seen[f] {
			if string(seen[f][i].Data) != string(seen[0][i].Data) {
				t.Fatalf("followers disagree at offset %d", i)
			}
		}
	}
	for w := range writers {
		for b, first := range firsts[w] {
			for i := range sizes[w][b] {
				want := fmt.Sprintf("w%d-b%d-r%d", w, b, i)
				if got := string(seen[0][first+int64(i)].Data); got != want {
					t.Fatalf("offset %d holds %q, want %q", first+int64(i), got, want)
				}
			}
			if b > 0 && first <= firsts[w][b-1] {
				t.Fatalf("writer %d: batch %d at %d, before batch %d", w, b, first, b-1)
			}
		}
	}
}

// TestTruncateWhileReading truncates below a follower that keeps reading.
func TestTruncateWhileReading(t *testing.T) {
	l := openLog(t, t.TempDir(), small...)
	want := appendBatches(t, l, make40Ones(), 100)
	ctx := t.Context()
	var wg sync.WaitGroup
	wg.Go(func() {
		for from := int64(0); from < 40; {
			recs, err := l.Read(ctx, from, 200)
			if errors.Is(err, ErrOutOfRange) {
				start, _, err := l.Offsets(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				from = start
				continue
			}
			if err != nil {
				t.Error(err)
				return
			}
			for _, r := range recs {
				if string(r.Data) != string(want[r.Offset]) {
					t.Errorf("offset %d: wrong data", r.Offset)
					return
				}
			}
			from += int64(len(recs))
		}
	})
	for off := int64(0); off <= 42; off += 3 {
		if err := l.TruncateBefore(ctx, min(off, 40)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	checkOffsets(t, l, 40, 40)
}
