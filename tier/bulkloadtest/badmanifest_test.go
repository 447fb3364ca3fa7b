package bulkloadtest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/coordinator"
	"github.com/thawdb/thaw/tier/tierpb"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
)

// fixture is one transaction's build output, to be spoilt by a case
// before Commit.
type fixture struct {
	h    *harness
	t    *testing.T
	info *tierv1.BulkLoadTargetInfo
	st   snapshot.Target
	res  []snapshotbuild.BucketResult
	m    *snapshot.Manifest
	raw  []byte       // manifest bytes to write; nil: encode m
	path string       // where to write them; "": the planned path
	ref  *manifestRef // what Commit sends; nil: the written bytes
	skip bool         // write no manifest
}

func (f *fixture) metadataPath(b int) string { return f.st.MetadataPath(b, f.info.GetSnapshotIds()[b]) }

// metadata decodes bucket b's _METADATA.
func (f *fixture) metadata(b int) *snapshot.Metadata {
	f.t.Helper()
	md, err := snapshot.DecodeMetadata(f.h.get(f.metadataPath(b)))
	if err != nil {
		f.t.Fatal(err)
	}
	return md
}

// rewriteRaw replaces bucket b's _METADATA with raw and makes the manifest
// reference the new bytes.
func (f *fixture) rewriteRaw(b int, raw []byte) {
	f.t.Helper()
	f.h.put(f.metadataPath(b), raw)
	r := refOf(f.metadataPath(b), raw)
	f.m.Buckets[b].Metadata.Length, f.m.Buckets[b].Metadata.SHA256 = r.length, r.sha
}

// rewrite re-encodes bucket b's _METADATA after change.
func (f *fixture) rewrite(b int, change func(md *snapshot.Metadata)) {
	f.t.Helper()
	md := f.metadata(b)
	change(md)
	raw, err := snapshot.EncodeMetadata(md)
	if err != nil {
		f.t.Fatal(err)
	}
	f.rewriteRaw(b, raw)
}

