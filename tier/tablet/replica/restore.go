package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// Local layout of a replica directory.
const (
	dbDirName         = "db"
	checkpointDirName = "checkpoint"
)

// fileSum is the size and SHA-256 of a local SST file, and, when they
// were computed by reading it, the file's stamp from then (the upload then
// links the file without reading it again while it keeps that stamp).
type fileSum struct {
	size   int64
	sha256 string
	stamp  objstore.FileStamp
}

// Open opens the replica of id, restoring it from the snapshot from (nil:
// a new, empty replica that starts at changelog offset 0), then replays the
// changelog from the snapshot's log_offset to its end. Whatever a previous
// process left in the replica's local directory is discarded first.
//
// A restore fetches every file of from, shared and private, into
// {root}/{replica}/db/{local_path}, verifying each file's size and SHA-256
// (SSTs and blob files are hard links to their objects when the store is
// file:// on the same file system; see download), opens the Pebble
// database and replays. It is the one
// path for tablet-made and offline-built (snapshotbuild) snapshots. On any
// failure, integrity errors included (they wrap objstore.ErrIntegrity), the
// local directory is removed and no replica stays registered.
func (h *Host) Open(ctx context.Context, id ReplicaID, from *snapshot.Metadata) (_ *Replica, err error) {
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("replica: open: %w", err)
	}
	if _, err := h.store.Key(id.Target.TabletDir(int(id.Bucket))); err != nil {
		return nil, fmt.Errorf("replica: open %v: %w: target not in the host's store: %w", id, ErrInvalidRequest, err)
	}
	if from != nil {
		if err := checkSnapshot(id, from); err != nil {
			return nil, fmt.Errorf("replica: open %v: %w", id, err)
		}
	}
	logID := id.LogID()
	memTable, err := h.reserve(logID)
	if err != nil {
		return nil, fmt.Errorf("replica: open %v: %w", id, err)
	}
	defer h.opening.Done()
	r := &Replica{h: h, id: id, logID: logID, dir: filepath.Join(h.root, id.dirName()), memTableSize: memTable, bg: newBGErrors()}
	defer func() {
		if err != nil {
			err = fmt.Errorf("replica: open %v: %w", id, errors.Join(err, r.discard()))
			h.register(logID, nil)
		}
	}()
	if err := os.RemoveAll(r.dir); err != nil {
		return nil, err
	}
	dbDir := filepath.Join(r.dir, dbDirName)
	if err := os.MkdirAll(dbDir, 0o755); err != nil {
		return nil, err
	}
	r.sums = make(map[string]fileSum)
	if from != nil {
		if err := h.download(ctx, from, dbDir, r.sums); err != nil {
			return nil, err
		}
	}
	if r.db, err = pebble.Open(dbDir, h.pebbleOptions(id, memTable, from != nil, r.bg)); err != nil {
		return nil, fmt.Errorf("open pebble: %w", err)
	}
	if r.log, err = h.logs.Open(ctx, logID); err != nil {
		return nil, err
	}
	meta, err := r.initialMeta(from)
	if err != nil {
		return nil, err
	}
	if err := r.positionLog(ctx, meta.next); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.commitMetaLocked(meta); err != nil {
		return nil, err
	}
	if err := r.replayLocked(ctx, -1); err != nil {
		return nil, err
	}
	h.register(logID, r)
	h.log.Info("replica opened", "replica", id.String(), "snapshot", snapshotID(from),
		"applied", r.mu.meta.next-1, "rows", r.mu.meta.rows, "memtable", memTable)
	return r, nil
}

func snapshotID(m *snapshot.Metadata) int64 {
	if m == nil {
		return -1
	}
	return m.SnapshotID
}

// checkSnapshot checks that m belongs to id and that its files can be
// restored safely: unique, safe local paths and a digest on every file.
func checkSnapshot(id ReplicaID, m *snapshot.Metadata) error {
	partitioned := m.PartitionID != nil
	if m.TableID != id.Target.TableID || partitioned != id.Target.Partitioned() ||
		(partitioned && *m.PartitionID != id.Target.PartitionID) || m.BucketID != id.Bucket {
		part := "none"
		if partitioned {
			part = fmt.Sprint(*m.PartitionID)
		}
		return fmt.Errorf("%w: snapshot %d belongs to table %d partition %s bucket %d", ErrBadSnapshot,
			m.SnapshotID, m.TableID, part, m.BucketID)
	}
	if m.LogOffset < 0 || (m.RowCount != nil && *m.RowCount < 0) {
		return fmt.Errorf("%w: snapshot %d: negative log offset or row count", ErrBadSnapshot, m.SnapshotID)
	}
	seen := make(map[string]bool)
	for _, f := range snapshot.Files(m) {
		if err := snapshot.ValidateLocalPath(f.LocalPath); err != nil {
			return fmt.Errorf("%w: snapshot %d: %w", ErrBadSnapshot, m.SnapshotID, err)
		}
		if seen[f.LocalPath] {
			return fmt.Errorf("%w: snapshot %d: local path %q twice", ErrBadSnapshot, m.SnapshotID, f.LocalPath)
		}
		seen[f.LocalPath] = true
		if f.Handle.Size < 0 || !snapshot.IsCanonicalSHA256(f.Handle.SHA256) {
			return fmt.Errorf("%w: snapshot %d: file %q without a size and sha256", ErrBadSnapshot, m.SnapshotID, f.LocalPath)
		}
	}
	if err := snapshot.CheckLocalTree(slices.Sorted(maps.Keys(seen))); err != nil {
		return fmt.Errorf("%w: snapshot %d: %w", ErrBadSnapshot, m.SnapshotID, err)
	}
	return nil
}

