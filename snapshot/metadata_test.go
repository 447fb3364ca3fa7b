package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// golden is Fluss's CompletedSnapshotJsonSerdeTest vector, verbatim.
const golden = `{"version":1,"table_id":1,"partition_id":10,"bucket_id":1,"snapshot_id":1,"snapshot_location":"oss://bucket/snapshot","kv_snapshot_handle":{"shared_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/shared/t1.sst","size":1},"local_path":"localPath1"}],"private_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/snapshot1/t2","size":2},"local_path":"localPath2"}],"snapshot_incremental_size":3},"log_offset":10,"row_count":1234,"auto_inc_id_range":[{"column_id":2,"start":10000,"end":20000}]}`

func ptr[T any](v T) *T { return &v }

func goldenMetadata() *Metadata {
	return &Metadata{
		TableID:          1,
		PartitionID:      ptr[int64](10),
		BucketID:         1,
		SnapshotID:       1,
		SnapshotLocation: "oss://bucket/snapshot",
		SharedFiles: []KvFileHandle{{
			Handle:    FileHandle{Path: "oss://bucket/snapshot/shared/t1.sst", Size: 1},
			LocalPath: "localPath1",
		}},
		PrivateFiles: []KvFileHandle{{
			Handle:    FileHandle{Path: "oss://bucket/snapshot/snapshot1/t2", Size: 2},
			LocalPath: "localPath2",
		}},
		IncrementalSize: 3,
		LogOffset:       10,
		RowCount:        ptr[int64](1234),
		AutoIncRanges:   []AutoIncRange{{ColumnID: 2, Start: 10000, End: 20000}},
	}
}

func mustEncodeMetadata(t testing.TB, m *Metadata) []byte {
	t.Helper()
	b, err := EncodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMetadataGoldenDecodeEncode(t *testing.T) {
	m, err := DecodeMetadata([]byte(golden))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, goldenMetadata()) {
		t.Fatalf("decoded %+v, want %+v", m, goldenMetadata())
	}
	if got := mustEncodeMetadata(t, m); string(got) != golden {
		t.Fatalf("re-encoded:\n%s\nwant:\n%s", got, golden)
	}
}

func TestMetadataGoldenFromStruct(t *testing.T) {
	if got := mustEncodeMetadata(t, goldenMetadata()); string(got) != golden {
		t.Fatalf("encoded:\n%s\nwant:\n%s", got, golden)
	}
}

