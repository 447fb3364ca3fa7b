package kafkalog

import (
	"context"
	"errors"
	"fmt"
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
var ErrConflict = errors.New("kafkalog: another writer appended to the log first")

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
		startX   int64  // the log's start (logical)
		idx      []pos  // the valid entries from startK to tail.k
		stash    []entry
		empties  int // fetches in a row that returned nothing below the high watermark
	}
	lead leader
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
		if err != nil || done {
			return err
		}
	}
}

// applyLocked extends the chain with a fetch from Kafka offset from and
// reports whether the chain reached the high watermark.
func (l *kafkaLog) applyLocked(res fetchResult, from int64) (bool, error) {
	if res.logStart > l.mu.startK && l.mu.anchored {
		l.trimLocked(res.logStart)
		if !l.mu.anchored {
			return false, nil
		}
	}
	if !l.mu.anchored {
		if len(res.entries) == 0 {
			switch {
			case res.hw > res.logStart:
				return false, nil // nothing returned yet; fetch again
			case res.logStart > 0:
				return false, fmt.Errorf("%w: no record from Kafka offset %d on: records were deleted outside the tier", changelog.ErrCorrupt, res.logStart)
			}
			l.mu.anchored, l.mu.tail, l.mu.startK, l.mu.startX = true, cursor{}, 0, 0
			return true, nil
		}
		e := res.entries[0]
		l.mu.anchored, l.mu.startK, l.mu.startX = true, e.k, e.first
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
		x := l.mu.tail.x
		if l.mu.tail.step(e) {
			if e.marker {
				x = e.first
			}
			l.mu.idx = append(l.mu.idx, pos{k: e.k, x: x, n: len(e.recs)})
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

// trimLocked drops what lies below Kafka offset start.
func (l *kafkaLog) trimLocked(start int64) {
	i := sort.Search(len(l.mu.idx), func(i int) bool { return l.mu.idx[i].k >= start })
	if i == len(l.mu.idx) || l.mu.idx[i].k != start {
		l.mu.anchored, l.mu.startK, l.mu.idx, l.mu.stash = false, start, nil, nil
		return
	}
	l.mu.idx = append([]pos(nil), l.mu.idx[i:]...)
	l.mu.startK, l.mu.startX = start, l.mu.idx[0].x
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
	inside := from >= l.mu.startX && from < l.mu.tail.x
	l.mu.Unlock()
	if !inside {
		if err := l.sync(ctx); err != nil {
			return nil, l.wrap("read", err)
		}
	}
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
	idx := l.mu.idx
	i := sort.Search(len(idx), func(i int) bool { return idx[i].x+int64(idx[i].n) > from })
	if i == len(idx) || idx[i].n == 0 || idx[i].x > from {
		l.mu.Unlock()
		return nil, fmt.Errorf("kafkalog: read %s: offset %d not indexed", l.topic, from)
	}
	first := idx[i]
	stash := l.mu.stash
	l.mu.Unlock()

	var ents []entry
	if j := sort.Search(len(stash), func(j int) bool { return stash[j].k >= first.k }); j < len(stash) && stash[j].k == first.k {
		ents = stash[j:]
	} else {
		res, err := l.lead.fetch(ctx, l, first.k)
		if errors.Is(err, kerr.OffsetOutOfRange) {
			// Truncated by another handle since this one last looked.
			return nil, fmt.Errorf("%w: offset %d: %s was truncated past it", changelog.ErrOutOfRange, from, l.topic)
		}
		if err != nil {
			return nil, l.wrap("read", err)
		}
		// Keep only the chain's valid entries below the known tail.
		v := idx[i:]
		for _, e := range res.entries {
			for len(v) > 0 && v[0].k < e.k {
				v = v[1:]
			}
			if e.k >= tailK || len(v) == 0 {
				break
			}
			if v[0].k == e.k {
				ents = append(ents, e)
			}
		}
	}
	if len(ents) == 0 || ents[0].k != first.k {
		return nil, fmt.Errorf("%w: %s: Kafka offset %d of logical offset %d is gone", changelog.ErrOutOfRange, l.topic, first.k, from)
	}
	var out []changelog.Record
	size := 0
	for n, e := range ents {
		if e.marker {
			continue
		}
		if n > 0 && size+e.size() > maxBytes {
			break
		}
		skip := 0
		if n == 0 {
			skip = int(from - e.first)
		}
		for r, data := range e.recs[skip:] {
			out = append(out, changelog.Record{Offset: e.first + int64(skip+r), Data: data})
			size += len(data)
		}
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
	key, value := encodeBatch(x, records)
	if len(value) > int(l.p.maxMessage) {
		return 0, fmt.Errorf("%w: batch encodes to %d bytes, limit %d", changelog.ErrTooLarge, len(value), l.p.maxMessage)
	}
	if _, err := l.write(ctx, key, value, x, len(records)); err != nil {
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

// write produces one record meant to continue the chain at logical
// offset x (a batch of n records, or a marker if n == 0) and checks that
// it did: ErrConflict if another writer's record got there first. It
// returns the record's Kafka offset.
func (l *kafkaLog) write(ctx context.Context, key, value []byte, x int64, n int) (int64, error) {
	r := &kgo.Record{Topic: l.topic, Partition: 0, Key: key, Value: value}
	if err := l.p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		l.mu.Lock()
		l.mu.dirty = true
		l.mu.Unlock()
		return 0, err
	}
	l.mu.Lock()
	if l.mu.anchored && l.mu.tail.k == r.Offset {
		// Nobody wrote in between: the record continues the chain.
		e := entry{k: r.Offset, marker: n == 0, first: x}
		if n > 0 {
			e.recs = make([][]byte, n) // only the count matters to the chain
		}
		if !l.mu.tail.step(e) {
			l.mu.Unlock()
			return 0, fmt.Errorf("kafkalog: internal: own record at Kafka offset %d does not continue the chain", r.Offset)
		}
		l.mu.idx = append(l.mu.idx, pos{k: r.Offset, x: x, n: n})
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
	i := sort.Search(len(l.mu.idx), func(i int) bool { return l.mu.idx[i].k >= r.Offset })
	if i < len(l.mu.idx) && l.mu.idx[i].k == r.Offset {
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
		if _, err := l.write(ctx, key, value, end, 0); err != nil {
			if errors.Is(err, ErrConflict) {
				return nil // the log grew meanwhile; what stays is allowed to
			}
			return l.wrap("truncate", err)
		}
	}
	l.mu.Lock()
	idx := l.mu.idx
	i := sort.Search(len(idx), func(i int) bool { return idx[i].x+int64(idx[i].n) > offset || (idx[i].n == 0 && idx[i].x >= offset) })
	var cut int64 = -1
	if i < len(idx) {
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
		l.trimLocked(k)
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
	key, value := encodeMarker(offset)
	k, err := l.write(ctx, key, value, offset, 0)
	if err != nil {
		return l.wrap("reset", err)
	}
	return l.cut(ctx, k)
}
