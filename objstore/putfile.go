package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// errNoLink tells PutFile that a bucket cannot store this file by linking
// it; PutFile then copies.
var errNoLink = errors.New("objstore: cannot link")

// linker is implemented by buckets that can store a local file without
// copying it (file:// on the same file system) and by Faults around them.
type linker interface {
	// canLink reports whether linkFile may succeed at all; when false,
	// PutFile copies without calling linkFile.
	canLink() bool
	// linkFile makes the already verified and synced file f (opened from
	// path) the object at key, write-if-absent: an error wrapping ErrExists
	// when the key is taken, errNoLink when this file cannot be linked here
	// (PutFile then copies). The object is durable when it returns nil.
	linkFile(ctx context.Context, key, path string, f *os.File) error
}

// PutFile stores the local file at path under key unless the key exists,
// and guarantees that the object has exactly size bytes with SHA-256 sha
// (lowercase or uppercase hex): what the caller computed when it wrote the
// file. It is PutIfAbsent for files whose digest is known:
//
//   - The file is verified before any object appears: a file of another
//     size or digest fails with ErrIntegrity and stores nothing.
//   - An existing object with this size and digest is adopted (Adopted is
//     true); any other existing object is ErrConflict.
//   - On a file:// store whose root is on the same file system as path,
//     the object is a hard link to the file (link(2) refuses an existing
//     name, so write-if-absent holds even across processes), made durable
//     with fsync of the file and of the directories up to the root. Nothing
//     is copied. The caller must not modify the file afterwards, since it is
//     the object now. Removing or renaming it is fine.
//   - Elsewhere (s3://, mem://, another file system, a file system without
//     hard links) the file is copied as PutIfAbsent copies, and verified
//     while it streams.
//
// The file is read once either way: to hash it before linking, or while
// copying it. PutFileStamped links a file without reading it at all.
func (s *Store) PutFile(ctx context.Context, key, path string, size int64, sha string) (Object, error) {
	return s.PutFileStamped(ctx, key, path, size, sha, FileStamp{})
}

// PutFileStamped is PutFile for a file whose digest the caller computed
// from the bytes it wrote, and whose state it stamped after its last write
// (StampFile). Where PutFile would link the file, a file that still has
// that stamp is linked without being read again: the caller's digest is
// trusted. A file with another stamp (written to, replaced, copied) is
// hashed and verified as PutFile does, and where the file is copied it is
// verified while it streams as always. See FileStamp for what a stamp can
// miss. The zero stamp makes this PutFile.
func (s *Store) PutFileStamped(ctx context.Context, key, path string, size int64, sha string, stamp FileStamp) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: %w", key, err)
	}
	want, err := hex.DecodeString(sha)
	if err != nil || len(want) != sha256.Size || size < 0 {
		return Object{}, fmt.Errorf("objstore: put %q: want size >= 0 and a hex sha256, got %d and %q", key, size, sha)
	}
	sha = hex.EncodeToString(want)
	f, err := os.Open(path)
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: open source: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: stat source: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		return Object{}, fmt.Errorf("objstore: put %q: source %s is not a regular file", key, path)
	}
	if fi.Size() != size {
		return Object{}, fmt.Errorf("objstore: put %q: %w: source %s has %d bytes, want %d", key, ErrIntegrity, path, fi.Size(), size)
	}
	if l, ok := s.b.(linker); ok && s.LinksFiles() {
		obj, err := s.putLinked(ctx, l, key, path, f, fi, size, sha, stamp)
		if !errors.Is(err, errNoLink) {
			return obj, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Object{}, fmt.Errorf("objstore: put %q: rewind source: %w", key, err)
		}
	}
	v := &verifier{rc: f, d: newDigester(f), key: key, size: size, sha: sha}
	switch err := s.b.Put(ctx, key, v, true); {
	case err == nil:
		return Object{Key: key, Size: size, SHA256: sha}, nil
	case errors.Is(err, ErrExists):
		return s.adopt(ctx, key, size, sha)
	default:
		return Object{}, err
	}
}

