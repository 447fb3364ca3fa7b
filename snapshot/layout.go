package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// File and directory names of the layout.
const (
	MetadataFileName = "_METADATA"
	ManifestFileName = "manifest"
	SharedDirName    = "shared"
	BulkLoadDirName  = "_bulkload"
	maxNameLen       = 200
)

// Target is one physical target: a whole non-partitioned table or one
// partition. Its path methods never fail; they assume Validate() == nil and
// non-negative bucket and snapshot ids.
type Target struct {
	RemoteDir   string // URI without a trailing slash: "file:///x/remote", "s3://bucket/prefix"
	Database    string
	Table       string
	TableID     int64
	Partition   string // "" = non-partitioned
	PartitionID int64  // meaningful only when Partition != ""
}

// Validate checks that the target yields canonical, unambiguous paths:
// RemoteDir is an absolute "scheme://authority[/path]" URI with no trailing
// slash, query, fragment, backslash, control character or empty, "." or
// ".." path segment; Database, Table and a non-empty Partition are names of
// 1..200 characters [A-Za-z0-9_-]; TableID and (when partitioned)
// PartitionID are non-negative. Errors wrap ErrInvalidTarget.
func (t Target) Validate() error {
	if err := validateRemoteDir(t.RemoteDir); err != nil {
		return fmt.Errorf("%w: remote dir %q: %s", ErrInvalidTarget, t.RemoteDir, err)
	}
	if err := validateName(t.Database); err != nil {
		return fmt.Errorf("%w: database name %q: %s", ErrInvalidTarget, t.Database, err)
	}
	if err := validateName(t.Table); err != nil {
		return fmt.Errorf("%w: table name %q: %s", ErrInvalidTarget, t.Table, err)
	}
	if t.TableID < 0 {
		return fmt.Errorf("%w: negative table id %d", ErrInvalidTarget, t.TableID)
	}
	if t.Partition != "" {
		if err := validatePartitionName(t.Partition); err != nil {
			return fmt.Errorf("%w: partition name %q: %s", ErrInvalidTarget, t.Partition, err)
		}
		if t.PartitionID < 0 {
			return fmt.Errorf("%w: negative partition id %d", ErrInvalidTarget, t.PartitionID)
		}
	}
	return nil
}

// Partitioned reports whether the target is one partition of a table.
func (t Target) Partitioned() bool { return t.Partition != "" }

// Dir is {remote}/kv/{db}/{table}-{tableId}[/{partition}-p{partitionId}].
func (t Target) Dir() string {
	d := t.RemoteDir + "/kv/" + t.Database + "/" + t.Table + "-" + strconv.FormatInt(t.TableID, 10)
	if t.Partition != "" {
		d += "/" + t.Partition + "-p" + strconv.FormatInt(t.PartitionID, 10)
	}
	return d
}

// TabletDir is Dir()/{bucket}.
func (t Target) TabletDir(bucket int) string { return t.Dir() + "/" + strconv.Itoa(bucket) }

// SnapshotDir is TabletDir(bucket)/snap-{snapshotID}, without a trailing slash.
func (t Target) SnapshotDir(bucket int, snapshotID int64) string {
	return t.TabletDir(bucket) + "/snap-" + strconv.FormatInt(snapshotID, 10)
}

// MetadataPath is SnapshotDir(bucket, snapshotID)/_METADATA.
func (t Target) MetadataPath(bucket int, snapshotID int64) string {
	return t.SnapshotDir(bucket, snapshotID) + "/" + MetadataFileName
}

// SharedDir is TabletDir(bucket)/shared, used only by tablet-made snapshots.
func (t Target) SharedDir(bucket int) string { return t.TabletDir(bucket) + "/" + SharedDirName }

// BulkLoadDir is Dir()/_bulkload/{txnID}.
func (t Target) BulkLoadDir(txnID string) string {
	return t.Dir() + "/" + BulkLoadDirName + "/" + txnID
}

// ManifestPath is BulkLoadDir(txnID)/manifest.
func (t Target) ManifestPath(txnID string) string {
	return t.BulkLoadDir(txnID) + "/" + ManifestFileName
}

