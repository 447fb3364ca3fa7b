package uploadcap

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/internal/strictjson"
)

var (
	// ErrMalformed reports a token that is not a capability.
	ErrMalformed = errors.New("uploadcap: malformed capability")
	// ErrSignature reports a token whose signature does not verify.
	ErrSignature = errors.New("uploadcap: capability signature does not verify")
	// ErrUnknownKey reports a token signed under another key: minted by
	// another coordinator (or this one before a restart). A new one from
	// the active coordinator will do.
	ErrUnknownKey = errors.New("uploadcap: capability minted by another coordinator")
	// ErrExpired reports a token past its expiry.
	ErrExpired = errors.New("uploadcap: capability expired")
)

const (
	prefix = "thawcap1."
	// KeySize is the size of a signing key.
	KeySize = 32
	// MaxTokenLen bounds a token; one of every bucket is about 170 bytes,
	// one of every other bucket of 4096 about 14 KiB.
	MaxTokenLen = 64 << 10
	// MaxTTL bounds a capability's lifetime.
	MaxTTL = 24 * time.Hour
)

// Token is a capability as handed to a builder. It is a credential: its
// String, GoString, Format and LogValue print "[REDACTED]"; Reveal returns
// the token itself, for the Authorization header only.
type Token string

const redacted = "[REDACTED]"

// Reveal returns the token.
func (t Token) Reveal() string { return string(t) }

// String returns "[REDACTED]".
func (t Token) String() string { return redacted }

// GoString returns "[REDACTED]".
func (t Token) GoString() string { return redacted }

// Format prints "[REDACTED]" for every verb.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue returns "[REDACTED]".
func (t Token) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON refuses: a token is never serialized.
func (t Token) MarshalJSON() ([]byte, error) {
	return nil, errors.New("uploadcap: a capability token is never serialized")
}

// Capability is what a token grants: uploads into the transaction TxnID's
// snapshot directories until Expires — of every bucket and the manifest
// path too when Buckets is nil, else of the buckets Buckets lists only
// (and no manifest: a builder of some buckets does not commit).
type Capability struct {
	TxnID   string
	Expires time.Time // millisecond precision, UTC
	// Buckets, sorted and distinct, each in 0..MaxBucket; nil means every
	// bucket and the manifest. An empty non-nil list is not a capability.
	Buckets []int
}

// MaxBucket bounds a bucket number in a capability (the tier's bucket
// limit is 4096).
const MaxBucket = 65535

// AllowsBucket reports whether c allows writing bucket b's snapshot
// directory.
func (c Capability) AllowsBucket(b int) bool {
	if c.Buckets == nil {
		return true
	}
	_, ok := slices.BinarySearch(c.Buckets, b)
	return ok
}

// AllowsManifest reports whether c allows writing the manifest.
func (c Capability) AllowsManifest() bool { return c.Buckets == nil }

// formatBuckets writes buckets as ranges ("0-3,7"); nil is "*".
func formatBuckets(buckets []int) string {
	if buckets == nil {
		return "*"
	}
	var sb strings.Builder
	for i := 0; i < len(buckets); {
		j := i
		for j+1 < len(buckets) && buckets[j+1] == buckets[j]+1 {
			j++
		}
		if sb.Len() > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(buckets[i]))
		if j > i {
			sb.WriteByte('-')
			sb.WriteString(strconv.Itoa(buckets[j]))
		}
		i = j + 1
	}
	return sb.String()
}

// parseBuckets reads what formatBuckets writes, and only that: ranges in
// ascending order, neither overlapping nor adjacent, single numbers as
// such, no leading zeros.
func parseBuckets(s string) ([]int, error) {
	if s == "*" {
		return nil, nil
	}
	if s == "" {
		return nil, errors.New("empty bucket list")
	}
	num := func(p string) (int, error) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > MaxBucket || strconv.Itoa(n) != p {
			return 0, fmt.Errorf("bucket %q is not a number in 0..%d", p, MaxBucket)
		}
		return n, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := num(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = num(hi); err != nil {
				return nil, err
			}
			if b <= a {
				return nil, fmt.Errorf("bucket range %q is not ascending", part)
			}
		}
		if len(out) > 0 && a <= out[len(out)-1]+1 {
			return nil, fmt.Errorf("bucket list %q is not in canonical form", s)
		}
		if len(out)+b-a+1 > MaxBucket+1 {
			return nil, errors.New("bucket list too long")
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	return out, nil
}

// Signer mints and verifies capabilities under one key.
type Signer struct {
	key []byte
	kid string
}

// NewSigner returns a Signer of key, which must be KeySize bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("uploadcap: signing key of %d bytes (want %d)", len(key), KeySize)
	}
	id := sha256.Sum256(append([]byte("thaw upload capability key id\x00"), key...))
	return &Signer{key: bytes.Clone(key), kid: hex.EncodeToString(id[:8])}, nil
}

// NewRandomSigner returns a Signer of a fresh random key.
func NewRandomSigner() (*Signer, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("uploadcap: signing key: %w", err)
	}
	return NewSigner(key)
}

// KeyID names the signing key (not secret: a truncated hash of it).
func (s *Signer) KeyID() string { return s.kid }

type payload struct {
	V       int    `json:"v"`
	Kid     string `json:"kid"`
	Txn     string `json:"txn"`
	Exp     int64  `json:"exp"`
	Buckets string `json:"buckets"` // "*" or ranges, see formatBuckets
}

