package uploadcap

import (
	"fmt"
	"log/slog"
)

// The upload gateway's wire protocol, shared by the coordinator that serves
// it and the clients that use it.
//
//	PUT    {Path}?uri=U   Authorization: Bearer T, Content-Length: N,
//	                      X-Thaw-Content-Sha256: H; body: the object
//	POST   {Path}?uri=U   Authorization: Bearer T, X-Thaw-Content-Length: N,
//	                      X-Thaw-Content-Sha256: H; no body
//
// U is the object's URI; the gateway stores it write-if-absent (an
// identical object is adopted) after checking the body's size and SHA-256.
// PUT answers 200 with a Result; a refusal answers a 4xx or 5xx status with
// a Refusal. Nothing is ever deleted through the gateway (a delete cannot
// be fenced against a coordinator that lost its term).
//
// POST asks for a signed upload instead: the object goes straight to the
// store, not through the coordinator. It answers 200 with a Signed: either
// the key already holds these bytes (Adopted), or a URL and headers with
// which to PUT exactly these N bytes of SHA-256 H to the store, once, while
// the key is free, until ExpiresMs. A coordinator whose store signs no
// uploads (anything but S3), or that was told not to, refuses with class
// Unsupported (501): send the object with PUT instead.

// Path is the gateway's path on a coordinator's listener.
const Path = "/thaw/uploads/v1"

// HeaderSHA256 carries the lowercase hex SHA-256 of a PUT's body (or of
// the object a POST asks to upload).
const HeaderSHA256 = "X-Thaw-Content-Sha256"

// HeaderLength carries the size in bytes of the object a POST asks to
// upload.
const HeaderLength = "X-Thaw-Content-Length"

// Signed is the answer to a POST.
type Signed struct {
	Adopted   bool              `json:"adopted"`              // the key already holds these bytes: send nothing
	URL       SignedURL         `json:"url,omitempty"`        // PUT the object here
	Header    map[string]string `json:"header,omitempty"`     // with exactly these headers
	ExpiresMs int64             `json:"expires_ms,omitempty"` // until then (Unix milliseconds)
}

// LogValue shows the answer with its URL redacted (slog's JSON handler
// would otherwise marshal it whole).
func (s Signed) LogValue() slog.Value {
	return slog.GroupValue(slog.Bool("adopted", s.Adopted), slog.String("url", redacted), slog.Int64("expires_ms", s.ExpiresMs))
}

// SignedURL is a signed upload URL: a credential for one object (its query
// holds the signature). String, GoString, Format and LogValue print
// "[REDACTED]"; Reveal returns the URL, for the request only. It is
// marshalled in a Signed answer and nowhere else.
type SignedURL string

// Reveal returns the URL.
func (u SignedURL) Reveal() string { return string(u) }

// String returns "[REDACTED]".
func (u SignedURL) String() string { return redacted }

// GoString returns "[REDACTED]".
func (u SignedURL) GoString() string { return redacted }

// Format prints "[REDACTED]" for every verb.
func (u SignedURL) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue returns "[REDACTED]".
func (u SignedURL) LogValue() slog.Value { return slog.StringValue(redacted) }

// Result is the answer to a successful PUT.
type Result struct {
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Adopted bool   `json:"adopted"` // the key already held these bytes
}

// Refusal is the answer to a refused request: a message and the class a
// client acts on.
type Refusal struct {
	Error string `json:"error"`
	Class string `json:"class"`
}

// Classes of a Refusal. Expired, UnknownKey and NotLeader mean: ask the
// active coordinator for a new capability and send the request again.
const (
	Expired      = "expired"         // the capability expired
	UnknownKey   = "unknown_key"     // another coordinator minted it
	NotLeader    = "not_leader"      // this coordinator is not (yet) the active one
	Unauthorized = "unauthenticated" // no capability, or not a valid one
	NotBegun     = "not_begun"       // the transaction is not BEGUN (or unknown)
	OutOfScope   = "out_of_scope"    // the object is not the transaction's to write
	BadRequest   = "bad_request"     // the request itself is malformed
	TooLarge     = "too_large"       // larger than the gateway's limit
	Integrity    = "integrity"       // the body's size or SHA-256 differs from the request's
	Conflict     = "conflict"        // the key holds other bytes
	NotFound     = "not_found"       // an object the request needs is absent
	NoSpace      = "no_space"        // the store is full
	Transient    = "transient"       // a failure that may pass
	StoreRefused = "store_refused"   // the store refused the write for good
	Unsupported  = "unsupported"     // POST: this gateway signs no uploads
)

// Refresh reports whether a refusal of this class is cured by a new
// capability from the active coordinator.
func Refresh(class string) bool { return class == Expired || class == UnknownKey || class == NotLeader }
