package snapshot

import (
	"fmt"
	"strings"
)

// Rule identifies one validation rule. A Rule is an error, so a rule is also
// a sentinel: errors.Is(err, RuleBucketMissing) holds for a *Violation of
// that rule and for a Validator.Err that contains one.
type Rule string

func (r Rule) Error() string { return "snapshot: rule " + string(r) }

// Plan and commit request.
const (
	RulePlan           Rule = "plan"            // target, transaction id, bucket count or limits are invalid
	RuleSnapshotIDs    Rule = "snapshot-ids"    // not exactly one non-negative snapshot id per bucket
	RuleManifestLength Rule = "manifest-length" // request length not in (0, MaxManifestSize]
	RuleManifestSHA256 Rule = "manifest-sha256" // request sha256 not canonical
	RuleManifestPath   Rule = "manifest-path"   // request path differs from the planned path
)

// Manifest.
const (
	RuleObjectMissing   Rule = "object-missing"   // an object to check was not supplied (not found)
	RuleManifestSize    Rule = "manifest-size"    // manifest bytes differ in length from the request (truncated or grown)
	RuleManifestDigest  Rule = "manifest-digest"  // manifest bytes do not match the request sha256
	RuleManifestJSON    Rule = "manifest-json"    // manifest is not a strictly valid document
	RuleManifestVersion Rule = "manifest-version" // manifest version missing, not an int or not 1
	RuleBulkLoadID      Rule = "bulk-load-id"     // bulk_load_id differs from the transaction id
	RuleBucketMissing   Rule = "bucket-missing"   // a bucket of 0..N-1 has no entry
	RuleBucketDuplicate Rule = "bucket-duplicate" // a bucket has more than one entry
	RuleBucketExtra     Rule = "bucket-extra"     // an entry's bucket is outside 0..N-1
	RuleBucketOrder     Rule = "bucket-order"     // entries are not in ascending bucket order
	RuleMetadataPath    Rule = "metadata-path"    // _METADATA path is not {tablet}/snap-{S}/_METADATA
	RuleMetadataLength  Rule = "metadata-length"  // _METADATA length not in (0, MaxMetadataSize]
	RuleMetadataSHA256  Rule = "metadata-sha256"  // _METADATA sha256 not canonical
)

// _METADATA.
const (
	RuleMetadataSize     Rule = "metadata-size"     // _METADATA bytes differ in length from the reference
	RuleMetadataDigest   Rule = "metadata-digest"   // _METADATA bytes do not match the reference sha256
	RuleMetadataJSON     Rule = "metadata-json"     // _METADATA is not a strictly valid document
	RuleMetadataVersion  Rule = "metadata-version"  // _METADATA version missing, not an int or not 1
	RuleTableID          Rule = "table-id"          // table_id differs from the target's
	RulePartitionID      Rule = "partition-id"      // partition_id absent, present or different, against the target
	RuleBucketID         Rule = "bucket-id"         // bucket_id differs from the manifest entry's bucket
	RuleSnapshotID       Rule = "snapshot-id"       // snapshot_id differs from the frozen id
	RuleSnapshotLocation Rule = "snapshot-location" // snapshot_location is not the canonical snap-{S} directory
	RuleSharedFiles      Rule = "shared-files"      // shared_file_handles is not empty
	RuleAutoIncRanges    Rule = "auto-inc-ranges"   // auto_inc_id_range is present
	RuleLogOffset        Rule = "log-offset"        // log_offset is negative
	RuleRowCount         Rule = "row-count"         // row_count absent though required, present though not, or negative
	RuleIncrementalSize  Rule = "incremental-size"  // snapshot_incremental_size differs from the sum of private sizes
	RuleInputSize        Rule = "input-size"        // manifest + _METADATA + private files exceed MaxInputSize
)

// Private files.
const (
	RuleFileSize            Rule = "file-size"             // size is negative
	RuleLocalPath           Rule = "local-path"            // local_path is not safe (see ValidateLocalPath)
	RuleDuplicateLocalPath  Rule = "duplicate-local-path"  // two files share a local_path
	RuleDuplicateRemotePath Rule = "duplicate-remote-path" // two files share a remote path
	RuleRemotePath          Rule = "remote-path"           // remote path not strictly within snap-{S}/
	RuleFileName            Rule = "file-name"             // name is not private-{sha256}-{sha256(local_path)} (thaw)
	RuleFileSHA256          Rule = "file-sha256"           // sha256 absent or not canonical (thaw)
	RuleFileObjectSize      Rule = "file-object-size"      // observed object size differs from size
)

// RuleIncomplete: a Validator stage was called out of order, or the stages
// stopped early without any other violation; an incomplete validation never
// passes.
const RuleIncomplete Rule = "incomplete"

// Rules lists every rule, in the order the Validator checks them.
func Rules() []Rule {
	return []Rule{
		RulePlan, RuleSnapshotIDs, RuleManifestLength, RuleManifestSHA256, RuleManifestPath,
		RuleObjectMissing, RuleManifestSize, RuleManifestDigest, RuleManifestJSON, RuleManifestVersion,
		RuleBulkLoadID, RuleBucketMissing, RuleBucketDuplicate, RuleBucketExtra, RuleBucketOrder,
		RuleMetadataPath, RuleMetadataLength, RuleMetadataSHA256,
		RuleMetadataSize, RuleMetadataDigest, RuleMetadataJSON, RuleMetadataVersion,
		RuleTableID, RulePartitionID, RuleBucketID, RuleSnapshotID, RuleSnapshotLocation,
		RuleSharedFiles, RuleAutoIncRanges, RuleLogOffset, RuleRowCount,
		RuleFileSize, RuleLocalPath, RuleDuplicateLocalPath, RuleDuplicateRemotePath,
		RuleRemotePath, RuleFileName, RuleFileSHA256, RuleFileObjectSize,
		RuleIncrementalSize, RuleInputSize, RuleIncomplete,
	}
}

// Violation is one broken rule. It wraps ErrInvalidBulkLoad, its Rule and,
// when set, Err.
type Violation struct {
	Rule   Rule
	Bucket int    // -1 when the violation concerns no single bucket
	Path   string // the object concerned, if any
	Detail string
	Err    error // underlying error, e.g. a *DecodeError; may be nil
}

func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString("snapshot: invalid bulk load: ")
	b.WriteString(string(v.Rule))
	if v.Bucket >= 0 {
		fmt.Fprintf(&b, ": bucket %d", v.Bucket)
	}
	if v.Path != "" {
		b.WriteString(": ")
		b.WriteString(v.Path)
	}
	if v.Detail != "" {
		b.WriteString(": ")
		b.WriteString(v.Detail)
	}
	if v.Err != nil {
		b.WriteString(": ")
		b.WriteString(v.Err.Error())
	}
	return b.String()
}

func (v *Violation) Unwrap() []error {
	if v.Err != nil {
		return []error{ErrInvalidBulkLoad, v.Rule, v.Err}
	}
	return []error{ErrInvalidBulkLoad, v.Rule}
}
