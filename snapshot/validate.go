package snapshot

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Limits bound what one bulk load may make the coordinator read.
type Limits struct {
	MaxManifestSize int64 // bytes of the manifest, at most MaxDocumentSize
	MaxMetadataSize int64 // bytes of one _METADATA, at most MaxDocumentSize
	MaxInputSize    int64 // manifest + every _METADATA + every private file
}

// DefaultLimits returns limits suitable for up to 4096 buckets.
func DefaultLimits() Limits {
	return Limits{MaxManifestSize: 16 << 20, MaxMetadataSize: 16 << 20, MaxInputSize: 1 << 40}
}

// Plan is what Begin froze for one transaction.
type Plan struct {
	Target          Target  // table id, partition id and every canonical path
	TxnID           string  // the bulk_load_id
	Buckets         int     // bucket count N
	SnapshotIDs     []int64 // one per bucket, indexed by bucket id
	RequireRowCount bool    // row_count must be present (changelog image FULL) or absent
	Limits          Limits
}

// ManifestPath is the planned manifest path, Target.ManifestPath(TxnID).
func (p Plan) ManifestPath() string { return p.Target.ManifestPath(p.TxnID) }

// CommitRequest is what Commit carries.
type CommitRequest struct {
	ManifestPath   string
	ManifestLength int64
	ManifestSHA256 string
}

// Inputs is everything Validate reads, supplied by the caller.
type Inputs struct {
	Manifest []byte            // nil = not found
	Metadata map[string][]byte // _METADATA bytes by path; absent = not found
	Sizes    map[string]int64  // observed object sizes by path; absent = not found
}

// Validate runs every stage of a Validator over in and returns every
// violation; none means the commit request is valid.
func Validate(p Plan, req CommitRequest, in Inputs) []*Violation {
	v := NewValidator(p)
	v.CheckRequest(req)
	v.CheckManifest(in.Manifest)
	v.CheckMetadata(in.Metadata)
	v.CheckSizes(in.Sizes)
	return v.Violations()
}

// Validator checks one commit request against its Plan in four stages, each
// telling the caller exactly what to read next, so that only canonical,
// bounded objects inside the transaction's directories are ever read:
//
//	if v.CheckRequest(req) {                  // read ≤ req.ManifestLength+1 bytes of req.ManifestPath
//		refs := v.CheckManifest(manifest)     // read ≤ ref.Length+1 bytes of each ref.Path
//		files := v.CheckMetadata(docs)        // stat each file's Path
//		v.CheckSizes(sizes)
//	}
//	err := v.Err()
//
// Reading one byte more than the expected length lets the Validator see an
// object that grew. A stage whose predecessor found nothing to read next is a
// no-op, so calling all four unconditionally is fine. A Validator is pure
// and not safe for concurrent use.
type Validator struct {
	plan  Plan
	stage int
	open  bool // the previous stage lets the current one run
	req   CommitRequest
	refs  []bucketRef
	files []bucketFile
	total int64 // declared input bytes, saturating
	// aborted: a stage ended with its read's error, so whatever comes
	// after it cannot pass.
	aborted bool
	vs      []*Violation
	// offsets are the buckets' log_offset values the metadata stage read.
	offsets []int64
}

type bucketRef struct {
	bucket int
	ref    MetadataRef
}

type bucketFile struct {
	bucket int
	h      FileHandle
}

const (
	stageNew = iota
	stageRequest
	stageManifest
	stageMetadata
	stageSizes
)

// NewValidator returns a Validator for p.
func NewValidator(p Plan) *Validator {
	p.SnapshotIDs = slices.Clone(p.SnapshotIDs)
	return &Validator{plan: p, open: true}
}

