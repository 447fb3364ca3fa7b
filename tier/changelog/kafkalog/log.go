package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/thawdb/thaw/tier/changelog"
)

// ErrConflict: another writer's record took the place an Append, a reset
// or an emptying truncation was meant for (two leaders of one bucket for a
// moment). The record this handle wrote is not part of the log: no reader
// ever returns it. The handle knows the log's new end; a retry appends
// after it.
// It wraps changelog.ErrConflict.
var ErrConflict = fmt.Errorf("kafkalog: %w", changelog.ErrConflict)

// maxIdx bounds a handle's index of valid entries: beyond it the older
// half is thinned to every other entry, so that the index stays a few
// hundred KiB however much the log retains; a read or truncation between
// two indexed entries walks from the one below. A variable for tests.
var maxIdx = 1 << 12

// maxVerdicts bounds the verdicts a handle keeps while its write is in
// flight (see judge): the records other writers add meanwhile. Beyond it
// the write's own verdict may be unknown (an error that is not
// ErrConflict).
const maxVerdicts = 1 << 14

// produced, when set (by tests), runs after a write's record is in Kafka
// and before the handle checks it continued the chain.
var produced func()

// maxEmptyFetches bounds the fetches in a row that return no record
// although the partition's high watermark lies past the fetch offset.
const maxEmptyFetches = 100

// pos is a valid entry of the chain: a batch of n records from logical
// offset x, or (n == 0) a marker making x the next offset.
type pos struct {
	k, x int64
	n    int
}

type kafkaLog struct {
	p     *Provider
	id    changelog.BucketLogID
	topic string

	ctx    context.Context // done when the handle closes
	cancel context.CancelFunc

	writeMu sync.Mutex // Append, TruncateBefore and ResetTo, one at a time

	mu struct {
		sync.Mutex
		closed   bool
		anchored bool   // tail, startK, startX and idx describe the log
		dirty    bool   // an Append failed: its record may have landed
		tail     cursor // the chain's end as last fetched
		startK   int64  // first retained Kafka offset
		startX   int64  // the log's start (logical), if startOK
		startOK  bool   // startX is known (see resolveStart)
		idx      []pos  // valid entries from startK to tail.k, thinned (addIdxLocked)
		stash    []entry
		empties  int // fetches in a row that returned nothing below the high watermark
		judge    judge
	}
	lead leader
}

// judge records, while a write is in flight, whether each record the
// chain walks at or past from continued it: the write looks its own
// record's verdict up once it knows the record's Kafka offset (k) and has
// synced. The index cannot answer that alone: it may have thinned the
// entry away, or a truncation by another handle may have re-anchored the
// chain past it (then the verdict stays unknown).
type judge struct {
	on       bool
	from     int64          // the chain's end when the write began
	k        int64          // the write's record, once produced; else -1
	verdicts map[int64]bool // Kafka offset → continued the chain
	overflow bool           // verdicts reached maxVerdicts
}

// judgeLocked records the verdict of the record at Kafka offset k.
func (l *kafkaLog) judgeLocked(k int64, valid bool) {
	j := &l.mu.judge
	if !j.on || k < j.from || (j.k >= 0 && k != j.k) {
		return
	}
	if _, ok := j.verdicts[k]; !ok && len(j.verdicts) >= maxVerdicts {
		j.overflow = true
		return
	}
	if j.verdicts == nil {
		j.verdicts = map[int64]bool{} // only a write that was overtaken walks
	}
	j.verdicts[k] = valid
}

