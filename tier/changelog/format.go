package changelog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"sync"
)

// On-disk format (DESIGN.md has the picture). All integers little endian.
//
// Segment file "%020d.log" named by its base offset:
//
//	header  magic "thawclog" [8] | version uint32 = 1 | base offset int64 | crc32c of the previous 20 bytes uint32
//	frames  one per Append, back to back, nothing after the last
//
// Frame (one batch):
//
//	body length uint32 | crc32c(body) uint32 | body
//	body = base offset int64 | record count uint32 | count × (payload length uint32 | payload)
const (
	segmentExt      = ".log"
	segmentDigits   = 20
	segHeaderLen    = 24
	segVersion      = 1
	framePrefixLen  = 8  // body length + crc
	batchFixedLen   = 12 // base offset + count, the start of the body
	frameHeaderLen  = framePrefixLen + batchFixedLen
	recordHeaderLen = 4
)

var (
	segMagic = [8]byte{'t', 'h', 'a', 'w', 'c', 'l', 'o', 'g'}
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

func segmentName(base int64) string { return fmt.Sprintf("%0*d%s", segmentDigits, base, segmentExt) }

// parseSegmentName returns the base offset of a segment file name.
func parseSegmentName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(digits) != segmentDigits {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return base, true
}

func encodeSegmentHeader(base int64) []byte {
	b := make([]byte, segHeaderLen)
	copy(b, segMagic[:])
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint64(b[12:], uint64(base))
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], crcTable))
	return b
}

// checkSegmentHeader returns why b is not the header of the segment with
// this base offset, or "".
func checkSegmentHeader(b []byte, base int64) string {
	switch {
	case len(b) < segHeaderLen:
		return fmt.Sprintf("segment header truncated to %d bytes", len(b))
	case [8]byte(b[:8]) != segMagic:
		return "bad segment magic"
	case binary.LittleEndian.Uint32(b[20:]) != crc32.Checksum(b[:20], crcTable):
		return "segment header checksum mismatch"
	case binary.LittleEndian.Uint32(b[8:]) != segVersion:
		return fmt.Sprintf("unsupported segment version %d", binary.LittleEndian.Uint32(b[8:]))
	case int64(binary.LittleEndian.Uint64(b[12:])) != base:
		return fmt.Sprintf("segment header says base offset %d, file name says %d", int64(binary.LittleEndian.Uint64(b[12:])), base)
	}
	return ""
}

// batchFrameLen is the encoded size of a batch of records.
func batchFrameLen(records [][]byte) int64 {
	n := int64(frameHeaderLen)
	for _, r := range records {
		n += recordHeaderLen + int64(len(r))
	}
	return n
}

// appendBatchFrame appends the frame of records with base offset base to
// dst. The caller has checked the sizes.
func appendBatchFrame(dst []byte, base int64, records [][]byte) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0) // body length, below
	dst = binary.LittleEndian.AppendUint32(dst, 0) // crc, below
	dst = binary.LittleEndian.AppendUint64(dst, uint64(base))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(records)))
	for _, r := range records {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
	body := dst[start+framePrefixLen:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, crcTable))
	return dst
}

// batchHeader is the fixed start of a frame.
type batchHeader struct {
	bodyLen uint32
	crc     uint32
	base    int64
	count   uint32
}

func parseBatchHeader(b []byte) batchHeader {
	return batchHeader{
		bodyLen: binary.LittleEndian.Uint32(b[0:]),
		crc:     binary.LittleEndian.Uint32(b[4:]),
		base:    int64(binary.LittleEndian.Uint64(b[8:])),
		count:   binary.LittleEndian.Uint32(b[16:]),
	}
}

func (h batchHeader) frameLen() int64 { return framePrefixLen + int64(h.bodyLen) }
func (h batchHeader) next() int64     { return h.base + int64(h.count) }

// payloadLen is the sum of the record payload lengths; valid after check.
func (h batchHeader) payloadLen() int64 {
	return int64(h.bodyLen) - batchFixedLen - recordHeaderLen*int64(h.count)
}

// check returns why a frame with this header cannot start at pos of a
// segment whose readable bytes end at limit, or "". It does not look at the
// base offset.
func (h batchHeader) check(pos, limit int64) string {
	switch {
	case h.bodyLen < batchFixedLen+recordHeaderLen:
		return fmt.Sprintf("frame body length %d too small", h.bodyLen)
	case pos+h.frameLen() > limit:
		return fmt.Sprintf("frame of %d bytes extends past the end of the segment at byte %d", h.frameLen(), limit)
	case h.count == 0:
		return "batch with no records"
	case int64(h.count)*recordHeaderLen > int64(h.bodyLen)-batchFixedLen:
		return fmt.Sprintf("record count %d does not fit a body of %d bytes", h.count, h.bodyLen)
	case h.base < 0:
		return fmt.Sprintf("negative base offset %d", h.base)
	}
	return ""
}

