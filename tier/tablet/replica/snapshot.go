package replica

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// sharedFileName is the object name of a shared SST snapshot snapshotID
// uploads under {tablet}/shared/: named by content and by the snapshot, so
// a retried upload of the same snapshot finds (and adopts) its own object,
// but a snapshot never adopts an object another one uploaded (later
// snapshots reference it through their base instead). Such an object may
// be garbage a coordinator's retention is deleting, perhaps a deposed
// coordinator whose delete nothing fences: adopting it, a registered
// snapshot would lose a file. (Fluss names them by random UUIDs.)
func sharedFileName(sha string, snapshotID int64) string {
	return "shared-" + sha + "-s" + strconv.FormatInt(snapshotID, 10) + ".sst"
}

// localFile is one file of a local checkpoint.
type localFile struct {
	name string // local_path: Pebble's file name
	path string
	fileSum
}

// upload is one object a snapshot writes.
type upload struct {
	uri  string
	file localFile
}

// Snapshot takes an ordinary snapshot with id snapshotID and uploads it;
// prev is the bucket's previous completed snapshot (nil: none). It flushes
// the memtable, checkpoints the database into a temporary directory under
// the replica's (removed afterwards) and uploads:
//
//   - every *.sst file as a shared file {tablet}/shared/shared-{sha256}-s{id}.sst,
//     except that an SST listed among prev's shared files with the same
//     local_path, size and SHA-256 is referenced, not uploaded again;
//   - every other file (MANIFEST, OPTIONS, markers, the empty WAL) as a
//     private file snap-{id}/private-{sha256}-{sha256(local_path)};
//   - then _METADATA, last.
//
// log_offset is the offset of the first record the checkpoint does not
// hold (applied offset + 1: the log end offset when the snapshot was
// taken, as in Fluss), row_count the rows it holds, and
// snapshot_incremental_size the bytes of the files not taken over from
// prev. SSTs are stored with objstore.PutFile (verified against the size
// and SHA-256 the snapshot records; on a file:// store on this file system
// a hard link to the file, which Pebble never writes again), other files
// with PutIfAbsent copies. Both write only if absent, so a retry after a
// failure adopts what the failed attempt uploaded; a retry whose
// _METADATA differs from one already written fails with
// objstore.ErrConflict: use a new snapshot id. Writes wait only while the
// memtable left after a first flush is flushed and checkpointed.
//
// It returns the metadata and the URI of its _METADATA. Registering the
// snapshot with the coordinator is the caller's job.
func (r *Replica) Snapshot(ctx context.Context, snapshotID int64, prev *snapshot.Metadata) (_ *snapshot.Metadata, metadataPath string, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("replica: snapshot %d of %v: %w", snapshotID, r.id, err)
		}
	}()
	if snapshotID < 0 {
		return nil, "", fmt.Errorf("%w: negative snapshot id", ErrInvalidRequest)
	}
	if prev != nil {
		if err := checkSnapshot(r.id, prev); err != nil {
			return nil, "", fmt.Errorf("previous snapshot: %w", err)
		}
		if prev.SnapshotID == snapshotID {
			return nil, "", fmt.Errorf("%w: previous snapshot has the same id", ErrInvalidRequest)
		}
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()

	dir := filepath.Join(r.dir, fmt.Sprintf("%s-%d", checkpointDirName, snapshotID))
	if err := os.RemoveAll(dir); err != nil {
		return nil, "", err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	meta, err := r.checkpoint(ctx, dir)
	if err != nil {
		return nil, "", err
	}
	// A state the changelog no longer continues (truncated past it after a
	// newer snapshot, while this replica lagged) would be restored by no
	// one: refused. The log's start only grows, so checking after the
	// checkpoint errs on the safe side. So is a state past the log's end
	// (a ResetTo moved the log back below it): its offset names records
	// of another history.
	if start, end, err := r.LogOffsets(ctx); err != nil {
		return nil, "", err
	} else if start > meta.next {
		return nil, "", fmt.Errorf("%w: the state is at offset %d, the changelog starts at %d (the replica lags a newer snapshot)", ErrLogGap, meta.next, start)
	} else if end < meta.next {
		return nil, "", fmt.Errorf("%w: the state is at offset %d, the changelog ends at %d (it was moved back by a reset)", ErrLogGap, meta.next, end)
	}
	files, err := r.checkpointFiles(dir)
	if err != nil {
		return nil, "", err
	}

	t, bucket := r.id.Target, int(r.id.Bucket)
	md := &snapshot.Metadata{
		TableID:          t.TableID,
		BucketID:         r.id.Bucket,
		SnapshotID:       snapshotID,
		SnapshotLocation: t.SnapshotDir(bucket, snapshotID),
		SharedFiles:      []snapshot.KvFileHandle{},
		PrivateFiles:     []snapshot.KvFileHandle{},
		LogOffset:        meta.next,
		RowCount:         &meta.rows,
	}
	if t.Partitioned() {
		md.PartitionID = &t.PartitionID
	}
	prevShared := make(map[string]snapshot.KvFileHandle)
	if prev != nil {
		for _, f := range prev.SharedFiles {
			prevShared[f.LocalPath] = f
		}
	}
	var uploads []upload
	for _, f := range files {
		if !isSST(f.name) {
			u := upload{uri: md.SnapshotLocation + "/" + snapshot.PrivateFileName(f.sha256, f.name), file: f}
			md.PrivateFiles = append(md.PrivateFiles, u.handle())
			uploads = append(uploads, u)
			continue
		}
		if p, ok := prevShared[f.name]; ok && p.Handle.Size == f.size && p.Handle.SHA256 == f.sha256 {
			md.SharedFiles = append(md.SharedFiles, p)
			continue
		}
		u := upload{uri: t.SharedDir(bucket) + "/" + sharedFileName(f.sha256, snapshotID), file: f}
		md.SharedFiles = append(md.SharedFiles, u.handle())
		uploads = append(uploads, u)
	}
	for _, u := range uploads {
		md.IncrementalSize += u.file.size
	}
	err = forEach(ctx, len(uploads), r.h.opts.transfers, func(ctx context.Context, i int) error {
		u := uploads[i]
		if isSST(u.file.name) {
			return r.h.putFile(ctx, u.uri, u.file.path, u.file.fileSum)
		}
		return r.h.put(ctx, u.uri, objstore.FileSource(u.file.path), u.file.fileSum)
	})
	if err != nil {
		return nil, "", err
	}
	body, err := snapshot.EncodeMetadata(md)
	if err != nil {
		return nil, "", err
	}
	metadataPath = t.MetadataPath(bucket, snapshotID)
	if err := r.h.put(ctx, metadataPath, objstore.BytesSource(body), sumOf(body)); err != nil {
		return nil, "", err
	}
	r.h.log.Info("snapshot uploaded", "replica", r.id.String(), "snapshot", snapshotID,
		"log_offset", md.LogOffset, "rows", meta.rows, "files", len(files), "uploaded", len(uploads),
		"incremental_bytes", md.IncrementalSize)
	return md, metadataPath, nil
}

func (u upload) handle() snapshot.KvFileHandle {
	return snapshot.KvFileHandle{
		Handle:    snapshot.FileHandle{Path: u.uri, Size: u.file.size, SHA256: u.file.sha256},
		LocalPath: u.file.name,
	}
}

// put writes the object at uri if absent and checks that the stored
// object is the expected one.
func (h *Host) put(ctx context.Context, uri string, src objstore.Source, want fileSum) error {
	key, err := h.store.Key(uri)
	if err != nil {
		return err
	}
	obj, err := h.store.PutIfAbsent(ctx, key, src)
	if err != nil {
		return err
	}
	if obj.Size != want.size || obj.SHA256 != want.sha256 {
		return fmt.Errorf("upload %s: wrote size %d sha256 %s, expected size %d sha256 %s (file changed)",
			key, obj.Size, obj.SHA256, want.size, want.sha256)
	}
	return nil
}

// putFile stores the immutable local file at path (an SST of a
// checkpoint: a hard link to the database's file, which Pebble never
// writes again) at uri if absent, through objstore.PutFileStamped: it
// checks the file against want before anything is stored (without reading
// it again if it still has the stamp it had when it was hashed), and on a
// file:// store on this file system the object becomes a hard link to the
// file instead of a copy. Only immutable files may go this way, since the
// object is the file afterwards.
func (h *Host) putFile(ctx context.Context, uri, path string, want fileSum) error {
	key, err := h.store.Key(uri)
	if err != nil {
		return err
	}
	if _, err := h.store.PutFileStamped(ctx, key, path, want.size, want.sha256, want.stamp); err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	return nil
}

// checkpoint flushes and checkpoints the database into dir and returns
// the state the checkpoint holds. The first flush runs alongside writes;
// the second, under the apply lock with the checkpoint, catches what
// arrived meanwhile, so the checkpoint holds exactly meta.
func (r *Replica) checkpoint(ctx context.Context, dir string) (replicaMeta, error) {
	r.lifecycle.RLock()
	defer r.lifecycle.RUnlock()
	if r.closed {
		return replicaMeta{}, ErrClosed
	}
	if err := r.flush(ctx); err != nil {
		return replicaMeta{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.flush(ctx); err != nil {
		return replicaMeta{}, err
	}
	if err := r.db.Checkpoint(dir); err != nil {
		return replicaMeta{}, fmt.Errorf("checkpoint: %w", err)
	}
	return r.mu.meta, nil
}

// flush flushes the database's memtables, waiting until they are flushed,
// ctx ends, or background errors go on for flushErrorGrace (a flush that
// fails: Pebble retries it for as long as it fails, and DB.Flush waits for
// as long, with the locks the caller holds: a full disk hung Snapshot, the
// writes behind its apply lock and Close). A single background error (a
// compaction's, a flush its retry then completes) fails nothing.
func (r *Replica) flush(ctx context.Context) error {
	failed := r.bg.next()
	done, err := r.db.AsyncFlush()
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	var first time.Time
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("flush: %w", context.Cause(ctx))
		case <-failed:
			failed = r.bg.next()
			if first.IsZero() {
				first = time.Now()
			} else if time.Since(first) >= flushErrorGrace {
				return fmt.Errorf("flush: %w", r.bg.lastErr())
			}
		}
	}
}

// flushErrorGrace is how long background errors may go on while a flush
// is awaited before it is given up.
const flushErrorGrace = time.Second

// checkpointFiles lists the checkpoint's files with their sizes and
// digests. SST digests come from r.sums when known, and are remembered;
// other files (the MANIFEST grows in place) are always hashed.
func (r *Replica) checkpointFiles(dir string) ([]localFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint: %w", err)
	}
	files := make([]localFile, 0, len(ents))
	live := make(map[string]bool, len(ents))
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("checkpoint entry %q is not a regular file", e.Name())
		}
		f := localFile{name: e.Name(), path: filepath.Join(dir, e.Name())}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("stat checkpoint file: %w", err)
		}
		if s, ok := r.sums[f.name]; ok && isSST(f.name) && s.size == info.Size() {
			f.fileSum = s
		} else if f.fileSum, err = hashFile(f.path); err != nil {
			return nil, err
		}
		if isSST(f.name) {
			r.sums[f.name] = f.fileSum
			live[f.name] = true
		}
		files = append(files, f)
	}
	for name := range r.sums {
		if !live[name] {
			delete(r.sums, name)
		}
	}
	return files, nil
}

// hashFile hashes the file at path. The stamp is kept only if the file
// had it both before and after it was read, so the digest is of that
// state.
func hashFile(path string) (_ fileSum, err error) {
	before, serr := objstore.StampFile(path)
	f, err := os.Open(path)
	if err != nil {
		return fileSum{}, fmt.Errorf("hash checkpoint file: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileSum{}, fmt.Errorf("hash %s: %w", filepath.Base(path), err)
	}
	sum := fileSum{size: n, sha256: hex.EncodeToString(h.Sum(nil))}
	if after, aerr := objstore.StampFile(path); serr == nil && aerr == nil && after == before {
		sum.stamp = before
	}
	return sum, nil
}

func sumOf(b []byte) fileSum {
	h := sha256.Sum256(b)
	return fileSum{size: int64(len(b)), sha256: hex.EncodeToString(h[:])}
}
