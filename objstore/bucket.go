package objstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"iter"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // registers file://
	"gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob" // registers s3://
	"gocloud.dev/gcerrors"

	"github.com/thawdb/thaw/internal/redact"
)

// Attrs describes a stored object.
type Attrs struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Bucket is the narrow surface every store and the fault injector implement.
// Keys are relative to the bucket and must satisfy the rules in doc.go.
type Bucket interface {
	// Put stores the bytes of r under key. The object appears completely or
	// not at all: if reading r fails or ctx is cancelled, no object is left.
	// With ifNotExist, an existing key is never replaced and Put returns an
	// error wrapping ErrExists.
	Put(ctx context.Context, key string, r io.Reader, ifNotExist bool) error
	// Open reads length bytes from offset (length < 0: to the end).
	// A missing key is ErrNotFound.
	Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Stat returns the object's attributes; a missing key is ErrNotFound.
	Stat(ctx context.Context, key string) (Attrs, error)
	// List yields the objects whose key starts with prefix, in key order.
	// After an error it yields nothing more.
	List(ctx context.Context, prefix string) iter.Seq2[Attrs, error]
	// Delete removes key; a missing key is ErrNotFound.
	Delete(ctx context.Context, key string) error
	Close() error
}

// OpenBucket opens the bucket a store URL names; see doc.go for the forms.
func OpenBucket(ctx context.Context, storeURL string) (Bucket, error) {
	loc, err := parseLocation(storeURL)
	if err != nil {
		return nil, err
	}
	return openBucket(ctx, loc)
}

// CheckURL reports whether storeURL has one of the forms OpenBucket and
// Open take (see doc.go), without opening anything. The driver parameters
// in its query are checked only when the store is opened.
func CheckURL(storeURL string) error {
	_, err := parseLocation(storeURL)
	return err
}

// location is a parsed store URL.
type location struct {
	scheme string
	host   string     // s3 bucket or mem bucket name
	dir    string     // file: absolute root directory
	prefix string     // s3, mem: key prefix without slashes at either end
	query  url.Values // driver parameters
}

// base is the URI prefix of every object in the store: no query, no
// trailing slash.
func (l location) base() string {
	if l.scheme == "file" {
		return "file://" + filepath.ToSlash(l.dir)
	}
	b := l.scheme + "://" + l.host
	if l.prefix != "" {
		b += "/" + l.prefix
	}
	return b
}

func parseLocation(raw string) (location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, user information included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return location{}, fmt.Errorf("objstore: parse store url %q: %w", redact.URL(raw), err)
	}
	fail := func(format string, args ...any) (location, error) {
		return location{}, fmt.Errorf("objstore: store url %q: "+format, append([]any{redact.URL(raw)}, args...)...)
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return fail("user info, fragment and opaque forms are not supported")
	}
	loc := location{scheme: u.Scheme, host: u.Host, query: u.Query()}
	if loc.query.Has("prefix") || loc.query.Has("key") {
		return fail("give the key prefix as the url path, not as a query parameter")
	}
	switch u.Scheme {
	case "file":
		dir := u.Path
		switch u.Host {
		case "", "localhost":
		case ".":
			if dir, err = filepath.Abs(strings.TrimPrefix(dir, "/")); err != nil {
				return fail("%w", err)
			}
		default:
			return fail("host must be empty, localhost or \".\"")
		}
		if !filepath.IsAbs(dir) {
			return fail("path must be absolute")
		}
		if loc.dir = filepath.Clean(dir); loc.dir == string(filepath.Separator) {
			return fail("the file system root cannot be a store")
		}
		loc.host = ""
		return loc, nil
	case "mem", "s3":
		if u.Scheme == "s3" && u.Host == "" {
			return fail("the host must name the s3 bucket")
		}
		if loc.prefix = strings.Trim(u.Path, "/"); loc.prefix != "" {
			if err := checkKey(loc.prefix); err != nil {
				return fail("prefix: %w", err)
			}
		}
		return loc, nil
	default:
		return fail("unsupported scheme %q (want file, mem or s3)", u.Scheme)
	}
}

// memBuckets holds the named mem:// buckets of this process.
var memBuckets struct {
	sync.Mutex
	m map[string]*blob.Bucket
}

