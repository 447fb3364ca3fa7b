package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/tier/changelog"
)

// ctxCheckEvery is how many rows a read handles between ctx checks.
const ctxCheckEvery = 1024

// Replica is one bucket replica: a Pebble database fed by the bucket's
// changelog. It is safe for concurrent use; see doc.go and DESIGN.md.
type Replica struct {
	h            *Host
	id           ReplicaID
	logID        changelog.BucketLogID
	dir          string
	memTableSize uint64
	db           *pebble.DB    // set by Open, then fixed
	log          changelog.Log // set by Open, then fixed
	bg           *bgErrors     // db's background errors

	// lifecycle is read-held by every use of db and log, write-held by Close.
	lifecycle sync.RWMutex
	closed    bool // guarded by lifecycle
	// closing counts iterators being closed in the background
	// (closeInBackground); Close waits for them before closing db.
	closing sync.WaitGroup

	// mu is the apply lock: one goroutine at a time applies records and
	// moves meta, which always equals the state record in db.
	mu struct {
		sync.Mutex
		meta replicaMeta
	}
	applied atomic.Int64 // mu.meta.next - 1, for lock-free reads
	rows    atomic.Int64 // mu.meta.rows, likewise

	// snapMu runs one Snapshot at a time and guards sums: the size and
	// SHA-256 of SST files already hashed or downloaded, by local path.
	// Pebble never reuses a file number within a database, and SST files
	// are immutable, so an entry stays valid while the file exists.
	snapMu sync.Mutex
	sums   map[string]fileSum

	// views guards the set of open Views (each guards its own state).
	views struct {
		sync.Mutex
		open map[*View]struct{}
	}
}

// ID returns the replica's id.
func (r *Replica) ID() ReplicaID { return r.id }

// AppliedOffset returns the offset of the last changelog record applied,
// -1 if none.
func (r *Replica) AppliedOffset() int64 { return r.applied.Load() }

// RowCount returns the number of rows in the replica.
func (r *Replica) RowCount() int64 { return r.rows.Load() }

// MemTableSize returns the memtable size the replica was opened with.
func (r *Replica) MemTableSize() uint64 { return r.memTableSize }

// Write is the leader's write path. It validates muts against the host's
// request limits, appends them to the changelog as one batch (one record
// per mutation; durable when Append returns), applies them to Pebble and
// returns the offset of the first; mutation i got offset first+i. An
// invalid or oversized batch writes nothing. Once the append succeeded, ctx
// no longer stops the apply; if the apply fails the records are durable
// and the next Write, Follow or restore applies them.
func (r *Replica) Write(ctx context.Context, muts []Mutation) (first int64, err error) {
	recs, err := r.encode(muts)
	if err != nil {
		return 0, fmt.Errorf("replica: write %v: %w", r.id, err)
	}
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return 0, fmt.Errorf("replica: write %v: %w", r.id, ErrClosed)
	}
	start := time.Now()
	if first, err = r.log.Append(ctx, recs); err != nil {
		if errors.Is(err, changelog.ErrTooLarge) {
			err = fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return 0, fmt.Errorf("replica: write %v: append to changelog: %w", r.id, err)
	}
	appended := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	locked := time.Now()
	times, err := r.applyBatchLocked(context.WithoutCancel(ctx), first, recs)
	if err != nil {
		return first, fmt.Errorf("replica: write %v: apply offsets %d..%d: %w", r.id, first, first+int64(len(recs))-1, err)
	}
	if d := time.Since(start); d >= slowWrite {
		r.h.log.Warn("replica: slow write", "replica", r.id.String(), "mutations", len(recs), "took", d.Round(time.Millisecond),
			"append", appended.Sub(start).Round(time.Millisecond), "lock_wait", locked.Sub(appended).Round(time.Millisecond),
			"apply", time.Since(locked).Round(time.Millisecond), "apply_read", times.read.Round(time.Millisecond),
			"apply_commit", times.commit.Round(time.Millisecond), "apply_stalled", times.stall.Round(time.Millisecond),
			"block_bytes", times.blockBytes, "block_bytes_uncached", times.blockBytesRead, "block_read", times.blockRead.Round(time.Millisecond),
			"read_amp", r.readAmp())
	}
	return first, nil
}

