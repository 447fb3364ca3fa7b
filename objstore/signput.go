package objstore

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
)

// MaxSignedPutSize is the largest object a signed PUT may carry: S3's
// limit for a single PutObject (5 GiB).
const MaxSignedPutSize = 5 << 30

// MaxSignedPutTTL bounds a signed PUT's lifetime (SigV4 presigning allows
// at most 7 days; upload credentials live far shorter).
const MaxSignedPutTTL = 24 * time.Hour

// SignedPut is a one-object upload credential: an HTTP PUT of exactly the
// declared bytes to URL with every header in Header, until Expires. The
// signature covers the key, the size (Content-Length), the SHA-256
// (x-amz-checksum-sha256) and If-None-Match: *, so the server stores
// nothing but those bytes, at that key, and only while the key is free:
// used again, or after the object appeared, it answers 412; with other
// bytes, 400 BadDigest; with another key or header, 403.
//
// The URL is the credential (its query holds the signature): SignedPut
// prints as "[REDACTED]" in fmt verbs and slog, refuses json.Marshal, and
// must never be logged, stored or put into anything serialized.
type SignedPut struct {
	URL     string
	Header  http.Header // to send as is; never Host
	Expires time.Time
}

// String redacts the credential.
func (SignedPut) String() string { return "[REDACTED]" }

// GoString redacts the credential for %#v.
func (SignedPut) GoString() string { return "[REDACTED]" }

// Format redacts the credential in every fmt verb (String covers only
// %v, %s, %q, %x and %X: %d would print the fields, URL included).
func (SignedPut) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("[REDACTED]")) }

// LogValue redacts the credential in slog.
func (SignedPut) LogValue() slog.Value { return slog.StringValue("[REDACTED]") }

// MarshalJSON refuses: a signed PUT is handed over, never serialized
// (uploadcap.Signed is the gateway's wire form).
func (SignedPut) MarshalJSON() ([]byte, error) {
	return nil, errors.New("objstore: a signed PUT is never serialized")
}

// putSigner is a bucket that can sign uploads for others (when canSignPut).
type putSigner interface {
	canSignPut() bool
	signPut(ctx context.Context, key string, size int64, sha string, ttl time.Duration) (SignedPut, error)
}

// SignPut returns a signed PUT with which a holder of no store credentials
// can write the object key of size bytes and lowercase hex SHA-256 sha,
// write-if-absent, for ttl. If key already exists, nothing is signed: an
// object of these bytes is adopted (Object.Adopted, and the zero
// SignedPut), another one is ErrConflict, as PutIfAbsent would answer.
//
// Only s3:// stores sign PUTs; on others the error wraps
// errors.ErrUnsupported. The store's own credentials sign; the server
// checks the signature, the size, the digest and the condition, so a
// server that does not (gofakes3 checks no signature) gives no scope.
func (s *Store) SignPut(ctx context.Context, key string, size int64, sha string, ttl time.Duration) (SignedPut, Object, error) {
	fail := func(err error) (SignedPut, Object, error) {
		return SignedPut{}, Object{}, fmt.Errorf("objstore: sign put %q: %w", key, err)
	}
	if err := checkKey(key); err != nil {
		return fail(err)
	}
	if b, err := hex.DecodeString(sha); err != nil || len(b) != 32 || strings.ToLower(sha) != sha {
		return fail(fmt.Errorf("%w: sha256 %q is not 64 lowercase hex digits", ErrInvalidRequest, sha))
	}
	switch {
	case size < 0 || size > MaxSignedPutSize:
		return fail(fmt.Errorf("%w: size %d not in 0..%d", ErrInvalidRequest, size, int64(MaxSignedPutSize)))
	case ttl < time.Second || ttl > MaxSignedPutTTL:
		return fail(fmt.Errorf("%w: lifetime %v not in 1s..%v", ErrInvalidRequest, ttl, MaxSignedPutTTL))
	}
	ps, ok := s.b.(putSigner)
	if !ok || !ps.canSignPut() {
		return fail(fmt.Errorf("%w: the store cannot sign uploads", errors.ErrUnsupported))
	}
	// An existing key is adopted or a conflict; only a missing one (the
	// usual case: one HEAD) is signed.
	if obj, err := s.adopt(ctx, key, size, sha); err == nil || !errors.Is(err, ErrNotFound) {
		return SignedPut{}, obj, err
	}
	sp, err := ps.signPut(ctx, key, size, sha, ttl) // its errors name the operation
	if err != nil {
		return SignedPut{}, Object{}, err
	}
	return sp, Object{Key: key, Size: size, SHA256: sha}, nil
}

