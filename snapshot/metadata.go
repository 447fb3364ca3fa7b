package snapshot

import "errors"

// formatVersion is the version of both documents.
const formatVersion = 1

// FileHandle is one stored file.
type FileHandle struct {
	Path   string // object URI
	Size   int64
	SHA256 string // canonical lowercase hex; "" = absent (the key is omitted)
}

// KvFileHandle is a FileHandle and the file's path inside the checkpoint
// directory.
type KvFileHandle struct {
	Handle    FileHandle
	LocalPath string
}

// AutoIncRange is one reserved auto-increment id range of a column.
type AutoIncRange struct {
	ColumnID   int32
	Start, End int64
}

// Metadata is the _METADATA document of one snapshot: Fluss's
// CompletedSnapshot JSON v1, with an optional sha256 per file.
type Metadata struct {
	TableID          int64
	PartitionID      *int64 // nil = key absent (non-partitioned table)
	BucketID         int32
	SnapshotID       int64
	SnapshotLocation string // the snap-{id} directory, no trailing slash
	SharedFiles      []KvFileHandle
	PrivateFiles     []KvFileHandle
	IncrementalSize  int64
	LogOffset        int64
	RowCount         *int64         // nil = key absent
	AutoIncRanges    []AutoIncRange // nil = key absent; empty = "[]"
}

// EncodeMetadata returns the canonical encoding of m: Fluss's field names
// and order with no whitespace, "version":1 first, and "sha256" after "size"
// in a kv_file_handle when present. It fails only for a nil m or a string
// that is not valid UTF-8; it does not validate values (see Validator).
func EncodeMetadata(m *Metadata) ([]byte, error) {
	if m == nil {
		return nil, errors.New("snapshot: encode metadata: nil metadata")
	}
	w := &jsonWriter{}
	w.raw(`{"version":1,"table_id":`)
	w.int(m.TableID)
	if m.PartitionID != nil {
		w.raw(`,"partition_id":`)
		w.int(*m.PartitionID)
	}
	w.raw(`,"bucket_id":`)
	w.int(int64(m.BucketID))
	w.raw(`,"snapshot_id":`)
	w.int(m.SnapshotID)
	w.raw(`,"snapshot_location":`)
	w.str("snapshot_location", m.SnapshotLocation)
	w.raw(`,"kv_snapshot_handle":{"shared_file_handles":`)
	w.kvFiles(m.SharedFiles)
	w.raw(`,"private_file_handles":`)
	w.kvFiles(m.PrivateFiles)
	w.raw(`,"snapshot_incremental_size":`)
	w.int(m.IncrementalSize)
	w.raw(`},"log_offset":`)
	w.int(m.LogOffset)
	if m.RowCount != nil {
		w.raw(`,"row_count":`)
		w.int(*m.RowCount)
	}
	if m.AutoIncRanges != nil {
		w.raw(`,"auto_inc_id_range":[`)
		for i, r := range m.AutoIncRanges {
			if i > 0 {
				w.raw(",")
			}
			w.raw(`{"column_id":`)
			w.int(int64(r.ColumnID))
			w.raw(`,"start":`)
			w.int(r.Start)
			w.raw(`,"end":`)
			w.int(r.End)
			w.raw("}")
		}
		w.raw("]")
	}
	w.raw("}")
	if w.err != nil {
		return nil, w.err
	}
	return w.buf, nil
}

func (w *jsonWriter) kvFiles(files []KvFileHandle) {
	w.raw("[")
	for i, f := range files {
		if i > 0 {
			w.raw(",")
		}
		w.raw(`{"kv_file_handle":{"path":`)
		w.str("kv_file_handle.path", f.Handle.Path)
		w.raw(`,"size":`)
		w.int(f.Handle.Size)
		if f.Handle.SHA256 != "" {
			w.raw(`,"sha256":`)
			w.str("kv_file_handle.sha256", f.Handle.SHA256)
		}
		w.raw(`},"local_path":`)
		w.str("local_path", f.LocalPath)
		w.raw("}")
	}
	w.raw("]")
}

// DecodeMetadata strictly decodes a _METADATA document. Members may come in
// any order. It rejects everything listed in the package documentation with
// a *DecodeError; it checks types and integer ranges, not values (a negative
// size or a non-canonical sha256 decodes; the Validator rejects it), except
// that a present "sha256" must not be empty.
func DecodeMetadata(b []byte) (*Metadata, error) {
	d := &jsonDecoder{doc: "metadata"}
	root, err := parseJSON(d.doc, b)
	if err != nil {
		return nil, err
	}
	d.version(&root)
	o := d.object(&root, "", "version", "table_id", "partition_id", "bucket_id", "snapshot_id",
		"snapshot_location", "kv_snapshot_handle", "log_offset", "row_count", "auto_inc_id_range")
	m := &Metadata{
		TableID:          o.int64("table_id"),
		PartitionID:      o.optInt64("partition_id"),
		BucketID:         o.int32("bucket_id"),
		SnapshotID:       o.int64("snapshot_id"),
		SnapshotLocation: o.string("snapshot_location"),
	}
	h := o.object("kv_snapshot_handle", "shared_file_handles", "private_file_handles", "snapshot_incremental_size")
	m.SharedFiles = h.kvFiles("shared_file_handles")
	m.PrivateFiles = h.kvFiles("private_file_handles")
	m.IncrementalSize = h.int64("snapshot_incremental_size")
	m.LogOffset = o.int64("log_offset")
	m.RowCount = o.optInt64("row_count")
	ranges := []AutoIncRange{}
	if o.array("auto_inc_id_range", false, func(v *jsonValue, path string) {
		r := d.object(v, path, "column_id", "start", "end")
		ranges = append(ranges, AutoIncRange{ColumnID: r.int32("column_id"), Start: r.int64("start"), End: r.int64("end")})
	}) {
		m.AutoIncRanges = ranges
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}

func (o *jsonObj) kvFiles(key string) []KvFileHandle {
	files := []KvFileHandle{}
	o.array(key, true, func(v *jsonValue, path string) {
		f := o.d.object(v, path, "kv_file_handle", "local_path")
		h := f.object("kv_file_handle", "path", "size", "sha256")
		files = append(files, KvFileHandle{
			Handle:    FileHandle{Path: h.string("path"), Size: h.int64("size"), SHA256: h.digest("sha256")},
			LocalPath: f.string("local_path"),
		})
	})
	return files
}
