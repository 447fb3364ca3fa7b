package changelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// OpenSegmentLog opens the segment log in dir, creating the directory and
// an empty log (start = end = 0) if needed, and recovers it: every
// segment's header is checked, the last segment is scanned and
// CRC-checked completely, a torn tail is cut off, and empty segments left
// by an interrupted ResetTo are removed. Earlier segments are CRC-checked
// as they are read. Corruption is a *CorruptError.
func OpenSegmentLog(dir string, opts ...Option) (*SegmentLog, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return openSegmentLog(dir, o)
}

func openSegmentLog(dir string, o options) (_ *SegmentLog, err error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	l := &SegmentLog{dir: dir, opts: o, sem: make(chan struct{}, 1)}
	l.mu.notify = make(chan struct{})

	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("changelog: list log directory: %w", err)
	}
	var bases []int64
	for _, e := range entries {
		if base, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			bases = append(bases, base)
		}
		// A segment whose creation a crash cut short never got its name.
		if name, ok := strings.CutSuffix(e.Name(), tmpSuffix); ok && e.Type().IsRegular() {
			if _, seg := parseSegmentName(name); seg {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
					return nil, fmt.Errorf("changelog: remove an unfinished segment: %w", err)
				}
			}
		}
	}
	slices.Sort(bases)
	if len(bases) == 0 {
		seg, err := createSegment(dir, 0)
		if err != nil {
			return nil, err
		}
		l.mu.segs = []*segment{seg}
		l.w.seg, l.w.f = seg, seg.f
		return l, nil
	}

	segs := make([]*segment, len(bases))
	for i, base := range bases[:len(bases)-1] {
		segs[i] = newSegment(dir, base)
		if err := checkSealed(segs[i]); err != nil {
			return nil, err
		}
	}
	last := newSegment(dir, bases[len(bases)-1])
	end, err := l.recoverActive(last)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, last.f.Close())
		}
	}()
	segs[len(segs)-1] = last

	// Only an interrupted ResetTo leaves an empty segment before the last,
	// and only when the whole log is empty. Keep the last one.
	empty := func(s *segment) bool { return s.size == segHeaderLen }
	if len(segs) > 1 && !slices.ContainsFunc(segs, func(s *segment) bool { return !empty(s) }) {
		if err := removeSegments(dir, segs[:len(segs)-1]); err != nil {
			return nil, err
		}
		segs = segs[len(segs)-1:]
	}
	for _, s := range segs[:len(segs)-1] {
		if empty(s) {
			return nil, &CorruptError{Segment: s.path, Pos: segHeaderLen, Offset: s.base, Reason: "empty segment before the last"}
		}
	}
	l.mu.segs = segs
	l.mu.end = end
	l.w.seg, l.w.f = last, last.f
	return l, nil
}

// ensureDir creates dir if it does not exist and makes its entry durable:
// every level it creates (MkdirAll may create several) is synced in its
// parent, and so is an existing dir's entry (a crash may have come between
// its creation and the sync).
func ensureDir(dir string) error {
	var missing []string // dir and its missing ancestors, deepest first
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("changelog: stat log directory: %w", err)
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("changelog: create log directory: %w", err)
	}
	if len(missing) == 0 {
		missing = []string{filepath.Clean(dir)}
	}
	for _, d := range missing { // deepest first: a parent's entry after its child's
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// checkSealed checks the header of a segment that is not the last and
// records its size. Its frames are checked when read.
func checkSealed(s *segment) (err error) {
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("changelog: open segment: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("changelog: close segment %s: %w", s.path, cerr)
		}
	}()
	hdr := make([]byte, segHeaderLen)
	n, err := f.ReadAt(hdr, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("changelog: read segment header %s: %w", s.path, err)
	}
	if reason := checkSegmentHeader(hdr[:n], s.base); reason != "" {
		return &CorruptError{Segment: s.path, Pos: 0, Offset: s.base, Reason: reason}
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("changelog: stat segment: %w", err)
	}
	s.size = st.Size()
	return nil
}

// recoverActive opens the last segment for writing, checks every frame,
// repairs a torn tail or a torn header, indexes it, and returns the log's
// end offset.
func (l *SegmentLog) recoverActive(s *segment) (_ int64, err error) {
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("changelog: open segment: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("changelog: stat segment: %w", err)
	}
	size := st.Size()
	hdr := make([]byte, segHeaderLen)
	n, err := f.ReadAt(hdr, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("changelog: read segment header %s: %w", s.path, err)
	}
	end := s.base
	if reason := checkSegmentHeader(hdr[:n], s.base); reason != "" {
		if err := l.repairHeader(s, f, size, reason); err != nil {
			return 0, err
		}
		size = segHeaderLen
	} else if end, size, err = l.scanActive(s, f, size); err != nil {
		return 0, err
	}
	s.f, s.refs = f, 1
	s.size = size
	s.scanned, s.scannedOff = size, end
	return end, nil
}

// scanActive follows and checks every frame of the last segment. At the
// first bad frame it decides between a torn tail (cut it off) and
// corruption. It returns the end offset and the segment's good size.
func (l *SegmentLog) scanActive(s *segment, f *os.File, size int64) (end, good int64, err error) {
	r := newFrameReader(f, segHeaderLen, size)
	defer r.release()
	off := s.base
	var buf []byte
	for {
		pos := r.pos
		h, reason, err := r.header(off)
		if err == io.EOF {
			return off, size, nil
		}
		if err == nil && reason == "" {
			buf, reason, err = r.body(h, buf)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("changelog: recover segment %s: %w", s.path, err)
		}
		if reason != "" {
			return off, pos, l.repairTail(s, f, pos, off, size, reason)
		}
		if last := s.index[len(s.index)-1]; pos-last.pos >= l.opts.indexIntervalBytes {
			s.index = append(s.index, indexEntry{off: off, pos: pos})
		}
		off = h.next()
	}
}

