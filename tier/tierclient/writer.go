package tierclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierpb"
)

// Writer streams upserts and deletes into one Target. It encodes each row,
// appends it to its bucket's open batch and sends batches to the buckets'
// leaders in the background: a bucket with no request in flight sends
// what it has at once, and rows keep accumulating in the next batch while
// one is in flight, up to the batch limits (so batches grow with load and
// latency; there is no linger timer). Requests for different buckets are
// in flight together, up to the client's in-flight limits.
//
// A Writer is safe for concurrent use. It holds at most the
// WithMaxBufferedBytes of rows not yet acknowledged; Write blocks beyond.
// The first request the client gives up on fails the Writer: the rows it
// holds are dropped, and Write, Flush and Close return the error, which
// names every bucket that failed (see BucketError).
type Writer struct {
	c      *Client
	r      *router
	ctx    context.Context // the sends' lifecycle; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // drain goroutines

	mu struct {
		sync.Mutex
		hold     bool // encode only; send on Flush (Upsert, Delete)
		closed   bool
		encoders map[*kv.Table]*kv.Encoder
		queues   map[queueKey]*bucketQueue
		buffered int64 // key+value bytes written and not finished
		// reporting counts finished batches whose WithOnBatch fn has not
		// returned yet.
		reporting int
		failed    map[queueKey]*BucketError
		err       error // sticky: the join of failed
		change    chan struct{}
		stats     WriterStats
	}
}

// WriterStats counts a Writer's work so far.
type WriterStats struct {
	Rows, Bytes           int64 // accepted by Write and Delete (key+value bytes)
	AckedRows, AckedBytes int64 // acknowledged by the leaders
	Batches               int64 // write requests acknowledged
	Retries               int64 // attempts beyond the first, over all requests
	FailedRows            int64 // rows of requests given up
	DroppedRows           int64 // rows dropped unsent after a failure
}

type queueKey struct {
	e      *targetEntry
	bucket int
}

// bucketQueue holds one bucket's batches: the open one, sealed ones in
// order, and how many goroutines send them.
type bucketQueue struct {
	key     queueKey
	cur     *batch
	ready   []*batch
	sending int
}

// NewWriter returns a Writer into t. ctx bounds the setup only: the
// Writer's requests run until Close (its values are kept).
func (c *Client) NewWriter(ctx context.Context, t Target) (*Writer, error) {
	return c.newWriter(ctx, t, context.WithoutCancel(ctx), false)
}

func (c *Client) newWriter(ctx context.Context, t Target, life context.Context, hold bool) (*Writer, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	r, err := c.newRouter(ctx, t)
	if err != nil {
		return nil, err
	}
	w := &Writer{c: c, r: r}
	w.ctx, w.cancel = context.WithCancel(life)
	w.mu.hold = hold
	w.mu.encoders = make(map[*kv.Table]*kv.Encoder)
	w.mu.queues = make(map[queueKey]*bucketQueue)
	w.mu.failed = make(map[queueKey]*BucketError)
	w.mu.change = make(chan struct{})
	return w, nil
}

// Write upserts row, a value for every column of the table. It returns
// once the row is encoded and buffered; Flush or Close tell when it is
// acknowledged. It blocks while the Writer holds its maximum of buffered
// bytes, and returns an error for a row that does not fit the schema (a
// *kv.RowError), a row of another partition than the Target's, or a
// Writer that failed or was closed.
func (w *Writer) Write(ctx context.Context, row kv.Row) error {
	if err := w.mutate(ctx, tierv1.MutationOp_MUTATION_OP_UPSERT, row); err != nil {
		return fmt.Errorf("tierclient: write to %v: %w", w.r.base, err)
	}
	return nil
}

// Delete deletes the row whose primary key key holds (a row of the table
// in which only the primary-key columns are read; see TableInfo.KeyRow).
// It is ordered with the Writer's upserts of the same key. A key whose
// partition does not exist (rows routed per row) has no row to delete: it
// is skipped, and the partition is not created, whatever
// WithCreatePartitions says; such a key costs a call to the coordinator
// each time, since the partition may exist by the next one (Client.Delete
// asks once per partition for all its keys).
func (w *Writer) Delete(ctx context.Context, key kv.Row) error {
	if err := w.mutate(ctx, tierv1.MutationOp_MUTATION_OP_DELETE, key); err != nil {
		return fmt.Errorf("tierclient: delete from %v: %w", w.r.base, err)
	}
	return nil
}

// Stats returns the Writer's counters.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.stats
}

