package promoter_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/promoter"
)

// BenchmarkEtcdLedgerList lists a ledger of n records, as every plan does:
// cold is a promoter's first List (every record decoded), warm a later one
// with nothing changed in between.
func BenchmarkEtcdLedgerList(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		cli := startEtcd(b)
		l := promoter.NewEtcdLedger(cli, "/bench/promoter", nil)
		now := time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < n; i += 16 {
					r := sampleRecord(now)
					r.Partition = fmt.Sprintf("p%06d", i)
					r.ID = promoter.PromotionID("default", "lake.events", "shop.events", r.Partition, 42)
					r.CallerToken = promoter.CallerToken(r.ID, 1)
					if _, err := l.Create(b.Context(), r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		list := func(b *testing.B, l *promoter.EtcdLedger) {
			rs, err := l.List(b.Context())
			if err != nil || len(rs) != n {
				b.Fatal(len(rs), err)
			}
		}
		b.Run(fmt.Sprintf("cold/%d", n), func(b *testing.B) {
			for b.Loop() {
				list(b, promoter.NewEtcdLedger(cli, "/bench/promoter", nil))
			}
		})
		b.Run(fmt.Sprintf("warm/%d", n), func(b *testing.B) {
			list(b, l)
			for b.Loop() {
				list(b, l)
			}
		})
	}
}
