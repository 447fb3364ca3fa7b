package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/thawdb/thaw/tier/changelog"
)

// BenchmarkAppendFollow appends batches of 128-byte records through one
// provider while a handle of another provider (another host) follows them
// as a tablet follower does (Wait, then Read to the end); the time includes
// the follower's catching up with the last batch. It measures the
// adapter's own cost (encoding, the chain, the poller) against kfake, an
// in-process Kafka: real brokers add the network and their replication.
func BenchmarkAppendFollow(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			addrs := brokers(b, 1)
			id := changelog.BucketLogID{TableID: 1}
			w, f := open(b, provider(b, addrs), id), open(b, provider(b, addrs), id)
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = rec(int64(i), 128)
			}
			total := make(chan int64, 1)
			followed := make(chan error, 1)
			go func() {
				next, want := int64(0), int64(-1)
				for next != want {
					select {
					case want = <-total:
						continue
					default:
					}
					// Bounded, so that a follower that caught up before
					// the total arrived looks for it again.
					ctx, cancel := context.WithTimeout(b.Context(), 50*time.Millisecond)
					_, err := f.Wait(ctx, next)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						continue
					}
					if err != nil {
						followed <- err
						return
					}
					recs, err := f.Read(b.Context(), next, 1<<20)
					if err != nil {
						followed <- err
						return
					}
					next += int64(len(recs))
				}
				followed <- nil
			}()
			b.SetBytes(int64(n * 128))
			for b.Loop() {
				if _, err := w.Append(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			total <- int64(b.N * n)
			if err := <-followed; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/append")
		})
	}
}
