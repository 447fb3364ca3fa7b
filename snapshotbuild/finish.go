package snapshotbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// bucketOutput is a bucket whose data files are uploaded and whose
// _METADATA is encoded but not yet written.
type bucketOutput struct {
	result   BucketResult
	metaKey  string
	metadata []byte
}

// Finish sorts what was added, builds and uploads every owned bucket's
// snapshot and returns one result per owned bucket in bucket order. It writes
// no _METADATA until every owned bucket's data files are uploaded, so every
// _METADATA in the store, even one a failed or cancelled Finish wrote before
// it failed, describes a complete bucket. A failure leaves the _METADATA
// files it wrote: another build of the same context may have adopted them
// meanwhile (and committed them), so deleting them is never safe; a rebuild
// of the same input adopts them. Temporary files are removed on every path.
// Finish can be called once.
func (b *Builder) Finish(ctx context.Context) (results []BucketResult, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usableLocked(); err != nil {
		return nil, err
	}
	b.mu.done = true
	defer func() {
		if rerr := b.releaseLocked(); rerr != nil {
			err = errors.Join(err, rerr)
			results = nil
		}
	}()
	b.stopSpillingLocked()
	if err := b.spillErr(); err != nil {
		return nil, b.failLocked(err)
	}
	// In-memory sources, oldest first: the kept chunk (sorted by the spill
	// goroutine) and the tail, which the bucket workers sort bucket by
	// bucket after this partition pass.
	var mem []*chunk
	if b.mu.held != nil {
		mem = append(mem, b.mu.held)
	}
	if tail := b.mu.fill; tail != nil && tail.len() > 0 {
		tail.seq = b.mu.seq
		start := time.Now()
		tail.partition(b.nb)
		b.timed(timerSortSpill, start)
		tail.trim() // what an earlier fill touched is not charged: the merge's buffers take the rest
		mem = append(mem, tail)
	} else {
		tail.trim()
	}

	var owned []int
	for bucket, o := range b.owned {
		if o {
			owned = append(owned, bucket)
		}
	}
	workers := min(b.opts.Workers, max(len(owned), 1))
	if err := b.compactRuns(ctx, mem); err != nil {
		return nil, b.failLocked(err)
	}
	plan := b.planMerge(mem, workers)
	if plan.workers < workers {
		b.log.Info("memory budget limits concurrent buckets", "workers", plan.workers, "runs", len(b.sp.runs))
	}

	// Once every bucket is merged, the chunks and runs are not read again:
	// they are released while the last uploads run instead of after the
	// _METADATA phase (unmapping a few hundred MiB takes tens of ms).
	if plan.mapped() {
		plan.bufs = newSrcBufs(plan.bufSize+plan.frame, b.bud)
	}
	outs, err := b.buildBuckets(ctx, owned, mem, plan, workers, b.releaseInputLocked)
	if err != nil {
		return nil, b.failLocked(err)
	}
	// Every data file of every owned bucket is uploaded: now the commit
	// markers.
	err = forEach(ctx, len(outs), workers, func(ctx context.Context, i int) error {
		o := outs[i]
		defer b.timed(timerMetadata, time.Now())
		b.progress(BucketProgress{Bucket: o.result.Bucket, Phase: PhaseMetadata, Rows: o.result.RowCount})
		obj, err := b.store.PutIfAbsent(ctx, o.metaKey, objstore.BytesSource(o.metadata))
		if errors.Is(err, objstore.ErrConflict) {
			return &BucketError{Bucket: o.result.Bucket, Err: fmt.Errorf("write _METADATA: %w (%s)", err, metadataConflictHint)}
		}
		if err != nil {
			return &BucketError{Bucket: o.result.Bucket, Err: fmt.Errorf("write _METADATA: %w", err)}
		}
		o.result.MetadataAdopted = obj.Adopted
		b.progress(BucketProgress{Bucket: o.result.Bucket, Phase: PhaseDone, Rows: o.result.RowCount, Bytes: o.result.Bytes})
		return nil
	})
	if err != nil {
		return nil, b.failLocked(err)
	}
	results = make([]BucketResult, len(outs))
	for i, o := range outs {
		results[i] = o.result
	}
	return results, nil
}

