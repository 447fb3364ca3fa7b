package snapshot

import "errors"

// MetadataRef locates one bucket's _METADATA and pins its content.
type MetadataRef struct {
	Path   string
	Length int64
	SHA256 string // canonical lowercase hex
}

// Manifest is the bulk-load manifest: one _METADATA reference per bucket,
// ordered by bucket id.
type Manifest struct {
	BulkLoadID string
	Buckets    []ManifestBucket
}

// ManifestBucket is one entry of a Manifest.
type ManifestBucket struct {
	BucketID int32
	Metadata MetadataRef
}

// EncodeManifest returns the canonical encoding of m:
// {"version":1,"bulk_load_id":..,"buckets":[{"bucket_id":..,"snapshot_metadata":{"path":..,"length":..,"sha256":..}},..]}.
// It fails only for a nil m or a string that is not valid UTF-8.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if m == nil {
		return nil, errors.New("snapshot: encode manifest: nil manifest")
	}
	w := &jsonWriter{}
	w.raw(`{"version":1,"bulk_load_id":`)
	w.str("bulk_load_id", m.BulkLoadID)
	w.raw(`,"buckets":[`)
	for i, b := range m.Buckets {
		if i > 0 {
			w.raw(",")
		}
		w.raw(`{"bucket_id":`)
		w.int(int64(b.BucketID))
		w.raw(`,"snapshot_metadata":{"path":`)
		w.str("snapshot_metadata.path", b.Metadata.Path)
		w.raw(`,"length":`)
		w.int(b.Metadata.Length)
		w.raw(`,"sha256":`)
		w.str("snapshot_metadata.sha256", b.Metadata.SHA256)
		w.raw("}}")
	}
	w.raw("]}")
	if w.err != nil {
		return nil, w.err
	}
	return w.buf, nil
}

// DecodeManifest strictly decodes a manifest document, with the same rules
// as DecodeMetadata. Every member is required.
func DecodeManifest(b []byte) (*Manifest, error) {
	d := &jsonDecoder{doc: "manifest"}
	root, err := parseJSON(d.doc, b)
	if err != nil {
		return nil, err
	}
	d.version(&root)
	o := d.object(&root, "", "version", "bulk_load_id", "buckets")
	m := &Manifest{BulkLoadID: o.string("bulk_load_id"), Buckets: []ManifestBucket{}}
	o.array("buckets", true, func(v *jsonValue, path string) {
		e := d.object(v, path, "bucket_id", "snapshot_metadata")
		id := e.int32("bucket_id")
		r := e.object("snapshot_metadata", "path", "length", "sha256")
		m.Buckets = append(m.Buckets, ManifestBucket{
			BucketID: id,
			Metadata: MetadataRef{Path: r.string("path"), Length: r.int64("length"), SHA256: r.string("sha256")},
		})
	})
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}
