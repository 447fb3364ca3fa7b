package snapshot

import (
	"bytes"
	"reflect"
	"testing"
)

func metadataSeeds(f *testing.F) {
	f.Add([]byte(golden))
	f.Add([]byte(`{"version":1,"table_id":0,"bucket_id":0,"snapshot_id":0,"snapshot_location":"","kv_snapshot_handle":{"shared_file_handles":[],"private_file_handles":[],"snapshot_incremental_size":0},"log_offset":0,"auto_inc_id_range":[]}`))
	for _, m := range newFixture(true).metas {
		f.Add(mustEncodeMetadata(f, m))
	}
	f.Add([]byte(`{"version":1,"table_id":-0,"bucket_id":1,"snapshot_id":1,"snapshot_location":"\u00e9\ud83d\ude00\n","kv_snapshot_handle":{"shared_file_handles":[],"private_file_handles":[{"kv_file_handle":{"path":"p","size":1,"sha256":"x"},"local_path":"l"}],"snapshot_incremental_size":1},"log_offset":0}`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Add([]byte(`{"version":1,"version":1}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]`))
}

// FuzzDecodeMetadata: decoding never panics, and whatever decodes
// re-encodes to a canonical form that decodes to an equal value and
// re-encodes to itself.
func FuzzDecodeMetadata(f *testing.F) {
	metadataSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMetadata(b)
		if err != nil {
			return
		}
		enc, err := EncodeMetadata(m)
		if err != nil {
			t.Fatalf("encode of decoded %q: %v", b, err)
		}
		m2, err := DecodeMetadata(enc)
		if err != nil {
			t.Fatalf("decode of canonical %q: %v", enc, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
		if enc2, _ := EncodeMetadata(m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not canonical: %q vs %q", enc, enc2)
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(goldenManifest))
	f.Add([]byte(`{"version":1,"bulk_load_id":"","buckets":[]}`))
	_, _, in := ruleCase{partitioned: true}.build(f)
	f.Add(in.Manifest)
	f.Add([]byte(`{"buckets":[{"snapshot_metadata":{"sha256":"","length":-0,"path":"\\"}, "bucket_id":-2147483648}],"bulk_load_id":"\u0000","version":1} `))
	f.Add([]byte(`{"version":1.0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		enc, err := EncodeManifest(m)
		if err != nil {
			t.Fatalf("encode of decoded %q: %v", b, err)
		}
		m2, err := DecodeManifest(enc)
		if err != nil {
			t.Fatalf("decode of canonical %q: %v", enc, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
		if enc2, _ := EncodeManifest(m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not canonical: %q vs %q", enc, enc2)
		}
	})
}