// checkBody returns why body (the whole body of a frame with header h) is
// not valid, or "".
func checkBody(h batchHeader, body []byte) string {
	if crc32.Checksum(body, crcTable) != h.crc {
		return "batch checksum mismatch"
	}
	rest := body[batchFixedLen:]
	for i := uint32(0); i < h.count; i++ {
		if len(rest) < recordHeaderLen {
			return fmt.Sprintf("record %d of %d: header truncated", i, h.count)
		}
		n := binary.LittleEndian.Uint32(rest)
		rest = rest[recordHeaderLen:]
		if uint64(n) > uint64(len(rest)) {
			return fmt.Sprintf("record %d of %d: length %d overruns the batch", i, h.count, n)
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return fmt.Sprintf("%d stray bytes after the last record", len(rest))
	}
	return ""
}

// decodeRecords appends the records of a checked body with offset >= from
// to dst. The records' Data alias body.
func decodeRecords(dst []Record, h batchHeader, body []byte, from int64) ([]Record, int64) {
	var n int64
	rest := body[batchFixedLen:]
	for i := range int64(h.count) {
		l := binary.LittleEndian.Uint32(rest)
		data := rest[recordHeaderLen : recordHeaderLen+l : recordHeaderLen+l]
		rest = rest[recordHeaderLen+l:]
		if h.base+i >= from {
			dst = append(dst, Record{Offset: h.base + i, Data: data})
			n += int64(l)
		}
	}
	return dst, n
}

var bufioPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// frameReader reads frames sequentially from pos to limit of a file.
type frameReader struct {
	br    *bufio.Reader
	pos   int64 // start of the next frame
	limit int64
	hdr   [frameHeaderLen]byte
}

func newFrameReader(f io.ReaderAt, pos, limit int64) *frameReader {
	br := bufioPool.Get().(*bufio.Reader)
	br.Reset(io.NewSectionReader(f, pos, limit-pos))
	return &frameReader{br: br, pos: pos, limit: limit}
}

func (r *frameReader) release() {
	r.br.Reset(nil)
	bufioPool.Put(r.br)
	r.br = nil
}

// header reads the header of the frame at r.pos and checks it against the
// expected base offset. It returns io.EOF at limit, a non-empty reason for
// an invalid frame, or an I/O error. After a valid header the caller must
// call skip or body.
func (r *frameReader) header(want int64) (batchHeader, string, error) {
	if r.pos == r.limit {
		return batchHeader{}, "", io.EOF
	}
	if r.limit-r.pos < frameHeaderLen {
		return batchHeader{}, fmt.Sprintf("frame header truncated to %d bytes", r.limit-r.pos), nil
	}
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return batchHeader{}, "", noEOF(err)
	}
	h := parseBatchHeader(r.hdr[:])
	if reason := h.check(r.pos, r.limit); reason != "" {
		return h, reason, nil
	}
	if h.base != want {
		return h, fmt.Sprintf("batch base offset %d, expected %d", h.base, want), nil
	}
	return h, "", nil
}

// skip moves past the body of the frame whose header was just read.
func (r *frameReader) skip(h batchHeader) error {
	if _, err := r.br.Discard(int(h.bodyLen) - batchFixedLen); err != nil {
		return noEOF(err)
	}
	r.pos += h.frameLen()
	return nil
}

// body reads and checks the body of the frame whose header was just read,
// into buf if it is large enough, and moves past it.
func (r *frameReader) body(h batchHeader, buf []byte) ([]byte, string, error) {
	if int64(cap(buf)) < int64(h.bodyLen) {
		buf = make([]byte, h.bodyLen)
	}
	buf = buf[:h.bodyLen]
	copy(buf, r.hdr[framePrefixLen:])
	if _, err := io.ReadFull(r.br, buf[batchFixedLen:]); err != nil {
		return buf, "", noEOF(err)
	}
	if reason := checkBody(h, buf); reason != "" {
		return buf, reason, nil
	}
	r.pos += h.frameLen()
	return buf, "", nil
}

// noEOF turns an EOF inside a range the file's size promised into an
// error that says so.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("segment shorter than expected: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// findBatch reports the position of the first valid frame in [from, limit)
// whose base offset is in [minBase, minBase+limit-from], scanning byte by
// byte. Recovery uses it to tell a torn tail (nothing valid after the bad
// frame) from corruption in the middle (a later batch survived).
func findBatch(f io.ReaderAt, from, limit, minBase int64) (int64, bool, error) {
	const chunk = 256 << 10
	buf := make([]byte, chunk+frameHeaderLen)
	var body []byte
	maxBase := minBase + (limit - from)
	for start := from; start+frameHeaderLen <= limit; start += chunk {
		n := min(int64(len(buf)), limit-start)
		if _, err := f.ReadAt(buf[:n], start); err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		for i := int64(0); i < chunk && i+frameHeaderLen <= n; i++ {
			h := parseBatchHeader(buf[i:])
			pos := start + i
			if h.base < minBase || h.base > maxBase || h.check(pos, limit) != "" {
				continue
			}
			if int64(cap(body)) < int64(h.bodyLen) {
				body = make([]byte, h.bodyLen)
			}
			body = body[:h.bodyLen]
			if _, err := f.ReadAt(body, pos+framePrefixLen); err != nil {
				return 0, false, noEOF(err)
			}
			if checkBody(h, body) == "" {
				return pos, true, nil
			}
		}
	}
	return 0, false, nil
}
