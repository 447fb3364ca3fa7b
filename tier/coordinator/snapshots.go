package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierpb"
)

// reportSnapshot registers a snapshot a bucket leader completed and applies
// retention to the bucket:
//
//  1. the request names a live target and bucket, and its leader epoch is
//     the bucket's current one (else STALE_EPOCH: a deposed bucket leader
//     registers nothing);
//  2. its metadata path is the canonical one, and the _METADATA there
//     describes exactly this snapshot (ids, bucket, log offset, location);
//  3. every shared file it references is in the store (missingShared);
//  4. the registry entry is added (guarded; idempotent);
//  5. retention keeps the SnapshotRetention newest entries: it removes the
//     others from the registry first, then deletes their _METADATA, then
//     their files that no retained snapshot references (see garbage).
//
// Reports of one bucket are serialized (snapLocks); step 5 failing to delete
// an object only leaks it (logged and counted), it fails nothing.
func (c *Coordinator) reportSnapshot(ctx context.Context, m *tierv1.ReportSnapshotRequest) (*tierv1.ReportSnapshotResponse, error) {
	t, err := c.leading(ctx)
	if err != nil {
		return nil, err
	}
	tgt := meta.Target{TableID: m.GetTarget().GetTableId(), PartitionID: m.GetTarget().GetPartitionId()}
	bucket, id := int(m.GetBucket()), m.GetSnapshotId()
	switch {
	case m.GetTarget() == nil || tgt.TableID < 1 || tgt.PartitionID < 0:
		return nil, invalid("report snapshot: target %v", m.GetTarget())
	case bucket < 0 || id < 1 || m.GetLogOffset() < 0 || m.GetLeaderEpoch() < 0:
		return nil, invalid("report snapshot: bucket %d, snapshot id %d, log offset %d, leader epoch %d", bucket, id, m.GetLogOffset(), m.GetLeaderEpoch())
	case m.GetMetadataPath() == "":
		return nil, invalid("report snapshot: no metadata path")
	case m.GetServerId() != "" && !isServerID(m.GetServerId()):
		return nil, invalid("report snapshot: server id %q", m.GetServerId())
	}
	what := fmt.Sprintf("report snapshot %d of %s bucket %d", id, tgt, bucket)

	mu := c.snapLock(tgt, bucket)
	mu.Lock()
	defer mu.Unlock()

	ts, err := c.targetByID(ctx, tgt)
	if err != nil {
		return nil, err
	}
	buckets := ts.assignment.Value.Buckets
	if bucket >= len(buckets) {
		return nil, notFound("%s: the target has %d buckets", what, len(buckets))
	}
	ba := buckets[bucket]
	switch {
	case m.GetLeaderEpoch() != ba.LeaderEpoch:
		return nil, tierpb.NewStaleEpochError(fmt.Sprintf("coordinator: %s: leader epoch %d, the bucket's is %d", what, m.GetLeaderEpoch(), ba.LeaderEpoch), int64(ba.LeaderEpoch))
	case m.GetServerId() != "" && m.GetServerId() != ba.Leader:
		return nil, tierpb.NewStaleEpochError(fmt.Sprintf("coordinator: %s: server %s does not lead the bucket (%q does)", what, m.GetServerId(), ba.Leader), int64(ba.LeaderEpoch))
	}
	if state, bl := dataStateOf(ts); state == tierv1.DataState_DATA_STATE_LOADING {
		return nil, tierpb.NewTargetLoadingError(fmt.Sprintf("coordinator: %s: the target is loading", what), state, bl)
	}
	st := snapshotTargetOf(ts)
	if want := st.MetadataPath(bucket, id); m.GetMetadataPath() != want {
		return nil, invalid("%s: metadata path %q, want %q", what, m.GetMetadataPath(), want)
	}
	doc, err := c.readMetadata(ctx, m.GetMetadataPath())
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrOutsideStore) || errors.Is(err, objstore.ErrInvalidKey) || errors.Is(err, snapshot.ErrSyntax) || isDecodeError(err) {
			return nil, invalid("%s: %v", what, err)
		}
		return nil, unavailable("%s: %v", what, err)
	}
	if msg := checkMetadata(doc, tgt, bucket, id, m.GetLogOffset(), st.SnapshotDir(bucket, id)); msg != "" {
		return nil, invalid("%s: _METADATA %s", what, msg)
	}
	missing, err := c.missingShared(ctx, doc)
	switch {
	case err != nil:
		return nil, unavailable("%s: %v", what, err)
	case len(missing) > 0:
		files := "shared files"
		if len(missing) == 1 {
			files = "shared file"
		}
		return nil, invalid("%s: _METADATA references %d %s the store does not hold (%s; deleted by retention, or never there): the leader's next snapshot uploads every file",
			what, len(missing), files, strings.Join(missing[:min(len(missing), 3)], ", "))
	}
	// A new snapshot (ids only grow) below the latest one's log offset (a
	// replica that lagged it: the changelog may be truncated past its
	// state) would become the bucket's latest, restored by every replica,
	// and push out by retention the snapshots that hold what the log no
	// longer does. An older id reported again is idempotent.
	switch latest, err := c.store.LatestSnapshot(ctx, tgt, bucket); {
	case errors.Is(err, meta.ErrNotFound):
	case err != nil:
		return nil, c.rpcError(ctx, what, err)
	case id > latest.Value.SnapshotID && latest.Value.LogOffset > m.GetLogOffset():
		return nil, invalid("%s: log offset %d is below the latest snapshot's (%d at %d): the replica lags it", what, m.GetLogOffset(), latest.Value.SnapshotID, latest.Value.LogOffset)
	}
	snap := meta.BucketSnapshot{SnapshotID: id, LogOffset: m.GetLogOffset(), MetadataPath: m.GetMetadataPath()}
	if _, err := c.store.AddSnapshot(ctx, t.guard, tgt, bucket, snap); err != nil {
		return nil, c.rpcError(ctx, what, err)
	}
	c.log.Info("coordinator registered snapshot", "target", tgt.String(), "bucket", bucket, "snapshot", id, "log_offset", m.GetLogOffset())

	kept, err := c.retain(ctx, t, tgt, bucket, st.TabletDir(bucket), map[int64]*snapshot.Metadata{id: doc})
	if err != nil {
		return nil, c.rpcError(ctx, what+": retention", err)
	}
	resp := &tierv1.ReportSnapshotResponse{OldestRetainedLogOffset: oldestLogOffset(kept)}
	for _, e := range kept {
		resp.Retained = append(resp.Retained, &tierv1.BucketSnapshot{Bucket: int32(bucket), SnapshotId: e.ID, LogOffset: e.LogOffset, MetadataPath: e.MetadataPath})
	}
	return resp, nil
}

