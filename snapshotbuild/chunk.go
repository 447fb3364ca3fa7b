package snapshotbuild

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"slices"
	"unsafe"
)

// entry indexes one key/value pair in a chunk's arena. Sorting moves entries,
// never the bytes. off doubles as the pair's input order within the chunk
// (the arena only grows), which is what last-wins deduplication needs.
type entry struct {
	pfx    uint64 // first 8 key bytes, big-endian, zero-padded: most comparisons end here
	bucket uint32
	off    uint32 // key at arena[off:off+klen], value right after it
	klen   uint32
	vlen   uint32
}

const entrySize = int64(unsafe.Sizeof(entry{}))

// maxArena bounds one chunk's arena so offsets fit in uint32.
const maxArena = math.MaxUint32

// chunk buffers input pairs in input order: one arena of key||value bytes
// and one index of entries, both mapped outside the Go heap. A chunk is
// filled by the Add goroutine, then sorted and either spilled as a run by the
// spill goroutine or kept as the final in-memory source of the merge. Its
// bytes are accounted against the budget in grants of grantSize.
type chunk struct {
	arenaMem []byte  // the whole mapping, for unmapping
	entMem   []byte  // the whole mapping, for unmapping
	scrMem   []byte  // the whole mapping, for unmapping
	arena    []byte  // arenaMem[:used]
	ents     []entry // over entMem
	scratch  []entry // over scrMem: the radix sort's second buffer
	capBytes int64   // arena + index bytes this chunk may hold
	reserved int64   // budget bytes held
	bud      *budget

	// With a prefaulter (builds with more than one worker), add keeps one
	// grant reserved ahead and pf populates it; arenaMem[:pfArena] and
	// entMem/scrMem[:pfEnt] were requested already (high-water marks: the
	// pages stay resident when the chunk is reset and reused).
	pf      *prefaulter
	pfArena int
	pfEnt   int

	// Set by partition and sortBucket.
	bounds []int   // bucket b's range is ents[bounds[b]:bounds[b+1]]
	ends   []int   // after sortBucket(b): the kept entries are ents[bounds[b]:ends[b]]
	dups   []int64 // duplicates dropped per bucket while sorting
	sorted bool    // every bucket is sorted
	seq    int     // input order of the chunk among all chunks (set when sealed)
}

const grantSize = 1 << 20

func newChunk(capBytes int64, bud *budget, pf *prefaulter) (*chunk, error) {
	if capBytes > maxArena {
		capBytes = maxArena
	}
	arenaMem, err := mapAnon(int(capBytes))
	if err != nil {
		return nil, err
	}
	// Every pair costs 2*entrySize of the capacity (entry + scratch), so
	// each entry region needs at most half of it.
	entBytes := int(capBytes/2/entrySize*entrySize) + int(entrySize)
	entMem, err := mapAnon(entBytes)
	if err != nil {
		unmapAnon(arenaMem)
		return nil, err
	}
	scrMem, err := mapAnon(entBytes)
	if err != nil {
		unmapAnon(arenaMem)
		unmapAnon(entMem)
		return nil, err
	}
	c := &chunk{arenaMem: arenaMem, entMem: entMem, scrMem: scrMem, capBytes: capBytes, bud: bud, pf: pf}
	c.arena = arenaMem[:0]
	c.ents = entriesOver(entMem)[:0]
	c.scratch = entriesOver(scrMem)[:0]
	return c, nil
}

func entriesOver(mem []byte) []entry {
	return unsafe.Slice((*entry)(unsafe.Pointer(unsafe.SliceData(mem))), int64(len(mem))/entrySize)
}

// used counts the arena, the entries and the sort scratch the entries will need.
func (c *chunk) used() int64 { return int64(len(c.arena)) + 2*int64(len(c.ents))*entrySize }

func (c *chunk) len() int { return len(c.ents) }