func (w *Writer) usableLocked() error {
	switch {
	case w.mu.err != nil:
		return w.mu.err
	case w.mu.closed:
		return ErrClosed
	}
	return nil
}

func (w *Writer) mutate(ctx context.Context, op tierv1.MutationOp, row kv.Row) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	if !w.mu.hold {
		if err := w.waitLocked(ctx, func() bool { return w.mu.buffered < w.c.opts.maxBufferedBytes }); err != nil {
			return err
		}
	}
	e, err := w.routeLocked(ctx, row, op == tierv1.MutationOp_MUTATION_OP_UPSERT)
	if err != nil {
		return err
	}
	// The wait and the routing unlock: the Writer may have failed (its
	// buffers dropped, which is what freed the space) or been closed
	// meanwhile, and a row queued now would never be sent.
	if err := w.usableLocked(); err != nil {
		return err
	}
	if e == nil {
		return nil // a delete in a partition that does not exist
	}
	st := e.state.Load()
	var key, value []byte
	var bucket int
	if op == tierv1.MutationOp_MUTATION_OP_UPSERT {
		key, value, bucket, err = w.encoderLocked(st.table).Encode(kv.RowFields(row))
	} else if key, err = st.table.EncodeKey(row); err == nil {
		bucket, err = st.table.Bucket(row)
	}
	if err != nil {
		return err
	}
	n := len(key) + len(value)
	qk := queueKey{e, bucket}
	q := w.mu.queues[qk]
	if q == nil {
		q = &bucketQueue{key: qk}
		w.mu.queues[qk] = q
	}
	if b := q.cur; b != nil && (b.n >= w.c.opts.maxBatchRows || b.bytes+n > w.c.opts.maxBatchBytes || b.enc != st) {
		w.sealLocked(q)
	}
	if q.cur == nil {
		q.cur = w.c.getBatch(e, st, bucket)
	}
	q.cur.add(op, key, value)
	w.mu.buffered += int64(n)
	w.mu.stats.Rows++
	w.mu.stats.Bytes += int64(n)
	if q.cur.n >= w.c.opts.maxBatchRows || q.cur.bytes >= w.c.opts.maxBatchBytes {
		w.sealLocked(q)
	}
	w.kickLocked(q)
	return nil
}

// routeLocked returns the physical target of row. Resolving a partition
// met for the first time asks the coordinator, without holding the lock;
// for an upsert (create) it creates a missing partition when the client
// does that, otherwise a missing partition routed per row is nil (and,
// within one Client.Delete, remembered as missing).
func (w *Writer) routeLocked(ctx context.Context, row kv.Row, create bool) (*targetEntry, error) {
	if !w.r.perRow() {
		if w.r.base.Partition != "" {
			name, err := w.encoderLocked(w.r.info.KV).PartitionName(kv.RowFields(row))
			if err != nil {
				return nil, err
			}
			if name != w.r.base.Partition {
				return nil, fmt.Errorf("%w: the row belongs to partition %q", ErrInvalidArgument, name)
			}
		}
		return w.r.fixed, nil
	}
	name, err := w.encoderLocked(w.r.info.KV).PartitionName(kv.RowFields(row))
	if err != nil {
		return nil, err
	}
	if e, ok := w.r.parts[name]; ok && (e != nil || !create) {
		return e, nil // nil: a delete of this call found the partition missing
	}
	if create {
		// A row the table refuses creates no partition (as Client.Upsert
		// checks every row before it routes any).
		if _, _, _, err := w.encoderLocked(w.r.info.KV).Encode(kv.RowFields(row)); err != nil {
			return nil, err
		}
	}
	w.mu.Unlock()
	var e *targetEntry
	if create {
		e, err = w.c.partitionEntry(ctx, w.r.base, name)
	} else {
		t := w.r.base
		t.Partition = name
		if e, err = w.c.entry(ctx, t); tierpb.ReasonOf(err) == tierpb.ReasonNotFound {
			// A delete finds no row to delete in a partition that does
			// not exist only while the table is the one routed by.
			if serr := w.c.sameTable(ctx, w.r.info); serr != nil {
				err = serr
			}
		}
	}
	w.mu.Lock()
	if !create && tierpb.ReasonOf(err) == tierpb.ReasonNotFound {
		// One call (Client.Delete) asks once per missing partition. A
		// Writer asks again for each delete: the partition may have been
		// created since (by its own upsert or by another client), and a
		// delete sent after that must not be skipped.
		if w.mu.hold {
			w.r.parts[name] = nil
		}
		return nil, w.usableLocked()
	}
	if err != nil {
		return nil, err
	}
	if err := w.usableLocked(); err != nil {
		return nil, err
	}
	w.r.parts[name] = e
	return e, nil
}

