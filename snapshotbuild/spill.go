package snapshotbuild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// A run is one sorted, deduplicated chunk spilled to disk: its pairs in
// (bucket, key) order, each encoded as uvarint(len(key)) uvarint(len(value))
// key value, cut into parts (files) that are written concurrently. A
// bucket's pairs form at most one section per part, in part order. The files
// stay open for concurrent ReadAt by the bucket merges and are removed with
// the build's temp directory.
type run struct {
	seq      int // spill order: a higher seq holds later input
	files    []*os.File
	size     int64
	sections [][]section // indexed by bucket, then in key order
}

type section struct {
	f         *os.File
	off, size int64
	count     int64
}

const spillBufSize = 1 << 20

// spillParts is how many files (and goroutines) a run is written with, at
// most (never more than Options.Workers): gathering records from the arena
// and the kernel's page-cache writes are the spill's cost, and two writers
// keep both cores busy when the spill goroutine, not input encoding, is the
// bottleneck.
const spillParts = 2

// writeRun spills a sorted chunk as files pathPrefix.0, pathPrefix.1, ...,
// parts of them (at least 1) written concurrently.
func writeRun(pathPrefix string, seq int, c *chunk, numBuckets, parts int) (_ *run, err error) {
	parts = max(parts, 1)
	// Cut the kept entries, in (bucket, key) order, into parts of about
	// equal bytes.
	var total int64
	for b := range numBuckets {
		for i := c.bounds[b]; i < c.ends[b]; i++ {
			total += int64(c.ents[i].klen + c.ents[i].vlen)
		}
	}
	type cut struct{ bucket, index int } // a part starts at entry index of bucket
	cuts := []cut{{0, c.bounds[0]}}
	var acc int64
	next := total / int64(parts)
	for b := 0; b < numBuckets && len(cuts) < parts; b++ {
		for i := c.bounds[b]; i < c.ends[b] && len(cuts) < parts; i++ {
			if acc >= next && acc > 0 {
				cuts = append(cuts, cut{b, i})
				next += total / int64(parts)
			}
			acc += int64(c.ents[i].klen + c.ents[i].vlen)
		}
	}
	r := &run{seq: seq, files: make([]*os.File, len(cuts)), sections: make([][]section, numBuckets)}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	for p := range cuts {
		f, err := os.OpenFile(fmt.Sprintf("%s.%d", pathPrefix, p), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create spill run: %w", err)
		}
		r.files[p] = f
	}
	results := make([]partResult, len(cuts))
	var wg sync.WaitGroup
	for p := range cuts {
		to := cut{numBuckets, 0}
		if p+1 < len(cuts) {
			to = cuts[p+1]
		}
		if len(cuts) == 1 {
			results[p] = writePart(r.files[p], c, cuts[p], to, numBuckets)
			continue
		}
		wg.Go(func() { results[p] = writePart(r.files[p], c, cuts[p], to, numBuckets) })
	}
	wg.Wait()
	for p, pr := range results {
		if pr.err != nil {
			return nil, pr.err
		}
		r.size += pr.size
		for _, bs := range pr.sections {
			bs.sec.f = r.files[p]
			r.sections[bs.bucket] = append(r.sections[bs.bucket], bs.sec)
		}
	}
	return r, nil
}

type partResult struct {
	size     int64
	sections []bucketSection
	err      error
}

type bucketSection struct {
	bucket int
	sec    section
}

// writePart writes the kept entries from entry from.index of bucket
// from.bucket up to entry to.index of bucket to.bucket, exclusive, to f.
func writePart(f *os.File, c *chunk, from, to struct{ bucket, index int }, numBuckets int) partResult {
	var res partResult
	var sink byte
	defer func() { touchSink.Add(uint32(sink)) }()
	buf := make([]byte, 0, spillBufSize)
	var off int64 // file offset of buf[0]
	flush := func() error {
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("write spill run: %w", err)
		}
		off += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	for b := from.bucket; b < numBuckets && b <= to.bucket; b++ {
		lo, hi := c.bounds[b], c.ends[b]
		if b == from.bucket {
			lo = from.index
		}
		if b == to.bucket {
			hi = min(hi, to.index)
		}
		if hi <= lo {
			continue
		}
		start := off + int64(len(buf))
		for i := lo; i < hi; i++ {
			// Gathering the pairs in key order reads the arena at
			// random: touch a group ahead (see memSource.touch).
			if (i-lo)%touchGroup == 0 {
				sink += touchEntries(c, i+touchGroup, min(i+2*touchGroup, hi))
			}
			e := &c.ents[i]
			rec := c.arena[e.off : e.off+e.klen+e.vlen]
			if len(buf)+2*binary.MaxVarintLen32+len(rec) > cap(buf) && len(buf) > 0 {
				if res.err = flush(); res.err != nil {
					return res
				}
			}
			buf = binary.AppendUvarint(buf, uint64(e.klen))
			buf = binary.AppendUvarint(buf, uint64(e.vlen))
			buf = append(buf, rec...)
		}
		res.sections = append(res.sections, bucketSection{b, section{off: start, size: off + int64(len(buf)) - start, count: int64(hi - lo)}})
	}
	if res.err = flush(); res.err != nil {
		return res
	}
	res.size = off
	return res
}

func (r *run) close() error {
	var errs []error
	for i, f := range r.files {
		if f != nil {
			errs = append(errs, f.Close())
			r.files[i] = nil
		}
	}
	return errors.Join(errs...)
}

// count is the number of pairs the run holds for bucket.
func (r *run) count(bucket int) int64 {
	var n int64
	for _, s := range r.sections[bucket] {
		n += s.count
	}
	return n
}