// metadataConflictHint follows the error of a _METADATA that another build
// of the same snapshot directory wrote with other content.
const metadataConflictHint = "another build of this bucket wrote its snapshot first, from other input or with options that change the files; " +
	"a rebuild adopts an earlier build's files only if it reads the same rows with the same options, " +
	"and the buckets of a committed transaction cannot be built again"

// objectReader is implemented by stores a build may read: *objstore.Store
// (file://, or S3 with the builder's own credentials). The upload
// gateway's scoped store is not one; its gateway refuses every write of a
// transaction that is no longer BEGUN.
type objectReader interface {
	Get(ctx context.Context, key string) ([]byte, error)
}

// checkMetadata refuses, before any of the bucket's data files go up, a
// bucket whose _METADATA another build already wrote with other content:
// such a rebuild would end in the same conflict at its _METADATA, and its
// data files would stay behind in that snapshot directory, listed by no
// _METADATA. A store the build cannot read, or a failed read, defers the
// decision to the _METADATA's own write-if-absent (as does a _METADATA
// written between this check and that write).
func (b *Builder) checkMetadata(ctx context.Context, key string, enc []byte) error {
	r, ok := b.store.(objectReader)
	if !ok {
		return nil
	}
	got, err := r.Get(ctx, key)
	if err != nil || bytes.Equal(got, enc) {
		return nil
	}
	return fmt.Errorf("write _METADATA: %s: %w, found before any data file was uploaded (%s)",
		key, objstore.ErrConflict, metadataConflictHint)
}

// buildBuckets runs the two stages of every owned bucket: merge, write and
// checkpoint (CPU-bound, plan.workers buckets at once), then upload
// (I/O-bound, up to uploaders buckets at once, overlapping the next
// buckets' merges). merged is called once no bucket reads mem or the runs
// any more, while uploads may still run. The first error cancels
// everything.
func (b *Builder) buildBuckets(ctx context.Context, owned []int, mem []*chunk, plan mergePlan, uploaders int, merged func() error) ([]*bucketOutput, error) {
	upCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	outs := make([]*bucketOutput, len(owned))
	slots := make(chan struct{}, uploaders)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var upErr error
	err := forEach(upCtx, len(owned), plan.workers, func(ctx context.Context, i int) error {
		bucket := owned[i]
		lb, err := b.prepareBucket(ctx, bucket, mem, plan)
		if err != nil {
			return &BucketError{Bucket: bucket, Err: err}
		}
		// An upload slot also bounds the local disk held by finished
		// buckets waiting for upload.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return &BucketError{Bucket: bucket, Err: errors.Join(context.Cause(ctx), lb.remove())}
		}
		wg.Go(func() {
			defer func() { <-slots }()
			// Not the worker's ctx: forEach cancels that when it returns.
			out, err := b.uploadBucket(upCtx, lb)
			if err != nil {
				err = &BucketError{Bucket: bucket, Err: err}
				mu.Lock()
				if upErr == nil {
					upErr = err
				}
				mu.Unlock()
				cancel(err)
				return
			}
			outs[i] = out
		})
		return nil
	})
	if err != nil {
		// A merge failed: the uploads running stop too (the first error
		// is the one returned).
		mu.Lock()
		if upErr == nil {
			upErr = err
		}
		mu.Unlock()
		cancel(err)
	}
	// No merge runs any more: its buffers go before its input.
	var relErr error
	if plan.bufs != nil {
		relErr = plan.bufs.close()
	}
	relErr = errors.Join(relErr, merged())
	wg.Wait()
	if upErr != nil {
		return nil, upErr
	}
	if relErr != nil {
		return nil, fmt.Errorf("snapshotbuild: release merged input: %w", relErr)
	}
	return outs, nil
}

