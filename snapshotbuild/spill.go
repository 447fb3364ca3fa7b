package snapshotbuild

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
)

// A run is one sorted, deduplicated chunk spilled to disk: its pairs in
// (bucket, key) order, each encoded as uvarint(len(key)) uvarint(len(value))
// key value, cut into parts (files) that are written concurrently. A
// bucket's pairs form at most one section per part, in part order. The files
// stay open for concurrent ReadAt by the bucket merges and are removed with
// the build's temp directory.
//
// A part is a sequence of frames, each holding whole records: a header of
// a kind byte, the stored length (4 bytes, little-endian) and the CRC-32C
// of the stored bytes (4 bytes, little-endian), then the stored bytes,
// Snappy-compressed (frameSnappy) or, where compression saves less than an
// eighth, as they are (frameRaw). A frame holds about
// frameSize bytes of records (more only for a single larger record) and
// never spans sections. Compression is the spill's cheapest saving: every
// spilled byte is written into the page cache and read back once, and on
// the project's VM a fresh page-cache page costs far more than Snappy
// spends on it (docs/performance.md).
type run struct {
	seq      int // spill order: a higher seq holds later input
	files    []*os.File
	size     int64       // bytes in the files
	rawSize  int64       // bytes of the records before compression
	maxFrame int         // the largest frame's record bytes: a bound for readers
	sections [][]section // indexed by bucket, then in key order
}

type section struct {
	f         *os.File
	off, size int64
	count     int64
}

const (
	frameRaw    = 1
	frameSnappy = 2
	frameHeader = 9 // kind, stored length, CRC-32C of the stored bytes

	// maxFrameSize is the frame size of builds with a large budget: the
	// merge holds one decoded frame per run it reads, and Snappy's own
	// window is 64 KiB, so larger frames would not compress better.
	maxFrameSize = 64 << 10
)

// frameSizeFor is the frame size of a build with the given memory budget:
// maxFrameSize, smaller for tiny budgets (the merge needs one frame per run).
func frameSizeFor(budget int64) int {
	return int(min(max(budget/256, 512), maxFrameSize))
}

const spillBufSize = 1 << 20

// spillParts is how many files (and goroutines) a run is written with, at
// most (never more than Options.Workers): gathering records from the arena
// and the kernel's page-cache writes are the spill's cost, and two writers
// keep both cores busy when the spill goroutine, not input encoding, is the
// bottleneck.
const spillParts = 2

// writeRun spills a sorted chunk as files pathPrefix.0, pathPrefix.1, ...,
// parts of them (at least 1) written concurrently, in frames of about
// frameSize record bytes.
func writeRun(pathPrefix string, seq int, c *chunk, numBuckets, parts, frameSize int) (_ *run, err error) {
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
			results[p] = writePart(r.files[p], c, cuts[p], to, numBuckets, frameSize)
			continue
		}
		wg.Go(func() { results[p] = writePart(r.files[p], c, cuts[p], to, numBuckets, frameSize) })
	}
	wg.Wait()
	for p, pr := range results {
		if pr.err != nil {
			return nil, pr.err
		}
		r.size += pr.size
		r.rawSize += pr.rawSize
		r.maxFrame = max(r.maxFrame, pr.maxFrame)
		for _, bs := range pr.sections {
			bs.sec.f = r.files[p]
			r.sections[bs.bucket] = append(r.sections[bs.bucket], bs.sec)
		}
	}
	return r, nil
}

type partResult struct {
	size     int64
	rawSize  int64
	maxFrame int
	sections []bucketSection
	err      error
}

type bucketSection struct {
	bucket int
	sec    section
}

// writePart writes the kept entries from entry from.index of bucket
// from.bucket up to entry to.index of bucket to.bucket, exclusive, to f.
func writePart(f *os.File, c *chunk, from, to struct{ bucket, index int }, numBuckets, frameSize int) partResult {
	var res partResult
	var sink byte
	defer func() { touchSink.Add(uint32(sink)) }()
	w := newFrameWriter(f, frameSize)
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
		start := w.offset()
		for i := lo; i < hi; i++ {
			// Gathering the pairs in key order reads the arena at
			// random: touch a group ahead (see touchRecords).
			if (i-lo)%touchGroup == 0 {
				sink += touchRecords(c, i+touchGroup, min(i+2*touchGroup, hi))
			}
			e := &c.ents[i]
			if res.err = w.add(e.klen, e.vlen, c.arena[e.off:e.off+e.klen+e.vlen]); res.err != nil {
				return res
			}
		}
		// Frames never span sections.
		if res.err = w.endFrame(); res.err != nil {
			return res
		}
		res.sections = append(res.sections, bucketSection{b, section{off: start, size: w.offset() - start, count: int64(hi - lo)}})
	}
	if res.err = w.flush(); res.err != nil {
		return res
	}
	res.size, res.rawSize, res.maxFrame = w.off, w.rawSize, w.maxFrame
	return res
}

