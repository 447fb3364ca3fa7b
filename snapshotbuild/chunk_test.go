package snapshotbuild

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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
// read buffers smaller than a frame or a record, for values that compress
// (Snappy frames) and values that do not (raw frames), and with frames
// smaller than a record.
func TestRunRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nb         int
		frameSize  int
		compresses bool
	}{
		{"compressible", 1, maxFrameSize, true},
		{"compressible-3-buckets", 3, maxFrameSize, true},
		{"random", 3, maxFrameSize, false},
		{"frames-smaller-than-records", 3, 128, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := runChunk(t, tc.nb, 5000, tc.compresses)
			defer c.free()
			r, err := writeRun(filepath.Join(t.TempDir(), "run"), 0, c, tc.nb, spillParts, tc.frameSize)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			if len(r.files) != spillParts {
				t.Fatalf("%d parts, want %d", len(r.files), spillParts)
			}
			t.Logf("%d record bytes in %d file bytes, largest frame %d", r.rawSize, r.size, r.maxFrame)
			switch {
			case tc.compresses && r.size > r.rawSize/2:
				t.Fatalf("compressible records: %d file bytes for %d record bytes", r.size, r.rawSize)
			case !tc.compresses && r.size < r.rawSize:
				t.Fatalf("random records compressed: %d file bytes for %d record bytes", r.size, r.rawSize)
			case r.maxFrame > max(tc.frameSize, 300+2*16+2*binary.MaxVarintLen32):
				t.Fatalf("a frame of %d record bytes, frame size %d", r.maxFrame, tc.frameSize)
			}
			var kind [1]byte
			if _, err := r.files[0].ReadAt(kind[:], 0); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]byte{true: frameSnappy, false: frameRaw}[tc.compresses]; kind[0] != want {
				t.Fatalf("first frame of kind %d, want %d", kind[0], want)
			}
			split := false
			for b := range tc.nb {
				split = split || len(r.sections[b]) > 1
				for _, bufSize := range []int{64, 4096, 1 << 20} {
					src, err := newRunSource(r, b, bufSize)
					if err != nil {
						t.Fatal(err)
					}
					sameAsChunk(t, src, c, b)
					src.release()
				}
			}
			if !split {
				t.Fatalf("nb=%d: no bucket spans two parts", tc.nb)
			}
		})
	}
}

// runChunk returns a sorted chunk of n pairs in nb buckets: 32-byte keys,
// values of up to 300 bytes, compressible or random.
func runChunk(t *testing.T, nb, n int, compressible bool) *chunk {
	t.Helper()
	c, err := newChunk(64<<20, newBudget(64<<20), nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(nb), uint64(n)))
	for i := range n {
		k := fmt.Appendf(nil, "%016x%016x", rng.Uint64(), i)
		v := bytes.Repeat([]byte{byte(i)}, rng.IntN(300))
		if !compressible {
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
		}
		if !c.add(rng.IntN(nb), k, v) {
			t.Fatal("chunk full")
		}
	}
	if _, _, ok := c.sortDedup(nb, DuplicatesLastWins); !ok {
		t.Fatal("dedup")
	}
	return c
}

// sameAsChunk reads src to its end and checks it yields bucket b's pairs of
// the sorted chunk c, in order.
func sameAsChunk(t *testing.T, src *runSource, c *chunk, b int) {
	t.Helper()
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
}