func TestMetadataOptionalKeys(t *testing.T) {
	m := goldenMetadata()
	m.PartitionID, m.RowCount, m.AutoIncRanges = nil, nil, nil
	m.PrivateFiles[0].Handle.SHA256 = strings.Repeat("ab", 32)
	const want = `{"version":1,"table_id":1,"bucket_id":1,"snapshot_id":1,"snapshot_location":"oss://bucket/snapshot","kv_snapshot_handle":{"shared_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/shared/t1.sst","size":1},"local_path":"localPath1"}],"private_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/snapshot1/t2","size":2,"sha256":"abababababababababababababababababababababababababababababababab"},"local_path":"localPath2"}],"snapshot_incremental_size":3},"log_offset":10}`
	got := mustEncodeMetadata(t, m)
	if string(got) != want {
		t.Fatalf("encoded:\n%s\nwant:\n%s", got, want)
	}
	back, err := DecodeMetadata(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: %+v, want %+v", back, m)
	}

	// An empty auto_inc_id_range list is kept apart from an absent one, and
	// nil file lists encode as [].
	m = &Metadata{AutoIncRanges: []AutoIncRange{}}
	const wantEmpty = `{"version":1,"table_id":0,"bucket_id":0,"snapshot_id":0,"snapshot_location":"","kv_snapshot_handle":{"shared_file_handles":[],"private_file_handles":[],"snapshot_incremental_size":0},"log_offset":0,"auto_inc_id_range":[]}`
	if got := mustEncodeMetadata(t, m); string(got) != wantEmpty {
		t.Fatalf("encoded:\n%s\nwant:\n%s", got, wantEmpty)
	}
	back, err = DecodeMetadata([]byte(wantEmpty))
	if err != nil {
		t.Fatal(err)
	}
	if back.AutoIncRanges == nil || len(back.AutoIncRanges) != 0 {
		t.Fatalf("auto_inc_id_range [] decoded as %#v", back.AutoIncRanges)
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	odd := "quote\" backslash\\ nl\n tab\t cr\r bs\b ff\f ctl\x01\x1f del\x7f é 😀 </script> \u2028"
	for name, m := range map[string]*Metadata{
		"golden": goldenMetadata(),
		"extremes": {
			TableID: 1<<63 - 1, PartitionID: ptr[int64](-1 << 63), BucketID: -1 << 31, SnapshotID: -5,
			SnapshotLocation: odd,
			SharedFiles:      []KvFileHandle{},
			PrivateFiles: []KvFileHandle{
				{Handle: FileHandle{Path: odd, Size: -1, SHA256: "not hex"}, LocalPath: odd},
				{Handle: FileHandle{Path: "p", Size: 1<<63 - 1}, LocalPath: "l"},
			},
			IncrementalSize: -1, LogOffset: -1, RowCount: ptr[int64](0),
			AutoIncRanges: []AutoIncRange{{ColumnID: 1<<31 - 1, Start: -1 << 63, End: 1<<63 - 1}, {}},
		},
	} {
		b := mustEncodeMetadata(t, m)
		back, err := DecodeMetadata(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("%s: round trip %+v, want %+v", name, back, m)
		}
	}
}

func TestEncodeStringEscapes(t *testing.T) {
	m := &Metadata{SnapshotLocation: "a\"b\\c\nd\te\x01f/g<h>&\u2028é"}
	b := mustEncodeMetadata(t, m)
	if want := `"snapshot_location":"a\"b\\c\nd\te\u0001f/g<h>&` + "\u2028é" + `"`; !bytes.Contains(b, []byte(want)) {
		t.Fatalf("%s does not contain %s", b, want)
	}
}

func TestEncodeErrors(t *testing.T) {
	if _, err := EncodeMetadata(nil); err == nil {
		t.Error("nil metadata encoded")
	}
	if _, err := EncodeManifest(nil); err == nil {
		t.Error("nil manifest encoded")
	}
	m := goldenMetadata()
	m.PrivateFiles[0].LocalPath = "bad\xff"
	if _, err := EncodeMetadata(m); err == nil || !strings.HasPrefix(err.Error(), "snapshot: ") {
		t.Errorf("invalid utf-8: got %v", err)
	}
	if _, err := EncodeManifest(&Manifest{BulkLoadID: "\xc0"}); err == nil {
		t.Error("invalid utf-8 bulk_load_id encoded")
	}
}

type decodeCase struct {
	name  string
	input string
	want  error  // sentinel
	path  string // DecodeError.Path, checked when want is not ErrSyntax
}

// replaceOnce replaces the single occurrence of old in s.
func replaceOnce(t testing.TB, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q occurs %d times", old, strings.Count(s, old))
	}
	return strings.Replace(s, old, new, 1)
}

func checkDecode(t *testing.T, tc decodeCase, decode func([]byte) error) {
	t.Helper()
	err := decode([]byte(tc.input))
	if !errors.Is(err, tc.want) {
		t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		return
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Errorf("%s: %T is not a *DecodeError", tc.name, err)
		return
	}
	if tc.want != ErrSyntax && de.Path != tc.path {
		t.Errorf("%s: path %q, want %q (%v)", tc.name, de.Path, tc.path, err)
	}
	if !strings.HasPrefix(err.Error(), "snapshot: ") {
		t.Errorf("%s: message %q lacks the package prefix", tc.name, err)
	}
}