// readAmp returns the database's read amplification (L0 sublevels plus
// the non-empty levels below) and its L0 file count, for the slow write
// warning.
func (r *Replica) readAmp() string {
	m := r.db.Metrics()
	return fmt.Sprintf("%d (L0: %d files in %d sublevels)", m.ReadAmp(), m.Levels[0].TablesCount, m.Levels[0].Sublevels)
}

// slowWrite is the time from which Write logs a warning saying where the
// time went (changelog append, waiting for the apply lock, applying).
var slowWrite = time.Second // a variable for tests

// encode checks muts and returns their changelog records.
func (r *Replica) encode(muts []Mutation) ([][]byte, error) {
	lim := r.h.opts
	if len(muts) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalidRequest)
	}
	if len(muts) > lim.maxRows {
		return nil, fmt.Errorf("%w: %d mutations, the limit is %d", ErrTooLarge, len(muts), lim.maxRows)
	}
	total := 0
	for i, m := range muts {
		switch {
		case len(m.Key) == 0:
			return nil, fmt.Errorf("%w: mutation %d", ErrEmptyKey, i)
		case bytes.Equal(m.Key, metaKey):
			return nil, fmt.Errorf("%w: mutation %d writes the reserved key %q", ErrInvalidRequest, i, metaKey)
		case m.Op != OpUpsert && m.Op != OpDelete:
			return nil, fmt.Errorf("%w: mutation %d has %v", ErrInvalidRequest, i, m.Op)
		case m.Op == OpDelete && len(m.Value) > 0:
			return nil, fmt.Errorf("%w: delete %d carries a value", ErrInvalidRequest, i)
		}
		if total += encodedLen(m); total > lim.maxBytes {
			return nil, fmt.Errorf("%w: batch exceeds %d bytes at mutation %d", ErrTooLarge, lim.maxBytes, i)
		}
	}
	buf := make([]byte, 0, total)
	recs := make([][]byte, len(muts))
	for i, m := range muts {
		n := len(buf)
		buf = appendRecord(buf, m)
		recs[i] = buf[n:len(buf):len(buf)]
	}
	return recs, nil
}

// Follow tails the changelog and applies what appears, until ctx is done
// (then it returns nil), the replica closes (ErrClosed) or applying fails.
// A follower runs it; on a leader it is harmless, since records are applied
// once, in offset order, whoever reads them first.
func (r *Replica) Follow(ctx context.Context) error {
	for {
		// Applied up to next-1, the replica saw an end of next or more: a
		// lower one is another history (a reset moved the log back), even
		// if the reset came before this wait.
		next := r.applied.Load() + 1
		wait := r.log.Wait
		if sw, ok := r.log.(changelog.SeenWaiter); ok {
			wait = func(ctx context.Context, offset int64) (int64, error) { return sw.WaitSeen(ctx, offset, offset) }
		}
		if _, err := wait(ctx, next); err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, changelog.ErrClosed):
				return fmt.Errorf("replica: follow %v: %w: %w", r.id, ErrClosed, err)
			}
			return fmt.Errorf("replica: follow %v: wait for offset %d: %w", r.id, r.applied.Load()+1, err)
		}
		if err := r.catchUp(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("replica: follow %v: %w", r.id, err)
		}
	}
}

// catchUp applies the changelog up to its current end.
func (r *Replica) catchUp(ctx context.Context) error {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return ErrClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replayLocked(ctx, -1)
}

