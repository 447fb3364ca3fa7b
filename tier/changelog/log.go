package changelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
)

// SegmentLog is the local segment log: one directory of segment files. It
// is safe for concurrent use. Within one process a directory must be opened
// by one SegmentLog at a time; LocalProvider ensures that for its root.
type SegmentLog struct {
	dir  string
	opts options

	// sem (capacity 1) serializes the writers: Append, TruncateBefore,
	// ResetTo and Close hold it for their whole duration. A channel rather
	// than a mutex so that a writer waiting for it can give up when its
	// context ends.
	sem chan struct{}

	// w is owned by the holder of sem.
	w struct {
		seg *segment // the active segment, last of mu.segs
		f   *os.File // seg's file, opened read-write
		buf []byte   // encoding buffer
	}

	mu struct {
		sync.Mutex
		segs   []*segment // ascending base offsets; never empty
		end    int64      // the next offset to assign
		closed bool
		failed error // a write or sync failed: no more writes
		// notify is closed and replaced when end changes or the log
		// closes, to wake Wait.
		notify chan struct{}
	}
}

var _ Log = (*SegmentLog)(nil)

// maxKeptBuf bounds the encoding buffer kept between Appends.
const maxKeptBuf = 1 << 20

// Append implements Appender. The batch goes to the end of the active
// segment, or to a new segment if it would not fit, in one write followed by
// one fsync. ctx is honoured until the write starts; from then on Append
// finishes. If the write or the fsync fails, the log takes no more writes
// (reads still work); reopen it to recover.
func (l *SegmentLog) Append(ctx context.Context, records [][]byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	frameLen := int64(frameHeaderLen)
	for i, r := range records {
		if int64(len(r)) > l.opts.maxRecordBytes {
			return 0, fmt.Errorf("%w: record %d of %d has %d bytes, the limit is %d", ErrTooLarge, i, len(records), len(r), l.opts.maxRecordBytes)
		}
		frameLen += recordHeaderLen + int64(len(r))
	}
	if frameLen > l.opts.maxBatchBytes {
		return 0, fmt.Errorf("%w: batch of %d records encodes to %d bytes, the limit is %d", ErrTooLarge, len(records), frameLen, l.opts.maxBatchBytes)
	}
	if err := l.acquire(ctx); err != nil {
		return 0, err
	}
	defer l.release()

	l.mu.Lock()
	err := l.writableLocked()
	base, pos := l.mu.end, l.w.seg.size
	l.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if len(records) == 0 {
		return base, nil
	}
	if base > math.MaxInt64-int64(len(records)) {
		return 0, fmt.Errorf("%w: %d records after offset %d overflow the offsets", ErrTooLarge, len(records), base)
	}
	if pos+frameLen > l.opts.segmentBytes {
		if err := l.roll(base); err != nil {
			return 0, err
		}
		pos = segHeaderLen
	}
	seg := l.w.seg
	l.w.buf = appendBatchFrame(l.w.buf[:0], base, records)
	if _, err := l.w.f.WriteAt(l.w.buf, pos); err != nil {
		err = fmt.Errorf("changelog: write batch to %s: %w", seg.path, err)
		if terr := l.w.f.Truncate(pos); terr != nil {
			err = errors.Join(err, fmt.Errorf("changelog: cut partial batch: %w", terr))
			l.fail(err)
		}
		return 0, err
	}
	if err := l.w.f.Sync(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty pages
		// and forgotten the error: nothing written since the last good sync
		// can be trusted, so stop writing.
		err = fmt.Errorf("changelog: sync %s: %w", seg.path, err)
		l.fail(err)
		return 0, err
	}
	if cap(l.w.buf) > maxKeptBuf {
		l.w.buf = nil
	}
	next := base + int64(len(records))
	l.mu.Lock()
	seg.size = pos + frameLen
	if last := seg.index[len(seg.index)-1]; pos-last.pos >= l.opts.indexIntervalBytes {
		seg.index = append(seg.index, indexEntry{off: base, pos: pos})
	}
	seg.scanned, seg.scannedOff = seg.size, next
	seg.hintLocked(indexEntry{off: base, pos: pos})
	l.mu.end = next
	l.broadcastLocked()
	l.mu.Unlock()
	return base, nil
}

