package bulkload

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Target names a physical target: a whole non-partitioned table
// (Partition "") or one partition, by name.
type Target struct {
	Database  string
	Table     string
	Partition string // "" = non-partitioned
}

// String returns "db.table" or "db.table/partition".
func (t Target) String() string {
	s := t.Database + "." + t.Table
	if t.Partition != "" {
		s += "/" + t.Partition
	}
	return s
}

// Handle identifies one transaction. Table and partition ids start at 1;
// PartitionID is 0 exactly when Target.Partition is "".
type Handle struct {
	Target      Target
	TableID     int64
	PartitionID int64
	TxnID       string // canonical lowercase UUID, the bulk_load_id
}

// Principal is the authenticated caller that began a transaction (Fluss's
// creator_name and creator_type). Begin resumes a transaction only for the
// same caller token and the same principal.
type Principal struct {
	Type string // e.g. "User", "anonymous"
	Name string
}

// Status is what Status, Commit and Abort report. AbortReason is set
// exactly when State is ABORTED.
type Status struct {
	Handle       Handle
	State        State
	AbortReason  *AbortReason
	AbortMessage string
	// ManifestFrozen: a Commit froze the manifest and the commit is being
	// decided (validated) while the state is still BEGUN; an Abort now
	// would end a commit that may succeed.
	ManifestFrozen bool
}

// ManifestRef names the manifest Commit freezes: its path, exact length and
// SHA-256 (64 lowercase hex digits).
type ManifestRef struct {
	Path   string
	Length int64
	SHA256 string
}

// Validate checks the form of m: a non-empty path, a positive length and a
// canonical SHA-256. Errors wrap ErrInvalidRequest. Whether the path is
// the planned one is for the server's validator.
func (m ManifestRef) Validate() error {
	switch {
	case m.Path == "":
		return fmt.Errorf("%w: empty manifest path", ErrInvalidRequest)
	case m.Length <= 0:
		return fmt.Errorf("%w: manifest length %d not positive", ErrInvalidRequest, m.Length)
	case !isLowerHex(m.SHA256, 64):
		return fmt.Errorf("%w: manifest sha256 %q is not 64 lowercase hex digits", ErrInvalidRequest, m.SHA256)
	}
	return nil
}

// TargetInfo is what Begin froze, returned to the caller to build the
// target's snapshots: everything a builder needs, no credentials.
type TargetInfo struct {
	Handle        Handle
	SchemaID      int16
	Schema        json.RawMessage // the table's kv.TableSchema JSON, opaque here
	Buckets       int
	Bucketing     string // "fluss", "iceberg" or "paimon" (kv.Bucketing)
	RemoteDataDir string
	SnapshotIDs   []int64  // one per bucket, indexed by bucket id
	SnapshotDirs  []string // canonical {tablet}/snap-{id} directory per bucket
	ManifestPath  string   // canonical manifest path of the transaction
	BuildDeadline time.Time
}

// NewTxnID returns a random (version 4) canonical lowercase UUID.
func NewTxnID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bulkload: new transaction id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

// ValidateTxnID checks that id is a canonical lowercase UUID
// (8-4-4-4-12 lowercase hex digits). Errors wrap ErrInvalidRequest.
func ValidateTxnID(id string) error {
	ok := len(id) == 36
	for i := 0; ok && i < len(id); i++ {
		switch i {
		case 8, 13, 18, 23:
			ok = id[i] == '-'
		default:
			ok = isLowerHex(id[i:i+1], 1)
		}
	}
	if !ok {
		return fmt.Errorf("%w: transaction id %q is not a canonical lowercase uuid", ErrInvalidRequest, id)
	}
	return nil
}

// MaxBearerTokenLen bounds a bearer token.
const MaxBearerTokenLen = 1024

// ValidateBearerToken checks a bearer token (a caller's credential):
// 16..MaxBearerTokenLen printable ASCII characters without spaces. Its
// errors never quote it.
func ValidateBearerToken(tok string) error {
	if len(tok) < 16 || len(tok) > MaxBearerTokenLen {
		return fmt.Errorf("%w: bearer token of %d bytes (want 16..%d)", ErrInvalidRequest, len(tok), MaxBearerTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return fmt.Errorf("%w: bearer token with a character that is not printable ASCII or is a space at byte %d", ErrInvalidRequest, i)
		}
	}
	return nil
}

// MaxCallerTokenLen bounds a caller token.
const MaxCallerTokenLen = 256

// ValidateCallerToken checks a caller token: 1..MaxCallerTokenLen printable
// ASCII characters without spaces. Errors wrap ErrInvalidRequest.
func ValidateCallerToken(tok string) error {
	if tok == "" || len(tok) > MaxCallerTokenLen {
		return fmt.Errorf("%w: caller token of %d bytes (want 1..%d)", ErrInvalidRequest, len(tok), MaxCallerTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: caller token %q has a character other than printable ascii", ErrInvalidRequest, tok)
		}
	}
	return nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
