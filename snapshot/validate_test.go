package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

const testTxn = "0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23"

// fixture is a valid bulk load of 3 buckets, 3 private files each, kept as
// values so that a test can break exactly one thing before encoding.
type fixture struct {
	plan  Plan
	metas []*Metadata
	sizes map[string]int64 // observed object sizes
}

func newFixture(partitioned bool) *fixture {
	tg := Target{RemoteDir: "s3://bkt/remote", Database: "db", Table: "orders", TableID: 42}
	if partitioned {
		tg.Partition, tg.PartitionID = "2024-01-01", 7
	}
	f := &fixture{
		plan: Plan{
			Target: tg, TxnID: testTxn, Buckets: 3, SnapshotIDs: []int64{5, 0, 9},
			RequireRowCount: true, Limits: DefaultLimits(),
		},
		sizes: map[string]int64{},
	}
	for b, sid := range f.plan.SnapshotIDs {
		m := &Metadata{
			TableID:          42,
			BucketID:         int32(b),
			SnapshotID:       sid,
			SnapshotLocation: tg.SnapshotDir(b, sid),
			SharedFiles:      []KvFileHandle{},
			LogOffset:        int64(100 + b),
			RowCount:         ptr(int64(100 + b)),
		}
		if partitioned {
			m.PartitionID = ptr[int64](7)
		}
		for _, local := range []string{"000005.sst", "MANIFEST-000001", "db/OPTIONS-000003"} {
			content := fmt.Sprintf("bucket %d, file %s", b, local)
			sha := sha256Hex([]byte(content))
			path := m.SnapshotLocation + "/" + PrivateFileName(sha, local)
			m.PrivateFiles = append(m.PrivateFiles, KvFileHandle{
				Handle:    FileHandle{Path: path, Size: int64(len(content)), SHA256: sha},
				LocalPath: local,
			})
			m.IncrementalSize += int64(len(content))
			f.sizes[path] = int64(len(content))
		}
		f.metas = append(f.metas, m)
	}
	return f
}

func (f *fixture) file(b, i int) *KvFileHandle { return &f.metas[b].PrivateFiles[i] }

// setRemote moves file i of bucket b, with its observed size.
func (f *fixture) setRemote(b, i int, path string) {
	h := &f.file(b, i).Handle
	f.sizes[path] = f.sizes[h.Path]
	delete(f.sizes, h.Path)
	h.Path = path
}

// setLocal changes a local path and renames the file to match.
func (f *fixture) setLocal(b, i int, local string) {
	fh := f.file(b, i)
	fh.LocalPath = local
	f.setRemote(b, i, f.metas[b].SnapshotLocation+"/"+PrivateFileName(fh.Handle.SHA256, local))
}

// ruleCase breaks the fixture at one or more points of its encoding.
type ruleCase struct {
	name          string
	partitioned   bool
	want          []Rule
	fixture       func(f *fixture)               // before anything is encoded
	metaBytes     func(b int, raw []byte) []byte // a _METADATA, before it is referenced
	manifest      func(m *Manifest)              // before it is encoded
	manifestBytes func(raw []byte) []byte        // before the request pins it
	req           func(r *CommitRequest)         // the request
	in            func(f *fixture, in *Inputs)   // what the caller read
}

func (tc ruleCase) build(t testing.TB) (Plan, CommitRequest, Inputs) {
	t.Helper()
	f := newFixture(tc.partitioned)
	if tc.fixture != nil {
		tc.fixture(f)
	}
	orig := newFixture(tc.partitioned).plan // paths follow the unbroken plan
	docs := map[string][]byte{}
	man := &Manifest{BulkLoadID: testTxn}
	for b, m := range f.metas {
		raw := mustEncodeMetadata(t, m)
		if tc.metaBytes != nil {
			raw = tc.metaBytes(b, raw)
		}
		path := orig.Target.MetadataPath(b, orig.SnapshotIDs[b])
		docs[path] = raw
		man.Buckets = append(man.Buckets, ManifestBucket{
			BucketID: int32(b),
			Metadata: MetadataRef{Path: path, Length: int64(len(raw)), SHA256: sha256Hex(raw)},
		})
	}
	if tc.manifest != nil {
		tc.manifest(man)
	}
	mb, err := EncodeManifest(man)
	if err != nil {
		t.Fatal(err)
	}
	if tc.manifestBytes != nil {
		mb = tc.manifestBytes(mb)
	}
	req := CommitRequest{ManifestPath: orig.ManifestPath(), ManifestLength: int64(len(mb)), ManifestSHA256: sha256Hex(mb)}
	if tc.req != nil {
		tc.req(&req)
	}
	in := Inputs{Manifest: mb, Metadata: docs, Sizes: f.sizes}
	if tc.in != nil {
		tc.in(f, &in)
	}
	return f.plan, req, in
}

