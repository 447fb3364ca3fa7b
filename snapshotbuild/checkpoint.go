package snapshotbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/objstore"
)

// localFile is one file of a bucket's checkpoint, ready for upload.
type localFile struct {
	localPath string // name inside the checkpoint directory (Pebble's name)
	path      string // absolute path on disk
	size      int64
	sha256    string // lowercase hex, computed while the file was written
	stamp     objstore.FileStamp
}

// checkpointResult is a bucket's local snapshot.
type checkpointResult struct {
	files              []localFile // sorted by localPath
	manifestNormalized bool
}

// makeCheckpoint turns the bucket's SST files into an ordinary Pebble
// checkpoint: ingest them into an empty database under dir (they land in L6
// unchanged: Pebble hard-links them and records their sequence numbers in
// the MANIFEST, it does not rewrite them), flush, checkpoint into dir/ckpt,
// make the MANIFEST reproducible and check that Pebble opens the result
// and sees exactly the ingested tables.
func makeCheckpoint(ctx context.Context, dir string, ssts []sstFile, c Compression, log *slog.Logger) (_ *checkpointResult, err error) {
	dbDir := filepath.Join(dir, "db")
	ckptDir := filepath.Join(dir, "ckpt")

	db, err := pebble.Open(dbDir, localPebbleOptions(c, log))
	if err != nil {
		return nil, fmt.Errorf("open local db: %w", err)
	}
	defer func() {
		if db != nil {
			err = errors.Join(err, db.Close())
		}
	}()
	if len(ssts) > 0 {
		paths := make([]string, len(ssts))
		for i, f := range ssts {
			paths[i] = f.path
		}
		if err := db.Ingest(ctx, paths); err != nil {
			return nil, fmt.Errorf("ingest sst files: %w", err)
		}
	}
	// Which local name did Pebble give each ingested file? Match by the
	// smallest key, which is unique since the files do not overlap.
	bySmallest := make(map[string]*sstFile, len(ssts))
	for i := range ssts {
		bySmallest[string(ssts[i].smallest)] = &ssts[i]
	}
	tables, err := db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("list local tables: %w", err)
	}
	known := make(map[string]*sstFile, len(ssts))
	n := 0
	for level, ts := range tables {
		for _, t := range ts {
			n++
			f := bySmallest[string(t.Smallest.UserKey)]
			if f == nil || int64(t.Size) != f.size {
				return nil, fmt.Errorf("ingested table %d at L%d (size %d) matches no written file", uint64(t.FileNum), level, t.Size)
			}
			if level != 6 {
				return nil, fmt.Errorf("ingested table %d landed at L%d, want L6", uint64(t.FileNum), level)
			}
			known[fmt.Sprintf("%06d.sst", uint64(t.FileNum))] = f
		}
	}
	if n != len(ssts) {
		return nil, fmt.Errorf("local db holds %d tables after ingesting %d", n, len(ssts))
	}
	if err := db.Flush(); err != nil {
		return nil, fmt.Errorf("flush local db: %w", err)
	}
	if err := db.Checkpoint(ckptDir, pebble.WithFlushedWAL()); err != nil {
		return nil, fmt.Errorf("checkpoint local db: %w", err)
	}
	cerr := db.Close()
	db = nil
	if cerr != nil {
		return nil, fmt.Errorf("close local db: %w", cerr)
	}
	if err := os.RemoveAll(dbDir); err != nil {
		return nil, fmt.Errorf("remove local db: %w", err)
	}

	res := &checkpointResult{}
	ents, err := os.ReadDir(ckptDir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoint: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("checkpoint entry %q is not a regular file", e.Name())
		}
		name := e.Name()
		p := filepath.Join(ckptDir, name)
		if strings.HasPrefix(name, "MANIFEST-") {
			norm, err := normalizeManifestFile(p, log)
			if err != nil {
				return nil, err
			}
			res.manifestNormalized = norm
		}
		if f, ok := known[name]; ok {
			// A hard link of the written file: same inode, same stamp.
			res.files = append(res.files, localFile{localPath: name, path: p, size: f.size, sha256: hex.EncodeToString(f.sha256[:]), stamp: f.stamp})
			delete(known, name)
			continue
		}
		if strings.HasSuffix(name, ".sst") {
			return nil, fmt.Errorf("checkpoint holds unexpected table %s", name)
		}
		// Small files (MANIFEST, OPTIONS, markers, WAL): hash them here.
		size, sum, err := hashFile(p)
		if err != nil {
			return nil, err
		}
		res.files = append(res.files, localFile{localPath: name, path: p, size: size, sha256: sum})
	}
	if len(known) > 0 {
		return nil, fmt.Errorf("checkpoint misses %d ingested tables", len(known))
	}
	slices.SortFunc(res.files, func(a, b localFile) int { return strings.Compare(a.localPath, b.localPath) })
	if err := verifyCheckpoint(ckptDir, res.files, ssts, c, log); err != nil {
		return nil, err
	}
	return res, nil
}