// applyBatchLocked applies the batch appended at first, after replaying
// whatever precedes it that is not applied yet, and skipping what another
// applier already applied; it returns the times of the batch's own apply.
func (r *Replica) applyBatchLocked(ctx context.Context, first int64, recs [][]byte) (applyTimes, error) {
	if r.mu.meta.next < first {
		if err := r.replayLocked(ctx, first); err != nil {
			return applyTimes{}, err
		}
	}
	skip := r.mu.meta.next - first
	if skip >= int64(len(recs)) {
		return applyTimes{}, nil
	}
	return r.applyLocked(r.mu.meta.next, recs[skip:])
}

// replayLocked applies changelog records from meta.next until meta.next
// reaches upTo (upTo < 0: the log's end when called).
func (r *Replica) replayLocked(ctx context.Context, upTo int64) error {
	if upTo < 0 {
		_, end, err := r.log.Offsets(ctx)
		if err != nil {
			return fmt.Errorf("changelog offsets: %w", err)
		}
		upTo = end
	}
	for next := r.mu.meta.next; next < upTo; next = r.mu.meta.next {
		recs, err := r.log.Read(ctx, next, r.h.opts.maxBytes)
		if err != nil {
			return fmt.Errorf("read changelog at %d: %w", next, err)
		}
		if len(recs) == 0 {
			return fmt.Errorf("%w: changelog ends at %d, want records up to %d", ErrLogGap, next, upTo)
		}
		data := make([][]byte, len(recs))
		for i, rec := range recs {
			if rec.Offset != next+int64(i) {
				return fmt.Errorf("%w: changelog returned offset %d, want %d", ErrLogGap, rec.Offset, next+int64(i))
			}
			data[i] = rec.Data
		}
		if _, err := r.applyLocked(next, data); err != nil {
			return err
		}
	}
	return nil
}

// applyLocked applies the records at offsets first.. in one Pebble batch
// together with the new state record, so data and applied offset move
// atomically. The caller ensures first == meta.next.
//
// The row count stays exact: an upsert of a key that does not exist adds
// a row, a delete of a key that exists removes one, and a delete of a
// missing key writes nothing. Rather than a Get per mutation, the batch's
// mutations are handled in key order (a key's own mutations keep their
// offset order): each distinct key is looked up once, with SeekPrefixGE
// on one iterator, and its state is then followed in memory through the
// batch's later mutations of it. Key order is what makes this cheap:
//
//   - the whole key is the prefix (Pebble's default comparer), so an SST
//     whose bloom filter rules the key out is skipped without reading
//     its blocks — on every level: UseL6Filters, since Pebble otherwise
//     skips the last level's filters, and that level holds most of a
//     large replica's keys;
//   - seeking forward lets each level continue from where the previous
//     key left it (TrySeekUsingNext) and reuse what the previous seek
//     brought into the CPU cache;
//   - the batch enters the memtable in key order, so the skiplist
//     inserter reuses the previous insert's position.
//
// The result equals applying the records one by one in offset order:
// mutations of different keys commute, and those of one key keep their
// order in the batch, hence their sequence numbers.
func (r *Replica) applyLocked(first int64, recs [][]byte) (applyTimes, error) {
	muts := make([]Mutation, len(recs))
	for i, rec := range recs {
		m, err := decodeRecord(rec)
		if err != nil {
			return applyTimes{}, fmt.Errorf("offset %d: %w", first+int64(i), err)
		}
		muts[i] = m
	}
	order := keyOrder(len(muts), func(i int) []byte { return muts[i].Key })

	// The caller holds the apply lock, so the database does not change
	// while the iterator reads it.
	it, err := r.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return applyTimes{}, fmt.Errorf("offsets %d..%d: %w", first, first+int64(len(recs))-1, err)
	}
	start := time.Now()
	b := r.db.NewBatch()
	defer b.Close()
	meta := r.mu.meta
	var exists bool
	for j, i := range order {
		m := muts[i]
		if j == 0 || !bytes.Equal(m.Key, muts[order[j-1]].Key) {
			exists = it.SeekPrefixGE(m.Key)
		}
		switch {
		case m.Op == OpUpsert:
			err = b.Set(m.Key, m.Value, nil)
			if !exists {
				exists = true
				meta.rows++
			}
		case exists:
			err = b.Delete(m.Key, nil)
			exists = false
			meta.rows--
		}
		if err != nil {
			_ = it.Close()
			return applyTimes{}, fmt.Errorf("offset %d: %w", first+int64(i), err)
		}
	}
	stats := it.Stats().InternalStats
	if err := it.Error(); err != nil {
		_ = it.Close()
		return applyTimes{}, fmt.Errorf("offsets %d..%d: read existing keys: %w", first, first+int64(len(recs))-1, err)
	}
	r.closeInBackground(it, "apply")
	meta.next = first + int64(len(recs))
	if err := b.Set(metaKey, meta.encode(), nil); err != nil {
		return applyTimes{}, err
	}
	// The changelog is the write-ahead log: Pebble's own is disabled.
	built := time.Now()
	if err := b.Commit(pebble.NoSync); err != nil {
		return applyTimes{}, fmt.Errorf("commit offsets %d..%d: %w", first, meta.next-1, err)
	}
	st := b.CommitStats()
	r.setMetaLocked(meta)
	return applyTimes{
		read: built.Sub(start), commit: time.Since(built), stall: st.MemTableWriteStallDuration + st.L0ReadAmpWriteStallDuration,
		blockBytes: stats.BlockBytes, blockBytesRead: stats.BlockBytes - stats.BlockBytesInCache, blockRead: stats.BlockReadDuration,
	}, nil
}