// CheckRequest checks the plan and the commit request. It reports whether
// the caller may read the manifest.
func (v *Validator) CheckRequest(req CommitRequest) bool {
	if !v.step(stageRequest, "CheckRequest") {
		return false
	}
	n := len(v.vs)
	p := &v.plan
	planOK := v.checkPlan()
	if l := req.ManifestLength; l <= 0 || planOK && l > p.Limits.MaxManifestSize {
		v.report(RuleManifestLength, -1, req.ManifestPath, "length %d not in (0, %d]", l, p.Limits.MaxManifestSize)
	}
	if !IsCanonicalSHA256(req.ManifestSHA256) {
		v.report(RuleManifestSHA256, -1, req.ManifestPath, "%q is not 64 lowercase hex digits", req.ManifestSHA256)
	}
	if want := p.ManifestPath(); planOK && req.ManifestPath != want {
		v.report(RuleManifestPath, -1, req.ManifestPath, "want %s", want)
	}
	v.req = req
	if v.open = len(v.vs) == n; v.open {
		v.total = req.ManifestLength
	}
	return v.open
}

func (v *Validator) checkPlan() bool {
	n := len(v.vs)
	p := &v.plan
	if err := p.Target.Validate(); err != nil {
		v.reportErr(RulePlan, -1, "", err)
	}
	if err := ValidateTxnID(p.TxnID); err != nil {
		v.reportErr(RulePlan, -1, "", err)
	}
	if p.Buckets < 1 {
		v.report(RulePlan, -1, "", "bucket count %d < 1", p.Buckets)
	}
	for _, l := range []struct {
		name     string
		val, max int64
	}{
		{"max manifest size", p.Limits.MaxManifestSize, MaxDocumentSize},
		{"max metadata size", p.Limits.MaxMetadataSize, MaxDocumentSize},
		{"max input size", p.Limits.MaxInputSize, math.MaxInt64},
	} {
		if l.val <= 0 || l.val > l.max {
			v.report(RulePlan, -1, "", "%s %d not in (0, %d]", l.name, l.val, l.max)
		}
	}
	if len(p.SnapshotIDs) != p.Buckets {
		v.report(RuleSnapshotIDs, -1, "", "%d snapshot ids for %d buckets", len(p.SnapshotIDs), p.Buckets)
	}
	for b, id := range p.SnapshotIDs {
		if id < 0 {
			v.report(RuleSnapshotIDs, b, "", "negative snapshot id %d", id)
		}
	}
	return len(v.vs) == n
}

// CheckManifest checks the manifest bytes (nil when not found) and returns
// the _METADATA objects to read next: those of the buckets whose entry has
// the canonical path, a bounded length and a canonical digest.
func (v *Validator) CheckManifest(b []byte) []MetadataRef {
	if !v.step(stageManifest, "CheckManifest") {
		return nil
	}
	p, req := &v.plan, v.req
	if !v.content(RuleManifestSize, RuleManifestDigest, -1, req.ManifestPath, b, b != nil, req.ManifestLength, req.ManifestSHA256) {
		return nil
	}
	m, err := DecodeManifest(b)
	if err != nil {
		v.decodeFailed(RuleManifestJSON, RuleManifestVersion, -1, req.ManifestPath, err)
		return nil
	}
	if m.BulkLoadID != p.TxnID {
		v.report(RuleBulkLoadID, -1, req.ManifestPath, "%q, want %q", m.BulkLoadID, p.TxnID)
	}
	seen := make([]bool, p.Buckets)
	last := -1
	var refs []MetadataRef
	for i, e := range m.Buckets {
		b := int(e.BucketID)
		switch {
		case b < 0 || b >= p.Buckets:
			v.report(RuleBucketExtra, -1, req.ManifestPath, "entry %d: bucket %d not in 0..%d", i, b, p.Buckets-1)
			continue
		case seen[b]:
			v.report(RuleBucketDuplicate, b, req.ManifestPath, "entry %d: bucket listed again", i)
			continue
		case b < last:
			v.report(RuleBucketOrder, b, req.ManifestPath, "entry %d: bucket after bucket %d", i, last)
		}
		seen[b] = true
		last = max(last, b)
		if v.checkRef(b, e.Metadata) {
			v.refs = append(v.refs, bucketRef{bucket: b, ref: e.Metadata})
			refs = append(refs, e.Metadata)
			v.total = addSat(v.total, e.Metadata.Length)
		}
	}
	for b, ok := range seen {
		if !ok {
			v.report(RuleBucketMissing, b, req.ManifestPath, "no entry")
		}
	}
	// The manifest declares every _METADATA's length: input already over
	// the limit is refused before any of them is read.
	if limit := p.Limits.MaxInputSize; v.total > limit {
		v.report(RuleInputSize, -1, req.ManifestPath, "%d bytes declared by the manifest and its _METADATA references, limit %d", v.total, limit)
		return nil
	}
	v.open = len(refs) > 0
	return refs
}