func newLog(p *Provider, id changelog.BucketLogID, topic string) *kafkaLog {
	l := &kafkaLog{p: p, id: id, topic: topic}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// run derives a context that ends with ctx or with the handle.
func (l *kafkaLog) run(ctx context.Context) (context.Context, context.CancelFunc, error) {
	l.mu.Lock()
	closed := l.mu.closed
	l.mu.Unlock()
	l.p.mu.Lock()
	closed = closed || l.p.mu.closed
	l.p.mu.Unlock()
	if closed {
		return nil, nil, changelog.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ctx, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// closedErr turns a failure caused by Close into changelog.ErrClosed.
func (l *kafkaLog) closedErr(err error) error {
	if err != nil && (l.ctx.Err() != nil || l.p.closed()) {
		return changelog.ErrClosed
	}
	return err
}

func (l *kafkaLog) wrap(op string, err error) error {
	if err = l.closedErr(err); err == nil || errors.Is(err, changelog.ErrClosed) {
		return err
	}
	return fmt.Errorf("kafkalog: %s %s: %w", op, l.topic, err)
}

// Close releases the handle; blocked Waits return changelog.ErrClosed.
func (l *kafkaLog) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return changelog.ErrClosed
	}
	l.mu.closed = true
	l.mu.stash, l.mu.idx = nil, nil
	l.mu.Unlock()
	l.cancel()
	l.p.poll.forget(l)
	l.p.release(l.id)
	return nil
}

// sync brings the chain up to Kafka's high watermark.
func (l *kafkaLog) sync(ctx context.Context) error {
	for {
		l.mu.Lock()
		anchored, from := l.mu.anchored, l.mu.tail.k
		if !anchored {
			from = l.mu.startK
		}
		l.mu.Unlock()
		res, err := l.lead.fetch(ctx, l, from)
		if errors.Is(err, kerr.OffsetOutOfRange) {
			// Truncated by another handle: start over at the log's start.
			start, lerr := l.lead.listStart(ctx, l)
			if lerr != nil {
				return lerr
			}
			l.mu.Lock()
			l.mu.anchored, l.mu.startK, l.mu.idx, l.mu.stash = false, start, nil, nil
			l.mu.Unlock()
			continue
		}
		if err != nil {
			return err
		}
		l.mu.Lock()
		if l.mu.anchored != anchored || (anchored && l.mu.tail.k != from) {
			l.mu.Unlock() // another sync moved the chain meanwhile
			continue
		}
		done, err := l.applyLocked(res, from)
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if done {
			return l.resolveStart(ctx)
		}
	}
}

// applyLocked extends the chain with a fetch from Kafka offset from and
// reports whether the chain reached the high watermark.
func (l *kafkaLog) applyLocked(res fetchResult, from int64) (bool, error) {
	if res.logStart > l.mu.startK && l.mu.anchored {
		l.dropBelowLocked(res.logStart)
	}
	if !l.mu.anchored {
		if len(res.entries) == 0 {
			switch {
			case res.hw > res.logStart:
				// Nothing returned yet; fetch again, but not for ever.
				if l.mu.empties++; l.mu.empties > maxEmptyFetches {
					l.mu.empties = 0
					return false, fmt.Errorf("no records from Kafka offset %d although the high watermark is %d", res.logStart, res.hw)
				}
				return false, nil
			case res.logStart > 0:
				return false, fmt.Errorf("%w: no record from Kafka offset %d on: records were deleted outside the tier", changelog.ErrCorrupt, res.logStart)
			}
			l.mu.anchored, l.mu.tail, l.mu.startK, l.mu.startX, l.mu.startOK = true, cursor{}, 0, 0, true
			return true, nil
		}
		e := res.entries[0]
		l.judgeLocked(e.k, true) // the first retained record is valid by construction
		l.mu.anchored, l.mu.startK, l.mu.startX, l.mu.startOK = true, e.k, e.first, true
		l.mu.tail = anchor(e)
		// New slices, never the old arrays: a Read may still hold them
		// (appending past their length is safe, overwriting is not).
		l.mu.idx = []pos{{k: e.k, x: e.first, n: len(e.recs)}}
		l.mu.stash = []entry{e}
		res.entries = res.entries[1:]
	} else {
		l.mu.stash = nil
	}
	for _, e := range res.entries {
		if e.k < l.mu.tail.k {
			continue
		}
		valid := l.stepLocked(e)
		l.judgeLocked(e.k, valid)
		if valid {
			l.mu.stash = append(l.mu.stash, e)
		}
	}
	if res.hw > l.mu.tail.k && len(res.entries) == 0 && from == l.mu.tail.k {
		// Kafka returned nothing below its high watermark; fetch again,
		// but not forever.
		if l.mu.empties++; l.mu.empties > maxEmptyFetches {
			l.mu.empties = 0
			return false, fmt.Errorf("no records from Kafka offset %d although the high watermark is %d", from, res.hw)
		}
		return false, nil
	}
	l.mu.empties = 0
	return l.mu.tail.k >= res.hw, nil
}

// stepLocked walks the chain past e (at its end) and reports whether e
// continued it; a valid entry is indexed. A marker that moves the end of
// an empty log up moves its start along: the log stays empty (a reset cut
// short before its deletion, or read between the two, claims no offsets
// below it).
func (l *kafkaLog) stepLocked(e entry) bool {
	x := l.mu.tail.x
	empty := l.mu.startOK && l.mu.startX == x
	if !l.mu.tail.step(e) {
		return false
	}
	if e.marker {
		x = e.first
		if empty {
			l.mu.startX = x
		}
	}
	l.addIdxLocked(pos{k: e.k, x: x, n: len(e.recs)})
	return true
}

// dropBelowLocked forgets what lies below Kafka offset start, the log's
// new first record (valid by construction). If the index does not hold
// it, the log's logical start is looked up by the next sync.
func (l *kafkaLog) dropBelowLocked(start int64) {
	if start > l.mu.tail.k {
		// Past everything this handle knows: start over.
		l.mu.anchored, l.mu.startK, l.mu.idx, l.mu.stash = false, start, nil, nil
		return
	}
	i := sort.Search(len(l.mu.idx), func(i int) bool { return l.mu.idx[i].k >= start })
	// A new slice, never the old array: a Read may still hold it.
	l.mu.idx = append([]pos(nil), l.mu.idx[i:]...)
	l.mu.startK = start
	l.mu.startOK = len(l.mu.idx) > 0 && l.mu.idx[0].k == start
	if l.mu.startOK {
		l.mu.startX = l.mu.idx[0].x
	}
}

// addIdxLocked indexes a valid entry, thinning the older half of the
// index when it outgrows maxIdx (see maxIdx). The first entry, the
// log's start, stays.
func (l *kafkaLog) addIdxLocked(p pos) {
	l.mu.idx = append(l.mu.idx, p)
	if len(l.mu.idx) <= maxIdx {
		return
	}
	half := len(l.mu.idx) / 2
	thin := make([]pos, 0, maxIdx)
	thin = append(thin, l.mu.idx[0])
	for i := 2; i < half; i += 2 {
		thin = append(thin, l.mu.idx[i])
	}
	l.mu.idx = append(thin, l.mu.idx[half:]...)
}

// resolveStart reads the log's first record when a truncation by another
// handle left its logical offset unknown.
func (l *kafkaLog) resolveStart(ctx context.Context) error {
	for {
		l.mu.Lock()
		ok, k := l.mu.startOK || !l.mu.anchored, l.mu.startK
		l.mu.Unlock()
		if ok {
			return nil
		}
		res, err := l.lead.fetch(ctx, l, k)
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return l.sync(ctx) // truncated further meanwhile
		}
		if err != nil {
			return err
		}
		if len(res.entries) == 0 || res.entries[0].k != k {
			return fmt.Errorf("%w: the first retained record, at Kafka offset %d, is missing", changelog.ErrCorrupt, k)
		}
		l.mu.Lock()
		if l.mu.anchored && !l.mu.startOK && l.mu.startK == k {
			e := res.entries[0]
			l.mu.startX, l.mu.startOK = e.first, true
			// Index the start, as the first entry always is: a thinned
			// index may hold nothing between it and the next entry kept,
			// and Read found no entry to walk from for those offsets.
			if len(l.mu.idx) == 0 || l.mu.idx[0].k > k {
				l.mu.idx = append([]pos{{k: k, x: e.first, n: len(e.recs)}}, l.mu.idx...)
			}
		}
		l.mu.Unlock()
	}
}