// memBucket returns the process-wide bucket called name, or a private one
// if name is empty.
func memBucket(name string) *blob.Bucket {
	if name == "" {
		return memblob.OpenBucket(&memblob.Options{NoMD5: true})
	}
	memBuckets.Lock()
	defer memBuckets.Unlock()
	if memBuckets.m[name] == nil {
		if memBuckets.m == nil {
			memBuckets.m = map[string]*blob.Bucket{}
		}
		memBuckets.m[name] = memblob.OpenBucket(&memblob.Options{NoMD5: true})
	}
	return memBuckets.m[name]
}

func openBucket(ctx context.Context, loc location) (*gcBucket, error) {
	b := &gcBucket{base: loc.base(), link: os.Link}
	if loc.prefix != "" {
		b.prefix = loc.prefix + "/"
	}
	var err error
	switch loc.scheme {
	case "file":
		q := loc.query
		if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		} else if on, err := strconv.ParseBool(q.Get("create_dir")); err == nil && !on {
			// fileblob creates the root for any value, "false" too; only
			// an empty one turns that off.
			q.Set("create_dir", "")
		}
		if !q.Has("metadata") {
			// No .attrs sidecars: fileblob writes them non-atomically, and a
			// torn sidecar makes its object unreadable.
			q.Set("metadata", "skip")
		}
		b.dir = loc.dir
		// Linking a local file in place of an upload (PutFile) needs an
		// object to be nothing but its file: no sidecar.
		b.linkable = q.Get("metadata") == "skip"
		b.dirMode = 0o777
		if fms := q.Get("dir_file_mode"); fms != "" {
			fm, perr := strconv.ParseUint(fms, 0, 32)
			if perr != nil {
				return nil, fmt.Errorf("objstore: open %s: dir_file_mode %q: %w", b.base, fms, perr)
			}
			b.dirMode = os.FileMode(fm)
		}
		b.b, err = blob.OpenBucket(ctx, (&url.URL{Scheme: "file", Path: filepath.ToSlash(loc.dir), RawQuery: q.Encode()}).String())
		if err == nil {
			removeStaleStaged(filepath.Join(loc.dir, StagingDir), time.Now().Add(-staleStaged))
		}
	case "mem":
		if len(loc.query) > 0 {
			return nil, fmt.Errorf("objstore: open %s: mem urls take no parameters", b.base)
		}
		b.b, b.shared = memBucket(loc.host), loc.host != ""
	case "s3":
		b.b, err = blob.OpenBucket(ctx, (&url.URL{Scheme: "s3", Host: loc.host, RawQuery: loc.query.Encode()}).String())
		b.headBlind, b.s3Bucket = true, loc.host
	}
	if err != nil {
		class := classify(err)
		if loc.scheme == "file" && errors.Is(err, fs.ErrNotExist) {
			class = ErrBucketNotFound // the root, without create_dir
		}
		if class != nil {
			return nil, fmt.Errorf("objstore: open %s: %w: %w", b.base, class, err)
		}
		return nil, fmt.Errorf("objstore: open %s: %w", b.base, err)
	}
	return b, nil
}

// gcBucket adapts a gocloud bucket to Bucket.
type gcBucket struct {
	b      *blob.Bucket
	base   string // for error messages
	prefix string // "" or a key prefix ending in "/"
	dir    string // file:// root directory; "" for other drivers
	shared bool   // a named mem bucket that outlives this handle
	// file:// only: PutFile may hard-link (no metadata sidecars), and the
	// mode of directories it creates (fileblob's dir_file_mode).
	linkable bool
	dirMode  os.FileMode
	link     func(oldname, newname string) error // os.Link; tests replace it
	// s3:// only: a HEAD (Stat, and the check Delete begins with) answers a
	// missing bucket like a missing object, so the first such answer asks
	// once whether the bucket exists (see notFound).
	headBlind   bool
	bucketFound atomic.Bool
	s3Bucket    string // s3:// only: the bucket's name, for signing uploads
}

var _ Bucket = (*gcBucket)(nil)

// commitLocks serialize the existence check and rename that fileblob's
// IfNotExist performs at Close: fileblob gives each writer its own mutex,
// so without these two writers in one process could both pass the check.
var commitLocks [64]sync.Mutex

func commitLock(path string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	return &commitLocks[h.Sum32()%uint32(len(commitLocks))]
}

