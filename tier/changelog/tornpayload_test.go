package changelog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"testing"
)

// forge sets the 4 bytes at b[at:] so that crc32c(b) == target.
func forge(t *testing.T, b []byte, at int, target uint32) {
	binary.LittleEndian.PutUint32(b[at:], 0)
	c0 := crc32.Checksum(b, crcTable)
	var cols [32]uint32
	for j := 0; j < 32; j++ {
		binary.LittleEndian.PutUint32(b[at:], 1<<j)
		cols[j] = crc32.Checksum(b, crcTable) ^ c0
	}
	// solve sum x_j cols[j] = c0 ^ target over GF(2)
	want := c0 ^ target
	type row struct{ v, x uint32 }
	var basis [32]row // basis[bit] has highest bit 'bit'
	var have [32]bool
	for j := 0; j < 32; j++ {
		r := row{cols[j], 1 << j}
		for bit := 31; bit >= 0; bit-- {
			if r.v>>bit&1 == 0 {
				continue
			}
			if !have[bit] {
				basis[bit], have[bit] = r, true
				break
			}
			r.v ^= basis[bit].v
			r.x ^= basis[bit].x
		}
	}
	var x uint32
	for bit := 31; bit >= 0; bit-- {
		if want>>bit&1 == 0 {
			continue
		}
		if !have[bit] {
			t.Fatal("not solvable")
		}
		want ^= basis[bit].v
		x ^= basis[bit].x
	}
	binary.LittleEndian.PutUint32(b[at:], x)
	if crc32.Checksum(b, crcTable) != target {
		t.Fatal("forge failed")
	}
}

// TestTornTailForgedPayload: a client record holding a valid frame, plus 4
// bytes chosen so that the torn batch cut in front of that frame has the
// stored checksum (CRC-32C is linear). A crash tore its Append, and
// recovery took the inner frame for one that follows a batch whose length
// field was damaged: corruption, and the log could never be opened again,
// though only the unacknowledged batch was damaged. The cut batch's record
// layout, which the client does not write, now has to check out too.
func TestTornTailForgedPayload(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenSegmentLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := appendBatches(t, l, []int{1, 2}, 10)
	off := int64(len(want))
	inner := appendBatchFrame(nil, off, [][]byte{[]byte("hello")})
	payload := make([]byte, 16+len(inner)+64+4)
	copy(payload[16:], inner)
	// the body as Append will encode it
	frame := appendBatchFrame(nil, off, [][]byte{payload})
	body := frame[framePrefixLen:]
	prefix := batchFixedLen + recordHeaderLen + 16 // body bytes before the inner frame
	target := crc32.Checksum(body[:prefix], crcTable)
	forge(t, body, len(body)-4, target)
	copy(payload, body[batchFixedLen+recordHeaderLen:])
	if _, err := l.Append(t.Context(), [][]byte{payload}); err != nil {
		t.Fatal(err)
	}
	seg := l.w.seg.path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// crash: the batch in flight was torn 10 bytes before its end
	full := fileSize(t, seg)
	if err := os.Truncate(seg, full-10); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenSegmentLog(dir)
	if err != nil {
		t.Fatalf("open after a torn, unacknowledged append: %v (errors.Is ErrCorrupt: %v)", err, errors.Is(err, ErrCorrupt))
	}
	defer l2.Close()
	checkRecords(t, readAll(t, l2, 0, 1<<20), 0, want)
}

// TestTornTailOfPlausibleHeaders: a crash while appending a batch whose
// client payload is made of plausible frame headers, one every 24 bytes,
// each claiming a body up to the end of the file. Recovery's search for a
// batch after the torn one read and checksummed most of the tail at each
// of them: quadratic (3 MiB took 21 s here, the default 8 MiB batch
// minutes). A torn batch's whole header bounds its extent, which runs past
// the end: nothing in it is searched. The test counts the bytes read.
func TestTornTailOfPlausibleHeaders(t *testing.T) {
	dir := t.TempDir()
	const recLen = 1 << 20 // one default max-size record
	l, err := OpenSegmentLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), [][]byte{[]byte("x")}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	pos := l.w.seg.size
	l.mu.Unlock()
	off := int64(1)
	// the batch as written: frame header 20 + record header 4 + payload
	payloadStart := pos + frameHeaderLen + recordHeaderLen
	full := payloadStart + recLen
	cut := full - 100 // torn: the last 100 bytes never made it
	const nrec = 3
	full = pos + frameHeaderLen + nrec*(recordHeaderLen+recLen)
	cut = full - 100
	var recs [][]byte
	for k := 0; k < nrec; k++ {
		rec := make([]byte, recLen)
		ps := pos + frameHeaderLen + int64(k)*(recordHeaderLen+recLen) + recordHeaderLen
		for i := 0; i+24 <= recLen; i += 24 {
			p := ps + int64(i)
			if cut-p-framePrefixLen < 16 {
				break
			}
			bodyLen := cut - p - framePrefixLen
			binary.LittleEndian.PutUint32(rec[i:], uint32(bodyLen))
			binary.LittleEndian.PutUint32(rec[i+4:], 0)
			binary.LittleEndian.PutUint64(rec[i+8:], uint64(off))
			binary.LittleEndian.PutUint32(rec[i+16:], 1)
		}
		recs = append(recs, rec)
	}
	if _, err := l.Append(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	seg := l.w.seg.path
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, cut); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(seg)
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReaderAt{r: f}
	q, err := followingBatch(cr, pos, off, cut)
	_ = f.Close()
	if err != nil || q >= 0 {
		t.Fatalf("followingBatch: %d, %v", q, err)
	}
	if tail := cut - pos; cr.n > 2*tail {
		t.Fatalf("deciding a %d-byte torn tail read %d bytes", tail, cr.n)
	}
	l, err = OpenSegmentLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, end, err := l.Offsets(t.Context()); err != nil || end != 1 {
		t.Fatalf("after recovery the log ends at %d, %v; want 1 (the torn batch cut)", end, err)
	}
}

type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}
