package bulkloadclient

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/snapshotbuild"
)

const testSchema = `{"schema_id":0,"columns":[{"name":"id","type":"BIGINT","nullable":false},{"name":"name","type":"STRING","nullable":false}],"primary_key":["id"],"buckets":4,"bucketing":"fluss"}`

const goldenContext = `{"version":1,"database":"shop","table":"items","partition":"","table_id":7,"partition_id":0,` +
	`"txn_id":"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9","schema_id":0,"schema":` + testSchema +
	`,"buckets":4,"bucketing":"fluss","remote_data_dir":"file:///data/remote","snapshot_ids":[3,0,5,1],` +
	`"manifest_path":"file:///data/remote/kv/shop/items-7/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest","build_deadline_ms":1780000000123}`

func testContext(t *testing.T) *BuildContext {
	t.Helper()
	bc, err := fromTargetInfo(&tierv1.BulkLoadTargetInfo{
		Handle: &tierv1.BulkLoadHandle{
			Target: &tierv1.TargetPath{Database: "shop", Table: "items"}, TableId: 7,
			TxnId: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9",
		},
		SchemaId: 0, TableSchemaJson: []byte(testSchema), BucketCount: 4, Bucketing: "fluss",
		RemoteDataDir: "file:///data/remote", SnapshotIds: []int64{3, 0, 5, 1},
		SnapshotDirs:    []string{"a", "b", "c", "d"},
		ManifestPath:    "file:///data/remote/kv/shop/items-7/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest",
		BuildDeadlineMs: 1780000000123,
	})
	if err != nil {
		t.Fatal(err)
	}
	return bc
}

func TestBuildContextGolden(t *testing.T) {
	b, err := testContext(t).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != goldenContext {
		t.Fatalf("marshal:\n got %s\nwant %s", b, goldenContext)
	}
}

func TestBuildContextRoundTrip(t *testing.T) {
	bc := testContext(t)
	b, err := bc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalBuildContext(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Handle() != bc.Handle() || got.SchemaID() != bc.SchemaID() || got.Buckets() != bc.Buckets() ||
		got.Bucketing() != bc.Bucketing() || got.RemoteDataDir() != bc.RemoteDataDir() ||
		!reflect.DeepEqual(got.SnapshotIDs(), bc.SnapshotIDs()) || got.ManifestPath() != bc.ManifestPath() ||
		!got.BuildDeadline().Equal(bc.BuildDeadline()) || string(got.SchemaJSON()) != string(bc.SchemaJSON()) ||
		got.SnapshotTarget() != bc.SnapshotTarget() || got.Table() == nil {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, bc)
	}
	again, err := got.Marshal()
	if err != nil || string(again) != string(b) {
		t.Fatalf("second marshal differs: %s (%v)", again, err)
	}
	// Getters return copies.
	got.SnapshotIDs()[0] = 99
	got.SchemaJSON()[0] = 'x'
	if got.SnapshotIDs()[0] != 3 || got.SchemaJSON()[0] != '{' {
		t.Fatal("a getter exposed internal state")
	}
}