func (l *kafkaLog) ensure(ctx context.Context) error {
	l.mu.Lock()
	ok := l.mu.anchored
	l.mu.Unlock()
	if ok {
		return nil
	}
	return l.sync(ctx)
}

// Offsets fetches what was appended since the last call and returns the
// log's start and end.
func (l *kafkaLog) Offsets(ctx context.Context) (start, end int64, err error) {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	if err := l.sync(ctx); err != nil {
		return 0, 0, l.wrap("offsets of", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.startX, l.mu.tail.x, nil
}

// Wait blocks until the log's end is past offset. Between its fetches it
// waits for the provider's poller to see the partition grow.
func (l *kafkaLog) Wait(ctx context.Context, offset int64) (int64, error) {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	fail := func(err error) (int64, error) {
		switch {
		case l.ctx.Err() != nil || l.p.closed():
			return 0, changelog.ErrClosed
		case ctx.Err() != nil:
			return 0, ctx.Err()
		}
		return 0, l.wrap("wait on", err)
	}
	for {
		if err := l.sync(ctx); err != nil {
			return fail(err)
		}
		l.mu.Lock()
		end, tailK := l.mu.tail.x, l.mu.tail.k
		l.mu.Unlock()
		if end > offset {
			return end, nil
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-l.p.poll.register(l, tailK):
			if l.p.closed() {
				return 0, changelog.ErrClosed
			}
		}
	}
}

// Read returns the records from logical offset from on: the rest of the
// batch holding from, then whole batches within maxBytes.
func (l *kafkaLog) Read(ctx context.Context, from int64, maxBytes int) ([]changelog.Record, error) {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := l.ensure(ctx); err != nil {
		return nil, l.wrap("read", err)
	}
	l.mu.Lock()
	inside := l.mu.startOK && from >= l.mu.startX && from < l.mu.tail.x
	l.mu.Unlock()
	if !inside {
		if err := l.sync(ctx); err != nil {
			return nil, l.wrap("read", err)
		}
	}
	out, err := l.readChain(ctx, from, maxBytes)
	if errors.Is(err, errTruncatedUnder) {
		// Another handle truncated the log since this one last looked, and
		// the index entry the walk started from is gone: learn the new
		// start (indexed once resolved) and walk again from there.
		if err := l.sync(ctx); err != nil {
			return nil, l.wrap("read", err)
		}
		out, err = l.readChain(ctx, from, maxBytes)
	}
	if errors.Is(err, errTruncatedUnder) {
		return nil, fmt.Errorf("%w: offset %d: %s was truncated past it", changelog.ErrOutOfRange, from, l.topic)
	}
	return out, err
}

// errTruncatedUnder: a read's walk of the chain started at a Kafka offset
// that is no longer retained.
var errTruncatedUnder = errors.New("kafkalog: truncated under the read")

// readChain is Read after the handle's view covers from.
func (l *kafkaLog) readChain(ctx context.Context, from int64, maxBytes int) ([]changelog.Record, error) {
	l.mu.Lock()
	start, end, tailK := l.mu.startX, l.mu.tail.x, l.mu.tail.k
	if from < start || from > end {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: offset %d not in [%d, %d]", changelog.ErrOutOfRange, from, start, end)
	}
	if from == end {
		l.mu.Unlock()
		return nil, nil
	}
	// Walk the chain from the last indexed entry starting at or below from.
	idx := l.mu.idx
	i := sort.Search(len(idx), func(i int) bool { return idx[i].x > from }) - 1
	if i < 0 {
		// The start is indexed once known; say so if that ever fails, as
		// records the caller must fetch elsewhere.
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: read %s: offset %d below the index", changelog.ErrOutOfRange, l.topic, from)
	}
	at := cursor{k: idx[i].k, x: idx[i].x}
	stash := l.mu.stash
	l.mu.Unlock()

	var out []changelog.Record
	size, started := 0, false
	for at.k < tailK {
		var ents []entry
		if j := sort.Search(len(stash), func(j int) bool { return stash[j].k >= at.k }); j < len(stash) && stash[j].k == at.k {
			ents, stash = stash[j:], nil // the last sync's valid entries: no fetch
		} else {
			res, err := l.lead.fetch(ctx, l, at.k)
			if errors.Is(err, kerr.OffsetOutOfRange) {
				return nil, errTruncatedUnder
			}
			if err != nil {
				return nil, l.wrap("read", err)
			}
			if len(res.entries) == 0 {
				return nil, fmt.Errorf("kafkalog: read %s: no records from Kafka offset %d below %d", l.topic, at.k, tailK)
			}
			ents = res.entries
		}
		for _, e := range ents {
			if e.k < at.k {
				continue
			}
			if e.k >= tailK {
				return out, nil
			}
			x := at.x
			if !at.step(e) || e.marker {
				continue
			}
			n := int64(len(e.recs))
			switch {
			case !started && from >= x+n:
				continue // before from
			case !started:
				started = true
				for r, data := range e.recs[from-x:] {
					out = append(out, changelog.Record{Offset: from + int64(r), Data: data})
					size += len(data)
				}
				continue
			case size+e.size() > maxBytes:
				return out, nil
			}
			for r, data := range e.recs {
				out = append(out, changelog.Record{Offset: x + int64(r), Data: data})
				size += len(data)
			}
		}
		if started && size >= maxBytes {
			return out, nil
		}
	}
	if !started {
		return nil, fmt.Errorf("%w: %s: offset %d not found below Kafka offset %d", changelog.ErrOutOfRange, l.topic, from, tailK)
	}
	return out, nil
}

// Append writes records as one Kafka record after the log's end.
func (l *kafkaLog) Append(ctx context.Context, records [][]byte) (int64, error) {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	payload := 0
	for _, r := range records {
		payload += len(r)
	}
	if int64(payload) > l.p.cfg.MaxBatchBytes {
		return 0, fmt.Errorf("%w: batch of %d bytes, limit %d", changelog.ErrTooLarge, payload, l.p.cfg.MaxBatchBytes)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.freshen(ctx); err != nil {
		return 0, l.wrap("append to", err)
	}
	if len(records) == 0 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.tail.x, nil
	}
	l.mu.Lock()
	x := l.mu.tail.x
	l.mu.Unlock()
	if x > math.MaxInt64-int64(len(records)) {
		// Every reader would refuse the record (decodeEntry).
		return 0, fmt.Errorf("%w: %d records after offset %d overflow the offsets", changelog.ErrTooLarge, len(records), x)
	}
	key, value := encodeBatch(x, records)
	if len(value) > int(l.p.maxMessage) {
		return 0, fmt.Errorf("%w: batch encodes to %d bytes, limit %d", changelog.ErrTooLarge, len(value), l.p.maxMessage)
	}
	if _, err := l.write(ctx, key, value, entry{first: x, recs: records}); err != nil {
		return 0, l.wrap("append to", err)
	}
	return x, nil
}

// freshen syncs a handle that has not read the log yet or whose last
// write failed.
func (l *kafkaLog) freshen(ctx context.Context) error {
	l.mu.Lock()
	need := !l.mu.anchored || l.mu.dirty
	l.mu.Unlock()
	if !need {
		return nil
	}
	if err := l.sync(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	l.mu.dirty = false
	l.mu.Unlock()
	return nil
}

// write produces one record, want encoded as key and value (want.k is
// set here), meant to continue the chain, and checks that it did:
// ErrConflict if another writer's record got there first. It returns the
// record's Kafka offset.
func (l *kafkaLog) write(ctx context.Context, key, value []byte, want entry) (int64, error) {
	x := want.first
	r := &kgo.Record{Topic: l.topic, Partition: 0, Key: key, Value: value}
	l.mu.Lock()
	from := l.mu.startK
	if l.mu.anchored {
		from = l.mu.tail.k
	}
	l.mu.judge = judge{on: true, from: from, k: -1}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.mu.judge = judge{}
		l.mu.Unlock()
	}()
	if err := l.p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		l.mu.Lock()
		l.mu.dirty = true
		l.mu.Unlock()
		return 0, err
	}
	if produced != nil {
		produced()
	}
	l.mu.Lock()
	// Only the own record's verdict matters now.
	l.mu.judge.k = r.Offset
	for k := range l.mu.judge.verdicts {
		if k != r.Offset {
			delete(l.mu.judge.verdicts, k)
		}
	}
	if l.mu.anchored && l.mu.tail.k == r.Offset {
		// The chain has reached the own record without walking it: walk
		// it here, by the rule every reader applies. Usually nobody wrote
		// in between; but another call on this handle (a Wait, Read or
		// Offsets) may have synced past other writers' records while the
		// produce was out, so the record may not continue the chain.
		want.k = r.Offset
		if !l.stepLocked(want) {
			end := l.mu.tail.x
			l.mu.Unlock()
			l.p.cfg.Logger.Warn("changelog write lost to another writer", "topic", l.topic, "kafka_offset", r.Offset, "offset", x, "end", end)
			return 0, fmt.Errorf("%w: record at Kafka offset %d meant for logical offset %d; the log now ends at %d", ErrConflict, r.Offset, x, end)
		}
		l.mu.Unlock()
		return r.Offset, nil
	}
	l.mu.Unlock()
	if err := l.sync(ctx); err != nil {
		l.mu.Lock()
		l.mu.dirty = true
		l.mu.Unlock()
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	valid, known := l.mu.judge.verdicts[r.Offset]
	if !known {
		// The index holds valid entries only (it may have thinned this one
		// away).
		i := sort.Search(len(l.mu.idx), func(i int) bool { return l.mu.idx[i].k >= r.Offset })
		if i < len(l.mu.idx) && l.mu.idx[i].k == r.Offset {
			return r.Offset, nil
		}
		// The chain never walked the record: a truncation by another
		// handle deleted it first (or other writers' records filled the
		// verdicts). It may have continued the log; which, cannot be
		// told now.
		why := "was deleted by another handle's truncation before this handle could tell"
		if l.mu.judge.overflow {
			why = fmt.Sprintf("came after more than %d records of other writers; this handle cannot tell", maxVerdicts)
		}
		l.p.cfg.Logger.Warn("changelog write outcome unknown", "topic", l.topic, "kafka_offset", r.Offset, "offset", x, "end", l.mu.tail.x)
		return 0, fmt.Errorf("the record written at Kafka offset %d (meant for logical offset %d) %s whether it continued the log: the write's outcome is unknown", r.Offset, x, why)
	}
	if valid {
		return r.Offset, nil
	}
	l.p.cfg.Logger.Warn("changelog write lost to another writer", "topic", l.topic, "kafka_offset", r.Offset, "offset", x, "end", l.mu.tail.x)
	return 0, fmt.Errorf("%w: record at Kafka offset %d meant for logical offset %d; the log now ends at %d", ErrConflict, r.Offset, x, l.mu.tail.x)
}

// TruncateBefore deletes the Kafka records below the batch that holds
// offset; emptying the log (offset == end) first writes a marker that
// keeps its end.
func (l *kafkaLog) TruncateBefore(ctx context.Context, offset int64) error {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return err
	}
	defer done()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.sync(ctx); err != nil {
		return l.wrap("truncate", err)
	}
	l.mu.Lock()
	start, end := l.mu.startX, l.mu.tail.x
	l.mu.Unlock()
	switch {
	case offset <= start:
		return nil
	case offset > end:
		return fmt.Errorf("%w: truncate before %d: log holds [%d, %d]", changelog.ErrOutOfRange, offset, start, end)
	case offset == end:
		key, value := encodeMarker(end)
		if _, err := l.write(ctx, key, value, entry{marker: true, first: end}); err != nil {
			if errors.Is(err, ErrConflict) {
				return nil // the log grew meanwhile; what stays is allowed to
			}
			return l.wrap("truncate", err)
		}
	}
	// Cut at the last indexed entry starting at or below offset: every
	// record from offset on stays, some below it may too.
	l.mu.Lock()
	idx := l.mu.idx
	i := sort.Search(len(idx), func(i int) bool { return idx[i].x > offset }) - 1
	var cut int64 = -1
	if i >= 0 {
		cut = idx[i].k
	}
	l.mu.Unlock()
	if cut < 0 {
		return fmt.Errorf("kafkalog: truncate %s before %d: offset not indexed", l.topic, offset)
	}
	return l.cut(ctx, cut)
}

// cut deletes the Kafka records below k, a valid entry.
func (l *kafkaLog) cut(ctx context.Context, k int64) error {
	if err := l.lead.deleteRecords(ctx, l, k); err != nil {
		return l.wrap("truncate", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.anchored && k >= l.mu.startK {
		l.dropBelowLocked(k)
	}
	return nil
}

// ResetTo makes an empty log continue at offset: a marker, then the
// records before it are deleted. Offsets are never reused: offset below
// the end is changelog.ErrOutOfRange.
func (l *kafkaLog) ResetTo(ctx context.Context, offset int64) error {
	ctx, done, err := l.run(ctx)
	if err != nil {
		return err
	}
	defer done()
	if offset < 0 {
		return fmt.Errorf("%w: reset to %d", changelog.ErrOutOfRange, offset)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.sync(ctx); err != nil {
		return l.wrap("reset", err)
	}
	l.mu.Lock()
	start, end := l.mu.startX, l.mu.tail.x
	l.mu.Unlock()
	switch {
	case start != end:
		return fmt.Errorf("%w: %s holds [%d, %d)", changelog.ErrNotEmpty, l.topic, start, end)
	case offset < end:
		return fmt.Errorf("%w: reset to %d below the end %d: a Kafka changelog never reuses offsets", changelog.ErrOutOfRange, offset, end)
	case offset == end:
		return nil
	}
	// A reset marker, valid only where the log still ends at end: a
	// batch another writer appends meanwhile wins (ErrConflict, nothing
	// cut), where a plain marker would skip past that acknowledged batch
	// and the cut would delete it.
	key, value := encodeReset(offset, end)
	k, err := l.write(ctx, key, value, entry{marker: true, reset: true, first: offset, from: end})
	if err != nil {
		return l.wrap("reset", err)
	}
	return l.cut(ctx, k)
}