// add appends a pair. It returns false, adding nothing, when the chunk is
// full or the budget refuses the next grant; the caller then seals the chunk.
func (c *chunk) add(bucket int, key, value []byte) bool {
	need := int64(len(key)+len(value)) + 2*entrySize
	if c.used()+need > c.capBytes {
		return false
	}
	for c.used()+need > c.reserved {
		g := max(int64(grantSize), need)
		g = min(g, c.capBytes-c.reserved)
		if !c.bud.tryAcquire(g) {
			return false
		}
		c.reserved += g
	}
	if c.pf != nil && c.used()+need+grantSize > c.reserved && c.reserved < c.capBytes {
		// Stay a grant ahead, so the prefaulter works where the filler
		// is not yet; without budget to spare, just go on.
		if g := min(int64(grantSize), c.capBytes-c.reserved); c.bud.tryAcquire(g) {
			c.reserved += g
			c.prefaultAhead(need - 2*entrySize)
		}
	}
	off := len(c.arena)
	c.arena = append(c.arena, key...)
	c.arena = append(c.arena, value...)
	c.ents = append(c.ents, entry{
		pfx:    prefix(key),
		bucket: uint32(bucket),
		off:    uint32(off),
		klen:   uint32(len(key)),
		vlen:   uint32(len(value)),
	})
	return true
}

func prefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

func (c *chunk) key(e *entry) []byte {
	return c.arena[e.off : e.off+e.klen : e.off+e.klen]
}

func (c *chunk) value(e *entry) []byte {
	s := e.off + e.klen
	return c.arena[s : s+e.vlen : s+e.vlen]
}

// sortDedup sorts the whole chunk: partition, then every bucket.
func (c *chunk) sortDedup(numBuckets int, policy Duplicates) (dupBucket int, dupKey []byte, ok bool) {
	c.partition(numBuckets)
	for b := range numBuckets {
		if key, ok := c.sortBucket(b, policy); !ok {
			return b, key, false
		}
	}
	c.sorted = true
	return 0, nil, true
}

// partition groups the entries by bucket (a stable counting sort into the
// scratch buffer, then the two buffers swap roles) and sets bounds. After
// it, each bucket's range can be sorted by sortBucket independently, also
// concurrently for different buckets.
//
// The whole sort: partition by bucket, then per bucket an LSD radix sort on
// the 8-byte key prefix (stable, so equal prefixes stay in input order),
// then a comparison sort of each run of equal prefixes on the full key.
// Random-looking keys (hashed or varint-encoded primary keys) rarely share
// 8-byte prefixes, so that last step is a scan; keys with long common
// prefixes fall back to comparison sorting.
func (c *chunk) partition(numBuckets int) {
	n := len(c.ents)
	c.bounds = make([]int, numBuckets+1)
	c.ends = make([]int, numBuckets)
	c.dups = make([]int64, numBuckets)
	for i := range c.ents {
		c.bounds[c.ents[i].bucket+1]++
	}
	for b := 1; b <= numBuckets; b++ {
		c.bounds[b] += c.bounds[b-1]
	}
	scratch := c.scratch[:n]
	next := slices.Clone(c.bounds[:numBuckets])
	for i := range c.ents {
		e := &c.ents[i]
		scratch[next[e.bucket]] = *e
		next[e.bucket]++
	}
	c.ents, c.scratch = scratch, c.ents[:0]
	copy(c.ends, c.bounds[1:])
}

// sortBucket sorts bucket b's range by (key, input order descending) and
// drops all but the first entry of each key: the last one added. Under
// DuplicatesError the first duplicate key is returned instead. The kept
// entries are ents[bounds[b]:ends[b]].
func (c *chunk) sortBucket(b int, policy Duplicates) (dupKey []byte, ok bool) {
	lo, hi := c.bounds[b], c.bounds[b+1]
	if hi-lo == 0 {
		return nil, true
	}
	ents := c.ents[lo:hi]
	radixByPrefix(ents, c.scratch[:cap(c.scratch)][lo:hi])
	c.sortPrefixRuns(ents)
	arena := c.arena
	w := 1
	for r := 1; r < len(ents); r++ {
		e, p := &ents[r], &ents[w-1]
		if p.pfx == e.pfx && p.klen == e.klen &&
			bytes.Equal(arena[p.off:p.off+p.klen], arena[e.off:e.off+e.klen]) {
			if policy == DuplicatesError {
				return bytes.Clone(c.key(e)), false
			}
			c.dups[b]++
			continue
		}
		ents[w] = *e
		w++
	}
	c.ends[b] = lo + w
	return nil, true
}