var b64 = base64.RawURLEncoding

// Mint returns the token of c. The transaction id must be valid and the
// expiry, which the token keeps in whole milliseconds (rounded down),
// after now and at most MaxTTL away.
func (s *Signer) Mint(c Capability, now time.Time) (Token, error) {
	if err := bulkload.ValidateTxnID(c.TxnID); err != nil {
		return "", fmt.Errorf("uploadcap: mint: %w", err)
	}
	// Checked as the token will carry it: a sub-millisecond expiry after
	// now could round down to an expired token.
	c.Expires = time.UnixMilli(c.Expires.UnixMilli())
	if !c.Expires.After(now) || c.Expires.Sub(now) > MaxTTL {
		return "", fmt.Errorf("uploadcap: mint: expiry %s is not within (now, now+%s]", c.Expires.UTC().Format(time.RFC3339Nano), MaxTTL)
	}
	if c.Buckets != nil {
		if len(c.Buckets) == 0 {
			return "", errors.New("uploadcap: mint: an empty bucket list")
		}
		for i, b := range c.Buckets {
			if b < 0 || b > MaxBucket || (i > 0 && b <= c.Buckets[i-1]) {
				return "", fmt.Errorf("uploadcap: mint: buckets %v are not distinct, ascending and in 0..%d", c.Buckets, MaxBucket)
			}
		}
	}
	p, err := json.Marshal(payload{V: 1, Kid: s.kid, Txn: c.TxnID, Exp: c.Expires.UnixMilli(), Buckets: formatBuckets(c.Buckets)})
	if err != nil {
		return "", fmt.Errorf("uploadcap: mint: %w", err)
	}
	signed := prefix + b64.EncodeToString(p)
	return Token(signed + "." + b64.EncodeToString(s.mac(signed))), nil
}

func (s *Signer) mac(signed string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// Verify checks tok and returns its capability. Errors wrap ErrMalformed,
// ErrSignature, ErrUnknownKey or ErrExpired; they never quote the token.
func (s *Signer) Verify(tok Token, now time.Time) (Capability, error) {
	t := string(tok)
	if len(t) > MaxTokenLen {
		return Capability{}, fmt.Errorf("%w: %d bytes (at most %d)", ErrMalformed, len(t), MaxTokenLen)
	}
	rest, ok := strings.CutPrefix(t, prefix)
	if !ok {
		return Capability{}, fmt.Errorf("%w: not a thawcap1 token", ErrMalformed)
	}
	p64, mac64, ok := strings.Cut(rest, ".")
	if !ok {
		return Capability{}, fmt.Errorf("%w: no signature", ErrMalformed)
	}
	mac, err := b64.Strict().DecodeString(mac64)
	if err != nil || len(mac) != sha256.Size {
		return Capability{}, fmt.Errorf("%w: signature is not %d bytes of unpadded base64url", ErrMalformed, sha256.Size)
	}
	p, err := b64.Strict().DecodeString(p64)
	if err != nil {
		return Capability{}, fmt.Errorf("%w: payload is not unpadded base64url", ErrMalformed)
	}
	if !hmac.Equal(mac, s.mac(prefix+p64)) {
		// Tell a token of another coordinator's key from a forged one, so
		// that a builder knows to ask the active coordinator again.
		if k, err := kidOf(p); err == nil && k != s.kid {
			return Capability{}, fmt.Errorf("%w (key %s, this coordinator's is %s)", ErrUnknownKey, k, s.kid)
		}
		return Capability{}, ErrSignature
	}
	pl, err := parsePayload(p)
	if err != nil {
		return Capability{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	buckets, err := parseBuckets(pl.Buckets)
	if err != nil {
		return Capability{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	c := Capability{TxnID: pl.Txn, Expires: time.UnixMilli(pl.Exp).UTC(), Buckets: buckets}
	if pl.Kid != s.kid {
		return Capability{}, fmt.Errorf("%w: signed under key %s but names %s", ErrMalformed, s.kid, pl.Kid)
	}
	if !now.Before(c.Expires) {
		return Capability{}, fmt.Errorf("%w at %s", ErrExpired, c.Expires.Format(time.RFC3339Nano))
	}
	return c, nil
}

// kidOf reads the key id of an unverified payload, for the error only.
func kidOf(p []byte) (string, error) {
	pl, err := parsePayload(p)
	return pl.Kid, err
}

func parsePayload(p []byte) (payload, error) {
	members, err := strictjson.Check(p, strictjson.Options{MaxDepth: 1, NoNull: true})
	if err != nil {
		return payload{}, err
	}
	if members == nil {
		return payload{}, errors.New("payload is not an object")
	}
	if err := strictjson.Members(members, []string{"v", "kid", "txn", "exp", "buckets"}, nil); err != nil {
		return payload{}, err
	}
	var pl payload
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pl); err != nil {
		return payload{}, err
	}
	switch {
	case pl.V != 1:
		return payload{}, fmt.Errorf("version %d (want 1)", pl.V)
	case len(pl.Kid) != 16 || strings.Trim(pl.Kid, "0123456789abcdef") != "":
		return payload{}, errors.New("key id is not 16 lowercase hex digits")
	case pl.Exp <= 0:
		return payload{}, fmt.Errorf("expiry %d is not positive", pl.Exp)
	}
	if err := bulkload.ValidateTxnID(pl.Txn); err != nil {
		return payload{}, err
	}
	return pl, nil
}