// frameWriter encodes records into frames (see run) and writes them to a
// file in writes of about spillBufSize.
type frameWriter struct {
	f         *os.File
	frameSize int
	raw       []byte // the open frame's records
	out       []byte // frames not yet written
	off       int64  // file offset of out[0]
	rawSize   int64
	maxFrame  int
}

func newFrameWriter(f *os.File, frameSize int) *frameWriter {
	return &frameWriter{
		f:         f,
		frameSize: frameSize,
		raw:       make([]byte, 0, frameSize+2*binary.MaxVarintLen32),
		out:       make([]byte, 0, spillBufSize+frameHeader+s2.MaxEncodedLen(frameSize)),
	}
}

// reset makes w write a new file f from its start, keeping its buffers.
func (w *frameWriter) reset(f *os.File) {
	w.f, w.off, w.rawSize, w.maxFrame = f, 0, 0, 0
	w.raw, w.out = w.raw[:0], w.out[:0]
}

// offset is the file offset after the last ended frame.
func (w *frameWriter) offset() int64 { return w.off + int64(len(w.out)) }

// add appends a record to the open frame, ending the frame first if the
// record would not fit (a record larger than a frame gets a frame of its own).
func (w *frameWriter) add(klen, vlen uint32, rec []byte) error {
	n := uvarintLen(klen) + uvarintLen(vlen) + len(rec)
	if len(w.raw)+n > w.frameSize && len(w.raw) > 0 {
		if err := w.endFrame(); err != nil {
			return err
		}
	}
	w.raw = binary.AppendUvarint(w.raw, uint64(klen))
	w.raw = binary.AppendUvarint(w.raw, uint64(vlen))
	w.raw = append(w.raw, rec...)
	return nil
}

func uvarintLen(x uint32) int { return (bits.Len32(x|1) + 6) / 7 }

// endFrame encodes the open frame, if it holds records, into out, writing
// out first when the frame might not fit.
func (w *frameWriter) endFrame() error {
	if len(w.raw) == 0 {
		return nil
	}
	need := frameHeader + s2.MaxEncodedLen(len(w.raw))
	if len(w.out)+need > cap(w.out) {
		if err := w.flush(); err != nil {
			return err
		}
		if need > cap(w.out) {
			w.out = make([]byte, 0, need) // a frame with one large record
		}
	}
	h := len(w.out)
	dst := w.out[h+frameHeader : h+need]
	kind, stored := byte(frameSnappy), s2.EncodeSnappy(dst, w.raw)
	if len(stored) > len(w.raw)-len(w.raw)/8 {
		kind, stored = frameRaw, dst[:copy(dst, w.raw)]
	}
	w.out = w.out[:h+frameHeader+len(stored)]
	w.out[h] = kind
	binary.LittleEndian.PutUint32(w.out[h+1:], uint32(len(stored)))
	binary.LittleEndian.PutUint32(w.out[h+5:], crc32.Checksum(stored, castagnoli))
	w.rawSize += int64(len(w.raw))
	w.maxFrame = max(w.maxFrame, len(w.raw))
	w.raw = w.raw[:0]
	return nil
}