func rulesOf(vs []*Violation) []Rule {
	var rs []Rule
	for _, v := range vs {
		if !slices.Contains(rs, v.Rule) {
			rs = append(rs, v.Rule)
		}
	}
	slices.Sort(rs)
	return rs
}

// metaPath is the canonical _METADATA path of bucket b of the fixture.
func metaPath(partitioned bool, b int) string {
	p := newFixture(partitioned).plan
	return p.Target.MetadataPath(b, p.SnapshotIDs[b])
}

func flipLast(raw []byte) []byte {
	out := slices.Clone(raw)
	out[len(out)-3] ^= 1 // inside the last string or number, not a delimiter
	return out
}

func onBucket1(fn func(raw []byte) []byte) func(int, []byte) []byte {
	return func(b int, raw []byte) []byte {
		if b != 1 {
			return raw
		}
		return fn(raw)
	}
}

func replaceIn(old, new string) func([]byte) []byte {
	return func(raw []byte) []byte {
		s := string(raw)
		if !strings.Contains(s, old) {
			panic(fmt.Sprintf("%q not in %s", old, s))
		}
		return []byte(strings.Replace(s, old, new, 1))
	}
}

func TestValidateBaseline(t *testing.T) {
	for _, partitioned := range []bool{false, true} {
		plan, req, in := ruleCase{partitioned: partitioned}.build(t)
		if vs := Validate(plan, req, in); len(vs) != 0 {
			t.Fatalf("partitioned=%v: %v", partitioned, vs)
		}

		v := NewValidator(plan)
		if !v.CheckRequest(req) {
			t.Fatal(v.Err())
		}
		refs := v.CheckManifest(in.Manifest)
		if len(refs) != 3 {
			t.Fatalf("%d refs, want 3", len(refs))
		}
		for b, r := range refs {
			if want := plan.Target.MetadataPath(b, plan.SnapshotIDs[b]); r.Path != want {
				t.Errorf("ref %d: %s, want %s", b, r.Path, want)
			}
		}
		files := v.CheckMetadata(in.Metadata)
		if len(files) != 9 {
			t.Fatalf("%d files to stat, want 9", len(files))
		}
		for _, f := range files {
			if _, ok := in.Sizes[f.Path]; !ok || !IsCanonicalSHA256(f.SHA256) {
				t.Errorf("unexpected file %+v", f)
			}
		}
		v.CheckSizes(in.Sizes)
		if err := v.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestValidateRules(t *testing.T) {
	for _, tc := range ruleCases() {
		plan, req, in := tc.build(t)
		vs := Validate(plan, req, in)
		slices.Sort(tc.want)
		if got := rulesOf(vs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: rules %v, want %v\n%v", tc.name, got, tc.want, errors.Join(asErrors(vs)...))
			continue
		}
		for _, v := range vs {
			if !errors.Is(v, v.Rule) || !errors.Is(v, ErrInvalidBulkLoad) {
				t.Errorf("%s: %v does not wrap its rule and ErrInvalidBulkLoad", tc.name, v)
			}
			if !strings.HasPrefix(v.Error(), "snapshot: invalid bulk load: "+string(v.Rule)) {
				t.Errorf("%s: message %q", tc.name, v)
			}
		}
	}
}

func asErrors(vs []*Violation) []error {
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v
	}
	return errs
}

func ruleCases() []ruleCase {
	fileIn1 := func(f *fixture, i int) string { return f.file(1, i).Handle.Path }
	dir1 := func(f *fixture) string { return f.metas[1].SnapshotLocation }
	return []ruleCase{
		// plan
		{name: "plan: invalid target", want: []Rule{RulePlan}, fixture: func(f *fixture) { f.plan.Target.Database = "" }},
		{name: "plan: invalid txn id", want: []Rule{RulePlan}, fixture: func(f *fixture) { f.plan.TxnID = "../x" }},
		{name: "plan: no buckets", want: []Rule{RulePlan, RuleSnapshotIDs}, fixture: func(f *fixture) { f.plan.Buckets = 0 }},
		{name: "plan: zero limit", want: []Rule{RulePlan}, fixture: func(f *fixture) { f.plan.Limits.MaxInputSize = 0 }},
		{name: "plan: metadata limit above document limit", want: []Rule{RulePlan}, fixture: func(f *fixture) { f.plan.Limits.MaxMetadataSize = MaxDocumentSize + 1 }},
		{name: "snapshot ids: too few", want: []Rule{RuleSnapshotIDs}, fixture: func(f *fixture) { f.plan.SnapshotIDs = f.plan.SnapshotIDs[:2] }},
		{name: "snapshot ids: absent", want: []Rule{RuleSnapshotIDs}, fixture: func(f *fixture) { f.plan.SnapshotIDs = nil }},
		{name: "snapshot ids: negative", want: []Rule{RuleSnapshotIDs}, fixture: func(f *fixture) { f.plan.SnapshotIDs[1] = -1 }},

		// request
		{name: "manifest length: zero", want: []Rule{RuleManifestLength}, req: func(r *CommitRequest) { r.ManifestLength = 0 }},
		{name: "manifest length: negative", want: []Rule{RuleManifestLength}, req: func(r *CommitRequest) { r.ManifestLength = -1 }},
		{name: "manifest length: above limit", want: []Rule{RuleManifestLength}, fixture: func(f *fixture) { f.plan.Limits.MaxManifestSize = 100 }},
		{name: "manifest sha256: upper case", want: []Rule{RuleManifestSHA256}, req: func(r *CommitRequest) { r.ManifestSHA256 = strings.ToUpper(r.ManifestSHA256) }},
		{name: "manifest sha256: empty", want: []Rule{RuleManifestSHA256}, req: func(r *CommitRequest) { r.ManifestSHA256 = "" }},
		{name: "manifest path: other txn", want: []Rule{RuleManifestPath}, req: func(r *CommitRequest) { r.ManifestPath = strings.Replace(r.ManifestPath, testTxn, "other", 1) }},
		{name: "manifest path: dot-dot", want: []Rule{RuleManifestPath}, req: func(r *CommitRequest) {
			r.ManifestPath = strings.Replace(r.ManifestPath, "/manifest", "/x/../manifest", 1)
		}},
		{name: "manifest path: trailing slash", want: []Rule{RuleManifestPath}, req: func(r *CommitRequest) { r.ManifestPath += "/" }},

		// manifest content
		{name: "manifest: not found", want: []Rule{RuleObjectMissing}, in: func(_ *fixture, in *Inputs) { in.Manifest = nil }},
		{name: "manifest size: grown", want: []Rule{RuleManifestSize}, in: func(_ *fixture, in *Inputs) { in.Manifest = append(in.Manifest, ' ') }},
		{name: "manifest size: truncated", want: []Rule{RuleManifestSize}, in: func(_ *fixture, in *Inputs) { in.Manifest = in.Manifest[:len(in.Manifest)-1] }},
		{name: "manifest digest", want: []Rule{RuleManifestDigest}, in: func(_ *fixture, in *Inputs) { in.Manifest = flipLast(in.Manifest) }},
		{name: "manifest json: unknown field", want: []Rule{RuleManifestJSON}, manifestBytes: replaceIn(`"buckets":`, `"extra":0,"buckets":`)},
		{name: "manifest json: duplicate key", want: []Rule{RuleManifestJSON}, manifestBytes: replaceIn(`"bulk_load_id":`, `"bulk_load_id":"x","bulk_load_id":`)},
		{name: "manifest json: nested duplicate key", want: []Rule{RuleManifestJSON}, manifestBytes: replaceIn(`"length":`, `"length":1,"length":`)},
		{name: "manifest json: trailing data", want: []Rule{RuleManifestJSON}, manifestBytes: func(raw []byte) []byte { return append(raw, "{}"...) }},
		{name: "manifest json: bom", want: []Rule{RuleManifestJSON}, manifestBytes: func(raw []byte) []byte { return append([]byte("\xef\xbb\xbf"), raw...) }},
		{name: "manifest version: 2", want: []Rule{RuleManifestVersion}, manifestBytes: replaceIn(`"version":1`, `"version":2`)},
		{name: "manifest version: missing", want: []Rule{RuleManifestVersion}, manifestBytes: replaceIn(`"version":1,`, ``)},
		{name: "manifest version: huge", want: []Rule{RuleManifestVersion}, manifestBytes: replaceIn(`"version":1`, `"version":4294967297`)},
		{name: "bulk load id", want: []Rule{RuleBulkLoadID}, manifest: func(m *Manifest) { m.BulkLoadID = strings.ToUpper(testTxn) }},
		{name: "bucket missing", want: []Rule{RuleBucketMissing}, manifest: func(m *Manifest) { m.Buckets = slices.Delete(m.Buckets, 1, 2) }},
		{name: "bucket missing: all", want: []Rule{RuleBucketMissing}, manifest: func(m *Manifest) { m.Buckets = nil }},
		{name: "bucket duplicate", want: []Rule{RuleBucketDuplicate}, manifest: func(m *Manifest) { m.Buckets = slices.Insert(m.Buckets, 2, m.Buckets[1]) }},
		{name: "bucket extra", want: []Rule{RuleBucketExtra}, manifest: func(m *Manifest) {
			m.Buckets = append(m.Buckets, ManifestBucket{BucketID: 3, Metadata: m.Buckets[2].Metadata})
		}},
		{name: "bucket extra: negative", want: []Rule{RuleBucketExtra}, manifest: func(m *Manifest) {
			m.Buckets = append([]ManifestBucket{{BucketID: -1, Metadata: m.Buckets[0].Metadata}}, m.Buckets...)
		}},
		{name: "bucket order", want: []Rule{RuleBucketOrder}, manifest: func(m *Manifest) { m.Buckets[1], m.Buckets[2] = m.Buckets[2], m.Buckets[1] }},
		{name: "metadata path: other snapshot", want: []Rule{RuleMetadataPath}, manifest: func(m *Manifest) {
			m.Buckets[1].Metadata.Path = strings.Replace(m.Buckets[1].Metadata.Path, "/snap-0/", "/snap-1/", 1)
		}},
		{name: "metadata path: dot-dot", want: []Rule{RuleMetadataPath}, manifest: func(m *Manifest) {
			m.Buckets[1].Metadata.Path = strings.Replace(m.Buckets[1].Metadata.Path, "/_METADATA", "/x/../_METADATA", 1)
		}},
		{name: "metadata path: other bucket's", want: []Rule{RuleMetadataPath}, manifest: func(m *Manifest) { m.Buckets[1].Metadata.Path = m.Buckets[2].Metadata.Path }},
		{name: "metadata length: zero", want: []Rule{RuleMetadataLength}, manifest: func(m *Manifest) { m.Buckets[1].Metadata.Length = 0 }},
		{name: "metadata length: above limit", want: []Rule{RuleMetadataLength}, fixture: func(f *fixture) { f.plan.Limits.MaxMetadataSize = 100 }},
		{name: "metadata sha256", want: []Rule{RuleMetadataSHA256}, manifest: func(m *Manifest) { m.Buckets[1].Metadata.SHA256 = "abc" }},
		{name: "metadata: not found", want: []Rule{RuleObjectMissing}, in: func(_ *fixture, in *Inputs) { delete(in.Metadata, metaPath(false, 1)) }},
		{name: "metadata size: grown", want: []Rule{RuleMetadataSize}, in: func(_ *fixture, in *Inputs) {
			in.Metadata[metaPath(false, 1)] = append(in.Metadata[metaPath(false, 1)], '\n')
		}},
		{name: "metadata digest", want: []Rule{RuleMetadataDigest}, in: func(_ *fixture, in *Inputs) {
			in.Metadata[metaPath(false, 1)] = flipLast(in.Metadata[metaPath(false, 1)])
		}},
		{name: "metadata json: unknown field", want: []Rule{RuleMetadataJSON}, metaBytes: onBucket1(replaceIn(`"log_offset"`, `"extra":1,"log_offset"`))},
		{name: "metadata json: nested duplicate key", want: []Rule{RuleMetadataJSON}, metaBytes: onBucket1(replaceIn(`"size":`, `"size":1,"size":`))},
		{name: "metadata json: wrong type", want: []Rule{RuleMetadataJSON}, metaBytes: onBucket1(replaceIn(`"log_offset":101`, `"log_offset":"101"`))},
		{name: "metadata json: trailing data", want: []Rule{RuleMetadataJSON}, metaBytes: onBucket1(func(raw []byte) []byte { return append(raw, 'x') })},
		{name: "metadata version: 2", want: []Rule{RuleMetadataVersion}, metaBytes: onBucket1(replaceIn(`"version":1`, `"version":2`))},
		{name: "metadata version: missing", want: []Rule{RuleMetadataVersion}, metaBytes: onBucket1(replaceIn(`"version":1,`, ``))},

		// _METADATA fields
		{name: "table id", want: []Rule{RuleTableID}, fixture: func(f *fixture) { f.metas[1].TableID = 43 }},
		{name: "partition id: absent", partitioned: true, want: []Rule{RulePartitionID}, fixture: func(f *fixture) { f.metas[1].PartitionID = nil }},
		{name: "partition id: other", partitioned: true, want: []Rule{RulePartitionID}, fixture: func(f *fixture) { f.metas[1].PartitionID = ptr[int64](8) }},
		{name: "partition id: present", want: []Rule{RulePartitionID}, fixture: func(f *fixture) { f.metas[1].PartitionID = ptr[int64](0) }},
		{name: "bucket id", want: []Rule{RuleBucketID}, fixture: func(f *fixture) { f.metas[1].BucketID = 2 }},
		{name: "snapshot id", want: []Rule{RuleSnapshotID}, fixture: func(f *fixture) { f.metas[1].SnapshotID = 1 }},
		{name: "snapshot location", want: []Rule{RuleSnapshotLocation}, fixture: func(f *fixture) { f.metas[1].SnapshotLocation += "/" }},
		{name: "shared files", want: []Rule{RuleSharedFiles}, fixture: func(f *fixture) {
			f.metas[1].SharedFiles = []KvFileHandle{{Handle: FileHandle{Path: f.plan.Target.SharedDir(1) + "/x.sst", Size: 1}, LocalPath: "x.sst"}}
		}},
		{name: "auto-inc ranges: empty list", want: []Rule{RuleAutoIncRanges}, fixture: func(f *fixture) { f.metas[1].AutoIncRanges = []AutoIncRange{} }},
		{name: "auto-inc ranges", want: []Rule{RuleAutoIncRanges}, fixture: func(f *fixture) { f.metas[1].AutoIncRanges = []AutoIncRange{{ColumnID: 1, Start: 0, End: 10}} }},
		{name: "log offset", want: []Rule{RuleLogOffset}, fixture: func(f *fixture) { f.metas[1].LogOffset = -1 }},
		{name: "row count: absent", want: []Rule{RuleRowCount}, fixture: func(f *fixture) { f.metas[1].RowCount = nil }},
		{name: "row count: negative", want: []Rule{RuleRowCount}, fixture: func(f *fixture) { f.metas[1].RowCount = ptr[int64](-1) }},
		{name: "row count: not kept", want: []Rule{RuleRowCount}, fixture: func(f *fixture) { f.plan.RequireRowCount = false }},
		{name: "row count: not kept, absent", want: nil, fixture: func(f *fixture) {
			f.plan.RequireRowCount = false
			for _, m := range f.metas {
				m.RowCount = nil
			}
		}},
		{name: "incremental size", want: []Rule{RuleIncrementalSize}, fixture: func(f *fixture) { f.metas[1].IncrementalSize++ }},
		{name: "incremental size: overflow", want: []Rule{RuleIncrementalSize, RuleFileObjectSize, RuleInputSize}, fixture: func(f *fixture) {
			f.file(1, 0).Handle.Size = 1<<63 - 1
			f.file(1, 1).Handle.Size = 1<<63 - 1
			f.metas[1].IncrementalSize = -2 // the wrapped sum
		}},
		{name: "input size", want: []Rule{RuleInputSize}, fixture: func(f *fixture) { f.plan.Limits.MaxInputSize = 1000 }},

		// private files
		{name: "file size: negative", want: []Rule{RuleFileSize}, fixture: func(f *fixture) {
			f.metas[1].IncrementalSize -= f.file(1, 0).Handle.Size + 1
			f.file(1, 0).Handle.Size = -1
		}},
		{name: "local path: absolute", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "/000005.sst") }},
		{name: "local path: dot-dot", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "db/../000005.sst") }},
		{name: "local path: escapes", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "../000005.sst") }},
		{name: "local path: dot", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "./000005.sst") }},
		{name: "local path: empty segment", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "db//000005.sst") }},
		{name: "local path: trailing slash", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "db/") }},
		{name: "local path: backslash", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, `db\000005.sst`) }},
		{name: "local path: empty", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "") }},
		{name: "local path: nul", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "a\x00b") }},
		// A file named like a directory of another file: no restore can
		// make both (the fixture has db/OPTIONS-000003).
		{name: "local path: file is a directory of another", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "db") }},
		{name: "local path: file under another file", want: []Rule{RuleLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 0, "MANIFEST-000001/x") }},
		{name: "duplicate local path", want: []Rule{RuleDuplicateLocalPath}, fixture: func(f *fixture) { f.setLocal(1, 2, f.file(1, 0).LocalPath) }},
		{name: "duplicate remote path", want: []Rule{RuleDuplicateLocalPath, RuleDuplicateRemotePath}, fixture: func(f *fixture) {
			f.metas[1].PrivateFiles = append(f.metas[1].PrivateFiles, *f.file(1, 0))
			f.metas[1].IncrementalSize += f.file(1, 0).Handle.Size
		}},
		{name: "duplicate remote path: misnamed", want: []Rule{RuleDuplicateRemotePath, RuleFileName}, fixture: func(f *fixture) {
			f.setRemote(1, 2, fileIn1(f, 0))
			f.sizes[fileIn1(f, 0)] = f.file(1, 0).Handle.Size
		}},
		{name: "remote path: other bucket", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/1/snap-0/", "/2/snap-9/", 1))
		}},
		{name: "remote path: sibling prefix", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/snap-0/", "/snap-00/", 1))
		}},
		{name: "remote path: dot-dot", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/snap-0/", "/snap-0/../snap-0/", 1))
		}},
		{name: "remote path: escaped dot-dot", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/snap-0/", "/snap-0/%2e%2e/snap-0/", 1))
		}},
		{name: "remote path: subdirectory", want: []Rule{RuleFileName}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/snap-0/", "/snap-0/sub/", 1))
		}},
		{name: "remote path: empty segment", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "/snap-0/", "/snap-0//", 1))
		}},
		{name: "remote path: query", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) { f.setRemote(1, 0, fileIn1(f, 0)+"?versionId=1") }},
		{name: "remote path: other scheme", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "s3://", "gs://", 1))
		}},
		{name: "remote path: other authority", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "s3://bkt/", "s3://evil/", 1))
		}},
		{name: "remote path: upper-case scheme", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) {
			f.setRemote(1, 0, strings.Replace(fileIn1(f, 0), "s3://", "S3://", 1))
		}},
		{name: "remote path: the directory", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) { f.setRemote(1, 0, dir1(f)) }},
		{name: "remote path: _METADATA", want: []Rule{RuleRemotePath}, fixture: func(f *fixture) { f.setRemote(1, 0, dir1(f)+"/_METADATA") }},
		{name: "file name: plain", want: []Rule{RuleFileName}, fixture: func(f *fixture) { f.setRemote(1, 0, dir1(f)+"/000005.sst") }},
		{name: "file name: other content", want: []Rule{RuleFileName}, fixture: func(f *fixture) {
			f.setRemote(1, 0, dir1(f)+"/"+PrivateFileName(sha256Hex(nil), f.file(1, 0).LocalPath))
		}},
		{name: "file sha256: absent", want: []Rule{RuleFileSHA256}, fixture: func(f *fixture) { f.file(1, 0).Handle.SHA256 = "" }},
		{name: "file sha256: upper case", want: []Rule{RuleFileSHA256}, fixture: func(f *fixture) {
			f.file(1, 0).Handle.SHA256 = strings.ToUpper(f.file(1, 0).Handle.SHA256)
		}},
		{name: "file sha256: short", want: []Rule{RuleFileSHA256}, fixture: func(f *fixture) { f.file(1, 0).Handle.SHA256 = "abcd" }},
		{name: "file: not found", want: []Rule{RuleObjectMissing}, in: func(f *fixture, in *Inputs) { delete(in.Sizes, fileIn1(f, 1)) }},
		{name: "file object size", want: []Rule{RuleFileObjectSize}, in: func(f *fixture, in *Inputs) { in.Sizes[fileIn1(f, 1)]++ }},
		{name: "file object size: empty object", want: []Rule{RuleFileObjectSize}, in: func(f *fixture, in *Inputs) { in.Sizes[fileIn1(f, 1)] = 0 }},

		// several at once: every violation is reported
		{name: "many", partitioned: true, want: []Rule{RuleBulkLoadID, RuleBucketOrder, RuleTableID, RuleLogOffset, RuleFileSHA256, RuleFileObjectSize}, fixture: func(f *fixture) {
			f.metas[0].TableID = 1
			f.metas[2].LogOffset = -5
			f.file(1, 2).Handle.SHA256 = ""
		}, manifest: func(m *Manifest) {
			m.BulkLoadID = "x"
			m.Buckets[0], m.Buckets[1] = m.Buckets[1], m.Buckets[0]
		}, in: func(f *fixture, in *Inputs) { in.Sizes[f.file(2, 0).Handle.Path] = 1 }},
	}
}