func (b *gcBucket) Put(ctx context.Context, key string, r io.Reader, ifNotExist bool) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("objstore: put %q: %w", key, err)
	}
	if ifNotExist {
		// Refuse early rather than upload an object only to have it rejected;
		// this also covers stores that ignore the precondition (doc.go).
		switch _, err := b.Stat(ctx, key); {
		case err == nil:
			return fmt.Errorf("objstore: put %q: %w", key, ErrExists)
		case !errors.Is(err, ErrNotFound):
			return err
		}
	}
	if ifNotExist && b.linkable {
		return b.putStaged(ctx, key, r)
	}
	// Cancelling the writer's context before Close aborts the upload in
	// every driver, so a failed Put leaves no object behind.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	abort := func(w *blob.Writer, cause error) error {
		cancel()
		_ = w.Close() // reports only the cancellation we just caused
		return b.errorf("put", key, cause)
	}
	var f *os.File
	opts := &blob.WriterOptions{ContentType: "application/octet-stream", IfNotExist: ifNotExist}
	if b.dir != "" {
		opts.BeforeWrite = func(as func(any) bool) error {
			as(&f) // fileblob's temporary file, synced before the rename
			return nil
		}
	}
	w, err := b.b.NewWriter(ctx, b.prefix+key, opts)
	if err != nil {
		return b.errorf("put", key, err)
	}
	if _, err := io.Copy(w, r); err != nil {
		return abort(w, err)
	}
	if f != nil {
		if err := f.Sync(); err != nil {
			return abort(w, err)
		}
	}
	if b.dir != "" && ifNotExist {
		mu := commitLock(b.filePath(key))
		mu.Lock()
		err = w.Close()
		mu.Unlock()
	} else {
		err = w.Close()
	}
	if err != nil {
		if code := gcerrors.Code(err); ifNotExist && (code == gcerrors.FailedPrecondition || code == gcerrors.AlreadyExists) {
			return fmt.Errorf("objstore: put %q: %w: %w", key, ErrExists, err)
		}
		return b.errorf("put", key, err)
	}
	if b.dir != "" {
		if err := syncDirs(b.dir, b.filePath(key)); err != nil {
			return b.errorf("put", key, err)
		}
	}
	return nil
}

// StagingDir is where a file:// store stages the bytes of a Put: a
// directory under its root, so on the store's file system whatever TMPDIR
// is, and a key prefix no object may use (checkKey) and List never shows.
const StagingDir = ".objstore-staging"

// putStaged stores r under key in a file:// store without metadata
// sidecars: it writes the bytes to a file in StagingDir, syncs it, and
// links it into place as PutFile links a local file (link(2) never
// replaces an object: ErrExists), or where the file system refuses hard
// links renames it into place after checking the name is free (as
// fileblob does). fileblob's own writer stages in os.TempDir and renames,
// which fails with EXDEV when that is another file system (a tmpfs /tmp
// beside a data disk).
func (b *gcBucket) putStaged(ctx context.Context, key string, r io.Reader) (err error) {
	staging := filepath.Join(b.dir, StagingDir)
	if err := os.MkdirAll(staging, b.dirMode); err != nil {
		return b.errorf("put", key, err)
	}
	f, err := os.CreateTemp(staging, "put-") // mode 0600, as fileblob's writer makes its files
	if err != nil {
		return b.errorf("put", key, err)
	}
	staged := f.Name()
	defer func() {
		err = errors.Join(err, f.Close())
		if rerr := os.Remove(staged); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, b.errorf("put", key, rerr))
		}
	}()
	if _, err := io.Copy(f, &ctxReader{ctx: ctx, r: r}); err != nil {
		return b.errorf("put", key, err)
	}
	if err := f.Sync(); err != nil {
		return b.errorf("put", key, err)
	}
	if err := b.linkFile(ctx, key, staged, f); !errors.Is(err, errNoLink) {
		return err
	}
	dest, _ := b.objectPath(key) // putStaged runs on linkable stores only
	mu := commitLock(dest)
	mu.Lock()
	_, serr := os.Lstat(dest)
	if serr == nil {
		mu.Unlock()
		return fmt.Errorf("objstore: put %q: %w", key, ErrExists)
	}
	err = os.Rename(staged, dest)
	mu.Unlock()
	if err != nil {
		return b.errorf("put", key, err)
	}
	if err := syncDirs(b.dir, dest); err != nil {
		return fmt.Errorf("objstore: put %q: %w", key, err)
	}
	return nil
}

