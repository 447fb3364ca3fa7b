package bulkloadclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshotbuild"
)

// seedContexts returns build contexts as Begin hands them out: the golden
// one, a partitioned one and one of the largest bucket count.
func seedContexts(tb testing.TB) []*BuildContext {
	tb.Helper()
	txn := "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	remote := "file:///data/remote"
	many := make([]int64, kv.MaxBuckets)
	for i := range many {
		many[i] = int64(i * 3)
	}
	manySchema := strings.Replace(testSchema, `"buckets":4`, fmt.Sprintf(`"buckets":%d`, kv.MaxBuckets), 1)
	var out []*BuildContext
	for _, ti := range []*tierv1.BulkLoadTargetInfo{
		{
			Handle:   &tierv1.BulkLoadHandle{Target: &tierv1.TargetPath{Database: "shop", Table: "items"}, TableId: 7, TxnId: txn},
			SchemaId: 0, TableSchemaJson: []byte(testSchema), BucketCount: 4, Bucketing: "fluss",
			RemoteDataDir: remote, SnapshotIds: []int64{3, 0, 5, 1},
			ManifestPath:    remote + "/kv/shop/items-7/_bulkload/" + txn + "/manifest",
			BuildDeadlineMs: 1780000000123,
		},
		{
			Handle: &tierv1.BulkLoadHandle{
				Target: &tierv1.TargetPath{Database: "shop", Table: "events", Partition: new("us")}, TableId: 7, PartitionId: 3, TxnId: txn,
			},
			SchemaId: 0, TableSchemaJson: []byte(partitionedSchema), BucketCount: 4, Bucketing: "fluss",
			RemoteDataDir: "s3://bucket/thaw", SnapshotIds: []int64{1, 1, 1, 1},
			ManifestPath:    "s3://bucket/thaw/kv/shop/events-7/us-p3/_bulkload/" + txn + "/manifest",
			BuildDeadlineMs: 1,
		},
		{
			Handle:   &tierv1.BulkLoadHandle{Target: &tierv1.TargetPath{Database: "d", Table: "t"}, TableId: 1, TxnId: txn},
			SchemaId: 0, TableSchemaJson: []byte(manySchema), BucketCount: kv.MaxBuckets, Bucketing: "fluss",
			RemoteDataDir: remote, SnapshotIds: many, ManifestPath: remote + "/kv/d/t-1/_bulkload/" + txn + "/manifest", BuildDeadlineMs: 1 << 50,
		},
	} {
		bc, err := fromTargetInfo(ti)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, bc)
	}
	return out
}

// FuzzUnmarshalBuildContext: decoding never panics; an error wraps
// bulkload.ErrInvalidRequest and says what is wrong; a decoded context is
// valid, and its Marshal decodes to an equal context that marshals to the
// same bytes.
func FuzzUnmarshalBuildContext(f *testing.F) {
	f.Add([]byte(goldenContext))
	// Not the largest one: the fuzzer minimizes slowly on 30 kB inputs.
	for _, bc := range seedContexts(f)[:2] {
		b, err := bc.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, in := range badContexts() {
		f.Add([]byte(in.doc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bc, err := UnmarshalBuildContext(b)
		if err != nil {
			checkParseError(t, err, "bulkloadclient: unmarshal build context: ")
			return
		}
		if bc.Table() == nil {
			t.Fatalf("decoded %q without a compiled schema", b)
		}
		again := *bc
		if err := again.init(); err != nil {
			t.Fatalf("decoded %q is not valid: %v", b, err)
		}
		enc, err := bc.Marshal()
		if err != nil {
			t.Fatalf("marshal of decoded %q: %v", b, err)
		}
		bc2, err := UnmarshalBuildContext(enc)
		if err != nil {
			t.Fatalf("decode of marshalled %q: %v", enc, err)
		}
		if d := diffContexts(bc, bc2); d != "" {
			t.Fatalf("round trip of %q changed %s", b, d)
		}
		if enc2, err := bc2.Marshal(); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("marshal not stable: %q then %q (%v)", enc, enc2, err)
		}
	})
}

// diffContexts names the first fact in which a and b differ.
func diffContexts(a, b *BuildContext) string {
	compact := func(s []byte) string {
		var buf bytes.Buffer
		if err := json.Compact(&buf, s); err != nil {
			return "invalid: " + err.Error()
		}
		return buf.String()
	}
	switch {
	case a.Handle() != b.Handle():
		return fmt.Sprintf("handle %+v into %+v", a.Handle(), b.Handle())
	case a.SchemaID() != b.SchemaID(), a.Buckets() != b.Buckets(), a.Bucketing() != b.Bucketing():
		return fmt.Sprintf("schema %d/%d/%s into %d/%d/%s", a.SchemaID(), a.Buckets(), a.Bucketing(), b.SchemaID(), b.Buckets(), b.Bucketing())
	case a.RemoteDataDir() != b.RemoteDataDir(), a.ManifestPath() != b.ManifestPath():
		return fmt.Sprintf("paths %q %q into %q %q", a.RemoteDataDir(), a.ManifestPath(), b.RemoteDataDir(), b.ManifestPath())
	case !reflect.DeepEqual(a.SnapshotIDs(), b.SnapshotIDs()):
		return fmt.Sprintf("snapshot ids %v into %v", a.SnapshotIDs(), b.SnapshotIDs())
	case !a.BuildDeadline().Equal(b.BuildDeadline()):
		return fmt.Sprintf("deadline %v into %v", a.BuildDeadline(), b.BuildDeadline())
	case compact(a.SchemaJSON()) != compact(b.SchemaJSON()):
		return fmt.Sprintf("schema %s into %s", a.SchemaJSON(), b.SchemaJSON())
	case a.SnapshotTarget() != b.SnapshotTarget():
		return fmt.Sprintf("target %+v into %+v", a.SnapshotTarget(), b.SnapshotTarget())
	}
	return ""
}

// checkParseError checks the error of a refused document: it wraps
// bulkload.ErrInvalidRequest and says something after prefix.
func checkParseError(t *testing.T, err error, prefix string) {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, bulkload.ErrInvalidRequest) || !strings.HasPrefix(msg, prefix) {
		t.Fatalf("error %q: want %q... wrapping ErrInvalidRequest", msg, prefix)
	}
	detail := strings.TrimPrefix(msg, prefix+bulkload.ErrInvalidRequest.Error()+": ")
	if detail == msg || strings.TrimSpace(detail) == "" {
		t.Fatalf("error %q names no problem", msg)
	}
}

