package snapshotbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/s2"
)

// maxMergeRuns bounds the spilled runs one merge reads at once, whatever
// the budget: each holds up to spillParts open files.
var maxMergeRuns = 512

// checkEvery is how many bytes a merge of runs writes between looks at
// its context.
const checkEvery = 4 << 20

// minSrcBuf is the least read buffer of a run's source whose frames decode
// to at most frame bytes: a page (fewer reads would not pay), and at least
// one stored frame, header and compressed bytes (S2's bound), so that
// reading a frame never needs a larger buffer than the one the budget
// holds (runSource.fill would take one from the heap).
func minSrcBuf(frame int) int { return max(4<<10, frameHeader+s2.MaxEncodedLen(frame)) }

// mergeFanIn is how many spilled runs the final merge may read at once: a
// source per run, each with a read buffer of at least minSrcBuf and a
// decoded frame, within the memory the in-memory chunks leave (and at most
// maxMergeRuns); never below 2.
// A frame is counted as at least minFrame: runs merged from small bucket
// sections write full frames.
func (b *Builder) mergeFanIn(mem []*chunk, minFrame int) int {
	frame := minFrame
	for _, r := range b.sp.runs {
		frame = max(frame, r.maxFrame)
	}
	return int(max(min(mergeMem(b.opts.MemoryBudget, mem)/int64(minSrcBuf(frame)+frame), int64(maxMergeRuns)), 2))
}

// mergeMem is the budget the in-memory chunks leave to a merge's sources.
func mergeMem(budget int64, mem []*chunk) int64 {
	for _, c := range mem {
		budget -= c.reserved
	}
	return max(budget, 1)
}

// compactRuns merges spilled runs, consecutive in input order, into larger
// ones until the final merge can read every run at once (mergeFanIn):
// without it, an input of many budgets' worth spilled so many runs that
// the merge's buffers went past the budget (a run's source holds at least
// one decoded frame) and its open files grew with the input. Each merged
// run takes the newest seq of its group, so it keeps its place among the
// others; duplicates it drops are counted as the final merge would count
// them. Most builds spill far fewer runs and skip this.
func (b *Builder) compactRuns(ctx context.Context, mem []*chunk) error {
	if len(b.sp.runs) <= b.mergeFanIn(mem, 0) {
		return nil
	}
	// Merged runs' frames grow to the build's frame size (their sections
	// are larger than the spilled runs'): the final merge, and merges of
	// merged runs, must fit with frames that large.
	fan := b.mergeFanIn(mem, frameSizeFor(b.opts.MemoryBudget))
	avail := mergeMem(b.opts.MemoryBudget, mem)
	// One writer and record buffer for every merge: with large records
	// each is a frame's size, and a merge of a few runs at a time would
	// otherwise make garbage of them run after run.
	mw := &runMerge{w: newFrameWriter(nil, frameSizeFor(b.opts.MemoryBudget))}
	b.log.Info("merging spilled runs before the final merge", "runs", len(b.sp.runs), "fan_in", fan)
	i := 0
	for len(b.sp.runs) > fan {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		if i >= len(b.sp.runs)-1 {
			i = 0 // a pass over the runs did not do: merged runs again
		}
		// Merging g runs removes g-1: as few as needed, as many as fit.
		g := min(fan, len(b.sp.runs)-fan+1, len(b.sp.runs)-i)
		group := b.sp.runs[i : i+g]
		merged, err := b.mergeRuns(ctx, group, avail, mw)
		if err != nil {
			return err
		}
		var errs []error
		for _, r := range group {
			errs = append(errs, r.remove())
		}
		b.sp.runs = slices.Replace(b.sp.runs, i, i+g, merged)
		b.compacted.Add(int64(g))
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("snapshotbuild: remove merged runs: %w", err)
		}
		i++
	}
	return nil
}