// staleStaged is the age from which a staged file is taken to be left by
// a process that died during its Put (a Put's file is written to without
// pause, and removed when the Put ends).
const staleStaged = 24 * time.Hour

// removeStaleStaged removes the staged files last written before cutoff,
// as well as it can: another process may be staging in the same store.
func removeStaleStaged(dir string, cutoff time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// syncDirs makes the directory entries leading to path durable, from its
// parent up to root.
func syncDirs(root, path string) error {
	for dir := filepath.Dir(path); len(dir) >= len(root); dir = filepath.Dir(dir) {
		d, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync directory: %w", err)
		}
	}
	return nil
}

func (b *gcBucket) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("objstore: open %q: %w", key, err)
	}
	var opts *blob.ReaderOptions
	if b.s3Bucket != "" && ctx.Value(verifiedReadKey{}) != nil {
		opts = &blob.ReaderOptions{BeforeRead: skipSDKChecksum}
	}
	r, err := b.b.NewRangeReader(ctx, b.prefix+key, offset, length, opts)
	if err != nil {
		return nil, b.errorf("open", key, err)
	}
	return &gcReader{r: r, b: b, key: key}, nil
}

// verifiedReadKey marks a context whose reads objstore verifies itself,
// against a size and SHA-256 known beforehand (OpenVerified, and so
// GetFile's copies; adopt).
type verifiedReadKey struct{}

func verifiedRead(ctx context.Context) context.Context {
	return context.WithValue(ctx, verifiedReadKey{}, true)
}

// skipSDKChecksum turns off the AWS SDK's validation of the checksum S3
// keeps with an object (response_checksum_validation=when_supported, the
// SDK's default) for one read that objstore verifies itself: objects of
// signed uploads carry a SHA-256 checksum, and the SDK would hash every
// byte a second time (docs/performance.md, session 12).
func skipSDKChecksum(as func(any) bool) error {
	var opts *[]func(*s3.Options)
	if as(&opts) {
		*opts = append(*opts, func(o *s3.Options) {
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		})
	}
	return nil
}

// gcReader gives read errors the same treatment as the other operations.
type gcReader struct {
	r   *blob.Reader
	b   *gcBucket
	key string
}

func (r *gcReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.b.errorf("read", r.key, err)
	}
	return n, err
}

func (r *gcReader) Close() error {
	if err := r.r.Close(); err != nil {
		return r.b.errorf("close reader", r.key, err)
	}
	return nil
}

func (b *gcBucket) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := checkKey(key); err != nil {
		return Attrs{}, fmt.Errorf("objstore: stat %q: %w", key, err)
	}
	a, err := b.b.Attributes(ctx, b.prefix+key)
	if err != nil {
		return Attrs{}, b.notFound(ctx, "stat", key, b.errorf("stat", key, err))
	}
	return Attrs{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

func (b *gcBucket) List(ctx context.Context, prefix string) iter.Seq2[Attrs, error] {
	if b.dir != "" {
		return b.listFiles(ctx, prefix)
	}
	return func(yield func(Attrs, error) bool) {
		it := b.b.List(&blob.ListOptions{Prefix: b.prefix + prefix})
		for {
			o, err := it.Next(ctx)
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Attrs{}, b.errorf("list", prefix, err))
				return
			}
			if o.IsDir {
				continue
			}
			if !yield(Attrs{Key: strings.TrimPrefix(o.Key, b.prefix), Size: o.Size, ModTime: o.ModTime}, nil) {
				return
			}
		}
	}
}

