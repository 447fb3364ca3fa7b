package snapshotbuild

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// TestChunkSortDedup checks the radix/comparison sort and last-wins dedup
// against a plain reference, on keys built to collide on 8-byte prefixes
// (zero padding included: "a" vs "a\x00") and to repeat.
func TestChunkSortDedup(t *testing.T) {
	for _, n := range []int{0, 1, 10, 63, 64, 65, 1000, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			const nb = 3
			c, err := newChunk(64<<20, newBudget(64<<20), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.free()
			type rec struct {
				b    int
				k, v []byte
				seq  int
			}
			var in []rec
			alphabet := []byte{0, 1, 'a', 0xff}
			for i := range n {
				k := make([]byte, 1+rng.IntN(11))
				for j := range k {
					k[j] = alphabet[rng.IntN(len(alphabet))]
				}
				if rng.IntN(3) == 0 && len(in) > 0 {
					k = in[rng.IntN(len(in))].k
				}
				r := rec{b: rng.IntN(nb), k: k, v: fmt.Appendf(nil, "%d", i), seq: i}
				in = append(in, r)
				if !c.add(r.b, r.k, r.v) {
					t.Fatal("chunk full")
				}
			}
			if _, _, ok := c.sortDedup(nb, DuplicatesLastWins); !ok {
				t.Fatal("dedup failed")
			}
			// Reference: last value per (bucket, key), sorted.
			last := map[string]rec{}
			for _, r := range in {
				last[fmt.Sprintf("%d/%x", r.b, r.k)] = r
			}
			var want []rec
			for _, r := range last {
				want = append(want, r)
			}
			slices.SortFunc(want, func(x, y rec) int {
				if x.b != y.b {
					return x.b - y.b
				}
				return bytes.Compare(x.k, y.k)
			})
			var kept []*entry
			for b := range nb {
				for i := c.bounds[b]; i < c.ends[b]; i++ {
					if int(c.ents[i].bucket) != b {
						t.Fatalf("range of bucket %d holds bucket %d", b, c.ents[i].bucket)
					}
					kept = append(kept, &c.ents[i])
				}
			}
			if len(kept) != len(want) {
				t.Fatalf("%d entries, want %d", len(kept), len(want))
			}
			var dups int64
			for _, d := range c.dups {
				dups += d
			}
			if int(dups)+len(want) != n {
				t.Fatalf("dups %d + kept %d != %d", dups, len(want), n)
			}
			for i, w := range want {
				e := kept[i]
				if int(e.bucket) != w.b || !bytes.Equal(c.key(e), w.k) || !bytes.Equal(c.value(e), w.v) {
					t.Fatalf("entry %d: bucket %d key %x value %s; want %d %x %s", i, e.bucket, c.key(e), c.value(e), w.b, w.k, w.v)
				}
			}
		})
	}
}

// TestRunRoundTrip: a sorted chunk written as a run (in parts, a bucket cut
// across two files) reads back in the same order through runSource, with
// buffers smaller than a record.
func TestRunRoundTrip(t *testing.T) {
	for _, nb := range []int{1, 3} {
		c, err := newChunk(64<<20, newBudget(64<<20), nil)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(nb), 2))
		for i := range 5000 {
			k := fmt.Appendf(nil, "%016x", rng.Uint64())
			if !c.add(rng.IntN(nb), k, bytes.Repeat([]byte{byte(i)}, rng.IntN(300))) {
				t.Fatal("chunk full")
			}
		}
		if _, _, ok := c.sortDedup(nb, DuplicatesLastWins); !ok {
			t.Fatal("dedup")
		}
		r, err := writeRun(filepath.Join(t.TempDir(), "run"), 0, c, nb, spillParts)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.files) != spillParts {
			t.Fatalf("%d parts, want %d", len(r.files), spillParts)
		}
		split := false
		for b := range nb {
			split = split || len(r.sections[b]) > 1
			for _, bufSize := range []int{64, 4096, 1 << 20} {
				src, err := newRunSource(r, b, bufSize)
				if err != nil {
					t.Fatal(err)
				}
				ms := newMemSource(c, b)
				n := 0
				for ms.next() {
					if !src.next() {
						t.Fatalf("bucket %d: run ends after %d pairs: %v", b, n, src.err)
					}
					mk, mv := ms.current()
					rk, rv := src.current()
					if !bytes.Equal(mk, rk) || !bytes.Equal(mv, rv) {
						t.Fatalf("bucket %d pair %d differs", b, n)
					}
					n++
				}
				if src.next() || src.err != nil {
					t.Fatalf("bucket %d: run has more pairs or an error: %v", b, src.err)
				}
				src.release()
			}
		}
		if !split {
			t.Fatalf("nb=%d: no bucket spans two parts", nb)
		}
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
		c.free()
	}
}

// TestRunDiscard: a source that discards what it read (hole punching, on
// Linux) yields the same pairs, leaves the other buckets' sections of the
// same files intact, and gives the file's blocks back.
func TestRunDiscard(t *testing.T) {
	const nb = 3
	c, err := newChunk(64<<20, newBudget(64<<20), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.free()
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		k := fmt.Appendf(nil, "%016x", rng.Uint64())
		if !c.add(rng.IntN(nb), k, bytes.Repeat([]byte{'v'}, rng.IntN(300))) {
			t.Fatal("chunk full")
		}
	}
	if _, _, ok := c.sortDedup(nb, DuplicatesLastWins); !ok {
		t.Fatal("dedup")
	}
	r, err := writeRun(filepath.Join(t.TempDir(), "run"), 0, c, nb, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	before := allocatedBytes(t, r.files[0])
	for b := range nb {
		src, err := newRunSource(r, b, 4096)
		if err != nil {
			t.Fatal(err)
		}
		src.discard = true
		ms := newMemSource(c, b)
		n := 0
		for ms.next() {
			if !src.next() {
				t.Fatalf("bucket %d: run ends after %d pairs: %v", b, n, src.err)
			}
			mk, mv := ms.current()
			rk, rv := src.current()
			if !bytes.Equal(mk, rk) || !bytes.Equal(mv, rv) {
				t.Fatalf("bucket %d pair %d differs", b, n)
			}
			n++
		}
		if src.next() || src.err != nil {
			t.Fatalf("bucket %d: run has more pairs or an error: %v", b, src.err)
		}
		src.release()
	}
	after := allocatedBytes(t, r.files[0])
	t.Logf("run file: %d bytes, %d allocated before the reads, %d after", r.size, before, after)
	if runtime.GOOS == "linux" && before >= 0 && after > before/4 {
		t.Fatalf("%d of %d allocated bytes left after reading every section", after, before)
	}
}
