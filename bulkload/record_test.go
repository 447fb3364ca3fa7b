package bulkload

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func ptr[T any](v T) *T { return &v }

// begun returns a fence-ready BEGUN record of a non-partitioned table.
func begun() Record {
	return Record{
		TxnID:           "3f1c2b7e-8a4d-4c1e-9b2a-5d6e7f8a9b0c",
		State:           Begun,
		CallerToken:     "job-42",
		Target:          Target{Database: "sales", Table: "orders"},
		TableID:         7,
		Creator:         Principal{Type: "User", Name: "alice"},
		RemoteDataDir:   "s3://bucket/thaw",
		SchemaID:        1,
		Schema:          []byte(`{"schema_id":1,"columns":[{"name":"id","type":"INT","nullable":false}],"primary_key":["id"],"buckets":3,"bucketing":"fluss"}`),
		Buckets:         3,
		Bucketing:       "fluss",
		SnapshotIDs:     []int64{11, 12, 13},
		CreatedMs:       1700000000000,
		UpdatedMs:       1700000000500,
		BuildDeadlineMs: 1700003600000,
	}
}

func goldenRecords() map[string]Record {
	creating := begun()
	creating.SnapshotIDs = nil
	creating.UpdatedMs = creating.CreatedMs

	committing := begun()
	committing.Target.Partition = "2024-01-01"
	committing.PartitionID = 3
	committing.State = Committing
	committing.Manifest = &ManifestRef{Path: "s3://bucket/thaw/kv/sales/orders-7/2024-01-01-p3/_bulkload/3f1c2b7e-8a4d-4c1e-9b2a-5d6e7f8a9b0c/manifest", Length: 321, SHA256: sha}
	committing.CommitDecisionDeadlineMs = 1700000900000
	committing.AdoptedBuckets = 2

	committed := committing
	committed.State = Committed
	committed.AdoptedBuckets = 3
	committed.ResultExpireMs = 1700086400000

	aborting := begun()
	aborting.AbortReason = ptr(AbortedByCaller)
	aborting.AbortMessage = "aborted by <caller> & co"

	aborted := creating
	aborted.State = Aborted
	aborted.AbortReason = ptr(TargetNotEmpty)
	aborted.AbortMessage = "bucket 1 on ts-2: log end 5"
	aborted.ResultExpireMs = 1700086400000

	return map[string]Record{
		"begun-creating": creating,
		"begun-ready":    begun(),
		"begun-aborting": aborting,
		"committing":     committing,
		"committed":      committed,
		"aborted":        aborted,
	}
}

func TestRecordGolden(t *testing.T) {
	for name, rec := range goldenRecords() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "record-"+name+".json")
			got, err := EncodeRecord(rec)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want = bytes.TrimSuffix(want, []byte("\n"))
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from %s:\n got %s\nwant %s", path, got, want)
			}
			back, err := DecodeRecord(want)
			if err != nil {
				t.Fatalf("decode golden: %v", err)
			}
			if !reflect.DeepEqual(back, rec) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", back, rec)
			}
		})
	}
}

