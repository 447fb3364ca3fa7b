package snapshotbuild

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/thawdb/thaw/kv"
)

func benchChunk(b *testing.B, n int, seed uint64) *chunk {
	c, err := newChunk(256<<20, newBudget(1<<30), nil)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	k := make([]byte, 17)
	v := make([]byte, 121)
	for range n {
		binary.BigEndian.PutUint64(k[1:], rng.Uint64())
		binary.BigEndian.PutUint64(k[9:], rng.Uint64())
		if !c.add(0, k, v) {
			b.Fatal("full")
		}
	}
	c.sortDedup(1, DuplicatesLastWins)
	return c
}

func BenchmarkMergeMem(b *testing.B) {
	c1 := benchChunk(b, 500000, 1)
	c2 := benchChunk(b, 500000, 2)
	defer c1.free()
	defer c2.free()
	b.ResetTimer()
	for range b.N {
		m := newMerger([]source{newMemSource(c1, 0), newMemSource(c2, 0)}, []int{0, 1})
		var sum int
		for {
			k, v, ok := m.next()
			if !ok {
				break
			}
			sum += len(k) + int(v[0])
		}
		if sum == 0 {
			b.Fatal(sum)
		}
	}
}

func BenchmarkMergeRuns(b *testing.B) {
	dir := b.TempDir()
	var runs []*run
	for i := range 13 {
		c := benchChunk(b, 77000, uint64(10+i))
		r, err := writeRun(fmt.Sprintf("%s/run-%d", dir, i), i, c, 1, spillParts, maxFrameSize)
		if err != nil {
			b.Fatal(err)
		}
		c.free()
		runs = append(runs, r)
	}
	b.ResetTimer()
	for range b.N {
		var srcs []source
		var prios []int
		var rs []*runSource
		for _, r := range runs {
			s, err := newRunSource(r, 0, 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			rs = append(rs, s)
			srcs = append(srcs, s)
			prios = append(prios, r.seq)
		}
		m := newMerger(srcs, prios)
		n := 0
		for {
			_, _, ok := m.next()
			if !ok {
				break
			}
			n++
		}
		if n != 13*77000 || m.err != nil {
			b.Fatal(n, m.err)
		}
		// Each iteration's mapped read buffers go before the next maps its
		// own (a defer here kept all of them until the end).
		for _, s := range rs {
			s.release()
		}
	}
}

// BenchmarkWriteRun spills a 128 MiB chunk of 8 buckets of bench load's
// shape (9-byte keys, 113-byte values with a repeating pattern) as a run of
// two parts: gathering the pairs in key order, framing, compressing and
// writing them.
func BenchmarkWriteRun(b *testing.B) {
	const nb = 8
	c, err := newChunk(128<<20, newBudget(1<<30), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.free()
	rng := rand.New(rand.NewPCG(3, 1))
	k := make([]byte, 9)
	v := []byte(fmt.Sprintf("%-113s", "thaw-bench-write-payload-thaw-bench-write-payload-thaw-bench-write-payload-"))
	for {
		binary.BigEndian.PutUint64(k[1:], rng.Uint64())
		copy(v[3:], fmt.Appendf(nil, "%016x", rng.Uint64()))
		if !c.add(rng.IntN(nb), k, v) {
			break
		}
	}
	c.sortDedup(nb, DuplicatesLastWins)
	b.SetBytes(int64(len(c.arena)))
	dir := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		r, err := writeRun(fmt.Sprintf("%s/run-%d", dir, i), i, c, nb, spillParts, maxFrameSize)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, f := range r.files {
			os.Remove(f.Name())
		}
		r.close()
		b.StartTimer()
	}
}

// BenchmarkRowEncoder encodes record batches of bench load's shape (a
// BIGINT key, a 100-byte STRING payload, 8 buckets): the Add goroutine's
// per-row cost before the chunk.
func BenchmarkRowEncoder(b *testing.B) {
	tbl, err := kv.NewTable(kv.TableSchema{
		SchemaID: 1,
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "payload", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"id"}, Buckets: 8,
	})
	if err != nil {
		b.Fatal(err)
	}
	const rows = 8192
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, 100)
	for range rows {
		rb.Field(0).(*array.Int64Builder).Append(int64(rng.Uint64() >> 1))
		for j := range payload {
			payload[j] = 'a' + byte(rng.IntN(26))
		}
		rb.Field(1).(*array.StringBuilder).Append(string(payload))
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	enc := NewRowEncoder(tbl, "")
	var sink int
	b.SetBytes(rows)
	for b.Loop() {
		if err := enc.Encode(rec, 0, func(_, bucket int, key, value []byte) error {
			sink += bucket + len(key) + len(value)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if sink == 0 {
		b.Fatal("nothing encoded")
	}
}