// realResults builds a partitioned context's four buckets from a few rows
// into a fresh file:// store: the results a builder really ships, an
// empty bucket's among them.
func realResults(tb testing.TB) []snapshotbuild.BucketResult {
	tb.Helper()
	bc := partitionedContextIDs(tb, []int64{1, 2, 3, 4})
	s, err := OpenBuildSession(tb.Context(), bc, SessionOptions{TempDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	// One row: three of the four buckets stay empty.
	if err := s.AddRow(tb.Context(), kv.Row{"us", int64(1), "a"}); err != nil {
		tb.Fatal(err)
	}
	if err := s.AddRow(tb.Context(), kv.Row{"us", int64(1), "b"}); err != nil {
		tb.Fatal(err)
	}
	res, err := s.Finish(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return res
}

// encodings returns the forms a builder ships results in: json.Marshal of
// the slice, the indented array thaw bulkload build prints, and each
// result alone.
func encodings(tb testing.TB, res []snapshotbuild.BucketResult) [][]byte {
	tb.Helper()
	compact, err := json.Marshal(res)
	if err != nil {
		tb.Fatal(err)
	}
	var indented bytes.Buffer
	enc := json.NewEncoder(&indented)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		tb.Fatal(err)
	}
	out := [][]byte{compact, indented.Bytes()}
	for _, r := range res {
		b, err := json.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzUnmarshalBucketResults: decoding never panics; an error wraps
// bulkload.ErrInvalidRequest and says what is wrong; decoded results are
// valid, and their JSON decodes to equal results.
func FuzzUnmarshalBucketResults(f *testing.F) {
	for _, b := range encodings(f, realResults(f)) {
		f.Add(b)
	}
	f.Add([]byte(`[]`))
	for _, in := range badResults() {
		f.Add([]byte(in.doc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := UnmarshalBucketResults(b)
		if err != nil {
			checkParseError(t, err, "bulkloadclient: unmarshal bucket results: ")
			return
		}
		for i, r := range res {
			if err := validateBucketResult(r); err != nil {
				t.Fatalf("decoded result %d of %q is not valid: %v", i, b, err)
			}
		}
		enc, err := json.Marshal(res)
		if err != nil {
			t.Fatalf("marshal of decoded %q: %v", b, err)
		}
		res2, err := UnmarshalBucketResults(enc)
		if err != nil {
			t.Fatalf("decode of marshalled %q: %v", enc, err)
		}
		if !reflect.DeepEqual(res, res2) {
			t.Fatalf("round trip of %q changed %+v into %+v", b, res, res2)
		}
	})
}