// flush writes out; endFrame must have been called.
func (w *frameWriter) flush() error {
	if len(w.out) == 0 {
		return nil
	}
	if _, err := w.f.Write(w.out); err != nil {
		return fmt.Errorf("write spill run: %w", err)
	}
	w.off += int64(len(w.out))
	w.out = w.out[:0]
	return nil
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

// runSource reads one bucket's sections of a run through its own buffer,
// frame by frame, parsing records in place: key and value alias the buffer
// (a raw frame) or the decoded frame and stay valid until the next call to
// next.
type runSource struct {
	mapped    []byte    // the buffer's mapping, if it is mapped; released by release
	secs      []section // sections after the current one
	f         *os.File
	off, end  int64 // file range not yet read into buf
	buf       []byte
	pos, lim  int    // unread file bytes: buf[pos:lim]
	frame     []byte // decoded records of the current Snappy frame
	maxFrame  int    // no frame of the run decodes to more
	recs      []byte // the current frame's unparsed records
	remaining int64
	key, val  []byte
	err       error
	discard   bool  // punch holes behind the reads (see discardRange): the section is read only once
	punched   int64 // with discard: the current section's bytes before this offset are punched
}

// newRunSource returns a source over bucket's pairs in r. Buffers of a
// page or more are mapped outside the Go heap, like chunks, so that many
// runs' buffers do not inflate the garbage collector's heap goal; call
// release when done. It reads the file bytes through a buffer of bufSize and
// decodes frames into one of the run's largest frame size.
func newRunSource(r *run, bucket int, bufSize int) (*runSource, error) {
	if bufSize >= 4096 {
		m, err := mapAnon(bufSize + r.maxFrame)
		if err != nil {
			return nil, err
		}
		s := newRunSourceOver(r, bucket, m, bufSize)
		s.mapped = m
		return s, nil
	}
	return newRunSourceOver(r, bucket, make([]byte, max(bufSize, 64)+r.maxFrame), max(bufSize, 64)), nil
}

// newRunSourceOver returns a source over bucket's pairs in r that reads
// through m, a buffer of at least bufSize+r.maxFrame bytes that the caller
// owns (release leaves it alone).
func newRunSourceOver(r *run, bucket int, m []byte, bufSize int) *runSource {
	return &runSource{secs: r.sections[bucket], remaining: r.count(bucket), maxFrame: r.maxFrame,
		buf: m[:bufSize:bufSize], frame: m[bufSize:]}
}

// srcBufs keeps the mapped read buffers of run sources from one bucket's
// merge to the next. Every merge reads each run through a buffer of about
// a MiB, and on the project's VM each fresh page costs 11 µs to fault in
// (docs/performance.md, session 26): mapped anew per bucket, eight
// buckets of twelve runs faulted 100 MiB, 0.3 CPU-seconds. The pool's
// buffers are accounted against the budget from their mapping to close,
// whether a merge is using them or not, so the budget still bounds what
// is resident.
type srcBufs struct {
	size int // bytes of every buffer
	bud  *budget

	mu     sync.Mutex
	idle   [][]byte
	mapped int // buffers mapped and not yet unmapped
}

func newSrcBufs(size int, bud *budget) *srcBufs { return &srcBufs{size: size, bud: bud} }

// get returns n buffers: idle ones first, then new ones, whose budget it
// acquires in one step (waiting for it, or ctx).
func (p *srcBufs) get(ctx context.Context, n int) ([][]byte, error) {
	p.mu.Lock()
	k := min(n, len(p.idle))
	bufs := slices.Clone(p.idle[len(p.idle)-k:])
	p.idle = p.idle[:len(p.idle)-k]
	p.mu.Unlock()
	if k == n {
		return bufs, nil
	}
	need := int64(n-k) * int64(p.size)
	if err := p.bud.acquire(ctx, need); err != nil {
		p.put(bufs)
		return nil, err
	}
	for range n - k {
		m, err := mapAnon(p.size)
		if err != nil {
			p.bud.release(need - int64(len(bufs)-k)*int64(p.size))
			p.put(bufs)
			return nil, err
		}
		p.mu.Lock()
		p.mapped++
		p.mu.Unlock()
		bufs = append(bufs, m)
	}
	return bufs, nil
}

// put gives buffers back for the next merge.
func (p *srcBufs) put(bufs [][]byte) {
	p.mu.Lock()
	p.idle = append(p.idle, bufs...)
	p.mu.Unlock()
}

// close unmaps every buffer and releases their budget. Every buffer must
// have been put back.
func (p *srcBufs) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != p.mapped {
		return fmt.Errorf("snapshotbuild: %d of %d merge buffers still in use", p.mapped-len(p.idle), p.mapped)
	}
	for _, m := range p.idle {
		unmapAnon(m)
	}
	p.bud.release(int64(p.mapped) * int64(p.size))
	p.idle, p.mapped = nil, 0
	return nil
}

// release unmaps the source's buffer; the source must not be used after.
func (s *runSource) release() {
	if s.mapped != nil {
		unmapAnon(s.mapped)
		s.mapped, s.buf, s.frame, s.recs, s.key, s.val = nil, nil, nil, nil, nil, nil
	}
}

// castagnoli is the CRC-32C table of the frames' checksums (computed with
// the CPU's CRC instruction where it has one).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorruptRun reports a spill file whose bytes do not parse: the build's
// own temporary file was changed under it, or the disk returned other bytes.
var errCorruptRun = errors.New("corrupt spill run")