// putLinked verifies f (fi is its Stat) and links it under key. A file
// that still has the caller's stamp is not read; any other is hashed, and
// its data is synced while it is hashed: the fsync mostly waits for the
// disk, the hash for the CPU, and a file whose pages are still dirty (the
// usual case: it was just written) then costs about the longer of the two
// instead of their sum.
func (s *Store) putLinked(ctx context.Context, l linker, key, path string, f *os.File, fi os.FileInfo, size int64, sha string, stamp FileStamp) (Object, error) {
	if stamp.matches(fi) {
		if err := f.Sync(); err != nil {
			return Object{}, fmt.Errorf("objstore: put %q: sync source: %w", key, err)
		}
	} else if err := hashAndSync(key, path, f, size, sha); err != nil {
		return Object{}, err
	}
	switch err := l.linkFile(ctx, key, path, f); {
	case err == nil:
		return Object{Key: key, Size: size, SHA256: sha}, nil
	case errors.Is(err, ErrExists):
		return s.adopt(ctx, key, size, sha)
	default:
		return Object{}, err
	}
}

// hashAndSync checks f against size and sha and syncs its data, both at
// once.
func hashAndSync(key, path string, f *os.File, size int64, sha string) error {
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	d := newDigester(f)
	buf := make([]byte, 256<<10)
	_, rerr := io.CopyBuffer(io.Discard, struct{ io.Reader }{d}, buf)
	serr := <-synced
	if rerr != nil {
		return fmt.Errorf("objstore: put %q: read source: %w", key, rerr)
	}
	if d.n != size || d.sum() != sha {
		return fmt.Errorf("objstore: put %q: %w: source %s has %d bytes sha256 %s, want %d bytes sha256 %s",
			key, ErrIntegrity, path, d.n, d.sum(), size, sha)
	}
	if serr != nil {
		return fmt.Errorf("objstore: put %q: sync source: %w", key, serr)
	}
	return nil
}

// LinksFiles reports whether PutFile and PutFileStamped store a local file
// by linking it rather than copying it, when the file is on the store's
// file system (a file:// store without metadata sidecars): such a put moves
// no data.
func (s *Store) LinksFiles() bool {
	l, ok := s.b.(linker)
	return ok && l.canLink()
}

func (b *gcBucket) canLink() bool { return b.linkable }

// linkFile hard-links path to the object's path. It serializes with the
// check-and-rename of Put (commitLock), so an object is never replaced
// within the process, and link(2) itself never replaces one.
func (b *gcBucket) linkFile(ctx context.Context, key, path string, f *os.File) error {
	if !b.linkable {
		return errNoLink
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: put %q: %w", key, err)
	}
	if li, err := os.Lstat(path); err != nil || !li.Mode().IsRegular() {
		// link(2) does not follow a symlink: the object would be the
		// link, gone with its target. Copy what f reads instead.
		return errNoLink
	}
	dest := b.filePath(key)
	if err := os.MkdirAll(filepath.Dir(dest), b.dirMode); err != nil {
		return b.errorf("put", key, err)
	}
	mu := commitLock(dest)
	mu.Lock()
	err := b.link(path, dest)
	mu.Unlock()
	if err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			switch le.Err {
			case syscall.EEXIST:
				return fmt.Errorf("objstore: put %q: %w", key, ErrExists)
			case syscall.EXDEV, syscall.EPERM, syscall.ENOTSUP, syscall.EMLINK, syscall.ENOSYS:
				// Another file system, or one without (more) hard links.
				return errNoLink
			}
		}
		return b.errorf("put", key, err)
	}
	// Make sure the name now refers to the file that was verified (path
	// could have been replaced between opening and linking it).
	fi, ferr := f.Stat()
	di, derr := os.Lstat(dest) // not through a link to another file
	if ferr != nil || derr != nil || !os.SameFile(fi, di) {
		rmErr := os.Remove(dest)
		return fmt.Errorf("objstore: put %q: %w: %s changed while it was stored: %w", key, ErrIntegrity, path, errors.Join(ferr, derr, rmErr))
	}
	if err := syncDirs(b.dir, dest); err != nil {
		return fmt.Errorf("objstore: put %q: %w", key, err)
	}
	return nil
}

// canLink reports whether the inner bucket can link.
func (f *Faults) canLink() bool {
	l, ok := f.inner.(linker)
	return ok && l.canLink()
}

// linkFile injects FailNth and FailKey faults (counted as OpPut), then
// links through the inner bucket. A key that a TruncateWrite fault matches
// is not linked: PutFile copies it, and the copy is torn.
func (f *Faults) linkFile(ctx context.Context, key, path string, file *os.File) error {
	l, ok := f.inner.(linker)
	if !ok || f.tornKey(key) {
		return errNoLink
	}
	if err := f.call(OpPut, key); err != nil {
		return err
	}
	return l.linkFile(ctx, key, path, file)
}