// repairTail handles a bad frame at pos of the last segment. It is a torn
// tail (the unsynced write of an Append that never returned) if no more
// bytes follow than one batch can hold and no valid later batch follows (a
// valid frame within the bad frame's own payload does not count: see
// followingBatch); it is then cut off. Otherwise it is corruption.
func (l *SegmentLog) repairTail(s *segment, f *os.File, pos, off, size int64, reason string) error {
	corrupt := &CorruptError{Segment: s.path, Pos: pos, Offset: off, Reason: reason}
	if tail := size - pos; tail > l.opts.maxBatchBytes {
		corrupt.Reason += fmt.Sprintf("; %d bytes follow, more than one batch can hold, so it is not a torn tail", tail)
		return corrupt
	}
	q, err := followingBatch(f, pos, off, size)
	if err != nil {
		return fmt.Errorf("changelog: recover segment %s: %w", s.path, err)
	}
	if q >= 0 {
		corrupt.Reason += fmt.Sprintf("; a valid batch follows at byte %d, so it is not a torn tail", q)
		return corrupt
	}
	if err := f.Truncate(pos); err != nil {
		return fmt.Errorf("changelog: cut torn tail of %s: %w", s.path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("changelog: sync %s: %w", s.path, err)
	}
	if l.opts.onTailRepair != nil {
		l.opts.onTailRepair(TailRepair{Segment: s.path, Pos: pos, Dropped: size - pos, Reason: reason})
	}
	return nil
}

// followingBatch returns the position of a valid batch that follows the
// bad frame at pos (whose base offset would be off) in [pos, size), or -1.
// A torn last batch's payload is client bytes that may hold valid frames,
// even with chosen checksums: when the bad frame's header is whole and
// plausible, a frame inside its extent counts only where the bad frame's
// own records end, and only if the bad frame checks out cut there (only
// its length field was damaged, in the middle of the log: checksum and
// record layout, which the client does not write); after its extent any
// valid frame counts. So a torn tail, whose extent runs past the end, is
// decided without searching its payload (which, searched byte by byte,
// could hold a plausible header every few bytes). When the header itself
// is damaged, any valid frame after it counts.
func followingBatch(f io.ReaderAt, pos, off, size int64) (int64, error) {
	tail := make([]byte, size-pos) // at most one batch: checked by the caller
	if _, err := f.ReadAt(tail, pos); err != nil {
		return -1, noEOF(err)
	}
	if len(tail) < frameHeaderLen {
		return -1, nil // no room for a frame after a torn header
	}
	bad := parseBatchHeader(tail)
	if bad.check(0, math.MaxInt64) != "" {
		q, found, err := findBatch(f, pos+1, size, off)
		if err != nil || !found {
			return -1, err
		}
		return q, nil
	}
	extent := bad.frameLen()
	if end, ok := recordsEnd(bad, tail); ok && end < extent && end+frameHeaderLen <= int64(len(tail)) {
		cut := bad
		cut.bodyLen = uint32(end - framePrefixLen)
		next := parseBatchHeader(tail[end:])
		if checkBody(cut, tail[framePrefixLen:end]) == "" && next.base >= off && next.base <= off+int64(len(tail)) && next.check(pos+end, size) == "" &&
			checkBody(next, tail[end+framePrefixLen:end+next.frameLen()]) == "" {
			return pos + end, nil
		}
	}
	if extent >= int64(len(tail)) {
		return -1, nil
	}
	q, found, err := findBatch(f, pos+extent, size, off)
	if err != nil || !found {
		return -1, err
	}
	return q, nil
}

// recordsEnd returns where, in a frame whose bytes b start with header h,
// the records h.count announces end, from their length fields, if they end
// within b.
func recordsEnd(h batchHeader, b []byte) (int64, bool) {
	at := int64(frameHeaderLen)
	for range h.count {
		if at+recordHeaderLen > int64(len(b)) {
			return 0, false
		}
		at += recordHeaderLen + int64(binary.LittleEndian.Uint32(b[at:]))
	}
	return at, at <= int64(len(b))
}

// repairHeader handles a last segment whose header is bad. Segments are
// created with a synced header before any batch goes in, so if no valid
// batch follows, the creation was torn and the header is rewritten;
// otherwise it is corruption.
func (l *SegmentLog) repairHeader(s *segment, f *os.File, size int64, reason string) error {
	corrupt := &CorruptError{Segment: s.path, Pos: 0, Offset: s.base, Reason: reason}
	if size > segHeaderLen+l.opts.maxBatchBytes {
		corrupt.Reason += fmt.Sprintf("; the segment holds %d bytes, so it is not a torn creation", size)
		return corrupt
	}
	if q, found, err := findBatch(f, 0, size, s.base); err != nil {
		return fmt.Errorf("changelog: recover segment %s: %w", s.path, err)
	} else if found {
		corrupt.Reason += fmt.Sprintf("; a valid batch follows at byte %d", q)
		return corrupt
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("changelog: rewrite torn segment header of %s: %w", s.path, err)
	}
	if _, err := f.WriteAt(encodeSegmentHeader(s.base), 0); err != nil {
		return fmt.Errorf("changelog: rewrite torn segment header of %s: %w", s.path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("changelog: sync %s: %w", s.path, err)
	}
	if l.opts.onTailRepair != nil {
		l.opts.onTailRepair(TailRepair{Segment: s.path, Pos: 0, Dropped: size, Reason: reason})
	}
	return nil
}