// canSignPut reports whether the bucket is an S3 one, whose client signs.
func (b *gcBucket) canSignPut() bool {
	var cl *s3.Client
	return b.s3Bucket != "" && b.b.As(&cl)
}

// signPut presigns a PutObject with the bucket's own client. Buckets of
// other drivers answer errors.ErrUnsupported.
func (b *gcBucket) signPut(ctx context.Context, key string, size int64, sha string, ttl time.Duration) (SignedPut, error) {
	var cl *s3.Client
	if b.s3Bucket == "" || !b.b.As(&cl) {
		return SignedPut{}, fmt.Errorf("objstore: sign put %q in %s: %w: the store cannot sign uploads", key, b.base, errors.ErrUnsupported)
	}
	raw, err := hex.DecodeString(sha)
	if err != nil {
		return SignedPut{}, fmt.Errorf("objstore: sign put %q: %w: sha256: %w", key, ErrInvalidRequest, err)
	}
	s3Key, err := b.s3Key(ctx, key)
	if err != nil {
		return SignedPut{}, err
	}
	now := time.Now()
	req, err := s3.NewPresignClient(cl, s3.WithPresignExpires(ttl)).PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:         aws.String(b.s3Bucket),
		Key:            aws.String(s3Key),
		ContentLength:  aws.Int64(size),
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(raw)),
		IfNoneMatch:    aws.String("*"),
	})
	if err != nil {
		return SignedPut{}, b.errorf("sign put", key, err)
	}
	h := req.SignedHeader.Clone()
	h.Del("Host")
	// The signature must cover what scopes the upload (the digest pins the
	// bytes, and so the size; the SDK signs Content-Length only when it is
	// not 0); an SDK that left one out would hand out a broader credential.
	signed := signedHeaders(req.URL)
	for _, name := range []string{"if-none-match", "x-amz-checksum-sha256"} {
		if !signed[name] {
			return SignedPut{}, fmt.Errorf("objstore: sign put %q in %s: the signature does not cover %s", key, b.base, name)
		}
	}
	return SignedPut{URL: req.URL, Header: h, Expires: now.Add(ttl)}, nil
}

// s3Key returns the S3 object key under which the store keeps key: gocloud
// escapes some sequences ("__0x41__" becomes "__0x5f___0x41__"), and a
// PUT signed for the raw key would write an object no other operation of
// the store finds (and that adopting never sees). gocloud computes it; its
// signing stops before anything is signed.
func (b *gcBucket) s3Key(ctx context.Context, key string) (string, error) {
	var escaped string
	_, err := b.b.SignedURL(ctx, b.prefix+key, &blob.SignedURLOptions{
		Method: http.MethodPut,
		Expiry: time.Minute,
		BeforeSign: func(as func(any) bool) error {
			var in *s3.PutObjectInput
			if as(&in) && in.Key != nil {
				escaped = *in.Key
			}
			return errKeyKnown
		},
	})
	if escaped == "" {
		return "", fmt.Errorf("objstore: sign put %q in %s: the store's object key is unknown: %w", key, b.base, err)
	}
	return escaped, nil
}

// errKeyKnown stops gocloud's signing once s3Key has the key.
var errKeyKnown = errors.New("objstore: object key known")

// signedHeaders returns the header names a presigned URL's
// X-Amz-SignedHeaders lists.
func signedHeaders(u string) map[string]bool {
	out := map[string]bool{}
	pu, err := url.Parse(u)
	if err != nil {
		return out
	}
	for name := range strings.SplitSeq(pu.Query().Get("X-Amz-SignedHeaders"), ";") {
		out[strings.ToLower(name)] = true
	}
	return out
}