func (s *runSource) next() bool {
	if s.remaining == 0 || s.err != nil {
		return false
	}
	for len(s.recs) == 0 {
		if err := s.nextFrame(); err != nil {
			s.err = fmt.Errorf("read spill run: %w", err)
			return false
		}
	}
	klen, n1 := binary.Uvarint(s.recs)
	if n1 <= 0 {
		s.err = fmt.Errorf("read spill run: %w: bad key length", errCorruptRun)
		return false
	}
	vlen, n2 := binary.Uvarint(s.recs[n1:])
	if n2 <= 0 {
		s.err = fmt.Errorf("read spill run: %w: bad value length", errCorruptRun)
		return false
	}
	h := n1 + n2
	if rest := uint64(len(s.recs) - h); klen > rest || vlen > rest-klen {
		s.err = fmt.Errorf("read spill run: %w: a record runs past its frame", errCorruptRun)
		return false
	}
	k, total := h+int(klen), h+int(klen)+int(vlen)
	s.key = s.recs[h:k:k]
	s.val = s.recs[k:total:total]
	s.recs = s.recs[total:]
	s.remaining--
	return true
}

// nextFrame reads the next frame and makes its records current.
func (s *runSource) nextFrame() error {
	if err := s.fill(frameHeader); err != nil {
		return err
	}
	kind := s.buf[s.pos]
	n := int64(binary.LittleEndian.Uint32(s.buf[s.pos+1:]))
	if n == 0 || n > int64(s2.MaxEncodedLen(s.maxFrame)) {
		return fmt.Errorf("%w: frame of %d bytes", errCorruptRun, n)
	}
	if err := s.fill(frameHeader + int(n)); err != nil {
		return err
	}
	sum := binary.LittleEndian.Uint32(s.buf[s.pos+5:])
	stored := s.buf[s.pos+frameHeader : s.pos+frameHeader+int(n)]
	s.pos += frameHeader + int(n)
	if crc32.Checksum(stored, castagnoli) != sum {
		return fmt.Errorf("%w: a frame of %d bytes does not match its checksum", errCorruptRun, n)
	}
	switch kind {
	case frameRaw:
		s.recs = stored
	case frameSnappy:
		dl, err := s2.DecodedLen(stored)
		if err != nil || dl == 0 || dl > s.maxFrame {
			return fmt.Errorf("%w: frame decodes to %d bytes (%v)", errCorruptRun, dl, err)
		}
		if s.recs, err = s2.Decode(s.frame[:dl], stored); err != nil {
			return fmt.Errorf("%w: %v", errCorruptRun, err)
		}
	default:
		return fmt.Errorf("%w: frame kind %d", errCorruptRun, kind)
	}
	return nil
}

// fill makes buf[pos:] hold at least n unread bytes of the current section,
// moving on to the next section when the current one is read (frames never
// span sections). It grows the buffer for a frame larger than it.
func (s *runSource) fill(n int) error {
	if s.lim-s.pos >= n {
		return nil
	}
	if s.off >= s.end {
		if s.pos != s.lim || len(s.secs) == 0 {
			return io.ErrUnexpectedEOF
		}
		s.f, s.off, s.end = s.secs[0].f, s.secs[0].off, s.secs[0].off+s.secs[0].size
		s.secs = s.secs[1:]
		s.punched = s.off
	}
	if n > len(s.buf) {
		// A frame larger than the buffer: never with the buffers the
		// merges size (minSrcBuf), which the budget holds; this one it
		// does not.
		grownBufs.Add(1)
		nb := make([]byte, n)
		s.lim = copy(nb, s.buf[s.pos:s.lim])
		s.buf, s.pos = nb, 0
	}
	for s.lim-s.pos < n {
		if err := s.refill(); err != nil {
			return err
		}
	}
	return nil
}

// grownBufs counts the read buffers fill replaced by a larger one outside
// the budget (tests check that none is).
var grownBufs atomic.Int64

// refill moves the unread bytes to the front and reads more of the current
// section.
func (s *runSource) refill() error {
	if s.off >= s.end {
		return io.ErrUnexpectedEOF
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

// touchRecords reads every cache line of the pairs of entries [from, to)
// of c and returns the sum of the bytes read. The spill copies whole pairs
// right away: a pair of bench load's shape (122 bytes) spans two or three
// lines, and touching only the first leaves the others to miss one by one
// in the copy (BenchmarkWriteRun: ~100 ms a 128 MiB chunk with the first
// byte touched, ~55 ms with every line).
func touchRecords(c *chunk, from, to int) byte {
	var x byte
	for j := from; j < to; j++ {
		e := &c.ents[j]
		last := e.off + e.klen + e.vlen - 1
		for p := e.off; p < last; p += 64 {
			x += c.arena[p]
		}
		x += c.arena[last]
	}
	return x
}

// touchSink receives writePart's sums of touchRecords, so that the reads
// are not optimized away.
var touchSink atomic.Uint32