// radixByPrefix sorts ents by pfx, stably, using tmp (same length) as
// the second buffer. Byte positions where every entry has the same digit
// are skipped.
func radixByPrefix(ents, tmp []entry) {
	n := len(ents)
	if n < 64 {
		slices.SortStableFunc(ents, func(a, b entry) int {
			switch {
			case a.pfx < b.pfx:
				return -1
			case a.pfx > b.pfx:
				return 1
			}
			return 0
		})
		return
	}
	var counts [8][256]int
	for i := range ents {
		p := ents[i].pfx
		for d := range 8 {
			counts[d][byte(p>>(8*d))]++
		}
	}
	from, to := ents, tmp
	for d := range 8 {
		cnt := &counts[d]
		if cnt[byte(from[0].pfx>>(8*d))] == n {
			continue // every entry has this digit
		}
		var pos [256]int
		sum := 0
		for v := range 256 {
			pos[v] = sum
			sum += cnt[v]
		}
		shift := uint(8 * d)
		for i := range from {
			v := byte(from[i].pfx >> shift)
			to[pos[v]] = from[i]
			pos[v]++
		}
		from, to = to, from
	}
	if &from[0] != &ents[0] {
		copy(ents, from)
	}
}

// sortPrefixRuns orders each run of entries with equal prefixes by full key
// and, for equal keys, later input first. Entries arrive in input order
// within a run.
func (c *chunk) sortPrefixRuns(ents []entry) {
	arena := c.arena
	for i := 0; i < len(ents); {
		j := i + 1
		for j < len(ents) && ents[j].pfx == ents[i].pfx {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(ents[i:j], func(a, b entry) int {
				if c := bytes.Compare(arena[a.off:a.off+a.klen], arena[b.off:b.off+b.klen]); c != 0 {
					return c
				}
				// Later input first.
				if a.off > b.off {
					return -1
				}
				if a.off < b.off {
					return 1
				}
				return 0
			})
		}
		i = j
	}
}

// reset empties the chunk for reuse and returns its budget. The mapped pages
// stay resident and are reused by the next fill.
func (c *chunk) reset() {
	c.arena = c.arena[:0]
	c.ents = c.ents[:0]
	c.scratch = c.scratch[:0]
	c.bounds, c.ends, c.dups, c.sorted = nil, nil, nil, false
	c.bud.release(c.reserved)
	c.reserved = 0
}

// trim gives back the pages of the chunk's mappings past what it holds
// now. A chunk reused after its fill was spilled keeps the pages that fill
// touched (reset keeps them for reuse), while only its current fill is
// charged to the budget: at Finish the tail's old pages came on top of
// the merge's buffers, which take the rest of the budget.
func (c *chunk) trim() {
	if c == nil || c.arenaMem == nil {
		return
	}
	page := os.Getpagesize()
	up := func(n int) int { return (n + page - 1) / page * page }
	a := min(up(len(c.arena)), len(c.arenaMem))
	e := min(up(len(c.ents)*int(entrySize)), len(c.entMem))
	dropPages(c.arenaMem[a:])
	dropPages(c.entMem[e:])
	dropPages(c.scrMem[min(e, len(c.scrMem)):])
	c.pfArena, c.pfEnt = min(c.pfArena, a), min(c.pfEnt, e)
}

// free resets the chunk and unmaps its memory.
func (c *chunk) free() {
	if c == nil || c.arenaMem == nil {
		return
	}
	c.reset()
	c.ents, c.scratch, c.arena = nil, nil, nil
	unmapAnon(c.arenaMem)
	unmapAnon(c.entMem)
	unmapAnon(c.scrMem)
	c.arenaMem, c.entMem, c.scrMem = nil, nil, nil
}