// TestRunCorrupt: a spill file changed under the build (a frame's kind, its
// length, its checksum, its stored bytes, a record's lengths) makes the
// source fail with errCorruptRun or a short read, never a panic or wrong
// pairs reported as right. The cases marked resum write the first frame's
// checksum anew after the change, so the checks behind the checksum are
// tested too.
func TestRunCorrupt(t *testing.T) {
	snappy := runChunk(t, 1, 2000, true)
	defer snappy.free()
	raw := runChunk(t, 1, 2000, false) // random values: stored as is
	defer raw.free()
	for _, tc := range []struct {
		name  string
		c     *chunk
		kind  byte // the first frame's kind before the change
		resum bool
		// corrupt changes the part file's bytes; the first frame starts
		// at 0.
		corrupt func(b []byte)
	}{
		{"kind", snappy, frameSnappy, false, func(b []byte) { b[0] = 9 }},
		{"zero-length", snappy, frameSnappy, false, func(b []byte) { binary.LittleEndian.PutUint32(b[1:], 0) }},
		{"length-past-the-section", snappy, frameSnappy, false, func(b []byte) { binary.LittleEndian.PutUint32(b[1:], uint32(len(b))) }},
		{"length-beyond-any-frame", snappy, frameSnappy, false, func(b []byte) { binary.LittleEndian.PutUint32(b[1:], 1<<31) }},
		{"checksum", snappy, frameSnappy, false, func(b []byte) { b[5] ^= 1 }},
		{"snappy-bytes", snappy, frameSnappy, false, func(b []byte) { b[frameHeader+40] ^= 0x10 }},
		{"snappy-bytes-resummed", snappy, frameSnappy, true, func(b []byte) {
			for i := frameHeader; i < frameHeader+64; i++ {
				b[i] ^= 0xff
			}
		}},
		// A value byte of a frame stored as is: only the checksum
		// tells.
		{"value-byte-in-a-raw-frame", raw, frameRaw, false, func(b []byte) {
			b[frameHeader+int(binary.LittleEndian.Uint32(b[1:]))-1] ^= 0xff
		}},
		{"record-lengths-in-a-raw-frame", snappy, frameSnappy, true, func(b []byte) {
			b[0] = frameRaw // the compressed bytes read as records
		}},
		{"record-lengths-that-overflow", snappy, frameSnappy, true, func(b []byte) {
			b[0] = frameRaw
			h := binary.AppendUvarint(nil, 1<<63)
			h = binary.AppendUvarint(h, 1<<63) // the sum wraps to 0
			copy(b[frameHeader:], h)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			r, err := writeRun(filepath.Join(t.TempDir(), "run"), 0, c, 1, 1, maxFrameSize)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			data := make([]byte, r.size)
			if _, err := r.files[0].ReadAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if data[0] != tc.kind {
				t.Fatalf("first frame of kind %d, want %d", data[0], tc.kind)
			}
			tc.corrupt(data)
			if tc.resum {
				n := binary.LittleEndian.Uint32(data[1:])
				binary.LittleEndian.PutUint32(data[5:], crc32.Checksum(data[frameHeader:frameHeader+n], castagnoli))
			}
			if _, err := r.files[0].WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			src, err := newRunSource(r, 0, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer src.release()
			n := 0
			for src.next() {
				n++
			}
			if n == c.ends[0]-c.bounds[0] || src.err == nil {
				t.Fatalf("read %d of %d pairs from a corrupt run, error %v", n, c.ends[0]-c.bounds[0], src.err)
			}
			if !errors.Is(src.err, errCorruptRun) && !errors.Is(src.err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v, want errCorruptRun or a short read", src.err)
			}
			t.Logf("after %d pairs: %v", n, src.err)
		})
	}
}

// TestRunDiscard: a source that discards what it read (hole punching, on
// Linux) yields the same pairs, leaves the other buckets' sections of the
// same files intact, and gives the file's blocks back.
func TestRunDiscard(t *testing.T) {
	const nb = 3
	c := runChunk(t, nb, 20000, false)
	defer c.free()
	r, err := writeRun(filepath.Join(t.TempDir(), "run"), 0, c, nb, 1, 4096)
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
		sameAsChunk(t, src, c, b)
		src.release()
	}
	after := allocatedBytes(t, r.files[0])
	t.Logf("run file: %d bytes, %d allocated before the reads, %d after", r.size, before, after)
	if runtime.GOOS == "linux" && before >= 0 && after > before/4 {
		t.Fatalf("%d of %d allocated bytes left after reading every section", after, before)
	}
}