// closeInBackground closes the iterator it of an apply, a lookup or a
// scan (use) on a goroutine of its own, so that neither the call nor the
// apply lock waits for it. Closing an iterator can be slow: when it holds
// the last reference to a version that a compaction replaced, Pebble
// deletes the compaction's input files in the closing goroutine and first
// evicts their blocks from the block cache, yielding the processor every
// 5 blocks (cache.shard.evictFile). On two busy cores that made single
// 8,192-mutation writes take 10–30 s (thaw bench load). Close waits for
// these goroutines before it closes the database.
func (r *Replica) closeInBackground(it *pebble.Iterator, use string) {
	r.closing.Add(1)
	go func() {
		defer r.closing.Done()
		if err := closeIter(it); err != nil {
			r.h.log.Warn("replica: close an iterator", "replica", r.id.String(), "of", use, "err", err)
		}
	}()
}

// closeIter closes an iterator closed in the background (a variable for
// tests).
var closeIter = (*pebble.Iterator).Close

// applyTimes split an applyLocked: reading the existing keys and building
// the batch, committing it, and of that the time Pebble stalled the write;
// and what the reading took from SST blocks: the bytes of the blocks it
// used, those of them not in the block cache, and the time spent reading
// those. A batch that applied nothing has zero times.
type applyTimes struct {
	read, commit, stall        time.Duration
	blockBytes, blockBytesRead uint64
	blockRead                  time.Duration
}

// setMetaLocked adopts meta and publishes it to the lock-free mirrors.
func (r *Replica) setMetaLocked(meta replicaMeta) {
	r.mu.meta = meta
	r.applied.Store(meta.next - 1)
	r.rows.Store(meta.rows)
}

// commitMetaLocked writes meta as the state record and adopts it.
func (r *Replica) commitMetaLocked(meta replicaMeta) error {
	if err := r.db.Set(metaKey, meta.encode(), pebble.NoSync); err != nil {
		return fmt.Errorf("write replica state: %w", err)
	}
	r.setMetaLocked(meta)
	return nil
}

// Lookup returns the value of each key, nil for a key that does not exist,
// all read from one consistent view. At most the host's row limit of keys;
// no key may be empty.
func (r *Replica) Lookup(ctx context.Context, keys [][]byte) ([][]byte, error) {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return nil, fmt.Errorf("replica: lookup %v: %w", r.id, ErrClosed)
	}
	snap := r.db.NewSnapshot()
	defer snap.Close()
	out, err := r.lookup(ctx, snap, keys)
	if err != nil {
		return nil, fmt.Errorf("replica: lookup %v: %w", r.id, err)
	}
	return out, nil
}

