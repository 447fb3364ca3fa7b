package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"os"
	"strings"
)

// Store addresses the objects of a Bucket by URI and adds write-if-absent
// with adoption and verified reads. It is safe for concurrent use.
type Store struct {
	b    Bucket
	base string
}

// Open opens the bucket url names and addresses it by url without its
// query (see doc.go).
func Open(ctx context.Context, url string) (*Store, error) {
	loc, err := parseLocation(url)
	if err != nil {
		return nil, err
	}
	b, err := openBucket(ctx, loc)
	if err != nil {
		return nil, err
	}
	return New(b, loc.base()), nil
}

// New addresses the objects of b by base, the URI prefix of the store;
// trailing slashes are dropped.
func New(b Bucket, base string) *Store {
	return &Store{b: b, base: strings.TrimRight(base, "/")}
}

// Base is the URI prefix of every object, e.g. "file:///data/remote" or
// "s3://bkt/prefix": no query, no trailing slash.
func (s *Store) Base() string { return s.base }

// URI is the URI of key: Base + "/" + key.
func (s *Store) URI(key string) string { return s.base + "/" + key }

// Key is the key of uri, which must be Base + "/" + a valid key; anything
// else is ErrOutsideStore.
func (s *Store) Key(uri string) (string, error) { return KeyUnder(s.base, uri) }

// KeyUnder is the key of uri in a store whose Base is base: what
// Store.Key returns, for code that names objects of a store it does not
// open (a client writing through a gateway).
func KeyUnder(base, uri string) (string, error) {
	key, ok := strings.CutPrefix(uri, base+"/")
	if !ok {
		return "", fmt.Errorf("objstore: key of %q: %w %s", uri, ErrOutsideStore, base)
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("objstore: key of %q: %w %s: %w", uri, ErrOutsideStore, base, err)
	}
	return key, nil
}

// Bucket is the underlying bucket.
func (s *Store) Bucket() Bucket { return s.b }

// Close closes the underlying bucket.
func (s *Store) Close() error { return s.b.Close() }

// Object describes the outcome of PutIfAbsent.
type Object struct {
	Key    string
	Size   int64
	SHA256 string // lowercase hex
	// Adopted: the key already held these exact bytes; nothing was written.
	Adopted bool
}

// Source is re-openable content: PutIfAbsent reads it once to write it and,
// only when the key is taken, again to compare.
type Source interface {
	Open() (io.ReadCloser, error)
}

type sourceFunc func() (io.ReadCloser, error)

func (f sourceFunc) Open() (io.ReadCloser, error) { return f() }

// FileSource is the content of the file at path.
func FileSource(path string) Source {
	return sourceFunc(func() (io.ReadCloser, error) { return os.Open(path) })
}

// BytesSource is b, which must not change while in use.
func BytesSource(b []byte) Source {
	return sourceFunc(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// PutIfAbsent writes src under key unless the key exists. It hashes src
// while writing. If the key exists with the same bytes, the object is
// adopted (Adopted is true); with different bytes the error wraps
// ErrConflict. An existing object is never replaced.
func (s *Store) PutIfAbsent(ctx context.Context, key string, src Source) (obj Object, err error) {
	if err := checkKey(key); err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: %w", key, err)
	}
	rc, err := src.Open()
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: open source: %w", key, err)
	}
	defer func() {
		if cerr := rc.Close(); cerr != nil && err == nil {
			obj, err = Object{}, fmt.Errorf("objstore: put %q: close source: %w", key, cerr)
		}
	}()
	d := newDigester(rc)
	switch err := s.b.Put(ctx, key, d, true); {
	case err == nil:
		return Object{Key: key, Size: d.n, SHA256: d.sum()}, nil
	case !errors.Is(err, ErrExists):
		return Object{}, err
	}
	size, sum := d.n, d.sum()
	if !d.eof { // the key was taken before the source was read through
		if size, sum, err = Digest(src); err != nil {
			return Object{}, fmt.Errorf("objstore: put %q: %w", key, err)
		}
	}
	return s.adopt(ctx, key, size, sum)
}

// adopt accepts the existing object at key if it has size and sum: sizes
// are compared first, so the object is only read when they agree.
func (s *Store) adopt(ctx context.Context, key string, size int64, sum string) (Object, error) {
	a, err := s.b.Stat(ctx, key)
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: adopt: %w", key, err)
	}
	if a.Size != size {
		return Object{}, fmt.Errorf("objstore: put %q: %w: existing size %d, new size %d sha256 %s",
			key, ErrConflict, a.Size, size, sum)
	}
	rc, err := s.b.Open(verifiedRead(ctx), key, 0, -1)
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: adopt: %w", key, err)
	}
	d := newDigester(rc)
	_, err = io.Copy(io.Discard, d)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Object{}, fmt.Errorf("objstore: put %q: adopt: %w", key, err)
	}
	if d.n != size || d.sum() != sum {
		return Object{}, fmt.Errorf("objstore: put %q: %w: existing size %d sha256 %s, new size %d sha256 %s",
			key, ErrConflict, d.n, d.sum(), size, sum)
	}
	return Object{Key: key, Size: size, SHA256: sum, Adopted: true}, nil
}