func TestEveryRuleTested(t *testing.T) {
	tested := map[Rule]bool{RuleIncomplete: true} // TestValidatorStages
	for _, tc := range ruleCases() {
		if len(tc.want) == 1 {
			tested[tc.want[0]] = true
		}
	}
	// Names are derived from local paths, so two files can share a remote
	// path only if they share a local path or one is misnamed.
	tested[RuleDuplicateRemotePath] = true
	for _, r := range Rules() {
		if !tested[r] {
			t.Errorf("no test isolates rule %s", r)
		}
	}
	if len(tested) != len(Rules()) {
		t.Errorf("tests name %d rules, Rules has %d", len(tested), len(Rules()))
	}
}

func TestInputSizeBoundary(t *testing.T) {
	plan, req, in := ruleCase{}.build(t)
	total := req.ManifestLength
	for _, b := range in.Metadata {
		total += int64(len(b))
	}
	for _, n := range in.Sizes {
		total += n
	}
	plan.Limits.MaxInputSize = total
	if vs := Validate(plan, req, in); len(vs) != 0 {
		t.Fatalf("limit = total: %v", vs)
	}
	plan.Limits.MaxInputSize = total - 1
	if got := rulesOf(Validate(plan, req, in)); !slices.Equal(got, []Rule{RuleInputSize}) {
		t.Fatalf("limit = total-1: %v", got)
	}
}