// mergePlan is how the merge uses the budget left by the in-memory chunks.
type mergePlan struct {
	bufSize int      // the read buffer of each spilled run's source
	frame   int      // the largest frame of any run: each source's decode buffer
	workers int      // buckets merged at once
	share   int64    // budget bytes one merging bucket may hold for its sources
	bufs    *srcBufs // with mapped(): the sources' buffers, kept across buckets
}

// mapped says whether the sources' buffers are mapped outside the Go heap
// and kept from one bucket to the next (srcBufs), rather than allocated on
// the heap per source (budgets too small for a page per run).
func (p mergePlan) mapped() bool { return p.bufSize >= 4096 }

// planMerge sizes the read buffer of each spilled run during the merge, and
// how many buckets may merge at once, so that the in-memory chunks plus the
// buffers of every merging bucket fit the budget. A run's source holds its
// read buffer and one decoded frame (see run). Buffers get up to 1 MiB
// and, before concurrency is reduced, at least one stored frame
// (minSrcBuf); compactRuns first merges runs until that fits, so only a
// budget too small for two such sources (a test setting) gets less, and
// its sources read larger frames through heap buffers past the budget.
func (b *Builder) planMerge(mem []*chunk, workers int) mergePlan {
	avail := b.opts.MemoryBudget
	for _, c := range mem {
		avail -= c.reserved
	}
	avail = max(avail, 1)
	runs := int64(len(b.sp.runs))
	if runs == 0 {
		return mergePlan{workers: workers, share: avail}
	}
	var frame int
	for _, r := range b.sp.runs {
		frame = max(frame, r.maxFrame)
	}
	// Every source gets a buffer of the same size, so that a merge can
	// reuse any of the previous one's.
	frames := runs * int64(frame)
	const maxBuf = 1 << 20
	minBuf := int64(minSrcBuf(frame))
	mw := min(max(avail/(runs*minBuf+frames), 1), int64(workers))
	per := (avail/mw - frames) / runs
	return mergePlan{bufSize: int(min(max(per, 64), maxBuf)), frame: frame, workers: int(mw), share: avail / mw}
}

func (b *Builder) progress(p BucketProgress) {
	if b.opts.Progress != nil {
		b.opts.Progress(p)
	}
}

// localBucket is a bucket whose checkpoint is ready on local disk.
type localBucket struct {
	bucket int
	dir    string
	sink   *sstSink
	dups   int64
	ck     *checkpointResult
}

func (lb *localBucket) remove() error {
	if err := os.RemoveAll(lb.dir); err != nil {
		return fmt.Errorf("remove bucket dir: %w", err)
	}
	return nil
}

// prepareBucket merges the bucket's sorted sources into SST files and turns
// them into a checkpoint under the bucket's own temporary directory.
func (b *Builder) prepareBucket(ctx context.Context, bucket int, mem []*chunk, plan mergePlan) (_ *localBucket, err error) {
	lb := &localBucket{bucket: bucket, dir: filepath.Join(b.tmp, fmt.Sprintf("bucket-%06d", bucket))}
	if err := os.Mkdir(lb.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create bucket dir: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, lb.remove())
		}
	}()
	b.progress(BucketProgress{Bucket: bucket, Phase: PhaseMerge})
	start := time.Now()
	lb.sink, lb.dups, err = b.mergeBucket(ctx, bucket, mem, plan, lb.dir)
	b.timed(timerMerge, start)
	if err != nil {
		return nil, err
	}
	b.progress(BucketProgress{Bucket: bucket, Phase: PhaseIngest, Rows: lb.sink.rows, Bytes: lb.sink.bytes})
	start = time.Now()
	lb.ck, err = makeCheckpoint(ctx, lb.dir, lb.sink.files, b.opts.Compression, b.log)
	b.timed(timerCheckpoint, start)
	if err != nil {
		return nil, err
	}
	if !lb.ck.manifestNormalized {
		b.manifestsUnfixed.Add(1)
	}
	return lb, nil
}

// filesPerBucketUpload bounds the concurrent uploads of one bucket's files.
const filesPerBucketUpload = 3