// Digest reads src through and returns its size and lowercase hex
// SHA-256.
func Digest(src Source) (size int64, sum string, err error) {
	rc, err := src.Open()
	if err != nil {
		return 0, "", fmt.Errorf("open source: %w", err)
	}
	d := newDigester(rc)
	_, err = io.Copy(io.Discard, d)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", fmt.Errorf("read source: %w", err)
	}
	return d.n, d.sum(), nil
}

// digester counts and hashes what is read through it.
type digester struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	eof bool
}

func newDigester(r io.Reader) *digester { return &digester{r: r, h: sha256.New()} }

func (d *digester) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	d.n += int64(n)
	d.eof = d.eof || err == io.EOF
	return n, err
}

func (d *digester) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// Get reads the whole object at key.
func (s *Store) Get(ctx context.Context, key string) (_ []byte, err error) {
	rc, err := s.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := rc.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Open reads the object at key.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.b.Open(ctx, key, 0, -1)
}

// OpenVerified reads the object at key and fails with ErrIntegrity unless
// it has exactly size bytes with SHA-256 sha (hex): at EOF, or as soon as
// more than size bytes arrive. Only a read that returned io.EOF has
// verified the object.
func (s *Store) OpenVerified(ctx context.Context, key string, size int64, sha string) (io.ReadCloser, error) {
	want, err := hex.DecodeString(sha)
	if err != nil || len(want) != sha256.Size || size < 0 {
		return nil, fmt.Errorf("objstore: open %q: want size >= 0 and a hex sha256, got %d and %q", key, size, sha)
	}
	// On a file:// store, an object file read through and found right is
	// remembered by its stamp (as GetFile remembers what it verified), if
	// the file had that stamp before and after the read.
	before, stamped := s.objectStamp(key)
	rc, err := s.b.Open(verifiedRead(ctx), key, 0, -1)
	if err != nil {
		return nil, err
	}
	v := &verifier{rc: rc, d: newDigester(rc), key: key, size: size, sha: hex.EncodeToString(want)}
	if stamped {
		v.verified = func() {
			if after, ok := s.objectStamp(key); ok && after == before {
				verifiedFiles.add(before, v.sha)
			}
		}
	}
	return v, nil
}

// objectStamp stamps the file of the object at key on a file:// store
// that links (metadata=skip); false elsewhere.
func (s *Store) objectStamp(key string) (FileStamp, bool) {
	l, ok := s.b.(interface {
		objectPath(key string) (string, bool)
	})
	if !ok {
		return FileStamp{}, false
	}
	p, ok := l.objectPath(key)
	if !ok {
		return FileStamp{}, false
	}
	st, err := StampFile(p)
	return st, err == nil
}

type verifier struct {
	rc   io.ReadCloser
	d    *digester
	key  string
	size int64
	sha  string
	err  error // sticky integrity error
	// verified, if set, runs once when the read ends with the right size
	// and digest.
	verified func()
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	// Read at most one byte past size, enough to detect overflow (written
	// so that size math.MaxInt64 does not wrap).
	if rem := v.size - v.d.n; int64(len(p)) > rem {
		p = p[:rem+1]
	}
	n, err := v.d.Read(p)
	switch {
	case v.d.n > v.size:
		v.err = fmt.Errorf("objstore: read %q: %w: more than %d bytes", v.key, ErrIntegrity, v.size)
		return n - int(v.d.n-v.size), v.err
	case err != io.EOF:
		return n, err
	case v.d.n != v.size:
		v.err = fmt.Errorf("objstore: read %q: %w: size %d, want %d", v.key, ErrIntegrity, v.d.n, v.size)
	case v.d.sum() != v.sha:
		v.err = fmt.Errorf("objstore: read %q: %w: sha256 %s, want %s", v.key, ErrIntegrity, v.d.sum(), v.sha)
	default:
		if v.verified != nil {
			v.verified()
			v.verified = nil
		}
		return n, io.EOF
	}
	return n, v.err
}

func (v *verifier) Close() error { return v.rc.Close() }

// Stat returns the attributes of the object at key.
func (s *Store) Stat(ctx context.Context, key string) (Attrs, error) { return s.b.Stat(ctx, key) }

// List yields the objects whose key starts with prefix, in key order.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[Attrs, error] {
	return s.b.List(ctx, prefix)
}

// Delete removes the object at key.
func (s *Store) Delete(ctx context.Context, key string) error { return s.b.Delete(ctx, key) }