// PrivateFileName is the object name of a private snapshot file:
// "private-{contentSHA256}-{sha256(utf8(localPath)) hex}". contentSHA256 is
// used as given; pass canonical lowercase hex.
func PrivateFileName(contentSHA256, localPath string) string {
	h := sha256.Sum256([]byte(localPath))
	return "private-" + contentSHA256 + "-" + hex.EncodeToString(h[:])
}

// ValidateTxnID checks that a bulk-load transaction id is usable as one path
// segment: 1..200 characters [A-Za-z0-9_-] (a canonical UUID qualifies).
// Errors wrap ErrInvalidTarget.
func ValidateTxnID(id string) error {
	if err := validateName(id); err != nil {
		return fmt.Errorf("%w: transaction id %q: %s", ErrInvalidTarget, id, err)
	}
	return nil
}

// ValidateLocalPath checks a private file's local_path: a non-empty relative
// path with "/" separators, no leading "/", no empty, "." or ".." segment, no
// backslash and no control character. Such a path is already normalized.
// Errors wrap ErrUnsafePath.
func ValidateLocalPath(p string) error {
	if err := checkRelPath(p); err != nil {
		return fmt.Errorf("%w: %q: %s", ErrUnsafePath, p, err)
	}
	return nil
}

// CheckLocalTree checks that a snapshot's local paths, each valid by
// ValidateLocalPath and distinct, can all be restored into one directory:
// none names a directory holding another ("a" beside "a/b"). Errors wrap
// ErrUnsafePath.
func CheckLocalTree(paths []string) error {
	files := make(map[string]bool, len(paths))
	for _, p := range paths {
		files[p] = true
	}
	for _, p := range paths {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if files[d] {
				return fmt.Errorf("%w: %q is a file, and a directory holding %q", ErrUnsafePath, d, p)
			}
		}
	}
	return nil
}

// StateKey is the key under which a thaw tablet replica keeps its applied
// state in a snapshot's database, beside the rows: a database holding other
// bytes under it does not restore. The tier refuses to write a row whose
// encoded key is StateKey, and snapshotbuild to build one.
const StateKey = "\xff\xffthaw-applied-offset"

// IsCanonicalSHA256 reports whether s is 64 lowercase hex digits.
func IsCanonicalSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func validateName(s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("length %d not in 1..%d", len(s), maxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return fmt.Errorf("character %q not in [A-Za-z0-9_-]", c)
		}
	}
	return nil
}

// validatePartitionName checks a partition name: one value per partition
// key joined by '$' (Fluss's ResolvedPartitionSpec), each value a non-empty
// [A-Za-z0-9_-] string other than "." or "..", at most 200 characters in all.
func validatePartitionName(s string) error {
	if len(s) > maxNameLen {
		return fmt.Errorf("length %d not in 1..%d", len(s), maxNameLen)
	}
	for _, v := range strings.Split(s, "$") {
		if err := validateName(v); err != nil {
			return fmt.Errorf("value %q: %v", v, err)
		}
	}
	return nil
}

// checkRelPath implements ValidateLocalPath without the wrapping.
func checkRelPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty")
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("not valid utf-8")
	}
	if strings.HasPrefix(p, "/") {
		return fmt.Errorf("absolute")
	}
	for _, r := range p {
		switch {
		case r == '\\':
			return fmt.Errorf("contains a backslash")
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("contains a control character")
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("empty, \".\" or \"..\" segment")
		}
	}
	return nil
}

func validateRemoteDir(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case err != nil:
		return fmt.Errorf("not a uri")
	case u.Scheme == "" || !strings.HasPrefix(s, u.Scheme+"://"):
		return fmt.Errorf("not of the form scheme://authority[/path] with a lowercase scheme")
	case strings.ContainsAny(s, "?#\\"):
		return fmt.Errorf("contains '?', '#' or a backslash")
	case strings.HasSuffix(s, "/"):
		return fmt.Errorf("trailing slash")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("contains a control character")
		}
	}
	rest := s[len(u.Scheme)+3:]
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return nil // authority only
	}
	if err := checkRelPath(rest[i+1:]); err != nil {
		return fmt.Errorf("path %s", err)
	}
	return nil
}