// listFiles lists a file:// store. fileblob walks one directory at a time
// (so "a/..." comes before "a-c", which sorts first), finds the directory
// to walk from the unescaped prefix (a prefix holding "__0x41__" walked a
// directory that does not exist, and listed nothing), and stats each file
// it lists (one deleted meanwhile failed the whole listing). So: list from
// the prefix cut before any escape-like text, filter and sort here, and
// list again when a file vanished under the walk.
func (b *gcBucket) listFiles(ctx context.Context, prefix string) iter.Seq2[Attrs, error] {
	return func(yield func(Attrs, error) bool) {
		full := b.prefix + prefix
		walk := full
		if i := strings.Index(walk, "__0x"); i >= 0 {
			walk = walk[:strings.LastIndex(walk[:i], "/")+1]
		}
		var out []Attrs
		for relists := 0; ; relists++ {
			out = out[:0]
			it := b.b.List(&blob.ListOptions{Prefix: walk})
			var err error
			for {
				var o *blob.ListObject
				if o, err = it.Next(ctx); err != nil {
					break
				}
				if o.IsDir || !strings.HasPrefix(o.Key, full) || strings.HasPrefix(o.Key, StagingDir+"/") {
					continue
				}
				out = append(out, Attrs{Key: strings.TrimPrefix(o.Key, b.prefix), Size: o.Size, ModTime: o.ModTime})
			}
			if err == io.EOF {
				// fileblob skips a directory it cannot read without a
				// word (EMFILE, EIO, EACCES): a listing that looks
				// complete would have a cleanup delete nothing and
				// forget what it cleaned.
				if err = b.walkErr(walk); err == nil {
					break
				}
			}
			if gcerrors.Code(err) == gcerrors.NotFound && relists < maxRelists && ctx.Err() == nil {
				continue // a file vanished under the walk
			}
			yield(Attrs{}, b.errorf("list", prefix, err))
			return
		}
		slices.SortFunc(out, func(x, y Attrs) int { return strings.Compare(x.Key, y.Key) })
		for _, a := range out {
			if !yield(a, nil) {
				return
			}
		}
	}
}

// walkErr walks the directory a file:// listing of walk (a key prefix
// without escapes) went through and returns the first error reading it
// other than a vanished file or directory.
func (b *gcBucket) walkErr(walk string) error {
	root := filepath.Join(b.dir, filepath.FromSlash(walk[:strings.LastIndex(walk, "/")+1]))
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// maxRelists bounds how often one List of a file:// store starts again
// after a file vanished under it.
const maxRelists = 100

func (b *gcBucket) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("objstore: delete %q: %w", key, err)
	}
	if b.dir != "" {
		// fileblob's Delete is os.Remove, which removes an empty
		// directory too: a key that names no file is no object.
		if fi, err := os.Lstat(b.filePath(key)); err == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("objstore: delete %q in %s: %w: a directory, not an object", key, b.base, ErrNotFound)
		}
	}
	if err := b.b.Delete(ctx, b.prefix+key); err != nil {
		return b.notFound(ctx, "delete", key, b.errorf("delete", key, err))
	}
	return nil
}

// notFound passes on err, an operation's error, unless it is ErrNotFound
// from a store whose HEAD cannot tell a missing bucket (s3://) and the
// bucket was not seen yet: then it lists one key of the bucket, and
// returns ErrBucketNotFound (wrapping the list's error) if the bucket is
// missing. A bucket seen once is taken to stay (no second request).
func (b *gcBucket) notFound(ctx context.Context, op, key string, err error) error {
	if !b.headBlind || b.bucketFound.Load() || !errors.Is(err, ErrNotFound) {
		return err
	}
	_, _, lerr := b.b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: b.prefix})
	switch {
	case lerr == nil:
		b.bucketFound.Store(true)
		return err
	case errors.Is(classify(lerr), ErrBucketNotFound):
		return fmt.Errorf("objstore: %s %q in %s: %w: %w", op, key, b.base, ErrBucketNotFound, lerr)
	}
	return err // the check failed: the operation's own answer stands
}

func (b *gcBucket) Close() error {
	if b.shared {
		return nil
	}
	if err := b.b.Close(); err != nil {
		return fmt.Errorf("objstore: close %s: %w", b.base, err)
	}
	return nil
}

// errorf wraps an error of the store (gocloud's, or the file system's
// under a file:// root) with the operation, the key and the class that
// classify finds, the one place where such errors enter objstore: doc.go
// lists the classes.
func (b *gcBucket) errorf(op, key string, err error) error {
	class := classify(err)
	if class == ErrInvalidRequest && op != "put" && errors.Is(err, syscall.ENOTDIR) {
		// file://: a parent of key is an object, so key is none.
		class = ErrNotFound
	}
	if class != nil {
		return fmt.Errorf("objstore: %s %q in %s: %w: %w", op, key, b.base, class, err)
	}
	return fmt.Errorf("objstore: %s %q in %s: %w", op, key, b.base, err)
}