// mergeRuns merges group (consecutive runs, oldest first) into one run,
// bucket by bucket, keeping the newest pair of each key. Its sources'
// buffers are charged to the budget, at most avail (what is free: more
// would wait for ever; only a budget too small for two sources goes over).
func (b *Builder) mergeRuns(ctx context.Context, group []*run, avail int64, mw *runMerge) (_ *run, err error) {
	frame := frameSizeFor(b.opts.MemoryBudget)
	for _, r := range group {
		frame = max(frame, r.maxFrame)
	}
	need := min(int64(len(group))*int64(minSrcBuf(frame)+frame), avail)
	if err := b.bud.acquire(ctx, need); err != nil {
		return nil, err
	}
	defer b.bud.release(need)
	defer b.timed(timerSortSpill, time.Now())

	seq := group[len(group)-1].seq
	path := filepath.Join(b.tmp, fmt.Sprintf("run-%06d-merged-%d.0", seq, b.compacted.Load()))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("snapshotbuild: merge spilled runs: %w", err)
	}
	out := &run{seq: seq, files: []*os.File{f}, sections: make([][]section, b.nb)}
	defer func() {
		if err != nil {
			err = errors.Join(err, out.remove())
		}
	}()
	w := mw.w
	w.reset(f)
	for bucket := range b.nb {
		n, err := b.mergeRunsBucket(ctx, group, bucket, w, &mw.rec)
		if err != nil {
			return nil, err
		}
		if n.count > 0 {
			out.sections[bucket] = []section{{f: f, off: n.start, size: w.offset() - n.start, count: n.count}}
		}
	}
	if err := w.flush(); err != nil {
		return nil, fmt.Errorf("snapshotbuild: merge spilled runs: %w", err)
	}
	out.size, out.rawSize, out.maxFrame = w.off, w.rawSize, w.maxFrame
	return out, nil
}

// runMerge is what compactRuns's merges share: the run writer and a
// record buffer.
type runMerge struct {
	w   *frameWriter
	rec []byte
}

// mergedSection is where mergeRunsBucket wrote a bucket's pairs.
type mergedSection struct {
	start, count int64
}

// mergeRunsBucket writes bucket's pairs of group, deduplicated, to w as one
// section (its frames end with it).
func (b *Builder) mergeRunsBucket(ctx context.Context, group []*run, bucket int, w *frameWriter, rec *[]byte) (mergedSection, error) {
	sec := mergedSection{start: w.offset()}
	if err := context.Cause(ctx); err != nil {
		return sec, err
	}
	var srcs []source
	var prios []int
	var runSrcs []*runSource
	defer func() {
		for _, s := range runSrcs {
			s.release()
		}
	}()
	for _, r := range group {
		if r.count(bucket) == 0 {
			continue
		}
		s, err := newRunSource(r, bucket, minSrcBuf(r.maxFrame))
		if err != nil {
			return sec, err
		}
		s.discard = true // read once: its pages go as they are read
		runSrcs = append(runSrcs, s)
		srcs = append(srcs, s)
		prios = append(prios, r.seq)
	}
	if len(srcs) == 0 {
		return sec, nil
	}
	m := newMerger(srcs, prios)
	var prev []byte
	have := false
	checked := w.offset()
	for {
		k, v, ok := m.next()
		if !ok {
			break
		}
		if have && bytes.Equal(k, prev) {
			if b.opts.Duplicates == DuplicatesError {
				return sec, b.duplicateError(bucket, bytes.Clone(k))
			}
			b.sp.dups[bucket]++
			continue
		}
		prev = append(prev[:0], k...)
		have = true
		*rec = append(append((*rec)[:0], k...), v...)
		if err := w.add(uint32(len(k)), uint32(len(v)), *rec); err != nil {
			return sec, fmt.Errorf("snapshotbuild: merge spilled runs: %w", err)
		}
		sec.count++
		if off := w.offset(); off-checked >= checkEvery {
			checked = off
			if err := context.Cause(ctx); err != nil {
				return sec, err
			}
		}
	}
	if m.err != nil {
		return sec, m.err
	}
	if err := w.endFrame(); err != nil {
		return sec, fmt.Errorf("snapshotbuild: merge spilled runs: %w", err)
	}
	return sec, nil
}

// remove closes the run's files and deletes them.
func (r *run) remove() error {
	names := make([]string, 0, len(r.files))
	for _, f := range r.files {
		if f != nil {
			names = append(names, f.Name())
		}
	}
	errs := []error{r.close()}
	for _, n := range names {
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