// runSource reads one bucket's section of a run through its own buffer,
// parsing records in place: key and value alias the buffer and stay valid
// until the next call to next.
type runSource struct {
	mapped    []byte    // the buffer's mapping, if it is mapped; released by release
	secs      []section // sections after the current one
	f         *os.File
	off, end  int64 // file range not yet read into buf
	buf       []byte
	pos, lim  int // unparsed bytes: buf[pos:lim]
	remaining int64
	key, val  []byte
	err       error
	discard   bool  // punch holes behind the reads (see discardRange): the section is read only once
	punched   int64 // with discard: the current section's bytes before this offset are punched
}

// newRunSource returns a source over bucket's pairs in r. Buffers of a
// page or more are mapped outside the Go heap, like chunks, so that many
// runs' buffers do not inflate the garbage collector's heap goal; call
// release when done.
func newRunSource(r *run, bucket int, bufSize int) (*runSource, error) {
	s := &runSource{secs: r.sections[bucket], remaining: r.count(bucket)}
	if bufSize >= 4096 {
		m, err := mapAnon(bufSize)
		if err != nil {
			return nil, err
		}
		s.mapped, s.buf = m, m
	} else {
		s.buf = make([]byte, max(bufSize, 64))
	}
	return s, nil
}

// release unmaps the source's buffer; the source must not be used after.
func (s *runSource) release() {
	if s.mapped != nil {
		unmapAnon(s.mapped)
		s.mapped, s.buf, s.key, s.val = nil, nil, nil, nil
	}
}

func (s *runSource) next() bool {
	if s.remaining == 0 || s.err != nil {
		return false
	}
	for {
		b := s.buf[s.pos:s.lim]
		klen, n1 := binary.Uvarint(b)
		if n1 > 0 {
			vlen, n2 := binary.Uvarint(b[n1:])
			if n2 > 0 {
				h := n1 + n2
				total := uint64(h) + klen + vlen
				if total <= uint64(len(b)) {
					s.key = b[h : h+int(klen) : h+int(klen)]
					s.val = b[h+int(klen) : int(total) : int(total)]
					s.pos += int(total)
					s.remaining--
					return true
				}
				if total > uint64(len(s.buf)) {
					// A record larger than the buffer (tiny budgets only).
					nb := make([]byte, total)
					s.lim = copy(nb, b)
					s.buf, s.pos = nb, 0
				}
			}
		}
		if err := s.refill(); err != nil {
			s.err = fmt.Errorf("read spill run: %w", err)
			return false
		}
	}
}

// refill moves the unparsed bytes to the front and reads more, moving on
// to the next section when the current one is read (records never span
// sections).
func (s *runSource) refill() error {
	if s.off >= s.end {
		if s.pos != s.lim || len(s.secs) == 0 {
			return io.ErrUnexpectedEOF
		}
		s.f, s.off, s.end = s.secs[0].f, s.secs[0].off, s.secs[0].off+s.secs[0].size
		s.secs = s.secs[1:]
		s.punched = s.off
	}
	s.lim = copy(s.buf, s.buf[s.pos:s.lim])
	s.pos = 0
	want := min(int64(len(s.buf)-s.lim), s.end-s.off)
	n, err := s.f.ReadAt(s.buf[s.lim:s.lim+int(want)], s.off)
	s.off += int64(n)
	s.lim += n
	if s.discard && n > 0 {
		// Each section is read once: the bytes read are dead. Punch up to a
		// page boundary (a page is only freed when one punch covers it
		// whole), in steps of at least discardStep, and the rest at the
		// section's end.
		to := s.off &^ (pageSize - 1)
		if s.off == s.end {
			to = s.end
		}
		if to-s.punched >= discardStep || s.off == s.end && to > s.punched {
			s.discard = discardRange(s.f, s.punched, to-s.punched)
			s.punched = to
		}
	}
	if int64(n) == want {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// discardStep is the least a runSource punches at once (see refill).
const discardStep = 64 << 10

var pageSize = int64(os.Getpagesize())

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// memSource iterates one bucket's entries of a sorted in-memory chunk.
type memSource struct {
	c          *chunk
	start, end int
	i          int
	key, val   []byte
	sink       byte // keeps the touches of touchAhead from being optimized away
}

func newMemSource(c *chunk, bucket int) *memSource {
	s := &memSource{c: c, start: c.bounds[bucket], i: c.bounds[bucket] - 1, end: c.ends[bucket]}
	s.touch(s.start, touchGroup)
	return s
}

// touchGroup is how many entries memSource touches at once, touchGroup
// entries ahead of the one it returns.
const touchGroup = 16

func (s *memSource) next() bool {
	s.i++
	if s.i >= s.end {
		return false
	}
	if (s.i-s.start)%touchGroup == 0 {
		s.touch(s.i+touchGroup, touchGroup)
	}
	e := &s.c.ents[s.i]
	s.key, s.val = s.c.key(e), s.c.value(e)
	return true
}

// touch reads the first key byte of entries [from, from+n) (within the
// source's range). Sorted entries point all over the arena, so each pair's
// bytes are a cache (and TLB) miss; reading a group of them in one tight
// loop lets the CPU wait for those misses together instead of one at a time
// in the merge and SST writer (Go has no prefetch instruction).
func (s *memSource) touch(from, n int) {
	s.sink += touchEntries(s.c, from, min(from+n, s.end))
}

// touchEntries reads the first key byte of the pairs of entries [from, to)
// of c and returns their sum; the caller keeps it (see memSource.touch).
func touchEntries(c *chunk, from, to int) byte {
	var x byte
	for j := from; j < to; j++ {
		x += c.arena[c.ents[j].off]
	}
	return x
}

// touchSink receives writePart's sums of touchEntries, so that the reads
// are not optimized away.
var touchSink atomic.Uint32