func (v *Validator) checkRef(b int, r MetadataRef) bool {
	n := len(v.vs)
	if want := v.plan.Target.MetadataPath(b, v.plan.SnapshotIDs[b]); r.Path != want {
		v.report(RuleMetadataPath, b, r.Path, "want %s", want)
	}
	if limit := v.plan.Limits.MaxMetadataSize; r.Length <= 0 || r.Length > limit {
		v.report(RuleMetadataLength, b, r.Path, "length %d not in (0, %d]", r.Length, limit)
	}
	if !IsCanonicalSHA256(r.SHA256) {
		v.report(RuleMetadataSHA256, b, r.Path, "%q is not 64 lowercase hex digits", r.SHA256)
	}
	return len(v.vs) == n
}

// CheckMetadata checks the _METADATA documents (bytes by path; a missing
// path means not found) of the references CheckManifest returned, and
// returns the private files whose sizes to observe next: those strictly
// within their snapshot directory.
func (v *Validator) CheckMetadata(docs map[string][]byte) []FileHandle {
	files, _ := v.CheckMetadataFrom(func(i int, ref MetadataRef) ([]byte, bool, error) {
		b, found := docs[ref.Path]
		return b, found, nil
	})
	return files
}

// CheckMetadataFrom is CheckMetadata with each _METADATA read when it is
// checked, in the order CheckManifest returned the references (i is the
// index there), and dropped after: a caller need not hold every document
// at once (a manifest of 4096 buckets may declare 16 MiB for each). An
// error of read (a storage failure, not a missing object: found false)
// ends the stage with that error; the outcome is then unknown, and the
// validation cannot pass (RuleIncomplete).
func (v *Validator) CheckMetadataFrom(read func(i int, ref MetadataRef) (b []byte, found bool, err error)) ([]FileHandle, error) {
	if !v.step(stageMetadata, "CheckMetadata") {
		return nil, nil
	}
	v.offsets = make([]int64, v.plan.Buckets)
	for i, r := range v.refs {
		b, found, err := read(i, r.ref)
		if err != nil {
			v.aborted = true
			return nil, err
		}
		if !v.content(RuleMetadataSize, RuleMetadataDigest, r.bucket, r.ref.Path, b, found, r.ref.Length, r.ref.SHA256) {
			continue
		}
		m, err := DecodeMetadata(b)
		if err != nil {
			v.decodeFailed(RuleMetadataJSON, RuleMetadataVersion, r.bucket, r.ref.Path, err)
			continue
		}
		v.checkMetadata(r.bucket, r.ref.Path, m)
		if r.bucket >= 0 && r.bucket < len(v.offsets) {
			v.offsets[r.bucket] = m.LogOffset
		}
	}
	if limit := v.plan.Limits.MaxInputSize; v.total > limit {
		v.report(RuleInputSize, -1, "", "%d bytes declared, limit %d", v.total, limit)
	}
	v.open = true
	files := make([]FileHandle, len(v.files))
	for i, f := range v.files {
		files[i] = f.h
	}
	return files, nil
}

// LogOffsets returns each bucket's log_offset as the metadata stage read
// it (indexed by bucket); meaningful once Violations is empty.
func (v *Validator) LogOffsets() []int64 { return slices.Clone(v.offsets) }