func TestUnmarshalBuildContextStrict(t *testing.T) {
	cases := map[string]string{
		"unknown field":        strings.Replace(goldenContext, `"version":1,`, `"version":1,"token":"secret",`, 1),
		"wrong version":        strings.Replace(goldenContext, `"version":1`, `"version":2`, 1),
		"no version":           strings.Replace(goldenContext, `"version":1,`, ``, 1),
		"trailing data":        goldenContext + `{}`,
		"bad txn id":           strings.Replace(goldenContext, `"txn_id":"0f1e`, `"txn_id":"XX1e`, 1),
		"too few ids":          strings.Replace(goldenContext, `[3,0,5,1]`, `[3,0,5]`, 1),
		"bucket mismatch":      strings.Replace(goldenContext, `"buckets":4,"bucketing"`, `"buckets":3,"bucketing"`, 1),
		"bucketing":            strings.Replace(goldenContext, `"bucketing":"fluss","remote`, `"bucketing":"paimon","remote`, 1),
		"no manifest path":     strings.Replace(goldenContext, `"manifest_path":"file:///data/remote/kv/shop/items-7/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest"`, `"manifest_path":""`, 1),
		"partition id":         strings.Replace(goldenContext, `"partition_id":0`, `"partition_id":4`, 1),
		"manifest elsewhere":   strings.Replace(goldenContext, `/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest"`, `/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/../../../../x"`, 1),
		"other txn's manifest": strings.Replace(goldenContext, `/_bulkload/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest"`, `/_bulkload/1f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9/manifest"`, 1),
		"not json":             `{"version":1,`,
		"bad schema":           strings.Replace(goldenContext, `"primary_key":["id"]`, `"primary_key":["nope"]`, 1),
	}
	for name, in := range cases {
		if in == goldenContext {
			t.Fatalf("%s: the case changes nothing", name)
		}
		if _, err := UnmarshalBuildContext([]byte(in)); !errors.Is(err, bulkload.ErrInvalidRequest) {
			t.Errorf("%s: err %v, want ErrInvalidRequest", name, err)
		}
	}
	if _, err := UnmarshalBuildContext([]byte(goldenContext)); err != nil {
		t.Fatal(err)
	}
}

func TestCoverage(t *testing.T) {
	bc := testContext(t)
	res := func(buckets ...int) []snapshotbuild.BucketResult {
		var out []snapshotbuild.BucketResult
		for _, b := range buckets {
			r := snapshotbuild.BucketResult{Bucket: b}
			if b >= 0 && b < 4 {
				r.SnapshotID = bc.snapshotIDs[b]
				r.MetadataPath = bc.SnapshotTarget().MetadataPath(b, r.SnapshotID)
			}
			out = append(out, r)
		}
		return out
	}
	if err := CheckCoverage(bc, res(3, 1, 0, 2)); err != nil {
		t.Fatal(err)
	}
	// Another target's results with the same snapshot ids (each target
	// counts its own from 1): they were accepted, and the manifest written
	// from them at this transaction's path then blocked its own results.
	other := bc.SnapshotTarget()
	other.Table, other.TableID = "other", other.TableID+1
	foreign := res(0, 1, 2, 3)
	foreign[2].MetadataPath = other.MetadataPath(2, foreign[2].SnapshotID)
	for _, c := range []struct {
		name    string
		results []snapshotbuild.BucketResult
		want    []string
	}{
		{"missing", res(0, 2), []string{"missing buckets [1 3]"}},
		{"duplicate", res(0, 1, 1, 2, 3, 3), []string{"duplicate buckets [1 3]"}},
		{"both", res(0, 0, 1, 2), []string{"missing buckets [3]", "duplicate buckets [0]"}},
		{"out of range", res(0, 1, 2, 3, 4, -1), []string{"buckets [4 -1] out of range [0,4)"}},
		{"none", nil, []string{"missing buckets [0 1 2 3]"}},
		{"snapshot id", append(res(0, 1, 2), snapshotbuild.BucketResult{Bucket: 3, SnapshotID: 8}), []string{"bucket 3 has snapshot id 8, want 1"}},
		{"another transaction", foreign, []string{"bucket 2 has _METADATA " + foreign[2].MetadataPath + ", want " + bc.SnapshotTarget().MetadataPath(2, foreign[2].SnapshotID)}},
	} {
		err := CheckCoverage(bc, c.results)
		if !errors.Is(err, bulkload.ErrInvalidRequest) {
			t.Errorf("%s: err %v, want ErrInvalidRequest", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not say %q", c.name, err, w)
			}
		}
		if _, err := EncodeManifest(bc, c.results); err == nil {
			t.Errorf("%s: EncodeManifest accepted the results", c.name)
		}
	}
}

func TestCommitRejectsBadCoverageBeforeAnyCall(t *testing.T) {
	// The address is never dialled: coverage is checked first.
	c, err := New(t.Context(), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	bc := testContext(t)
	if _, err := c.Commit(t.Context(), bc, nil, 0); !errors.Is(err, bulkload.ErrInvalidRequest) || !strings.Contains(err.Error(), "missing buckets") {
		t.Fatalf("commit: %v", err)
	}
}