// TestMetadataReadErrorNeverPasses: a storage error reading a _METADATA
// ends the metadata stage; a caller that goes on to CheckSizes (as it may,
// unconditionally) got no violation at all: a pass with no _METADATA read.
func TestMetadataReadErrorNeverPasses(t *testing.T) {
	p, req, in := ruleCase{}.build(t)
	v := NewValidator(p)
	if !v.CheckRequest(req) || len(v.CheckManifest(in.Manifest)) == 0 {
		t.Fatal(v.Violations())
	}
	_, err := v.CheckMetadataFrom(func(int, MetadataRef) ([]byte, bool, error) {
		return nil, false, errors.New("storage unavailable")
	})
	if err == nil {
		t.Fatal("want the read error")
	}
	v.CheckSizes(in.Sizes)
	if got := rulesOf(v.Violations()); !slices.Equal(got, []Rule{RuleIncomplete}) {
		t.Fatalf("violations %v after a failed read", got)
	}
}

// TestInputSizeRefusedBeforeMetadataReads: _METADATA references whose
// declared lengths already pass MaxInputSize are refused at the manifest,
// before the caller reads any of them (the limit bounds what a bulk load
// makes the coordinator read; it was checked after reading them all).
func TestInputSizeRefusedBeforeMetadataReads(t *testing.T) {
	p, req, in := ruleCase{}.build(t)
	p.Limits.MaxInputSize = req.ManifestLength + 1
	v := NewValidator(p)
	if !v.CheckRequest(req) {
		t.Fatal(v.Violations())
	}
	if refs := v.CheckManifest(in.Manifest); len(refs) != 0 {
		t.Fatalf("the caller is asked to read %d _METADATA over the input limit", len(refs))
	}
	v.CheckMetadata(in.Metadata)
	v.CheckSizes(in.Sizes)
	if got := rulesOf(v.Violations()); !slices.Equal(got, []Rule{RuleInputSize}) {
		t.Fatalf("violations %v", got)
	}
}