func (v *Validator) checkMetadata(b int, path string, m *Metadata) {
	t, sid := &v.plan.Target, v.plan.SnapshotIDs[b]
	if m.TableID != t.TableID {
		v.report(RuleTableID, b, path, "%d, want %d", m.TableID, t.TableID)
	}
	switch {
	case t.Partitioned() && m.PartitionID == nil:
		v.report(RulePartitionID, b, path, "absent, want %d", t.PartitionID)
	case t.Partitioned() && *m.PartitionID != t.PartitionID:
		v.report(RulePartitionID, b, path, "%d, want %d", *m.PartitionID, t.PartitionID)
	case !t.Partitioned() && m.PartitionID != nil:
		v.report(RulePartitionID, b, path, "%d for a non-partitioned table", *m.PartitionID)
	}
	if int(m.BucketID) != b {
		v.report(RuleBucketID, b, path, "%d", m.BucketID)
	}
	if m.SnapshotID != sid {
		v.report(RuleSnapshotID, b, path, "%d, want %d", m.SnapshotID, sid)
	}
	dir := t.SnapshotDir(b, sid)
	if m.SnapshotLocation != dir {
		v.report(RuleSnapshotLocation, b, path, "%q, want %q", m.SnapshotLocation, dir)
	}
	if len(m.SharedFiles) > 0 {
		v.report(RuleSharedFiles, b, path, "%d shared files", len(m.SharedFiles))
	}
	if m.AutoIncRanges != nil {
		v.report(RuleAutoIncRanges, b, path, "%d ranges", len(m.AutoIncRanges))
	}
	if m.LogOffset < 0 {
		v.report(RuleLogOffset, b, path, "%d", m.LogOffset)
	}
	switch rc := m.RowCount; {
	case rc == nil && v.plan.RequireRowCount:
		v.report(RuleRowCount, b, path, "absent, but required")
	case rc != nil && !v.plan.RequireRowCount:
		v.report(RuleRowCount, b, path, "present, but the table keeps no row count")
	case rc != nil && *rc < 0:
		v.report(RuleRowCount, b, path, "%d", *rc)
	}

	locals := make(map[string]int, len(m.PrivateFiles))
	remotes := make(map[string]int, len(m.PrivateFiles))
	var sum int64
	sumOK := true
	for i, f := range m.PrivateFiles {
		h := f.Handle
		where := fmt.Sprintf("private file %d", i)
		if h.Size < 0 {
			v.report(RuleFileSize, b, h.Path, "%s: size %d", where, h.Size)
		} else {
			v.total = addSat(v.total, h.Size)
		}
		var ok bool
		if sum, ok = addChecked(sum, h.Size); !ok {
			sumOK = false
		}
		if err := ValidateLocalPath(f.LocalPath); err != nil {
			v.reportErr(RuleLocalPath, b, h.Path, fmt.Errorf("%s: %w", where, err))
		}
		if j, dup := locals[f.LocalPath]; dup {
			v.report(RuleDuplicateLocalPath, b, h.Path, "%s: local_path %q also in private file %d", where, f.LocalPath, j)
		} else {
			locals[f.LocalPath] = i
		}
		j, dupRemote := remotes[h.Path]
		if dupRemote {
			v.report(RuleDuplicateRemotePath, b, h.Path, "%s: also private file %d", where, j)
		} else {
			remotes[h.Path] = i
		}
		shaOK := IsCanonicalSHA256(h.SHA256)
		if !shaOK {
			v.report(RuleFileSHA256, b, h.Path, "%s: %q is not 64 lowercase hex digits", where, h.SHA256)
		}
		name, why := relativeTo(dir, h.Path)
		if why != "" {
			v.report(RuleRemotePath, b, h.Path, "%s: %s", where, why)
			continue
		}
		if want := PrivateFileName(h.SHA256, f.LocalPath); shaOK && name != want {
			v.report(RuleFileName, b, h.Path, "%s: want name %s", where, want)
		}
		if h.Size >= 0 && !dupRemote {
			v.files = append(v.files, bucketFile{bucket: b, h: h})
		}
	}
	if err := CheckLocalTree(slices.Sorted(maps.Keys(locals))); err != nil {
		v.reportErr(RuleLocalPath, b, path, err)
	}
	if !sumOK || sum != m.IncrementalSize {
		v.report(RuleIncrementalSize, b, path, "%d, but private files sum to %d", m.IncrementalSize, sum)
	}
}