// Read implements Reader. The records' Data belong to the caller. On error
// Read returns no records.
func (l *SegmentLog) Read(ctx context.Context, from int64, maxBytes int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Record
	var used int64
	for {
		c, err := l.openCursor(from, len(out) == 0)
		if err != nil || c == nil {
			return out, err
		}
		var full bool
		out, used, full, err = c.read(out, from, used, int64(maxBytes))
		if err = errors.Join(err, l.closeCursor(c, err == nil)); err != nil {
			return nil, err
		}
		if full {
			return out, nil
		}
		from = c.segEnd
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Wait implements Reader.
func (l *SegmentLog) Wait(ctx context.Context, offset int64) (int64, error) {
	return l.wait(ctx, offset, -1, nil)
}

// WaitSeen implements SeenWaiter.
func (l *SegmentLog) WaitSeen(ctx context.Context, offset, seen int64) (int64, error) {
	return l.wait(ctx, offset, seen, nil)
}

// wait is Wait that also gives up with ErrClosed when done is closed; an
// end below seen (or, when seen is negative, below the end when the wait
// began) is ErrOutOfRange.
func (l *SegmentLog) wait(ctx context.Context, offset, seen int64, done <-chan struct{}) (int64, error) {
	first := seen
	for {
		l.mu.Lock()
		closed, end, notify := l.mu.closed, l.mu.end, l.mu.notify
		l.mu.Unlock()
		if first < 0 {
			first = end
		}
		switch {
		case closed:
			return 0, ErrClosed
		case end > offset:
			return end, nil
		case end < first:
			return end, errMovedBack(offset, first, end)
		}
		select {
		case <-notify:
		case <-done:
			return 0, ErrClosed
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Offsets implements Reader.
func (l *SegmentLog) Offsets(ctx context.Context) (start, end int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return 0, 0, ErrClosed
	}
	return l.mu.segs[0].base, l.mu.end, nil
}

// TruncateBefore implements Log. It removes every segment whose records all
// lie below offset; for offset == end it first rolls to a new empty
// segment so that the last records can go too. Files are removed oldest
// first, so a crash leaves a contiguous suffix. Readers that are inside a
// removed segment finish their read.
func (l *SegmentLog) TruncateBefore(ctx context.Context, offset int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()

	l.mu.Lock()
	err := l.writableLocked()
	start, end := l.mu.segs[0].base, l.mu.end
	l.mu.Unlock()
	switch {
	case err != nil:
		return err
	case offset > end:
		return fmt.Errorf("changelog: truncate before: %w", outOfRange(offset, start, end))
	case offset <= start:
		return nil
	}
	if offset == end && l.w.seg.base < end {
		if err := l.roll(end); err != nil {
			return err
		}
	}
	l.mu.Lock()
	segs := l.mu.segs
	k := 0
	for k+1 < len(segs) && segs[k+1].base <= offset {
		k++
	}
	dropped := segs[:k:k]
	l.mu.segs = slices.Clone(segs[k:])
	l.mu.Unlock()
	if err := removeSegments(l.dir, dropped); err != nil {
		// What stays is contiguous (oldest removed first), but a ResetTo
		// after it would put new records behind segments that come back at
		// the next open: no more writes until the log is opened again.
		l.fail(err)
		return err
	}
	return nil
}

// ResetTo implements Log. It creates the new empty segment first and then
// removes the old one, so a crash in between leaves the log either as it
// was or reset; recovery removes the other empty segment.
func (l *SegmentLog) ResetTo(ctx context.Context, offset int64) error {
	if offset < 0 {
		return fmt.Errorf("changelog: reset to negative offset %d", offset)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()

	l.mu.Lock()
	err := l.writableLocked()
	start, end := l.mu.segs[0].base, l.mu.end
	l.mu.Unlock()
	switch {
	case err != nil:
		return err
	case start != end:
		return fmt.Errorf("%w: reset to offset %d: the log holds offsets [%d, %d)", ErrNotEmpty, offset, start, end)
	case offset == end:
		return nil
	}
	seg, err := createSegment(l.dir, offset)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.mu.segs
	l.mu.segs = []*segment{seg}
	l.mu.end = offset
	err = l.w.seg.releaseLocked()
	l.broadcastLocked()
	l.mu.Unlock()
	l.w.seg, l.w.f = seg, seg.f
	if rerr := removeSegments(l.dir, old); rerr != nil {
		// The old segments may come back at the next open (an unlink that
		// failed, or was not made durable) and contradict what is appended
		// from here: no more writes until the log is opened again, whose
		// recovery sees empty segments only and keeps the last (the
		// caller's ResetTo then runs again).
		l.fail(rerr)
		return errors.Join(err, rerr)
	}
	return err
}

// Close implements Log. It waits for a running Append, TruncateBefore or
// ResetTo to finish; Wait calls return ErrClosed. Reads in progress finish.
func (l *SegmentLog) Close() error {
	l.sem <- struct{}{}
	defer l.release()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	l.mu.closed = true
	l.broadcastLocked()
	return l.w.seg.releaseLocked()
}

// Dir returns the log's directory.
func (l *SegmentLog) Dir() string { return l.dir }

func (l *SegmentLog) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		<-l.sem
		return err
	}
	return nil
}

func (l *SegmentLog) release() { <-l.sem }

func (l *SegmentLog) writableLocked() error {
	switch {
	case l.mu.closed:
		return ErrClosed
	case l.mu.failed != nil:
		return fmt.Errorf("changelog: log %s takes no writes after an earlier failure: %w", l.dir, l.mu.failed)
	}
	return nil
}

func (l *SegmentLog) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.failed == nil {
		l.mu.failed = err
	}
}

func (l *SegmentLog) broadcastLocked() {
	close(l.mu.notify)
	l.mu.notify = make(chan struct{})
}

// roll makes a new empty segment at base the active one. The caller holds
// sem.
func (l *SegmentLog) roll(base int64) error {
	seg, err := createSegment(l.dir, base)
	if err != nil {
		return err
	}
	old := l.w.seg
	l.w.seg, l.w.f = seg, seg.f
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.segs = append(l.mu.segs, seg)
	return old.releaseLocked()
}

// removeSegments deletes segment files oldest first and stops at the first
// failure, so that what stays on disk is still contiguous.
func removeSegments(dir string, segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	for _, s := range segs {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errors.Join(fmt.Errorf("changelog: remove segment: %w", err), syncDir(dir))
		}
	}
	return syncDir(dir)
}

// cursor is one reader's position in one segment. It holds a reference on
// the segment from openCursor to closeCursor.
type cursor struct {
	seg      *segment
	f        *os.File
	limit    int64 // readable bytes of the segment when the cursor opened
	segEnd   int64 // the offset after the segment's last readable record
	start    indexEntry
	frontier bool // start is seg.scanned: the read extends the index
	interval int64
	lastPos  int64 // position of the last index entry
	entries  []indexEntry
	reached  indexEntry // next batch start after what was read
}

// openCursor positions a cursor for offset from. It returns nil if there is
// nothing to read; first says whether a bad from is an error (the first
// segment of a Read) or the end of the read (a later one, after a truncation
// raced with it).
func (l *SegmentLog) openCursor(from int64, first bool) (*cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	segs := l.mu.segs
	start, end := segs[0].base, l.mu.end
	if from < start || from > end {
		if first {
			return nil, outOfRange(from, start, end)
		}
		return nil, nil
	}
	if from == end {
		return nil, nil
	}
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > from }) - 1
	seg := segs[i]
	f, err := seg.acquireLocked()
	if err != nil {
		return nil, err
	}
	c := &cursor{
		seg:      seg,
		f:        f,
		limit:    seg.size,
		segEnd:   end,
		start:    seg.seekLocked(from),
		interval: l.opts.indexIntervalBytes,
		lastPos:  seg.index[len(seg.index)-1].pos,
	}
	if i+1 < len(segs) {
		c.segEnd = segs[i+1].base
	}
	c.frontier = c.start.pos == seg.scanned
	c.reached = c.start
	return c, nil
}