func (w *Writer) encoderLocked(t *kv.Table) *kv.Encoder {
	enc := w.mu.encoders[t]
	if enc == nil {
		enc = t.NewEncoder()
		w.mu.encoders[t] = enc
	}
	return enc
}

// sealLocked closes the bucket's open batch: it is sent next.
func (w *Writer) sealLocked(q *bucketQueue) {
	if q.cur != nil {
		q.ready = append(q.ready, q.cur)
		q.cur = nil
	}
}

// kickLocked starts a goroutine sending q's batches if q has any and fewer
// than the per-bucket limit are sending.
func (w *Writer) kickLocked(q *bucketQueue) {
	if w.mu.hold || q.sending >= w.c.opts.maxInFlightPerB || (len(q.ready) == 0 && q.cur == nil) {
		return
	}
	q.sending++
	w.wg.Add(1)
	go w.drain(q)
}

// drain sends q's batches one after the other, the open one too when
// nothing is sealed, until q has none.
func (w *Writer) drain(q *bucketQueue) {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		var b *batch
		switch {
		case w.mu.err != nil || w.ctx.Err() != nil:
		case len(q.ready) > 0:
			b = q.ready[0]
			q.ready[0] = nil
			q.ready = q.ready[1:]
		case q.cur != nil:
			b, q.cur = q.cur, nil
		}
		if b == nil {
			q.sending--
			w.mu.Unlock()
			return
		}
		w.kickLocked(q)
		w.mu.Unlock()

		start := time.Now()
		attempts, err := w.c.sendWrite(w.ctx, b)
		if w.finish(q, b, attempts, time.Since(start), err) {
			return
		}
	}
}

// finish accounts for a batch acknowledged or given up. With WithOnBatch
// it hands q's sending over to another goroutine before it runs fn (fn may
// Write, and a Write into a full buffer waits for q's next batches to be
// sent) and reports true: the caller stops draining q.
func (w *Writer) finish(q *bucketQueue, b *batch, attempts int, latency time.Duration, err error) (handedOver bool) {
	info := BatchInfo{Target: b.entry.target, Bucket: b.bucket, Rows: b.n, Bytes: b.bytes, Attempts: attempts, Latency: latency, Err: err}
	w.mu.Lock()
	w.mu.buffered -= int64(b.bytes)
	w.mu.stats.Retries += int64(max(attempts-1, 0))
	if err == nil {
		w.mu.stats.AckedRows += int64(b.n)
		w.mu.stats.AckedBytes += int64(b.bytes)
		w.mu.stats.Batches++
	} else {
		w.mu.stats.FailedRows += int64(b.n)
		be := w.mu.failed[q.key]
		if be == nil {
			be = &BucketError{Op: "write", Target: b.entry.target, Bucket: b.bucket}
			w.mu.failed[q.key] = be
		}
		be.Rows += b.n
		be.Attempts, be.Err = attempts, err
		w.failLocked()
	}
	if w.c.opts.onBatch != nil {
		w.mu.reporting++
		q.sending--
		w.kickLocked(q)
		handedOver = true
	}
	w.changedLocked()
	w.mu.Unlock()
	if w.c.opts.onBatch != nil {
		// Outside the lock (fn may call the Writer), and waited for by
		// Flush: it returns once fn has been told of every batch.
		w.c.opts.onBatch(info)
		w.mu.Lock()
		if w.mu.reporting--; w.mu.reporting == 0 {
			w.changedLocked()
		}
		w.mu.Unlock()
	}
	if err != nil {
		w.c.opts.logger.Warn("tierclient: write given up", "target", info.Target.String(), "bucket", info.Bucket, "rows", info.Rows, "attempts", attempts, "err", err)
	}
	w.c.putBatch(b)
	return handedOver
}

// changedLocked wakes whoever waits for the Writer's state to change.
func (w *Writer) changedLocked() {
	close(w.mu.change)
	w.mu.change = make(chan struct{})
}

// failLocked makes the Writer failed: its error joins every bucket's, in a
// stable order, and every batch not yet sent is dropped.
func (w *Writer) failLocked() {
	errs := make([]*BucketError, 0, len(w.mu.failed))
	for _, be := range w.mu.failed {
		errs = append(errs, be)
	}
	slices.SortFunc(errs, func(a, b *BucketError) int {
		if c := compareTargets(a.Target, b.Target); c != 0 {
			return c
		}
		return a.Bucket - b.Bucket
	})
	joined := make([]error, len(errs))
	for i, be := range errs {
		joined[i] = be
	}
	w.mu.err = errors.Join(joined...)
	w.dropLocked()
}

