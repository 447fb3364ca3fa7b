package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/meta"
)

// cleanAborted deletes what an aborted transaction's builders left in the
// snap-{id} directories the transaction reserved (one per bucket; the ids
// were allocated for it alone, so nothing else writes there): every object
// under such a directory that no snapshot registry entry of the bucket
// references and that no live transaction reserved, the _METADATA objects
// first (a directory without one is an incomplete snapshot). If a
// registered snapshot's _METADATA cannot be read, the bucket is left
// alone: what it references cannot be known. It returns how many objects
// it deleted.
func (m *bulkManager) cleanAborted(ctx context.Context, rec bulkload.Record) (int, error) {
	objs := m.c.bulkObjects
	if objs == nil || rec.State != bulkload.Aborted || rec.SnapshotIDs == nil {
		return 0, nil
	}
	tgt := meta.BulkLoadTarget(&rec)
	st := snapshot.Target{RemoteDir: rec.RemoteDataDir, Database: rec.Target.Database, Table: rec.Target.Table,
		TableID: rec.TableID, Partition: rec.Target.Partition, PartitionID: rec.PartitionID}
	reserved := make(map[string]bool)
	for _, r := range m.runnersOf(&tgt) {
		v := r.view()
		if v.rec.State.Terminal() || v.rec.TxnID == rec.TxnID {
			continue
		}
		for b, id := range v.rec.SnapshotIDs {
			reserved[st.SnapshotDir(b, id)] = true
		}
	}
	deleted := 0
	var errs []error
	for b, id := range rec.SnapshotIDs {
		dir := st.SnapshotDir(b, id)
		if reserved[dir] {
			continue
		}
		n, err := m.cleanDir(ctx, objs, tgt, b, dir)
		deleted += n
		if err != nil {
			errs = append(errs, fmt.Errorf("bucket %d: %w", b, err))
		}
	}
	m.c.m.bulk.orphans.Add(float64(deleted))
	if deleted > 0 {
		m.log.Info("coordinator deleted an aborted bulk load's output", "txn", rec.TxnID, "objects", deleted)
	}
	return deleted, errors.Join(errs...)
}

// cleanDir deletes the unreferenced objects under one snapshot directory
// of bucket b.
func (m *bulkManager) cleanDir(ctx context.Context, objs BulkObjectStore, tgt meta.Target, b int, dir string) (int, error) {
	refs, err := m.registryRefs(ctx, tgt, b)
	if err != nil {
		return 0, err
	}
	prefix, err := objs.Key(dir)
	if err != nil {
		return 0, fmt.Errorf("coordinator: clean %s: %w", dir, err)
	}
	prefix += "/"
	var uris []string
	for a, err := range objs.List(ctx, prefix) {
		if err != nil {
			return 0, fmt.Errorf("coordinator: list %s: %w", dir, err)
		}
		uri := dir + "/" + strings.TrimPrefix(a.Key, prefix)
		if !refs[uri] {
			uris = append(uris, uri)
		}
	}
	// _METADATA first, so that nothing is ever left that names a deleted file.
	slices.SortStableFunc(uris, func(a, b string) int {
		am, bm := isMetadataURI(a), isMetadataURI(b)
		switch {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		}
		return 0
	})
	for i, uri := range uris {
		key, err := objs.Key(uri)
		if err == nil {
			err = objs.Delete(ctx, key)
		}
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return i, fmt.Errorf("coordinator: delete %s: %w", uri, err)
		}
	}
	return len(uris), nil
}

// registryRefs returns every object the registered snapshots of bucket b
// reference: their _METADATA and their files.
func (m *bulkManager) registryRefs(ctx context.Context, tgt meta.Target, b int) (map[string]bool, error) {
	snaps, err := m.c.store.ListSnapshots(ctx, tgt, b)
	if err != nil {
		return nil, err
	}
	refs := make(map[string]bool)
	for _, s := range snaps {
		refs[s.Value.MetadataPath] = true
		md, err := m.c.readMetadata(ctx, s.Value.MetadataPath)
		if err != nil {
			return nil, fmt.Errorf("coordinator: read snapshot %d of bucket %d: %w", s.Value.SnapshotID, b, err)
		}
		for _, f := range slices.Concat(md.SharedFiles, md.PrivateFiles) {
			refs[f.Handle.Path] = true
		}
	}
	return refs, nil
}