// read appends to out the records from offset from that the byte budget
// allows (see Reader.Read; used counts what out already holds). full says
// the budget ended the read; otherwise the cursor reached the end of its
// segment.
func (c *cursor) read(out []Record, from, used, budget int64) (_ []Record, _ int64, full bool, _ error) {
	r := newFrameReader(c.f, c.start.pos, c.limit)
	defer r.release()
	off := c.start.off
	for {
		pos := r.pos
		c.reached = indexEntry{off: off, pos: pos}
		if c.frontier && pos < c.limit && pos-c.lastPos >= c.interval {
			c.entries = append(c.entries, c.reached)
			c.lastPos = pos
		}
		h, reason, err := r.header(off)
		switch {
		case err == io.EOF:
			if off != c.segEnd {
				return nil, 0, false, &CorruptError{Segment: c.seg.path, Pos: pos, Offset: off,
					Reason: fmt.Sprintf("segment ends before offset %d, where the next segment starts", c.segEnd)}
			}
			return out, used, false, nil
		case err != nil:
			return nil, 0, false, fmt.Errorf("changelog: read segment %s: %w", c.seg.path, err)
		case reason != "":
			return nil, 0, false, &CorruptError{Segment: c.seg.path, Pos: pos, Offset: off, Reason: reason}
		case h.next() > c.segEnd:
			return nil, 0, false, &CorruptError{Segment: c.seg.path, Pos: pos, Offset: off,
				Reason: fmt.Sprintf("batch runs to offset %d, past %d, where the next segment starts", h.next(), c.segEnd)}
		}
		if h.next() <= from {
			if err := r.skip(h); err != nil {
				return nil, 0, false, fmt.Errorf("changelog: read segment %s: %w", c.seg.path, err)
			}
			off = h.next()
			continue
		}
		if len(out) > 0 && used+h.payloadLen() > budget {
			return out, used, true, nil
		}
		body, reason, err := r.body(h, nil)
		switch {
		case err != nil:
			return nil, 0, false, fmt.Errorf("changelog: read segment %s: %w", c.seg.path, err)
		case reason != "":
			return nil, 0, false, &CorruptError{Segment: c.seg.path, Pos: pos, Offset: off, Reason: reason}
		}
		var n int64
		out, n = decodeRecords(out, h, body, from)
		used += n
		off = h.next()
		c.reached = indexEntry{off: off, pos: r.pos}
		if used >= budget {
			return out, used, true, nil
		}
	}
}

// closeCursor releases the cursor's segment and, after a good read, records
// what it learned about batch positions.
func (l *SegmentLog) closeCursor(c *cursor, ok bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		if c.frontier {
			c.seg.extendLocked(c.start.pos, c.entries, c.reached)
		}
		if c.reached.pos > c.start.pos {
			c.seg.hintLocked(c.reached)
		}
	}
	return c.seg.releaseLocked()
}