// missingShared returns the shared files doc references that the store
// does not hold. A shared file outlives the snapshot that uploaded it only
// while a registered snapshot references it: retention deletes it with the
// last one. A leader whose snapshot reused such a file (built on a
// snapshot retention has dropped since, or adopting an object a concurrent
// retention then deleted) would register a snapshot no replica can
// restore. It runs under the bucket's report lock, after any earlier
// report's retention finished; what exists now stays, as registering makes
// it referenced. Private files live in the snapshot's own directory, which
// only the retention of this snapshot deletes.
func (c *Coordinator) missingShared(ctx context.Context, doc *snapshot.Metadata) ([]string, error) {
	missing := make([]bool, len(doc.SharedFiles))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Fanout)
	for i, f := range doc.SharedFiles {
		g.Go(func() error {
			key, err := c.objects.Key(f.Handle.Path)
			if err == nil {
				_, err = c.objects.Stat(gctx, key)
			}
			switch {
			case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrOutsideStore), errors.Is(err, objstore.ErrInvalidKey):
				missing[i] = true
			case err != nil:
				return fmt.Errorf("shared file %s: %w", f.Handle.Path, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []string
	for i, m := range missing {
		if m {
			out = append(out, doc.SharedFiles[i].LocalPath)
		}
	}
	return out, nil
}

// retain applies retention to one bucket and returns the entries it keeps,
// newest first. known holds documents already read, by snapshot id.
func (c *Coordinator) retain(ctx context.Context, t *term, tgt meta.Target, bucket int, bucketDir string, known map[int64]*snapshot.Metadata) ([]snapshotEntry, error) {
	vs, err := c.store.ListSnapshots(ctx, tgt, bucket)
	if err != nil {
		return nil, err
	}
	entries := make([]snapshotEntry, len(vs))
	for i, v := range vs {
		entries[i] = snapshotEntry{ID: v.Value.SnapshotID, LogOffset: v.Value.LogOffset, MetadataPath: v.Value.MetadataPath}
	}
	retained, removed := splitRetained(entries, c.cfg.SnapshotRetention)
	if len(removed) == 0 {
		return retained, nil
	}
	log := c.log.With("target", tgt.String(), "bucket", bucket)
	docs := c.readDocs(ctx, log, slices.Concat(retained, removed), known)
	// What a snapshot whose document could not be read references is
	// unknown. Its registry entry is the only way to its files, and what
	// the others share with it cannot be told: while a retained one, or a
	// removed one whose document is only unreadable for now, is unknown,
	// nothing is pruned (a kept one's shared files went with the ones
	// pruned beside it). It is tried again at the next report. Keeping
	// more only truncates the changelog less.
	for i, d := range docs {
		if d.doc == nil && (i < len(retained) || d.unread) {
			log.Warn("coordinator prunes no snapshot: the document of one it keeps or would prune could not be read", "snapshot", d.entry.ID)
			return slices.Concat(retained, removed), nil
		}
	}
	retainedDocs, removedDocs := docs[:len(retained)], docs[len(retained):]
	objects, skipped := garbage(bucketDir, retainedDocs, removedDocs)
	if skipped > 0 {
		log.Warn("coordinator leaves files of pruned snapshots: a snapshot document could not be read", "snapshots", skipped)
	}
	// The files first, each pruned snapshot's _METADATA after them, the
	// registry entries last: a delete that fails, or stops with the term,
	// leaves the entries, and the bucket's next retention pass (this
	// leader's or a successor's) reads the documents again and deletes
	// what is left. With the entries gone first, nothing ever found those
	// objects again. A pruned snapshot is never restored (the latest is),
	// and one that a leader's next snapshot builds on while its files go
	// is refused at that report (a shared file is missing).
	//
	// Object deletes cannot be fenced: they stop with the term, so that a
	// deposed coordinator does not go on deleting while its successor
	// registers snapshots.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(t.l.Context(), cancel)()
	var files []string
	metas := map[string]bool{}
	for _, uri := range objects {
		if isMetadataURI(uri) {
			metas[uri] = true
		} else {
			files = append(files, uri)
		}
	}
	deleted, failed := c.deleteEach(dctx, files)
	// Snapshot by snapshot: one whose files all went loses its _METADATA,
	// then its registry entry; one a file of which is left keeps both, and
	// so does nothing else.
	pruned, left := 0, 0
	for _, d := range removedDocs {
		if d.doc != nil {
			kept := false
			for _, f := range snapshot.Files(d.doc) {
				kept = kept || failed[f.Handle.Path] != nil
			}
			if md := d.entry.MetadataPath; !kept && metas[md] {
				if err := c.deleteObject(dctx, md); err != nil {
					failed[md] = err
					kept = true
				} else {
					deleted++
				}
			}
			if kept {
				left++
				continue
			}
		}
		if err := c.store.DeleteSnapshot(ctx, t.guard, tgt, bucket, d.entry.ID); err != nil && !errors.Is(err, meta.ErrNotFound) {
			c.m.snapshotsPruned.Add(float64(pruned))
			c.m.filesDeleted.Add(float64(deleted))
			return nil, err
		}
		pruned++
	}
	c.m.snapshotsPruned.Add(float64(pruned))
	c.m.filesDeleted.Add(float64(deleted))
	if len(failed) > 0 {
		c.m.filesLeaked.Add(float64(len(failed)))
		log.Warn("coordinator could not delete every file of pruned snapshots; the bucket's next retention pass tries again",
			"deleted", deleted, "failed", len(failed), "snapshots_left", left, "err", errors.Join(slices.Collect(maps.Values(failed))...))
	}
	log.Info("coordinator pruned snapshots", "pruned", pruned, "kept", len(retained), "deleted_files", deleted)
	return retained, nil
}

// readDocs reads the _METADATA of every entry, Fanout at a time; a document
// that cannot be read or does not describe its entry is nil.
func (c *Coordinator) readDocs(ctx context.Context, log *slog.Logger, entries []snapshotEntry, known map[int64]*snapshot.Metadata) []snapshotDoc {
	docs := make([]snapshotDoc, len(entries))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Fanout)
	for i, e := range entries {
		docs[i].entry = e
		if d, ok := known[e.ID]; ok {
			docs[i].doc = d
			continue
		}
		g.Go(func() error {
			d, err := c.readMetadata(gctx, e.MetadataPath)
			// Gone, outside the store, or read and wrong: no later read
			// tells more. Anything else may read at the next try.
			docs[i].unread = err != nil && !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrOutsideStore) && !isDecodeError(err)
			if err == nil && d.SnapshotID != e.ID {
				err = fmt.Errorf("document of snapshot %d at %s names snapshot %d", e.ID, e.MetadataPath, d.SnapshotID)
			}
			if err != nil {
				log.Warn("coordinator cannot read a snapshot document", "snapshot", e.ID, "err", err)
				return nil
			}
			docs[i].doc = d
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil
	return docs
}

// deleteObjects deletes the objects of uris, the files Fanout at a time,
// then (only if every file went) the _METADATA objects one by one,
// stopping at the first failure: a document stays until the files it
// lists are gone, so a later pass can list them again. A missing object
// counts as deleted. It returns how many it deleted.
func (c *Coordinator) deleteObjects(ctx context.Context, uris []string) (int, error) {
	var metas, files []string
	for _, uri := range uris {
		if isMetadataURI(uri) {
			metas = append(metas, uri)
		} else {
			files = append(files, uri)
		}
	}
	deleted, failed := c.deleteEach(ctx, files)
	if len(failed) > 0 {
		return deleted, errors.Join(slices.Collect(maps.Values(failed))...)
	}
	for _, uri := range metas {
		if err := c.deleteObject(ctx, uri); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

// deleteEach deletes uris Fanout at a time; it returns how many went and
// the error of each that did not.
func (c *Coordinator) deleteEach(ctx context.Context, uris []string) (int, map[string]error) {
	var (
		mu      sync.Mutex
		deleted int
	)
	failed := map[string]error{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.cfg.Fanout)
	for _, uri := range uris {
		g.Go(func() error {
			err := c.deleteObject(gctx, uri)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[uri] = err
			} else {
				deleted++
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil
	return deleted, failed
}

// deleteObject deletes the object at uri; a missing one counts as deleted.
func (c *Coordinator) deleteObject(ctx context.Context, uri string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("coordinator: delete %s: %w", uri, err)
	}
	key, err := c.objects.Key(uri)
	if err != nil {
		return err
	}
	if err := c.objects.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("coordinator: delete %s: %w", uri, err)
	}
	return nil
}

func isMetadataURI(uri string) bool {
	return len(uri) > len(snapshot.MetadataFileName) && uri[len(uri)-len(snapshot.MetadataFileName)-1:] == "/"+snapshot.MetadataFileName
}

// readMetadata reads and decodes a _METADATA document.
func (c *Coordinator) readMetadata(ctx context.Context, uri string) (*snapshot.Metadata, error) {
	key, err := c.objects.Key(uri)
	if err != nil {
		return nil, err
	}
	b, err := c.objects.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return snapshot.DecodeMetadata(b)
}

func isDecodeError(err error) bool {
	var de *snapshot.DecodeError
	return errors.As(err, &de)
}

// checkMetadata returns what is wrong with a reported snapshot's document,
// or "".
func checkMetadata(d *snapshot.Metadata, tgt meta.Target, bucket int, id, logOffset int64, location string) string {
	switch {
	case d.TableID != tgt.TableID:
		return fmt.Sprintf("names table id %d", d.TableID)
	case tgt.Partitioned() && (d.PartitionID == nil || *d.PartitionID != tgt.PartitionID):
		return fmt.Sprintf("names partition id %v, want %d", d.PartitionID, tgt.PartitionID)
	case !tgt.Partitioned() && d.PartitionID != nil:
		return fmt.Sprintf("names partition id %d of a non-partitioned table", *d.PartitionID)
	case int(d.BucketID) != bucket:
		return fmt.Sprintf("names bucket %d", d.BucketID)
	case d.SnapshotID != id:
		return fmt.Sprintf("names snapshot %d", d.SnapshotID)
	case d.LogOffset != logOffset:
		return fmt.Sprintf("has log offset %d, the report %d", d.LogOffset, logOffset)
	case d.SnapshotLocation != location:
		return fmt.Sprintf("has location %q, want %q", d.SnapshotLocation, location)
	}
	return ""
}

// snapshotTargetOf returns the snapshot layout target of a target.
func snapshotTargetOf(ts *targetState) snapshot.Target {
	st := ts.table.Value.SnapshotTarget()
	if ts.partition != nil {
		st.Partition, st.PartitionID = ts.partition.Value.Name, ts.partition.Value.ID
	}
	return st
}

// snapLock returns the lock serializing the reports of one bucket.
func (c *Coordinator) snapLock(tgt meta.Target, bucket int) *sync.Mutex {
	h := uint64(tgt.TableID)*1_000_003 ^ uint64(tgt.PartitionID)*10_007 ^ uint64(bucket)
	return &c.snapLocks[h%uint64(len(c.snapLocks))]
}

// targetByID reads the live target with the given ids and its assignment;
// NOT_FOUND if there is none. Names are looked up through a cache of id →
// name, refreshed by a listing on a miss.
func (c *Coordinator) targetByID(ctx context.Context, tgt meta.Target) (*targetState, error) {
	tv, err := c.tableByID(ctx, tgt.TableID)
	if err != nil {
		return nil, err
	}
	ts := &targetState{table: tv}
	switch {
	case tv.Value.Partitioned() != tgt.Partitioned():
		return nil, notFound("%s: table %s.%s is %s", tgt, tv.Value.Database, tv.Value.Name, map[bool]string{true: "partitioned", false: "not partitioned"}[tv.Value.Partitioned()])
	case tgt.Partitioned():
		pv, err := c.partitionByID(ctx, tgt.TableID, tgt.PartitionID)
		if err != nil {
			return nil, err
		}
		ts.partition = &pv
	}
	a, err := c.store.GetAssignment(ctx, tgt)
	if err != nil {
		return nil, c.rpcError(ctx, "read assignment of "+tgt.String(), err)
	}
	ts.assignment = a
	return ts, nil
}

// tableName is a table's database and name.
type tableName struct{ db, name string }

func (c *Coordinator) tableByID(ctx context.Context, id int64) (meta.Versioned[meta.TableRecord], error) {
	c.names.Lock()
	n, ok := c.names.tables[id]
	c.names.Unlock()
	if ok {
		tv, err := c.store.GetTable(ctx, n.db, n.name)
		if err == nil && tv.Value.ID == id && !tv.Value.Dropping {
			return tv, nil
		}
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			return tv, c.rpcError(ctx, fmt.Sprintf("read table id %d", id), err)
		}
	}
	tables, err := c.store.ListTables(ctx, "")
	if err != nil {
		return meta.Versioned[meta.TableRecord]{}, c.rpcError(ctx, "list tables", err)
	}
	var found *meta.Versioned[meta.TableRecord]
	c.names.Lock()
	c.names.tables = make(map[int64]tableName, len(tables))
	for i, tv := range tables {
		c.names.tables[tv.Value.ID] = tableName{tv.Value.Database, tv.Value.Name}
		if tv.Value.ID == id && !tv.Value.Dropping {
			found = &tables[i]
		}
	}
	c.names.Unlock()
	if found == nil {
		return meta.Versioned[meta.TableRecord]{}, notFound("no table with id %d", id)
	}
	return *found, nil
}

func (c *Coordinator) partitionByID(ctx context.Context, tableID, id int64) (meta.Versioned[meta.PartitionRecord], error) {
	tgt := meta.Target{TableID: tableID, PartitionID: id}
	c.names.Lock()
	n, ok := c.names.partitions[tgt]
	c.names.Unlock()
	if ok {
		pv, err := c.store.GetPartition(ctx, tableID, n)
		if err == nil && pv.Value.ID == id && !pv.Value.Dropping {
			return pv, nil
		}
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			return pv, c.rpcError(ctx, "read "+tgt.String(), err)
		}
	}
	parts, err := c.store.ListPartitions(ctx, tableID)
	if err != nil {
		return meta.Versioned[meta.PartitionRecord]{}, c.rpcError(ctx, "list partitions", err)
	}
	var found *meta.Versioned[meta.PartitionRecord]
	c.names.Lock()
	if c.names.partitions == nil {
		c.names.partitions = make(map[meta.Target]string)
	}
	for t := range c.names.partitions {
		if t.TableID == tableID {
			delete(c.names.partitions, t)
		}
	}
	for i, pv := range parts {
		c.names.partitions[pv.Value.Target()] = pv.Value.Name
		if pv.Value.ID == id && !pv.Value.Dropping {
			found = &parts[i]
		}
	}
	c.names.Unlock()
	if found == nil {
		return meta.Versioned[meta.PartitionRecord]{}, notFound("no %s", tgt)
	}
	return *found, nil
}
