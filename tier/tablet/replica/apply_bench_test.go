package replica

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// BenchmarkApply measures applying changelog records to a replica's
// database, the part of the write path that every replica (leader and
// followers) runs: batches of 7,000 upserts of new random 9-byte keys with
// 113-byte values (the shape of `thaw bench write`) into a replica sized
// as one of 8 on a host with the default memtable budget. Each iteration
// applies rows rows (rounded up to whole batches) into a fresh replica; ns/row is the figure to compare.
//
//	go test -run '^$' -bench Apply -benchtime 1x ./tier/tablet/replica/
func BenchmarkApply(b *testing.B) {
	for _, rows := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			const batch = 7000
			recs := make([][]byte, batch)
			value := make([]byte, 113)
			var elapsed time.Duration
			applied := (rows + batch - 1) / batch * batch
			for i := range b.N {
				e := newEnv(b)
				h := e.hostOnly(b, WithExpectedReplicas(8))
				r, err := h.Open(b.Context(), e.id(int32(i)), nil)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for done := 0; done < rows; done += batch {
					for j := range recs {
						k := binary.BigEndian.AppendUint64([]byte{0x01}, scrambleKey(uint64(done+j)))
						recs[j] = appendRecord(recs[j][:0], Mutation{Op: OpUpsert, Key: k, Value: value})
					}
					r.mu.Lock()
					_, err := r.applyLocked(r.mu.meta.next, recs)
					r.mu.Unlock()
					if err != nil {
						b.Fatal(err)
					}
				}
				elapsed += time.Since(start)
				if got, want := r.RowCount(), int64(applied); got != want {
					b.Fatalf("RowCount = %d, want %d", got, want)
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*applied), "ns/row")
		})
	}
}

// scrambleKey is a bijection of uint64, so keys are unique and arrive in
// random order.
func scrambleKey(x uint64) uint64 {
	x *= 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>32
}