// dropLocked drops every batch not in flight.
func (w *Writer) dropLocked() {
	for _, q := range w.mu.queues {
		for _, b := range append(q.ready, q.cur) {
			if b == nil {
				continue
			}
			w.mu.buffered -= int64(b.bytes)
			w.mu.stats.DroppedRows += int64(b.n)
			w.c.putBatch(b)
		}
		q.ready, q.cur = nil, nil
	}
}

func compareTargets(a, b Target) int {
	if a.Database != b.Database {
		return cmpString(a.Database, b.Database)
	}
	if a.Table != b.Table {
		return cmpString(a.Table, b.Table)
	}
	return cmpString(a.Partition, b.Partition)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// waitLocked waits, unlocking meanwhile, until ok holds (checked under the
// lock), the Writer fails, or ctx is done.
func (w *Writer) waitLocked(ctx context.Context, ok func() bool) error {
	for !ok() {
		if w.mu.err != nil {
			return w.mu.err
		}
		if err := w.awaitChangeLocked(ctx); err != nil {
			return err
		}
	}
	return nil
}

// awaitChangeLocked waits, unlocking meanwhile, until the Writer's state
// changes or ctx is done (then it returns ctx's error).
func (w *Writer) awaitChangeLocked(ctx context.Context) error {
	ch := w.mu.change
	w.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	w.mu.Lock()
	return ctx.Err()
}

// Flush sends every buffered row and waits until each is acknowledged:
// durable in its bucket's changelog and applied by the bucket's leader, so
// that a Get sees it. Rows written while Flush waits are waited for too.
// It returns the Writer's error if it failed, or ctx's. A failed Writer's
// Flush (and Close) first waits, within ctx, for its requests still in
// flight, so that the error names every bucket that failed. Flush does not
// close the Writer.
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return ErrClosed
	}
	return w.flushLocked(ctx)
}

func (w *Writer) flushLocked(ctx context.Context) error {
	idle := func() bool { return w.mu.buffered == 0 && w.mu.reporting == 0 }
	if w.mu.err == nil {
		w.mu.hold = false
		for _, q := range w.mu.queues {
			w.sealLocked(q)
			w.kickLocked(q)
		}
		if err := w.waitLocked(ctx, idle); err != nil && w.mu.err == nil {
			return err
		}
	}
	if w.mu.err == nil {
		return nil
	}
	// Failed: the rows not sent were dropped, and the requests still in
	// flight end by themselves (written, or given up after their retries).
	// Wait for them too, so that the error names every bucket that failed
	// and Close does not abandon a request it need not.
	for !idle() && !w.mu.closed {
		if err := w.awaitChangeLocked(ctx); err != nil {
			return errors.Join(w.mu.err, fmt.Errorf("tierclient: waiting for the requests still in flight: %w", err))
		}
	}
	if w.mu.closed && !errors.Is(w.mu.err, ErrClosed) {
		// A Flush waiting while Close abandons the requests in flight
		// fails with ErrClosed (the abandoned requests' errors replace
		// the Writer's, which Close's set to ErrClosed).
		return errors.Join(fmt.Errorf("%w: closed while this call waited", ErrClosed), w.mu.err)
	}
	return w.mu.err
}

// Close flushes the Writer (see Flush), then releases it. If ctx ends
// first, the requests in flight are abandoned: their rows may or may not
// be written (the error names their buckets); the rows not yet sent are
// dropped, and a Flush or Write waiting meanwhile fails with ErrClosed.
// Close returns the Writer's error, if any; closing again returns nil.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.mu.closed {
		w.mu.Unlock()
		return nil
	}
	err := w.flushLocked(ctx)
	w.mu.closed = true
	if err != nil && w.mu.err == nil {
		// Rows are dropped: a Flush or Write still waiting must not
		// take that for success, nor wait for ever.
		w.mu.err = fmt.Errorf("%w: closed before every row was sent: %w", ErrClosed, err)
	}
	w.dropLocked()
	w.changedLocked()
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	if err != nil && ctx.Err() != nil {
		// The requests abandoned above have failed by now: their buckets
		// are named too (w.mu.err joins every failed bucket's error).
		w.mu.Lock()
		if len(w.mu.failed) > 0 {
			err = errors.Join(w.mu.err, fmt.Errorf("tierclient: requests in flight abandoned: %w", ctx.Err()))
		}
		w.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("tierclient: close writer to %v: %w", w.r.base, err)
	}
	return nil
}
