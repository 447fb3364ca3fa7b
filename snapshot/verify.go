package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// NewVerifyingReader returns a reader of r that counts and hashes what it
// reads. It never returns more than size bytes: reading past size fails
// with an error wrapping ErrSizeMismatch. At r's EOF it returns an error
// wrapping ErrSizeMismatch if fewer than size bytes came, one wrapping
// ErrDigestMismatch if their SHA-256 is not sha256hex, and io.EOF only
// when both match. A negative size or a non-canonical sha256hex fails the
// first Read. Verification errors are sticky; other errors of r are passed
// through.
func NewVerifyingReader(r io.Reader, size int64, sha256hex string) io.Reader {
	v := &verifyingReader{r: r, size: size, want: sha256hex, h: sha256.New()}
	switch {
	case size < 0:
		v.err = fmt.Errorf("%w: negative expected size %d", ErrSizeMismatch, size)
	case !IsCanonicalSHA256(sha256hex):
		v.err = fmt.Errorf("%w: expected sha256 %q is not canonical lowercase hex", ErrDigestMismatch, sha256hex)
	}
	return v
}

type verifyingReader struct {
	r    io.Reader
	size int64
	want string
	h    hash.Hash
	n    int64 // bytes returned so far
	err  error // sticky verification outcome
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	if rest := v.size - v.n; int64(n) > rest {
		n = int(rest)
		v.err = fmt.Errorf("%w: object longer than %d bytes", ErrSizeMismatch, v.size)
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.err != nil:
		return n, v.err
	case errors.Is(err, io.EOF):
		if v.n != v.size {
			v.err = fmt.Errorf("%w: object has %d bytes, want %d", ErrSizeMismatch, v.n, v.size)
		} else if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			v.err = fmt.Errorf("%w: object has sha256 %s, want %s", ErrDigestMismatch, got, v.want)
		} else {
			v.err = io.EOF
		}
		return n, v.err
	}
	return n, err
}