// TestValidatorStages checks that the staged API asks only for canonical
// objects and that skipping or reordering stages never passes.
func TestValidatorStages(t *testing.T) {
	plan, req, in := ruleCase{}.build(t)

	bad := req
	bad.ManifestPath = "s3://bkt/elsewhere/manifest"
	v := NewValidator(plan)
	if v.CheckRequest(bad) {
		t.Fatal("manifest readable from a foreign path")
	}
	if refs := v.CheckManifest(in.Manifest); refs != nil {
		t.Fatalf("gated CheckManifest returned %v", refs)
	}

	// A reference to a foreign path is not handed out for reading; a file
	// outside its snapshot directory is not handed out for stat.
	_, req2, in2 := ruleCase{
		manifest: func(m *Manifest) { m.Buckets[1].Metadata.Path = "s3://bkt/secret/_METADATA" },
		fixture:  func(f *fixture) { f.setRemote(2, 0, "s3://bkt/secret/data") },
	}.build(t)
	v = NewValidator(plan)
	v.CheckRequest(req2)
	refs := v.CheckManifest(in2.Manifest)
	if len(refs) != 2 || refs[0].Path != metaPath(false, 0) || refs[1].Path != metaPath(false, 2) {
		t.Fatalf("refs %v", refs)
	}
	for _, f := range v.CheckMetadata(in2.Metadata) {
		if strings.Contains(f.Path, "secret") {
			t.Fatalf("asked to stat %s", f.Path)
		}
	}
	v.CheckSizes(in2.Sizes)
	if got := rulesOf(v.Violations()); !slices.Equal(got, []Rule{RuleMetadataPath, RuleRemotePath}) {
		t.Fatalf("rules %v", got)
	}

	// Stopping early fails with RuleIncomplete.
	for stop := 0; stop < 4; stop++ {
		v := NewValidator(plan)
		if stop > 0 {
			v.CheckRequest(req)
		}
		if stop > 1 {
			v.CheckManifest(in.Manifest)
		}
		if stop > 2 {
			v.CheckMetadata(in.Metadata)
		}
		if err := v.Err(); !errors.Is(err, RuleIncomplete) || !errors.Is(err, ErrInvalidBulkLoad) {
			t.Errorf("stopped after %d stages: %v", stop, err)
		}
	}

	// Out of order, or twice.
	v = NewValidator(plan)
	v.CheckManifest(in.Manifest)
	if got := rulesOf(v.Violations()); !slices.Equal(got, []Rule{RuleIncomplete}) {
		t.Errorf("CheckManifest first: %v", got)
	}
	v = NewValidator(plan)
	v.CheckRequest(req)
	if v.CheckRequest(req) {
		t.Error("second CheckRequest passed")
	}
	v.CheckManifest(in.Manifest)
	v.CheckMetadata(in.Metadata)
	v.CheckSizes(in.Sizes)
	if got := rulesOf(v.Violations()); !slices.Equal(got, []Rule{RuleIncomplete}) {
		t.Errorf("CheckRequest twice: %v", got)
	}
}

