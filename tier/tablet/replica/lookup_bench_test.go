package replica

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkLookup measures Lookup of batches of 1,000 random keys, half of
// them present, in a replica of 1 M rows shaped as BenchmarkApply's
// (9-byte keys, 113-byte values, flushed and compacted), against the
// baseline of a Pebble Get per key on the same snapshot, in the same run:
//
//	go test -run '^$' -bench Lookup ./tier/tablet/replica/
func BenchmarkLookup(b *testing.B) {
	const rows, batch, perLookup = 1_000_000, 7000, 1000
	e := newEnv(b)
	h := e.hostOnly(b, WithExpectedReplicas(8))
	r, err := h.Open(b.Context(), e.id(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	benchKey := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{0x01}, scrambleKey(i)) }
	recs := make([][]byte, batch)
	value := make([]byte, 113)
	for done := 0; done < rows; done += batch {
		for j := range recs {
			recs[j] = appendRecord(recs[j][:0], Mutation{Op: OpUpsert, Key: benchKey(uint64(done + j)), Value: value})
		}
		r.mu.Lock()
		_, err := r.applyLocked(r.mu.meta.next, recs)
		r.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := r.db.Compact(b.Context(), []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lookups := make([][][]byte, 64)
	for i := range lookups {
		keys := make([][]byte, perLookup)
		for j := range keys {
			keys[j] = benchKey(uint64(rng.IntN(2 * rows))) // keys from rows on are missing
		}
		lookups[i] = keys
	}
	run := func(b *testing.B, lookup func(snap *pebble.Snapshot, keys [][]byte) ([][]byte, error)) {
		snap := r.db.NewSnapshot()
		defer snap.Close()
		b.ResetTimer()
		for i := range b.N {
			if _, err := lookup(snap, lookups[i%len(lookups)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perLookup), "ns/key")
	}
	b.Run("get-per-key", func(b *testing.B) {
		run(b, func(snap *pebble.Snapshot, keys [][]byte) ([][]byte, error) {
			out := make([][]byte, len(keys))
			for i, k := range keys {
				v, closer, err := snap.Get(k)
				if errors.Is(err, pebble.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				out[i] = append(make([]byte, 0, len(v)), v...)
				if err := closer.Close(); err != nil {
					return nil, err
				}
			}
			return out, nil
		})
	})
	b.Run("lookup", func(b *testing.B) {
		run(b, func(snap *pebble.Snapshot, keys [][]byte) ([][]byte, error) {
			return r.lookup(b.Context(), snap, keys)
		})
	})
}