// lookup reads keys from snap; the caller holds lifecycle (read).
func (r *Replica) lookup(ctx context.Context, snap *pebble.Snapshot, keys [][]byte) ([][]byte, error) {
	if len(keys) > r.h.opts.maxRows {
		return nil, fmt.Errorf("%w: %d keys, the limit is %d", ErrTooLarge, len(keys), r.h.opts.maxRows)
	}
	for i, k := range keys {
		if len(k) == 0 {
			return nil, fmt.Errorf("%w: key %d", ErrEmptyKey, i)
		}
	}
	// As in applyLocked: the keys in key order, each looked up once by
	// SeekPrefixGE on one iterator, filters on every level; the iterator
	// closes in the background.
	order := keyOrder(len(keys), func(i int) []byte { return keys[i] })
	it, err := snap.NewIterWithContext(ctx, &pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	// The answer is bounded like a write or a scan page: past the byte
	// limit with more than one value it is refused (ErrTooLarge; clients
	// split the keys), a key asked for many times counting each time.
	size, found := 0, 0
	tooLarge := func(n int) error {
		if size += n; n > 0 {
			found++
		}
		if size > r.h.opts.maxBytes && found > 1 {
			_ = it.Close()
			return fmt.Errorf("%w: the values of %d keys exceed %d bytes", ErrTooLarge, len(keys), r.h.opts.maxBytes)
		}
		return nil
	}
	for j, i := range order {
		if j%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return nil, err
			}
		}
		k := keys[i]
		switch {
		case bytes.Equal(k, metaKey):
			continue
		case j > 0 && bytes.Equal(k, keys[order[j-1]]):
			if prev := out[order[j-1]]; prev != nil {
				if err := tooLarge(len(prev)); err != nil {
					return nil, err
				}
				out[i] = bytes.Clone(prev)
			}
			continue
		case !it.SeekPrefixGE(k):
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if err := tooLarge(len(v)); err != nil {
			return nil, err
		}
		out[i] = append(make([]byte, 0, len(v)), v...)
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return nil, err
	}
	r.closeInBackground(it, "lookup")
	return out, nil
}

// keyOrder returns the indexes 0..n-1 ordered by key(i), equal keys by
// index.
func keyOrder(n int, key func(i int) []byte) []int32 {
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := bytes.Compare(key(int(a)), key(int(b))); c != 0 {
			return c
		}
		return int(a - b)
	})
	return order
}

// PrefixLookup returns, in key order, up to limit rows whose key starts
// with prefix (a bucket-key prefix; not empty). limit must be in [1, the
// host's row limit].
func (r *Replica) PrefixLookup(ctx context.Context, prefix []byte, limit int) ([]KV, error) {
	if len(prefix) == 0 {
		return nil, fmt.Errorf("replica: prefix lookup %v: %w: empty prefix", r.id, ErrEmptyKey)
	}
	if err := r.checkLimit(limit); err != nil {
		return nil, fmt.Errorf("replica: prefix lookup %v: %w", r.id, err)
	}
	rows, _, err := r.scan(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}, limit, false)
	if err != nil {
		return nil, fmt.Errorf("replica: prefix lookup %v: %w", r.id, err)
	}
	return rows, nil
}

// Scan returns one page of rows in key order: those after startAfter (nil:
// from the first), at most limit rows and, beyond the first row, at most
// the host's byte limit of keys and values. next is the key to pass as
// startAfter for the following page, nil when the scan is complete. Pages
// are stable: paging by key never repeats or skips a row that exists for
// the whole scan, whatever is written meanwhile.
func (r *Replica) Scan(ctx context.Context, startAfter []byte, limit int) (rows []KV, next []byte, err error) {
	if err := r.checkLimit(limit); err != nil {
		return nil, nil, fmt.Errorf("replica: scan %v: %w", r.id, err)
	}
	var lower []byte
	if len(startAfter) > 0 {
		lower = append(bytes.Clone(startAfter), 0) // the immediate successor
	}
	rows, next, err = r.scan(ctx, &pebble.IterOptions{LowerBound: lower}, limit, true)
	if err != nil {
		return nil, nil, fmt.Errorf("replica: scan %v: %w", r.id, err)
	}
	return rows, next, nil
}