func TestViolationErrors(t *testing.T) {
	plan, req, in := ruleCase{
		metaBytes: onBucket1(replaceIn(`"log_offset"`, `"extra":1,"log_offset"`)),
		manifest:  func(m *Manifest) { m.Buckets = m.Buckets[:2] },
	}.build(t)
	v := NewValidator(plan)
	v.CheckRequest(req)
	v.CheckManifest(in.Manifest)
	v.CheckMetadata(in.Metadata)
	v.CheckSizes(in.Sizes)
	err := v.Err()
	for _, target := range []error{ErrInvalidBulkLoad, RuleBucketMissing, RuleMetadataJSON, ErrUnknownField} {
		if !errors.Is(err, target) {
			t.Errorf("%v does not match %v", err, target)
		}
	}
	if errors.Is(err, RuleTableID) {
		t.Error("matches a rule that was not broken")
	}
	var viol *Violation
	if !errors.As(err, &viol) || viol.Rule != RuleBucketMissing || viol.Bucket != 2 {
		t.Errorf("first violation %+v", viol)
	}
	var de *DecodeError
	if !errors.As(err, &de) || de.Path != "extra" {
		t.Errorf("decode error %+v", de)
	}
	const want = "snapshot: invalid bulk load: bucket-missing: bucket 2: s3://bkt/remote/kv/db/orders-42/_bulkload/" + testTxn + "/manifest: no entry"
	if got := v.Violations()[0].Error(); got != want {
		t.Errorf("message %q\nwant %q", got, want)
	}
	if RuleTableID.Error() != "snapshot: rule table-id" {
		t.Errorf("rule message %q", RuleTableID.Error())
	}
}

