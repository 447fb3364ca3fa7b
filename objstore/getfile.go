package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// objectLinker is implemented by buckets that can hand out an object as a
// local file without copying it (file:// without sidecars) and by Faults
// around them.
type objectLinker interface {
	// canLink reports whether linkObject may succeed at all; when false,
	// GetFile copies without calling it.
	canLink() bool
	// linkObject opens the object at key, passes its Stat and the open file
	// to verify (which reads it through, unless that file state was
	// verified before, and returns an ErrIntegrity error on a mismatch) and then
	// hard-links it to dst, which must not exist (an error wrapping
	// fs.ErrExist). errNoLink: this object cannot be linked to dst (another
	// file system, no hard links, or the object was replaced while it was
	// verified); GetFile then copies. On any error dst does not exist
	// unless it existed before.
	linkObject(ctx context.Context, key, dst string, verify func(os.FileInfo, io.Reader) error) error
}

// GetFile writes the object at key to the new local file dst and
// guarantees that it has exactly size bytes with SHA-256 sha (lowercase or
// uppercase hex). It is the mirror of PutFile:
//
//   - dst must not exist: like O_CREATE|O_EXCL, an existing dst is an error
//     wrapping fs.ErrExist and is left alone. A missing object is
//     ErrNotFound.
//   - The object is verified, read once: an object of another size or
//     digest fails with ErrIntegrity and leaves no dst. So does any other
//     failure, a cancelled ctx included.
//   - On a file:// store (with metadata=skip, the default) whose root is on
//     the same file system as dst, dst becomes a hard link to the object's
//     file after the file was hashed, and linked is true: nothing is
//     copied. GetFile then checks that the name it linked still refers to
//     the file it hashed (a plain Put can replace an object meanwhile) and
//     otherwise removes dst and copies.
//   - Elsewhere (s3://, mem://, another file system, a file system without
//     hard links: link(2) failing with EXDEV, EPERM, EMLINK, ENOTSUP or
//     ENOSYS) GetFile copies the object into dst through OpenVerified and
//     linked is false.
//
// Because dst may be the object itself, the caller must never modify dst
// in place: no writes, truncation, appends or chmod. Removing or renaming
// it is fine and leaves the object intact. Use GetFile only for files the
// caller treats as immutable; a file that will be appended to (a log, a
// Pebble MANIFEST) must be copied with OpenVerified.
//
// GetFile does not fsync dst or its directory: a linked dst shares the
// object's data, which is durable already, but neither the new name nor a
// copy's data is made durable. A caller that needs dst to survive a crash
// syncs it.
func (s *Store) GetFile(ctx context.Context, key, dst string, size int64, sha string) (linked bool, err error) {
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("objstore: get %q: %w", key, err)
	}
	want, err := hex.DecodeString(sha)
	if err != nil || len(want) != sha256.Size || size < 0 {
		return false, fmt.Errorf("objstore: get %q: want size >= 0 and a hex sha256, got %d and %q", key, size, sha)
	}
	sha = hex.EncodeToString(want)
	// Fail before reading anything if dst is taken; link(2) and O_EXCL
	// enforce it again when dst is created.
	if _, err := os.Lstat(dst); err == nil {
		return false, fmt.Errorf("objstore: get %q: %s: %w", key, dst, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("objstore: get %q: %w", key, err)
	}
	if l, ok := s.b.(objectLinker); ok && l.canLink() {
		err := l.linkObject(ctx, key, dst, func(fi os.FileInfo, r io.Reader) error {
			st, _ := stampOf(fi)
			if verifiedFiles.verified(st, size, sha) {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("objstore: get %q: %w", key, err)
				}
				return nil
			}
			if err := checkDigest(key, r, size, sha); err != nil {
				return err
			}
			verifiedFiles.add(st, sha)
			return nil
		})
		if !errors.Is(err, errNoLink) {
			return err == nil, err
		}
	}
	return false, s.getCopy(ctx, key, dst, size, sha)
}

// checkDigest reads r through and fails with ErrIntegrity unless it holds
// exactly size bytes with SHA-256 sha.
func checkDigest(key string, r io.Reader, size int64, sha string) error {
	d := newDigester(r)
	buf := make([]byte, 256<<10)
	// Read at most one byte past size: enough to tell that it is too long.
	if _, err := io.CopyBuffer(io.Discard, io.LimitReader(struct{ io.Reader }{d}, min(size, math.MaxInt64-1)+1), buf); err != nil {
		return fmt.Errorf("objstore: get %q: read: %w", key, err)
	}
	if d.n != size || d.sum() != sha {
		what := fmt.Sprintf("size %d", d.n)
		if d.n == size {
			what = "sha256 " + d.sum()
		}
		return fmt.Errorf("objstore: get %q: %w: %s, want %d bytes sha256 %s", key, ErrIntegrity, what, size, sha)
	}
	return nil
}

// getCopy streams the object into a new dst, verifying it as it goes, and
// removes dst on any failure.
func (s *Store) getCopy(ctx context.Context, key, dst string, size int64, sha string) (err error) {
	rc, err := s.OpenVerified(ctx, key, size, sha)
	if err != nil {
		return fmt.Errorf("objstore: get %q: %w", key, err)
	}
	defer func() {
		if cerr := rc.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("objstore: get %q: close object: %w", key, cerr)
		}
	}()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("objstore: get %q: %w", key, err)
	}
	buf := make([]byte, 256<<10)
	_, err = io.CopyBuffer(out, &ctxReader{ctx: ctx, r: rc}, buf)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(fmt.Errorf("objstore: get %q: copy to %s: %w", key, dst, err), os.Remove(dst))
	}
	return nil
}