// encoded returns the manifest's canonical bytes.
func (f *fixture) encoded() []byte {
	f.t.Helper()
	b, err := snapshot.EncodeManifest(f.m)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// spoilRaw edits the encoded manifest.
func (f *fixture) spoilRaw(edit func(string) string) { f.raw = []byte(edit(string(f.encoded()))) }

// A bad manifest is rejected with the rule it breaks, while the
// transaction stays BEGUN and abortable; an Abort then leaves the target
// ACTIVE and empty, as it was.
func TestBadManifests(t *testing.T) {
	h := newHarness(t, withBulkConfig(func(c *coordinator.BulkLoadConfig) {
		c.MaxPerTarget = 64
		c.MaxManifestBytes = 16 << 10
	}))
	n := h.standard()
	tp := h.createTable(n, "items", 4, "")
	rows := makeRows(40, "")
	var tb *kv.Table

	cases := []struct {
		name  string
		rule  snapshot.Rule
		spoil func(f *fixture)
	}{
		{"missing bucket", snapshot.RuleBucketMissing, func(f *fixture) {
			f.m.Buckets = slices.Delete(f.m.Buckets, 2, 3)
		}},
		{"duplicate bucket", snapshot.RuleBucketDuplicate, func(f *fixture) {
			f.m.Buckets = slices.Insert(f.m.Buckets, 2, f.m.Buckets[1])
		}},
		{"extra bucket", snapshot.RuleBucketExtra, func(f *fixture) {
			e := f.m.Buckets[3]
			e.BucketID = 4
			f.m.Buckets = append(f.m.Buckets, e)
		}},
		{"buckets out of order", snapshot.RuleBucketOrder, func(f *fixture) {
			f.m.Buckets[1], f.m.Buckets[2] = f.m.Buckets[2], f.m.Buckets[1]
		}},
		{"wrong snapshot id", snapshot.RuleSnapshotID, func(f *fixture) {
			f.rewrite(1, func(md *snapshot.Metadata) { md.SnapshotID++ })
		}},
		{"wrong table id", snapshot.RuleTableID, func(f *fixture) {
			f.rewrite(0, func(md *snapshot.Metadata) { md.TableID += 100 })
		}},
		{"partition id on a table", snapshot.RulePartitionID, func(f *fixture) {
			f.rewrite(0, func(md *snapshot.Metadata) { p := int64(7); md.PartitionID = &p })
		}},
		{"bucket id mismatch", snapshot.RuleBucketID, func(f *fixture) {
			f.rewrite(2, func(md *snapshot.Metadata) { md.BucketID = 3 })
		}},
		{"metadata path outside the transaction's directories", snapshot.RuleMetadataPath, func(f *fixture) {
			other := f.st.MetadataPath(0, 999)
			raw := f.h.get(f.metadataPath(0))
			f.h.put(other, raw)
			f.m.Buckets[0].Metadata.Path = other
		}},
		{"data file outside the snapshot directory", snapshot.RuleRemotePath, func(f *fixture) {
			f.rewrite(3, func(md *snapshot.Metadata) {
				md.PrivateFiles[0].Handle.Path = f.st.SnapshotDir(3, 999) + "/" + snapshot.PrivateFileName(md.PrivateFiles[0].Handle.SHA256, md.PrivateFiles[0].LocalPath)
			})
		}},
		{"dot-dot in a local path", snapshot.RuleLocalPath, func(f *fixture) {
			f.rewrite(1, func(md *snapshot.Metadata) { md.PrivateFiles[0].LocalPath = "../escape" })
		}},
		{"duplicate local path", snapshot.RuleDuplicateLocalPath, func(f *fixture) {
			f.rewrite(1, func(md *snapshot.Metadata) { md.PrivateFiles[1].LocalPath = md.PrivateFiles[0].LocalPath })
		}},
		{"size mismatch of a data file", snapshot.RuleFileObjectSize, func(f *fixture) {
			f.rewrite(2, func(md *snapshot.Metadata) {
				md.PrivateFiles[0].Handle.Size++
				md.IncrementalSize++
			})
		}},
		{"incremental size mismatch", snapshot.RuleIncrementalSize, func(f *fixture) {
			f.rewrite(2, func(md *snapshot.Metadata) { md.IncrementalSize += 5 })
		}},
		{"digest mismatch of the manifest", snapshot.RuleManifestDigest, func(f *fixture) {
			b := f.encoded()
			r := refOf(f.info.GetManifestPath(), b)
			r.sha = strings.Repeat("ab", 32)
			f.ref = &r
		}},
		{"truncated manifest", snapshot.RuleManifestSize, func(f *fixture) {
			b := f.encoded()
			r := refOf(f.info.GetManifestPath(), b)
			r.length += 10
			f.ref = &r
		}},
		{"digest mismatch of a _METADATA", snapshot.RuleMetadataDigest, func(f *fixture) {
			f.m.Buckets[2].Metadata.SHA256 = strings.Repeat("cd", 32)
		}},
		{"digest mismatch of a data file", coordinator.RuleFileDigest, func(f *fixture) {
			md := f.metadata(3)
			var biggest snapshot.KvFileHandle
			for _, pf := range md.PrivateFiles {
				if pf.Handle.Size > biggest.Handle.Size {
					biggest = pf
				}
			}
			b := f.h.get(biggest.Handle.Path)
			b[len(b)/2] ^= 0xff
			f.h.put(biggest.Handle.Path, b)
		}},
		{"missing data file", snapshot.RuleObjectMissing, func(f *fixture) {
			md := f.metadata(0)
			key, err := f.h.objects.Key(md.PrivateFiles[0].Handle.Path)
			if err != nil {
				f.t.Fatal(err)
			}
			if err := f.h.objects.Delete(f.t.Context(), key); err != nil {
				f.t.Fatal(err)
			}
		}},
		{"shared files present", snapshot.RuleSharedFiles, func(f *fixture) {
			f.rewrite(0, func(md *snapshot.Metadata) {
				md.SharedFiles = []snapshot.KvFileHandle{{Handle: snapshot.FileHandle{Path: f.st.SharedDir(0) + "/x.sst", Size: 1, SHA256: strings.Repeat("0", 64)}, LocalPath: "x.sst"}}
			})
		}},
		{"negative log offset", snapshot.RuleLogOffset, func(f *fixture) {
			f.rewrite(1, func(md *snapshot.Metadata) { md.LogOffset = -1 })
		}},
		{"row count absent", snapshot.RuleRowCount, func(f *fixture) {
			f.rewrite(1, func(md *snapshot.Metadata) { md.RowCount = nil })
		}},
		{"unknown field in the manifest", snapshot.RuleManifestJSON, func(f *fixture) {
			f.spoilRaw(func(s string) string { return strings.Replace(s, `{"version":1,`, `{"version":1,"extra":true,`, 1) })
		}},
		{"duplicate key in the manifest", snapshot.RuleManifestJSON, func(f *fixture) {
			f.spoilRaw(func(s string) string { return strings.Replace(s, `{"version":1,`, `{"version":1,"version":1,`, 1) })
		}},
		{"trailing data after the manifest", snapshot.RuleManifestJSON, func(f *fixture) {
			f.spoilRaw(func(s string) string { return s + `{}` })
		}},
		{"unknown field in a _METADATA", snapshot.RuleMetadataJSON, func(f *fixture) {
			raw := f.h.get(f.metadataPath(2))
			f.rewriteRaw(2, bytes.Replace(raw, []byte(`{"version":1,`), []byte(`{"version":1,"extra":1,`), 1))
		}},
		{"oversize manifest", snapshot.RuleManifestLength, func(f *fixture) {
			f.spoilRaw(func(s string) string { return s + strings.Repeat(" ", 20<<10) })
		}},
		{"wrong manifest version", snapshot.RuleManifestVersion, func(f *fixture) {
			f.spoilRaw(func(s string) string { return strings.Replace(s, `{"version":1,`, `{"version":2,`, 1) })
		}},
		{"wrong _METADATA version", snapshot.RuleMetadataVersion, func(f *fixture) {
			raw := f.h.get(f.metadataPath(0))
			f.rewriteRaw(0, bytes.Replace(raw, []byte(`{"version":1,`), []byte(`{"version":2,`), 1))
		}},
		{"wrong bulk_load_id", snapshot.RuleBulkLoadID, func(f *fixture) {
			f.m.BulkLoadID = "00000000-0000-4000-8000-000000000000"
		}},
		{"manifest at another path", snapshot.RuleManifestPath, func(f *fixture) {
			f.path = f.st.BulkLoadDir(f.info.GetHandle().GetTxnId()) + "/other"
		}},
		{"no manifest written", snapshot.RuleObjectMissing, func(f *fixture) {
			f.skip = true
		}},
	}
	if len(cases) < 20 {
		t.Fatalf("only %d cases", len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			info := h.mustBegin(n, tp, fmt.Sprintf("bad-%d", i))
			if tb == nil {
				tb = table(t, info)
			}
			f := &fixture{h: h, t: t, info: info, st: snapTarget(info), res: h.build(info, rows)}
			f.m = &snapshot.Manifest{BulkLoadID: info.GetHandle().GetTxnId()}
			for _, r := range f.res {
				f.m.Buckets = append(f.m.Buckets, snapshot.ManifestBucket{BucketID: int32(r.Bucket), Metadata: r.MetadataRef()})
			}
			tc.spoil(f)
			raw := f.raw
			if raw == nil {
				raw = f.encoded()
			}
			path := f.path
			if path == "" {
				path = info.GetManifestPath()
			}
			ref := refOf(path, raw)
			if !f.skip {
				ref = h.writeManifest(path, raw)
			}
			if f.ref != nil {
				ref = *f.ref
			}
			_, err := commit(ctx, n, info.GetHandle(), ref)
			md := wantReason(t, err, tierpb.ReasonInvalidManifest)
			if !slices.Contains(strings.Split(md[tierpb.KeyRules], ","), string(tc.rule)) {
				t.Fatalf("rules %q (err %v), want %s", md[tierpb.KeyRules], err, tc.rule)
			}
			if !strings.Contains(err.Error(), string(tc.rule)) {
				t.Fatalf("error %v does not name rule %s", err, tc.rule)
			}
			// Still BEGUN, the manifest frozen; a retry gets the same answer.
			st, err := status(ctx, n, info.GetHandle().GetTxnId())
			if err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_BEGUN || st.GetPhase() != "invalid" || st.GetRegistration() != "LOADING" {
				t.Fatalf("status after the rejected commit: %v, %v", st, err)
			}
			_, err = commit(ctx, n, info.GetHandle(), ref)
			wantReason(t, err, tierpb.ReasonInvalidManifest)
			// Abortable; the target is as before.
			st, err = abort(ctx, n, info.GetHandle())
			if err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_ABORTED || st.GetAbortReason() != tierv1.BulkLoadAbortReason_BULK_LOAD_ABORT_REASON_ABORTED_BY_CALLER {
				t.Fatalf("abort: %v, %v", st, err)
			}
			h.noFence(tp)
			h.expectEmpty(tp, tb, rows)
		})
	}
}