// TestCheckMetadataFrom: the documents are asked for one at a time, in the
// references' order, so a caller holds one at a time; a read error ends
// the stage with it; the log offsets read come back per bucket.
func TestCheckMetadataFrom(t *testing.T) {
	plan, req, in := ruleCase{}.build(t)
	v := NewValidator(plan)
	v.CheckRequest(req)
	refs := v.CheckManifest(in.Manifest)
	var asked []int
	files, err := v.CheckMetadataFrom(func(i int, ref MetadataRef) ([]byte, bool, error) {
		if ref != refs[i] {
			t.Fatalf("asked for %d as %+v, the manifest's is %+v", i, ref, refs[i])
		}
		asked = append(asked, i)
		b, ok := in.Metadata[ref.Path]
		return b, ok, nil
	})
	if err != nil || len(files) != 9 || !slices.Equal(asked, []int{0, 1, 2}) {
		t.Fatalf("files %d, asked %v, %v", len(files), asked, err)
	}
	v.CheckSizes(in.Sizes)
	if err := v.Err(); err != nil {
		t.Fatal(err)
	}
	if got := v.LogOffsets(); !slices.Equal(got, []int64{100, 101, 102}) {
		t.Fatalf("log offsets %v", got)
	}

	injected := errors.New("store down")
	v = NewValidator(plan)
	v.CheckRequest(req)
	v.CheckManifest(in.Manifest)
	if _, err := v.CheckMetadataFrom(func(i int, ref MetadataRef) ([]byte, bool, error) {
		if i == 1 {
			return nil, false, injected
		}
		return in.Metadata[ref.Path], true, nil
	}); !errors.Is(err, injected) {
		t.Fatalf("a read error: %v", err)
	}
}