// TestRecordFieldNames pins the Fluss transaction JSON v1 names the record
// keeps, in Fluss's order, followed by thaw's own members.
func TestRecordFieldNames(t *testing.T) {
	rec := goldenRecords()["committed"]
	rec.AbortReason = nil
	b, err := EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"version", "bulk_load_id", "state", "caller_token", "database_name", "table_name",
		"partition_name", "table_id", "partition_id", "creator_name", "creator_type", "remote_data_dir",
		"schema_id", "snapshot_ids", "created_time_ms", "updated_time_ms", "build_deadline_ms",
		"commit_decision_deadline_ms", "result_expire_time_ms", "manifest_path", "manifest_length",
		"manifest_sha256", "bucket_count", "bucketing", "table_schema", "adopted_buckets"}
	last := -1
	for _, k := range want {
		i := bytes.Index(b, []byte(`"`+k+`":`))
		if i < 0 || i < last {
			t.Fatalf("member %q missing or out of order in %s", k, b)
		}
		last = i
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good, err := EncodeRecord(begun())
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	replace := func(old, new string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("test setup: %q not in %s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
	cases := map[string]string{
		"bom":                 "\xef\xbb\xbf" + s,
		"trailing data":       s + "{}",
		"trailing garbage":    s + " x",
		"two values":          s + " " + s,
		"not an object":       `[` + s + `]`,
		"empty":               ``,
		"truncated":           s[:len(s)-1],
		"invalid utf-8":       replace(`"alice"`, "\"al\xffice\""),
		"duplicate key":       replace(`{"version":1,`, `{"version":1,"version":1,`),
		"nested duplicate":    replace(`"primary_key":["id"]`, `"primary_key":["id"],"primary_key":["id"]`),
		"unknown member":      replace(`{"version":1,`, `{"version":1,"extra":0,`),
		"case-folded name":    replace(`"state":0`, `"State":0`),
		"missing member":      replace(`"caller_token":"job-42",`, ``),
		"missing thaw member": replace(`,"adopted_buckets":0`, ``),
		"null member":         replace(`"bucketing":"fluss"`, `"bucketing":null`),
		"wrong type":          replace(`"table_id":7`, `"table_id":"7"`),
		"fraction":            replace(`"table_id":7`, `"table_id":7.0`),
		"exponent":            replace(`"table_id":7`, `"table_id":7e0`),
		"state out of range":  replace(`"state":0`, `"state":256`),
		"unknown state":       replace(`"state":0`, `"state":4`),
		"schema id range":     replace(`"schema_id":1,"snapshot`, `"schema_id":40000,"snapshot`),
		"version 2":           replace(`"version":1`, `"version":2`),
		"version 0":           replace(`"version":1`, `"version":0`),
		"bad txn id":          replace(`3f1c2b7e-8a4d`, `3F1C2B7E-8a4d`),
		"empty snapshot ids":  replace(`"snapshot_ids":[11,12,13]`, `"snapshot_ids":[]`),
		"ids for 2 buckets":   replace(`"snapshot_ids":[11,12,13]`, `"snapshot_ids":[11,12]`),
		"negative id":         replace(`"snapshot_ids":[11,12,13]`, `"snapshot_ids":[11,-1,13]`),
		"partial manifest":    replace(`"bucket_count"`, `"manifest_path":"p","bucket_count"`),
		"schema not object":   replace(`"table_schema":`+string(begun().Schema), `"table_schema":[1]`),
		"partition name only": replace(`"table_id":7`, `"partition_name":"p1","table_id":7`),
		"partition id 0":      replace(`"table_id":7`, `"table_id":7,"partition_id":0`),
		"empty abort message": replace(`"bucket_count"`, `"abort_reason":3,"abort_message":"","bucket_count"`),
		"abort reason 9":      replace(`"bucket_count"`, `"abort_reason":9,"bucket_count"`),
		"adopted in BEGUN":    replace(`"adopted_buckets":0`, `"adopted_buckets":1`),
		"terminal no expiry":  replace(`"state":0`, `"state":3`),
		"expiry in BEGUN":     replace(`"bucket_count"`, `"result_expire_time_ms":5,"bucket_count"`),
		"deadline order":      replace(`"build_deadline_ms":1700003600000`, `"build_deadline_ms":1700000000000`),
		"deep nesting":        replace(`"table_schema":{`, `"table_schema":{"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`,`),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeRecord([]byte(in))
			if !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("DecodeRecord(%s) = %v, want ErrInvalidRecord", in, err)
			}
		})
	}
	if _, err := DecodeRecord(append([]byte(" \n"), append(good, " \n"...)...)); err != nil {
		t.Fatalf("surrounding whitespace: %v", err)
	}
}

func TestRecordValidate(t *testing.T) {
	cases := map[string]func(r *Record){
		"committing without manifest": func(r *Record) { r.State = Committing },
		"committed partly adopted": func(r *Record) {
			r.State, r.Manifest, r.CommitDecisionDeadlineMs, r.ResultExpireMs = Committed, &ManifestRef{"p", 1, sha}, r.CreatedMs+1, 1
		},
		"committing with abort reason": func(r *Record) {
			r.State, r.Manifest, r.CommitDecisionDeadlineMs, r.AbortReason = Committing, &ManifestRef{"p", 1, sha}, r.CreatedMs+1, ptr(AbortedByCaller)
		},
		"aborted without reason": func(r *Record) { r.State, r.ResultExpireMs = Aborted, 1 },
		"manifest before fence": func(r *Record) {
			r.SnapshotIDs, r.Manifest, r.CommitDecisionDeadlineMs = nil, &ManifestRef{"p", 1, sha}, r.CreatedMs+1
		},
		"manifest bad digest":     func(r *Record) { r.Manifest, r.CommitDecisionDeadlineMs = &ManifestRef{"p", 1, "AB"}, r.CreatedMs+1 },
		"manifest no deadline":    func(r *Record) { r.Manifest = &ManifestRef{"p", 1, sha} },
		"abort message no reason": func(r *Record) { r.AbortMessage = "x" },
		"zero buckets":            func(r *Record) { r.Buckets, r.SnapshotIDs = 0, nil },
		"too many buckets":        func(r *Record) { r.Buckets, r.SnapshotIDs = MaxBuckets+1, nil },
		"no creator":              func(r *Record) { r.Creator = Principal{} },
		"token with space":        func(r *Record) { r.CallerToken = "a b" },
		"table id 0":              func(r *Record) { r.TableID = 0 },
		"partition id only":       func(r *Record) { r.PartitionID = 4 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := begun()
			mutate(&r)
			if err := r.Validate(); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("Validate = %v, want ErrInvalidRecord", err)
			}
			if _, err := EncodeRecord(r); !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("EncodeRecord = %v, want ErrInvalidRecord", err)
			}
		})
	}
}

func TestRecordStatusAndClone(t *testing.T) {
	r := goldenRecords()["begun-aborting"]
	if s := r.Status(); s.State != Begun || s.AbortReason != nil {
		t.Fatalf("aborting status %+v: the reason shows only once ABORTED", s)
	}
	if !r.Aborting() || !r.FenceReady() {
		t.Fatal("aborting record: want Aborting and FenceReady")
	}
	a := goldenRecords()["aborted"]
	if s := a.Status(); s.State != Aborted || s.AbortReason == nil || *s.AbortReason != TargetNotEmpty || s.AbortMessage == "" {
		t.Fatalf("aborted status %+v", s)
	}
	c := goldenRecords()["committing"]
	d := c.Clone()
	d.SnapshotIDs[0], d.Manifest.Length, d.Schema[0] = 99, 1, 'x'
	if c.SnapshotIDs[0] == 99 || c.Manifest.Length == 1 || c.Schema[0] == 'x' {
		t.Fatal("Clone shares memory with the original")
	}
}