// uploadBucket encodes (but does not write) a bucket's _METADATA and
// uploads its checkpoint files, unless checkMetadata finds that _METADATA
// taken. It removes the bucket's directory in any case.
func (b *Builder) uploadBucket(ctx context.Context, lb *localBucket) (_ *bucketOutput, err error) {
	defer func() { err = errors.Join(err, lb.remove()) }()
	defer b.timed(timerUpload, time.Now())
	bucket, sink := lb.bucket, lb.sink
	snapID := b.target.SnapshotIDs[bucket]
	snapDir := b.target.Snapshot.SnapshotDir(bucket, snapID)
	// The _METADATA is known before anything goes up: its files are named
	// and described by the digests taken while they were written.
	handles := make([]snapshot.KvFileHandle, len(lb.ck.files))
	keys := make([]string, len(lb.ck.files))
	var total int64
	for i, f := range lb.ck.files {
		uri := snapDir + "/" + snapshot.PrivateFileName(f.sha256, f.localPath)
		if keys[i], err = b.store.Key(uri); err != nil {
			return nil, fmt.Errorf("upload %s: %w", f.localPath, err)
		}
		handles[i] = snapshot.KvFileHandle{
			Handle:    snapshot.FileHandle{Path: uri, Size: f.size, SHA256: f.sha256},
			LocalPath: f.localPath,
		}
		total += f.size
	}
	rows := sink.rows
	logOffset := rows
	if off, ok := b.target.LogOffsets[bucket]; ok {
		logOffset = off
	}
	meta := &snapshot.Metadata{
		TableID:          b.target.Snapshot.TableID,
		BucketID:         int32(bucket),
		SnapshotID:       snapID,
		SnapshotLocation: snapDir,
		SharedFiles:      []snapshot.KvFileHandle{},
		PrivateFiles:     handles,
		IncrementalSize:  total,
		LogOffset:        logOffset,
		RowCount:         &rows,
	}
	if b.target.Snapshot.Partitioned() {
		pid := b.target.Snapshot.PartitionID
		meta.PartitionID = &pid
	}
	enc, err := snapshot.EncodeMetadata(meta)
	if err != nil {
		return nil, fmt.Errorf("encode _METADATA: %w", err)
	}
	metaURI := b.target.Snapshot.MetadataPath(bucket, snapID)
	metaKey, err := b.store.Key(metaURI)
	if err != nil {
		return nil, fmt.Errorf("_METADATA: %w", err)
	}
	if err := b.checkMetadata(ctx, metaKey, enc); err != nil {
		return nil, err
	}

	// A bucket's files go up concurrently (a few at a time): the largest
	// files are SSTs of similar size, and the store's per-object latency
	// (fsync, rename) then overlaps.
	var uploaded atomic.Int64
	b.progress(BucketProgress{Bucket: bucket, Phase: PhaseUpload, Rows: sink.rows})
	err = forEach(ctx, len(lb.ck.files), filesPerBucketUpload, func(ctx context.Context, i int) error {
		f := lb.ck.files[i]
		// PutFileStamped stores the file write-if-absent. On a file://
		// store on the same file system it links the file instead of
		// copying it, trusting the digest computed while the file was
		// written as long as the file keeps the stamp taken then (the
		// SSTs; the small files carry none and are hashed again); copies
		// are verified while they stream.
		if _, err := b.store.PutFileStamped(ctx, keys[i], f.path, f.size, f.sha256, f.stamp); err != nil {
			if errors.Is(err, objstore.ErrIntegrity) {
				return fmt.Errorf("%w: %s: %w", ErrLocalIntegrity, f.localPath, err)
			}
			return fmt.Errorf("upload %s: %w", f.localPath, err)
		}
		b.progress(BucketProgress{Bucket: bucket, Phase: PhaseUpload, Rows: sink.rows, Bytes: uploaded.Add(f.size)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := BucketResult{
		Bucket:         bucket,
		SnapshotID:     snapID,
		MetadataPath:   metaURI,
		MetadataLength: int64(len(enc)),
		MetadataSHA256: sha256Hex(enc),
		RowCount:       rows,
		Duplicates:     lb.dups,
		Bytes:          total,
		Files:          len(handles),
		LogOffset:      logOffset,
	}
	if len(sink.files) > 0 {
		res.MinKey = hexKey(sink.files[0].smallest)
		res.MaxKey = hexKey(sink.files[len(sink.files)-1].largest)
	}
	return &bucketOutput{result: res, metaKey: metaKey, metadata: enc}, nil
}

// mergeBucket streams the bucket's pairs, deduplicated, into SST files:
// from every spilled run and in-memory chunk, oldest input first in
// priority order.
func (b *Builder) mergeBucket(ctx context.Context, bucket int, mem []*chunk, plan mergePlan, dir string) (_ *sstSink, dups int64, err error) {
	var srcs []source
	var prios []int
	var fanIn int
	for _, r := range b.sp.runs {
		if r.count(bucket) > 0 {
			fanIn++
		}
	}
	var bufs [][]byte
	if plan.mapped() {
		// The pool accounts its buffers against the budget (see srcBufs).
		if bufs, err = plan.bufs.get(ctx, fanIn); err != nil {
			return nil, 0, err
		}
		defer plan.bufs.put(bufs)
	} else {
		// A fan-in larger than the budget can buffer (tiny budgets only)
		// takes the bucket's share and goes over by the least buffers it
		// needs.
		bufMem := min(int64(fanIn)*int64(plan.bufSize+plan.frame), plan.share)
		if err := b.bud.acquire(ctx, bufMem); err != nil {
			return nil, 0, err
		}
		defer b.bud.release(bufMem)
	}
	var runSrcs []*runSource
	defer func() {
		for _, s := range runSrcs {
			s.release()
		}
	}()
	for _, r := range b.sp.runs {
		if r.count(bucket) > 0 {
			var s *runSource
			if plan.mapped() {
				s = newRunSourceOver(r, bucket, bufs[len(runSrcs)], plan.bufSize)
			} else if s, err = newRunSource(r, bucket, plan.bufSize); err != nil {
				return nil, 0, err
			}
			// A bucket is merged once: free the run's pages as they are
			// read, for the SST files to reuse.
			s.discard = true
			runSrcs = append(runSrcs, s)
			srcs = append(srcs, s)
			prios = append(prios, r.seq)
		}
	}
	dups = b.sp.dups[bucket]
	for _, c := range mem {
		if !c.sorted {
			// The tail: partitioned in Finish, sorted here bucket by bucket.
			start := time.Now()
			key, ok := c.sortBucket(bucket, b.opts.Duplicates)
			b.timed(timerSortSpill, start)
			if !ok {
				return nil, 0, b.duplicateError(bucket, key)
			}
		}
		dups += c.dups[bucket]
		if c.ends[bucket] > c.bounds[bucket] {
			srcs = append(srcs, newMemSource(c, bucket))
			prios = append(prios, c.seq)
		}
	}

	sink := newSSTSink(dir, b.wopts, b.opts.TargetFileSize)
	defer func() {
		if err != nil {
			sink.abort()
		}
	}()
	m := newMerger(srcs, prios)
	var prev []byte
	have := false
	for {
		k, v, ok := m.next()
		if !ok {
			break
		}
		if have && bytes.Equal(k, prev) {
			if b.opts.Duplicates == DuplicatesError {
				return nil, 0, b.duplicateError(bucket, bytes.Clone(k))
			}
			dups++
			continue
		}
		prev = append(prev[:0], k...)
		have = true
		if err := sink.add(k, v); err != nil {
			return nil, 0, err
		}
		if sink.rows&(1<<16-1) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
			b.progress(BucketProgress{Bucket: bucket, Phase: PhaseMerge, Rows: sink.rows, Bytes: sink.bytes})
		}
	}
	if m.err != nil {
		return nil, 0, m.err
	}
	if err := sink.finish(); err != nil {
		return nil, 0, err
	}
	return sink, dups, nil
}

// forEach runs fn(ctx, i) for i in [0, n) on at most workers goroutines. The
// first error cancels the others' ctx and is returned (errors that are only
// the consequence of that cancellation are dropped).
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
	}
	return first
}