// relativeTo returns the part of remote strictly within dir, or why there
// is none. The part must be a safe relative path free of URI escapes,
// queries and fragments, and must not be the _METADATA object.
func relativeTo(dir, remote string) (rel, why string) {
	if !strings.HasPrefix(remote, dir+"/") {
		if o := origin(dir); origin(remote) != o {
			return "", "scheme or authority differs from " + o
		}
		return "", "not within " + dir + "/"
	}
	rel = remote[len(dir)+1:]
	switch err := checkRelPath(rel); {
	case err != nil:
		return "", "path within the snapshot directory is " + err.Error()
	case strings.ContainsAny(rel, "%?#"):
		return "", "path contains '%', '?' or '#'"
	case rel == MetadataFileName:
		return "", "names the " + MetadataFileName + " object"
	}
	return rel, ""
}

// origin returns the "scheme://authority" prefix of a URI.
func origin(uri string) string {
	i := strings.Index(uri, "://")
	if i < 0 {
		return ""
	}
	if j := strings.IndexByte(uri[i+3:], '/'); j >= 0 {
		return uri[:i+3+j]
	}
	return uri
}

// CheckSizes checks the observed sizes (by path; a missing path means not
// found) of the files CheckMetadata returned.
func (v *Validator) CheckSizes(sizes map[string]int64) {
	if !v.step(stageSizes, "CheckSizes") {
		return
	}
	for _, f := range v.files {
		switch n, ok := sizes[f.h.Path]; {
		case !ok:
			v.report(RuleObjectMissing, f.bucket, f.h.Path, "private file not found")
		case n != f.h.Size:
			v.report(RuleFileObjectSize, f.bucket, f.h.Path, "object has %d bytes, metadata says %d", n, f.h.Size)
		}
	}
}

// Violations returns every violation found so far, in the order found. If
// there is none but not every stage has run, or one ended with its read's
// error, it returns one RuleIncomplete violation.
func (v *Validator) Violations() []*Violation {
	vs := slices.Clone(v.vs)
	switch {
	case len(vs) > 0:
	case v.aborted:
		vs = append(vs, &Violation{Rule: RuleIncomplete, Bucket: -1, Detail: "a stage ended with an error reading its input"})
	case v.stage != stageSizes:
		vs = append(vs, &Violation{Rule: RuleIncomplete, Bucket: -1, Detail: "validation stopped before CheckSizes"})
	}
	return vs
}

// Err joins Violations into one error, or returns nil when there are none.
func (v *Validator) Err() error {
	vs := v.Violations()
	errs := make([]error, len(vs))
	for i, e := range vs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// step enters stage s, reporting whether it may run. A call out of order is
// a RuleIncomplete violation.
func (v *Validator) step(s int, name string) bool {
	if v.stage != s-1 {
		v.report(RuleIncomplete, -1, "", "%s called out of order", name)
		v.open = false
		return false
	}
	v.stage = s
	ok := v.open
	v.open = false
	return ok
}

// content checks that b, read from path, is the object pinned by length
// and sha. A length mismatch masks the digest check.
func (v *Validator) content(sizeRule, digestRule Rule, bucket int, path string, b []byte, found bool, length int64, sha string) bool {
	switch {
	case !found:
		v.report(RuleObjectMissing, bucket, path, "not found")
	case int64(len(b)) != length:
		v.report(sizeRule, bucket, path, "read %d bytes, want exactly %d", len(b), length)
	default:
		if got := sha256Hex(b); got != sha {
			v.report(digestRule, bucket, path, "sha256 %s, want %s", got, sha)
			return false
		}
		return true
	}
	return false
}

func (v *Validator) decodeFailed(jsonRule, versionRule Rule, bucket int, path string, err error) {
	rule := jsonRule
	if de := (*DecodeError)(nil); errors.As(err, &de) && de.Path == "version" {
		rule = versionRule
	}
	v.reportErr(rule, bucket, path, err)
}

func (v *Validator) report(rule Rule, bucket int, path, format string, args ...any) {
	v.vs = append(v.vs, &Violation{Rule: rule, Bucket: bucket, Path: path, Detail: fmt.Sprintf(format, args...)})
}

func (v *Validator) reportErr(rule Rule, bucket int, path string, err error) {
	v.vs = append(v.vs, &Violation{Rule: rule, Bucket: bucket, Path: path, Err: err})
}

// addSat adds two non-negative numbers, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

func addChecked(a, b int64) (int64, bool) {
	c := a + b
	return c, (b >= 0) == (c >= a)
}