// ctxReader stops reading once ctx is done: local file readers do not
// watch the context.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// objectPath is the path of the object's file on a linking file:// store.
func (b *gcBucket) objectPath(key string) (string, bool) {
	if !b.linkable {
		return "", false
	}
	return b.filePath(key), true
}

// filePath is the path of the file fileblob keeps key in (b.dir is set):
// the key's text, but for the escaping fileblob applies. Of what it
// escapes, checkKey lets through only text that reads as an escape
// sequence ("__0x41__"), whose first '_' becomes "__0x5f__" so that no two
// keys share a file; the paths the store builds itself (links, locks, dir
// syncs) must name the same file (TestFileKeyEscaping).
func (b *gcBucket) filePath(key string) string {
	return filepath.Join(b.dir, filepath.FromSlash(fileblobEscape(b.prefix+key)))
}

// fileblobEscape escapes key as gocloud's fileblob does on unix for a key
// checkKey accepts: every '_' that starts "__0x<hex digits>__" becomes
// "__0x5f__" (positions found in the original text).
func fileblobEscape(key string) string {
	if !strings.Contains(key, "__0x") {
		return key
	}
	runes := []rune(key)
	var b strings.Builder
	for i, r := range runes {
		if escapeSequenceAt(runes, i) {
			b.WriteString("__0x5f__")
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// escapeSequenceAt reports whether r[i:] starts with what fileblob's
// unescaping reads as an escape: "__0x", text up to the next '_' that
// parses as a 32-bit integer in base 16, and "__".
func escapeSequenceAt(r []rune, i int) bool {
	if i+4 > len(r) || string(r[i:i+4]) != "__0x" {
		return false
	}
	j := i + 4
	for j < len(r) && r[j] != '_' {
		j++
	}
	if j+2 > len(r) || r[j+1] != '_' {
		return false
	}
	_, err := strconv.ParseInt(string(r[i+4:j]), 16, 32)
	return err == nil
}

// objectPath is the inner bucket's. A read through Faults may still be
// corrupted on purpose; the verifier then fails and nothing is remembered.
func (f *Faults) objectPath(key string) (string, bool) {
	l, ok := f.inner.(interface{ objectPath(string) (string, bool) })
	if !ok {
		return "", false
	}
	return l.objectPath(key)
}

// linkObject verifies the object's file and hard-links it to dst.
func (b *gcBucket) linkObject(ctx context.Context, key, dst string, verify func(os.FileInfo, io.Reader) error) error {
	if !b.linkable {
		return errNoLink
	}
	src := b.filePath(key)
	f, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objstore: get %q in %s: %w", key, b.base, ErrNotFound)
	}
	if err != nil {
		return b.errorf("get", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return b.errorf("get", key, err)
	}
	if !fi.Mode().IsRegular() {
		// A directory of other keys, which is no object.
		return fmt.Errorf("objstore: get %q in %s: %w", key, b.base, ErrNotFound)
	}
	if err := verify(fi, &ctxReader{ctx: ctx, r: f}); err != nil {
		return err
	}
	if err := b.link(src, dst); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			switch le.Err {
			case syscall.EEXIST:
				return fmt.Errorf("objstore: get %q: %s: %w", key, dst, fs.ErrExist)
			case syscall.EXDEV, syscall.EPERM, syscall.ENOTSUP, syscall.EMLINK, syscall.ENOSYS:
				return errNoLink
			}
		}
		return fmt.Errorf("objstore: get %q: %w", key, err)
	}
	// The object's name may have been given to another file (a plain Put
	// replaces by rename) between opening and linking: then dst is not
	// what was verified.
	di, err := os.Lstat(dst) // not through a link to another file
	if err != nil || !os.SameFile(fi, di) {
		if rmErr := os.Remove(dst); rmErr != nil {
			return fmt.Errorf("objstore: get %q: %s does not hold the verified object: %w", key, dst, errors.Join(err, rmErr))
		}
		return errNoLink
	}
	return nil
}

// linkObject injects FailNth and FailKey faults (counted as OpOpen), then
// links through the inner bucket. A key that a CorruptRead fault matches
// is not linked: GetFile copies it through Open, which corrupts it.
func (f *Faults) linkObject(ctx context.Context, key, dst string, verify func(os.FileInfo, io.Reader) error) error {
	l, ok := f.inner.(objectLinker)
	if !ok || f.corruptKey(key) {
		return errNoLink
	}
	if err := f.call(OpOpen, key); err != nil {
		return err
	}
	return l.linkObject(ctx, key, dst, verify)
}

// corruptKey reports whether a CorruptRead fault matches key.
func (f *Faults) corruptKey(key string) bool {
	f.mu.Lock()
	corrupt := append([]func(string) bool(nil), f.mu.corrupt...)
	f.mu.Unlock()
	for _, match := range corrupt {
		if match(key) {
			return true
		}
	}
	return false
}