func TestDecodeMetadataStrict(t *testing.T) {
	g := golden
	r := func(old, new string) string { return replaceOnce(t, g, old, new) }
	const fh = "kv_snapshot_handle.shared_file_handles[0]"
	cases := []decodeCase{
		// document framing
		{"bom", "\xef\xbb\xbf" + g, ErrBOM, ""},
		{"trailing garbage", g + "x", ErrTrailingData, ""},
		{"trailing value", g + g, ErrTrailingData, ""},
		{"trailing after space", g + " \n{}", ErrTrailingData, ""},
		{"too deep", r(`"auto_inc_id_range":[`, `"auto_inc_id_range":[`+strings.Repeat("[", 20)+strings.Repeat("]", 20)+`,`), ErrTooDeep, ""},
		{"root array", `[]`, ErrWrongType, ""},
		{"root null", `null`, ErrNull, ""},
		// syntax
		{"empty", ``, ErrSyntax, ""},
		{"whitespace only", " \n", ErrSyntax, ""},
		{"unterminated", g[:len(g)-1], ErrSyntax, ""},
		{"trailing comma", r(`"end":20000}`, `"end":20000,}`), ErrSyntax, ""},
		{"single quotes", r(`"table_id":1`, `'table_id':1`), ErrSyntax, ""},
		{"comment", r(`"table_id":1`, `/*x*/"table_id":1`), ErrSyntax, ""},
		{"leading zero", r(`"table_id":1`, `"table_id":01`), ErrSyntax, ""},
		{"plus sign", r(`"table_id":1`, `"table_id":+1`), ErrSyntax, ""},
		{"bare dot", r(`"table_id":1`, `"table_id":1.`), ErrSyntax, ""},
		{"NaN", r(`"table_id":1`, `"table_id":NaN`), ErrSyntax, ""},
		{"invalid utf-8", r(`localPath1`, "local\xffPath1"), ErrSyntax, ""},
		{"utf-8 surrogate", r(`localPath1`, "local\xed\xa0\x80Path1"), ErrSyntax, ""},
		{"lone high surrogate", r(`localPath1`, `local\ud800Path1`), ErrSyntax, ""},
		{"lone low surrogate", r(`localPath1`, `local\udc00Path1`), ErrSyntax, ""},
		{"bad surrogate pair", r(`localPath1`, `local\ud800\u0041Path1`), ErrSyntax, ""},
		{"raw control char", r(`localPath1`, "local\tPath1"), ErrSyntax, ""},
		{"bad escape", r(`localPath1`, `local\xPath1`), ErrSyntax, ""},
		{"short unicode escape", r(`localPath1`, `local\u12`), ErrSyntax, ""},
		{"bad literal", r(`"row_count":1234`, `"row_count":nul`), ErrSyntax, ""},
		// keys
		{"duplicate top-level key", r(`"table_id":1,`, `"table_id":1,"table_id":1,`), ErrDuplicateKey, ""},
		{"duplicate nested key", r(`"size":1`, `"size":1,"size":1`), ErrDuplicateKey, ""},
		{"duplicate escaped key", r(`"table_id":1,`, `"table_id":1,"table\u005fid":1,`), ErrDuplicateKey, ""},
		{"duplicate key in array element", r(`"column_id":2,`, `"column_id":2,"column_id":2,`), ErrDuplicateKey, ""},
		{"unknown top-level field", r(`"log_offset"`, `"extra":1,"log_offset"`), ErrUnknownField, "extra"},
		{"unknown nested field", r(`"size":1`, `"size":1,"mtime":5`), ErrUnknownField, fh + ".kv_file_handle.mtime"},
		{"unknown handle field", r(`"snapshot_incremental_size"`, `"x":[],"snapshot_incremental_size"`), ErrUnknownField, "kv_snapshot_handle.x"},
		{"unknown field before bad version", r(`"version":1`, `"version":1,"x":1`), ErrUnknownField, "x"},
		{"missing table_id", r(`"table_id":1,`, ``), ErrMissingField, "table_id"},
		{"missing log_offset", r(`,"log_offset":10`, ``), ErrMissingField, "log_offset"},
		{"missing local_path", r(`,"local_path":"localPath2"`, ``), ErrMissingField, "kv_snapshot_handle.private_file_handles[0].local_path"},
		{"missing size", r(`,"size":2`, ``), ErrMissingField, "kv_snapshot_handle.private_file_handles[0].kv_file_handle.size"},
		{"missing end", r(`,"end":20000`, ``), ErrMissingField, "auto_inc_id_range[0].end"},
		// version
		{"missing version", r(`"version":1,`, ``), ErrMissingVersion, "version"},
		{"version 2", r(`"version":1`, `"version":2`), ErrUnsupportedVersion, "version"},
		{"version 0", r(`"version":1`, `"version":0`), ErrUnsupportedVersion, "version"},
		{"version -1", r(`"version":1`, `"version":-1`), ErrUnsupportedVersion, "version"},
		{"version beyond int32", r(`"version":1`, `"version":2147483648`), ErrOutOfRange, "version"},
		{"version huge", r(`"version":1`, `"version":123456789012345678901234567890`), ErrOutOfRange, "version"},
		{"version float", r(`"version":1`, `"version":1.0`), ErrNotInteger, "version"},
		{"version exponent", r(`"version":1`, `"version":1e0`), ErrNotInteger, "version"},
		{"version string", r(`"version":1`, `"version":"1"`), ErrWrongType, "version"},
		{"version null", r(`"version":1`, `"version":null`), ErrNull, "version"},
		{"version 2 with new field", r(`"version":1`, `"version":2,"new":1`), ErrUnsupportedVersion, "version"},
		// types and ranges
		{"table_id string", r(`"table_id":1`, `"table_id":"1"`), ErrWrongType, "table_id"},
		{"table_id bool", r(`"table_id":1`, `"table_id":true`), ErrWrongType, "table_id"},
		{"table_id fraction", r(`"table_id":1`, `"table_id":1.5`), ErrNotInteger, "table_id"},
		{"table_id exponent", r(`"table_id":1`, `"table_id":1E2`), ErrNotInteger, "table_id"},
		{"table_id beyond int64", r(`"table_id":1`, `"table_id":9223372036854775808`), ErrOutOfRange, "table_id"},
		{"table_id below int64", r(`"table_id":1`, `"table_id":-9223372036854775809`), ErrOutOfRange, "table_id"},
		{"bucket_id beyond int32", r(`"bucket_id":1`, `"bucket_id":2147483648`), ErrOutOfRange, "bucket_id"},
		{"column_id beyond int32", r(`"column_id":2`, `"column_id":-2147483649`), ErrOutOfRange, "auto_inc_id_range[0].column_id"},
		{"size fraction", r(`"size":2`, `"size":2.0`), ErrNotInteger, "kv_snapshot_handle.private_file_handles[0].kv_file_handle.size"},
		{"location number", r(`"snapshot_location":"oss://bucket/snapshot"`, `"snapshot_location":1`), ErrWrongType, "snapshot_location"},
		{"handle array", `{"version":1,"table_id":1,"bucket_id":1,"snapshot_id":1,"snapshot_location":"x","kv_snapshot_handle":[],"log_offset":1}`, ErrWrongType, "kv_snapshot_handle"},
		{"files object", r(`"shared_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/shared/t1.sst","size":1},"local_path":"localPath1"}]`, `"shared_file_handles":{}`), ErrWrongType, "kv_snapshot_handle.shared_file_handles"},
		{"file element string", r(`"shared_file_handles":[`, `"shared_file_handles":["x",`), ErrWrongType, fh},
		{"auto inc object", r(`"auto_inc_id_range":[{"column_id":2,"start":10000,"end":20000}]`, `"auto_inc_id_range":{}`), ErrWrongType, "auto_inc_id_range"},
		{"sha256 number", r(`"size":1`, `"size":1,"sha256":1`), ErrWrongType, fh + ".kv_file_handle.sha256"},
		{"sha256 empty", r(`"size":1`, `"size":1,"sha256":""`), ErrInvalidValue, fh + ".kv_file_handle.sha256"},
		// null
		{"partition_id null", r(`"partition_id":10`, `"partition_id":null`), ErrNull, "partition_id"},
		{"row_count null", r(`"row_count":1234`, `"row_count":null`), ErrNull, "row_count"},
		{"auto inc null", r(`"auto_inc_id_range":[{"column_id":2,"start":10000,"end":20000}]`, `"auto_inc_id_range":null`), ErrNull, "auto_inc_id_range"},
		{"location null", r(`"snapshot_location":"oss://bucket/snapshot"`, `"snapshot_location":null`), ErrNull, "snapshot_location"},
		{"sha256 null", r(`"size":1`, `"size":1,"sha256":null`), ErrNull, fh + ".kv_file_handle.sha256"},
		{"file element null", r(`"shared_file_handles":[`, `"shared_file_handles":[null,`), ErrNull, fh},
	}
	for _, tc := range cases {
		checkDecode(t, tc, func(b []byte) error { _, err := DecodeMetadata(b); return err })
	}

	// Accepted variations: whitespace around tokens, any member order,
	// escapes, "-0".
	for name, in := range map[string]string{
		"whitespace": " \t\r\n" + strings.NewReplacer(`":`, `" :  `, `,"`, " ,\n \"", "{", "{\r\n", "[", "[\t", "}", " }", "]", " ]").Replace(g) + " \n",
		"reordered":  `{"log_offset":10,"row_count":1234,"table_id":1,"bucket_id":1,"snapshot_id":1,"version":1,"partition_id":10,"auto_inc_id_range":[{"end":20000,"start":10000,"column_id":2}],"snapshot_location":"oss://bucket/snapshot","kv_snapshot_handle":{"snapshot_incremental_size":3,"private_file_handles":[{"local_path":"localPath2","kv_file_handle":{"size":2,"path":"oss://bucket/snapshot/snapshot1/t2"}}],"shared_file_handles":[{"kv_file_handle":{"path":"oss://bucket/snapshot/shared/t1.sst","size":1},"local_path":"localPath1"}]}}`,
		"escapes":    r(`"localPath1"`, `"local\u0050ath\u0031"`),
	} {
		m, err := DecodeMetadata([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := mustEncodeMetadata(t, m); string(got) != golden {
			t.Errorf("%s: re-encoded %s", name, got)
		}
	}
	m, err := DecodeMetadata([]byte(r(`"log_offset":10`, `"log_offset":-0`)))
	if err != nil || m.LogOffset != 0 {
		t.Errorf("-0: %v, %v", m, err)
	}
}

func TestDecodeTooLarge(t *testing.T) {
	big := bytes.Repeat([]byte(" "), MaxDocumentSize+1)
	if _, err := DecodeMetadata(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("metadata: %v", err)
	}
	if _, err := DecodeManifest(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("manifest: %v", err)
	}
	// At the limit the size is accepted and the content judged.
	if _, err := DecodeMetadata(big[1:]); !errors.Is(err, ErrSyntax) {
		t.Errorf("at the limit: %v", err)
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	in := replaceOnce(t, golden, `"size":1`, `"size":1,"mtime":5`)
	_, err := DecodeMetadata([]byte(in))
	want := fmt.Sprintf(`snapshot: unknown field: metadata at kv_snapshot_handle.shared_file_handles[0].kv_file_handle.mtime (offset %d): "mtime"`, strings.Index(in, `"mtime"`))
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

const goldenManifest = `{"version":1,"bulk_load_id":"0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23","buckets":[{"bucket_id":0,"snapshot_metadata":{"path":"s3://b/kv/db/t-1/0/snap-3/_METADATA","length":812,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}},{"bucket_id":1,"snapshot_metadata":{"path":"s3://b/kv/db/t-1/1/snap-4/_METADATA","length":790,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}]}`

func goldenManifestValue() *Manifest {
	return &Manifest{
		BulkLoadID: "0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23",
		Buckets: []ManifestBucket{
			{BucketID: 0, Metadata: MetadataRef{Path: "s3://b/kv/db/t-1/0/snap-3/_METADATA", Length: 812, SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}},
			{BucketID: 1, Metadata: MetadataRef{Path: "s3://b/kv/db/t-1/1/snap-4/_METADATA", Length: 790, SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}},
		},
	}
}

func TestManifestEncodeDecode(t *testing.T) {
	b, err := EncodeManifest(goldenManifestValue())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != goldenManifest {
		t.Fatalf("encoded:\n%s\nwant:\n%s", b, goldenManifest)
	}
	m, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, goldenManifestValue()) {
		t.Fatalf("decoded %+v", m)
	}
	empty := &Manifest{Buckets: []ManifestBucket{}}
	b, err = EncodeManifest(&Manifest{})
	if err != nil || string(b) != `{"version":1,"bulk_load_id":"","buckets":[]}` {
		t.Fatalf("empty manifest: %s, %v", b, err)
	}
	if m, err = DecodeManifest(b); err != nil || !reflect.DeepEqual(m, empty) {
		t.Fatalf("empty manifest decoded %+v, %v", m, err)
	}
}

func TestDecodeManifestStrict(t *testing.T) {
	g := goldenManifest
	r := func(old, new string) string { return replaceOnce(t, g, old, new) }
	const ref = "buckets[0].snapshot_metadata"
	cases := []decodeCase{
		{"bom", "\xef\xbb\xbf" + g, ErrBOM, ""},
		{"trailing data", g + "}", ErrTrailingData, ""},
		{"syntax", g[:100], ErrSyntax, ""},
		{"duplicate top-level key", r(`"buckets":`, `"buckets":[],"buckets":`), ErrDuplicateKey, ""},
		{"duplicate nested key", r(`"length":812`, `"length":812,"length":812`), ErrDuplicateKey, ""},
		{"unknown field", r(`"buckets":`, `"txn":1,"buckets":`), ErrUnknownField, "txn"},
		{"unknown nested field", r(`"length":812`, `"length":812,"etag":"x"`), ErrUnknownField, ref + ".etag"},
		{"missing version", r(`"version":1,`, ``), ErrMissingVersion, "version"},
		{"version 2", r(`"version":1`, `"version":2`), ErrUnsupportedVersion, "version"},
		{"version huge", r(`"version":1`, `"version":99999999999`), ErrOutOfRange, "version"},
		{"version float", r(`"version":1`, `"version":1.5`), ErrNotInteger, "version"},
		{"missing buckets", `{"version":1,"bulk_load_id":"x"}`, ErrMissingField, "buckets"},
		{"missing sha256", r(`,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"`, ``), ErrMissingField, ref + ".sha256"},
		{"bucket_id string", r(`"bucket_id":0`, `"bucket_id":"0"`), ErrWrongType, "buckets[0].bucket_id"},
		{"bucket_id beyond int32", r(`"bucket_id":0`, `"bucket_id":4294967296`), ErrOutOfRange, "buckets[0].bucket_id"},
		{"length fraction", r(`"length":812`, `"length":812.5`), ErrNotInteger, ref + ".length"},
		{"length null", r(`"length":812`, `"length":null`), ErrNull, ref + ".length"},
		{"bulk_load_id null", r(`"bulk_load_id":"0b9f4d7e-3c1a-4c2b-9f00-5d2e8c7a1b23"`, `"bulk_load_id":null`), ErrNull, "bulk_load_id"},
		{"buckets object", `{"version":1,"bulk_load_id":"x","buckets":{}}`, ErrWrongType, "buckets"},
		{"bucket element array", `{"version":1,"bulk_load_id":"x","buckets":[[]]}`, ErrWrongType, "buckets[0]"},
	}
	for _, tc := range cases {
		checkDecode(t, tc, func(b []byte) error { _, err := DecodeManifest(b); return err })
	}
}

// TestDecodeBoundsValues: a document of many small values is refused
// (ErrTooLarge) once it has more than maxValues, before its parse tree
// costs many times its size: 16 MiB of "0," allocated 2-4 GiB.
func TestDecodeBoundsValues(t *testing.T) {
	elems := strings.Repeat("0,", 8<<20) + "0"
	for name, doc := range map[string]string{
		"manifest": `{"version":1,"bulk_load_id":"x","buckets":[` + elems + `]}`,
		"metadata": `{"version":1,"auto_inc_id_range":[` + elems + `]}`,
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var err error
		if name == "manifest" {
			_, err = DecodeManifest([]byte(doc))
		} else {
			_, err = DecodeMetadata([]byte(doc))
		}
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than 262144 values") {
			t.Errorf("%s of %d bytes: %v", name, len(doc), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
			t.Errorf("%s of %d bytes: allocated %d MiB", name, len(doc), alloc>>20)
		}
	}
}
