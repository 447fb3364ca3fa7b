package uploadcap

// The upload gateway's wire protocol, shared by the coordinator that serves
// it and the clients that use it.
//
//	PUT    {Path}?uri=U   Authorization: Bearer T, Content-Length: N,
//	                      X-Thaw-Content-Sha256: H; body: the object
//	DELETE {Path}?uri=U   Authorization: Bearer T
//
// U is the object's URI; the gateway stores it write-if-absent (an
// identical object is adopted) after checking the body's size and SHA-256.
// PUT answers 200 with a Result, DELETE 204; a refusal answers a 4xx or
// 5xx status with a Refusal.

// Path is the gateway's path on a coordinator's listener.
const Path = "/thaw/uploads/v1"

// HeaderSHA256 carries the lowercase hex SHA-256 of a PUT's body.
const HeaderSHA256 = "X-Thaw-Content-Sha256"

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
	NotFound     = "not_found"       // DELETE of an absent object
	NoSpace      = "no_space"        // the store is full
	Transient    = "transient"       // a failure that may pass
	StoreRefused = "store_refused"   // the store refused the write for good
)

// Refresh reports whether a refusal of this class is cured by a new
// capability from the active coordinator.
func Refresh(class string) bool { return class == Expired || class == UnknownKey || class == NotLeader }