// download fetches every file of m into dir, verifying size and SHA-256,
// and records the SST files' sums. Immutable files (SSTs and blob files,
// which Pebble never writes after creating them: compactions, ingestion
// and checkpoints only make new files or links, and obsolete ones are
// unlinked) come through objstore.GetFile, which on a file:// store on
// this file system makes them hard links to the snapshot's objects instead
// of copies. Every other file (MANIFEST, which Pebble appends to after
// open, OPTIONS, markers, WAL) is copied, so the objects never change.
func (h *Host) download(ctx context.Context, m *snapshot.Metadata, dir string, sums map[string]fileSum) error {
	files := snapshot.Files(m)
	err := forEach(ctx, len(files), h.opts.transfers, func(ctx context.Context, i int) error {
		return h.downloadFile(ctx, files[i], dir)
	})
	if err != nil {
		return fmt.Errorf("download snapshot %d: %w", m.SnapshotID, err)
	}
	for _, f := range files {
		if isSST(f.LocalPath) {
			sums[f.LocalPath] = fileSum{size: f.Handle.Size, sha256: f.Handle.SHA256}
		}
	}
	return nil
}

func (h *Host) downloadFile(ctx context.Context, f snapshot.KvFileHandle, dir string) (err error) {
	key, err := h.store.Key(f.Handle.Path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	dst := filepath.Join(dir, filepath.FromSlash(f.LocalPath))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if isImmutable(f.LocalPath) {
		if _, err := h.store.GetFile(ctx, key, dst, f.Handle.Size, f.Handle.SHA256); err != nil {
			return fmt.Errorf("download %s: %w", f.LocalPath, err)
		}
		return nil
	}
	rc, err := h.store.OpenVerified(ctx, key, f.Handle.Size, f.Handle.SHA256)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rc.Close()) }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, rc); err != nil {
		return errors.Join(fmt.Errorf("download %s: %w", f.LocalPath, err), out.Close())
	}
	return out.Close()
}

// isImmutable reports whether Pebble treats the file at localPath as
// immutable once written: an SST or a blob file.
func isImmutable(localPath string) bool {
	return isSST(localPath) || strings.HasSuffix(localPath, ".blob")
}

func isSST(localPath string) bool { return strings.HasSuffix(localPath, ".sst") }

// initialMeta decides the restored state: the snapshot's log_offset and
// row_count, cross-checked with the state record of a tablet-made
// snapshot. A snapshot without row_count or state record (not made by
// thaw) is counted.
func (r *Replica) initialMeta(from *snapshot.Metadata) (replicaMeta, error) {
	stored, found, err := r.readMeta()
	switch {
	case err != nil:
		return replicaMeta{}, err
	case from == nil:
		return replicaMeta{}, nil
	case found && stored.next != from.LogOffset:
		return replicaMeta{}, fmt.Errorf("%w: snapshot %d has log_offset %d but its database is at offset %d",
			ErrBadSnapshot, from.SnapshotID, from.LogOffset, stored.next)
	case found && from.RowCount != nil && stored.rows != *from.RowCount:
		return replicaMeta{}, fmt.Errorf("%w: snapshot %d has row_count %d but its database holds %d rows",
			ErrBadSnapshot, from.SnapshotID, *from.RowCount, stored.rows)
	case found:
		return stored, nil
	case from.RowCount != nil:
		return replicaMeta{next: from.LogOffset, rows: *from.RowCount}, nil
	}
	rows, err := r.countRows()
	return replicaMeta{next: from.LogOffset, rows: rows}, err
}

func (r *Replica) readMeta() (replicaMeta, bool, error) {
	v, closer, err := r.db.Get(metaKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return replicaMeta{}, false, nil
	}
	if err != nil {
		return replicaMeta{}, false, fmt.Errorf("read replica state: %w", err)
	}
	m, err := decodeMeta(v)
	return m, true, errors.Join(err, closer.Close())
}

func (r *Replica) countRows() (int64, error) {
	it, err := r.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	var n int64
	for it.First(); it.Valid(); it.Next() {
		if !bytes.Equal(it.Key(), metaKey) {
			n++
		}
	}
	return n, errors.Join(it.Error(), it.Close())
}

// positionLog makes the changelog usable from next on. A log that holds
// no records and ends below next (a fresh log under a bulk-loaded
// snapshot) is moved up to next with ResetTo; otherwise next must lie in
// [start, end]. An emptied log ending above next is not reset: reusing
// offsets is the caller's decision (ResetTo before Open).
func (r *Replica) positionLog(ctx context.Context, next int64) error {
	start, end, err := r.log.Offsets(ctx)
	if err != nil {
		return err
	}
	if start == end && end < next {
		if err := r.log.ResetTo(ctx, next); err != nil {
			return fmt.Errorf("reset changelog to %d: %w", next, err)
		}
		// Expected under a bulk-loaded snapshot on a log that never held
		// its records; under any other snapshot the log was lost or
		// recreated, and the writes after the snapshot with it.
		r.h.log.Warn("changelog reset: it held no records and ended below the snapshot's log offset; "+
			"unless the snapshot was bulk loaded, writes after it were in a lost or recreated changelog",
			"replica", r.id.String(), "log_end", end, "offset", next)
		return nil
	}
	if next < start || next > end {
		return fmt.Errorf("%w: replay from %d, changelog holds [%d, %d)", ErrLogGap, next, start, end)
	}
	return nil
}