func normalizeManifestFile(p string, log *slog.Logger) (bool, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("read checkpoint manifest: %w", err)
	}
	norm, changed, err := normalizeManifest(data)
	if errors.Is(err, errManifestUnknown) {
		log.Warn("manifest left as written: build not byte-reproducible", "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if changed {
		if err := os.WriteFile(p, norm, 0o644); err != nil {
			return false, fmt.Errorf("write checkpoint manifest: %w", err)
		}
	}
	return true, nil
}

// verifyCheckpoint opens the checkpoint read-only and checks that Pebble
// sees exactly the written tables. Opening may create a LOCK file, which is
// not a snapshot file: it is removed, and the directory must otherwise be
// unchanged.
func verifyCheckpoint(ckptDir string, files []localFile, ssts []sstFile, c Compression, log *slog.Logger) (err error) {
	opts := localPebbleOptions(c, log)
	opts.ReadOnly = true
	if err := func() (err error) {
		db, err := pebble.Open(ckptDir, opts)
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		defer func() { err = errors.Join(err, db.Close()) }()
		tables, err := db.SSTables()
		if err != nil {
			return err
		}
		var got int
		sizes := make(map[string]int64, len(ssts))
		for _, s := range ssts {
			sizes[string(s.smallest)] = s.size
		}
		for _, ts := range tables {
			for _, t := range ts {
				got++
				if sz, ok := sizes[string(t.Smallest.UserKey)]; !ok || sz != int64(t.Size) {
					return fmt.Errorf("unexpected table %d", uint64(t.FileNum))
				}
			}
		}
		if got != len(ssts) {
			return fmt.Errorf("%d tables, want %d", got, len(ssts))
		}
		return nil
	}(); err != nil {
		return fmt.Errorf("verify checkpoint: %w", err)
	}
	ents, err := os.ReadDir(ckptDir)
	if err != nil {
		return fmt.Errorf("verify checkpoint: %w", err)
	}
	want := make(map[string]bool, len(files))
	for _, f := range files {
		want[f.localPath] = true
	}
	for _, e := range ents {
		switch {
		case want[e.Name()]:
			delete(want, e.Name())
		case e.Name() == "LOCK":
			if err := os.Remove(filepath.Join(ckptDir, "LOCK")); err != nil {
				return fmt.Errorf("verify checkpoint: %w", err)
			}
		default:
			return fmt.Errorf("verify checkpoint: opening it created %s", e.Name())
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("verify checkpoint: opening it removed %d files", len(want))
	}
	for _, f := range files {
		fi, err := os.Stat(f.path)
		if err != nil || fi.Size() != f.size {
			return fmt.Errorf("verify checkpoint: %s changed while opening it", f.localPath)
		}
	}
	return nil
}

func hashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", filepath.Base(p), err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", filepath.Base(p), err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
