package changelog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// indexEntry says that the batch with base offset off starts at byte pos.
type indexEntry struct {
	off int64
	pos int64
}

const numHints = 4

// segment is one segment file. Every field after path is guarded by the
// owning SegmentLog's mu.
type segment struct {
	base int64
	path string

	// f is open while refs > 0. The writer holds a reference on the active
	// segment; readers hold one while they read.
	f    *os.File
	refs int
	// size is the number of readable bytes: the header plus every durable
	// frame. For the active segment it grows after each fsync.
	size int64
	// index is sparse and sorted: index[0] is the first batch, then at most
	// one entry per index interval. It covers the batches before scanned.
	index []indexEntry
	// scanned/scannedOff: the batch chain has been followed up to byte
	// scanned, where the batch with base offset scannedOff starts (or the
	// segment ends). The active segment is always scanned to size.
	scanned    int64
	scannedOff int64
	// hints are recent batch starts beyond the index: where the last
	// readers stopped and where the last appends went, so that tailing
	// followers find their offset without scanning.
	hints    [numHints]indexEntry
	nextHint int
}

func newSegment(dir string, base int64) *segment {
	s := &segment{
		base:       base,
		path:       filepath.Join(dir, segmentName(base)),
		size:       segHeaderLen,
		index:      []indexEntry{{off: base, pos: segHeaderLen}},
		scanned:    segHeaderLen,
		scannedOff: base,
	}
	return s
}

// acquireLocked takes a reference, opening the file read-only if nobody has
// it open.
func (s *segment) acquireLocked() (*os.File, error) {
	if s.refs == 0 {
		f, err := os.Open(s.path)
		if err != nil {
			return nil, fmt.Errorf("changelog: open segment: %w", err)
		}
		s.f = f
	}
	s.refs++
	return s.f, nil
}

// releaseLocked drops a reference and closes the file with the last one.
func (s *segment) releaseLocked() error {
	s.refs--
	if s.refs > 0 {
		return nil
	}
	f := s.f
	s.f = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("changelog: close segment %s: %w", s.path, err)
	}
	return nil
}

// seekLocked returns the best known batch start at or before the batch that
// holds offset from.
func (s *segment) seekLocked(from int64) indexEntry {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].off > from }) - 1
	best := s.index[max(i, 0)]
	if s.scannedOff <= from && s.scanned > best.pos {
		best = indexEntry{off: s.scannedOff, pos: s.scanned}
	}
	for _, h := range s.hints {
		if h.pos > best.pos && h.off <= from {
			best = h
		}
	}
	return best
}

func (s *segment) hintLocked(e indexEntry) {
	s.hints[s.nextHint] = e
	s.nextHint = (s.nextHint + 1) % numHints
}

// extendLocked records the index entries a reader gathered while following
// the chain from start to reached, if nobody extended the index meanwhile.
func (s *segment) extendLocked(start int64, entries []indexEntry, reached indexEntry) {
	if s.scanned != start || reached.pos <= start {
		return
	}
	s.index = append(s.index, entries...)
	s.scanned, s.scannedOff = reached.pos, reached.off
}

// createSegment creates the segment file for base with its header, makes it
// and its directory entry durable, and returns it with one reference (the
// writer's).
func createSegment(dir string, base int64) (_ *segment, err error) {
	s := newSegment(dir, base)
	// The segment gets its name only with its whole header on disk (a
	// temporary file linked to the name): a crash never leaves a named
	// segment with a torn header, which recovery could not tell from
	// corruption when it is not the last one (a ResetTo below the end
	// creates a segment that sorts before the old one).
	tmp := s.path + tmpSuffix
	_ = os.Remove(tmp) // a leftover of a crash
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("changelog: create segment: %w", err)
	}
	linked := false
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
			if linked {
				err = errors.Join(err, os.Remove(s.path))
			}
		}
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("changelog: remove %s: %w", tmp, rerr)
		}
	}()
	if _, err := f.WriteAt(encodeSegmentHeader(base), 0); err != nil {
		return nil, fmt.Errorf("changelog: write segment header: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("changelog: sync new segment: %w", err)
	}
	if err := os.Link(tmp, s.path); err != nil { // fails if the name exists
		return nil, fmt.Errorf("changelog: create segment: %w", err)
	}
	linked = true
	if err := os.Remove(tmp); err != nil {
		return nil, fmt.Errorf("changelog: remove %s: %w", tmp, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	s.f, s.refs = f, 1
	return s, nil
}

// tmpSuffix marks a segment being created (createSegment); recovery
// removes such files.
const tmpSuffix = ".tmp"

// syncDir makes the directory's entries (created, renamed, removed files)
// durable.
func syncDir(dir string) (err error) {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("changelog: sync directory: %w", err)
	}
	defer func() {
		if cerr := d.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("changelog: close directory: %w", cerr)
		}
	}()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("changelog: sync directory %s: %w", dir, err)
	}
	return nil
}