func (r *Replica) checkLimit(limit int) error {
	if limit < 1 || limit > r.h.opts.maxRows {
		return fmt.Errorf("%w: limit %d not in [1, %d]", ErrInvalidRequest, limit, r.h.opts.maxRows)
	}
	return nil
}

// scan collects up to limit rows within opts' bounds from the database.
func (r *Replica) scan(ctx context.Context, opts *pebble.IterOptions, limit int, byteLimit bool) (rows []KV, next []byte, err error) {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return nil, nil, ErrClosed
	}
	return r.collect(ctx, func() (*pebble.Iterator, error) { return r.db.NewIterWithContext(ctx, opts) }, limit, byteLimit)
}

// collect reads up to limit rows from the iterator newIter opens,
// skipping metaKey, and with byteLimit also stops at the host's byte
// limit. next is the last row's key when rows remain. The caller holds
// lifecycle (read). The iterator closes in the background, as an
// apply's does.
func (r *Replica) collect(ctx context.Context, newIter func() (*pebble.Iterator, error), limit int, byteLimit bool) (rows []KV, next []byte, err error) {
	it, err := newIter()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = it.Close()
			return
		}
		r.closeInBackground(it, "scan")
	}()
	size := 0
	for it.First(); it.Valid(); it.Next() {
		if bytes.Equal(it.Key(), metaKey) {
			continue
		}
		if len(rows) == limit {
			return rows, rows[len(rows)-1].Key, nil
		}
		if len(rows)%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, err
		}
		if byteLimit && len(rows) > 0 && size+len(it.Key())+len(v) > r.h.opts.maxBytes {
			// Beyond the first row, a page holds at most the byte limit (it
			// took one row past it, up to twice the limit).
			return rows, rows[len(rows)-1].Key, nil
		}
		kv := KV{Key: bytes.Clone(it.Key()), Value: append(make([]byte, 0, len(v)), v...)}
		rows = append(rows, kv)
		size += len(kv.Key) + len(kv.Value)
	}
	return rows, nil, it.Error()
}

// prefixEnd is the smallest key above every key with prefix p, nil if
// there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Close closes the replica's database and its changelog handle and
// unregisters it from the host; it waits for running calls. Unflushed
// applied data is dropped (Pebble's WAL is off): a replica always reopens
// from a snapshot plus the changelog. A running Follow returns ErrClosed.
func (r *Replica) Close() error {
	r.lifecycle.Lock()
	if r.closed {
		r.lifecycle.Unlock()
		return fmt.Errorf("replica: close %v: %w", r.id, ErrClosed)
	}
	r.closed = true
	r.closing.Wait()
	err := errors.Join(r.closeViews(), r.log.Close(), r.db.Close())
	r.lifecycle.Unlock()
	r.h.release(r.logID, r)
	if err != nil {
		return fmt.Errorf("replica: close %v: %w", r.id, err)
	}
	return nil
}

// Destroy closes the replica (if open) and removes its local directory.
// The bucket's changelog and snapshots stay.
func (r *Replica) Destroy() error {
	if err := r.Close(); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	if err := os.RemoveAll(r.dir); err != nil {
		return fmt.Errorf("replica: destroy %v: %w", r.id, err)
	}
	return nil
}

// discard undoes a failed Open: it closes what was opened and removes the
// local directory.
func (r *Replica) discard() error {
	// As Close: the apply iterators still closing in the background must
	// be closed before the database is.
	r.closing.Wait()
	var errs []error
	if r.log != nil {
		errs = append(errs, r.log.Close())
	}
	if r.db != nil {
		errs = append(errs, r.db.Close())
	}
	errs = append(errs, os.RemoveAll(r.dir))
	return errors.Join(errs...)
}
