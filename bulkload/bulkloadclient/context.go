package bulkloadclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/strictjson"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// BuildContextVersion is the version of BuildContext's serialized form.
const BuildContextVersion = 1

// BuildContext is what Begin froze for one transaction: the target's
// handle, schema, bucketing, snapshot ids, manifest path and build
// deadline. It is immutable and holds no credentials, connections or local
// paths, so it can be shipped to build workers (Marshal,
// UnmarshalBuildContext).
type BuildContext struct {
	handle        bulkload.Handle
	schemaJSON    []byte
	schemaID      int16
	buckets       int
	bucketing     string
	remoteDataDir string
	snapshotIDs   []int64
	manifestPath  string
	buildDeadline time.Time // UTC, millisecond precision
	table         *kv.Table
}

// Handle is the transaction's handle.
func (bc *BuildContext) Handle() bulkload.Handle { return bc.handle }

// Target is the transaction's target.
func (bc *BuildContext) Target() bulkload.Target { return bc.handle.Target }

// SchemaJSON returns a copy of the table's kv.TableSchema JSON.
func (bc *BuildContext) SchemaJSON() []byte { return bytes.Clone(bc.schemaJSON) }

// SchemaID is the frozen schema id.
func (bc *BuildContext) SchemaID() int16 { return bc.schemaID }

// Table is the compiled schema (shared; *kv.Table is immutable).
func (bc *BuildContext) Table() *kv.Table { return bc.table }

// Buckets is the target's bucket count.
func (bc *BuildContext) Buckets() int { return bc.buckets }

// Bucketing is "fluss", "iceberg" or "paimon".
func (bc *BuildContext) Bucketing() string { return bc.bucketing }

// RemoteDataDir is the remote data dir the snapshots go to.
func (bc *BuildContext) RemoteDataDir() string { return bc.remoteDataDir }

// SnapshotIDs returns a copy of the snapshot ids, indexed by bucket.
func (bc *BuildContext) SnapshotIDs() []int64 { return slices.Clone(bc.snapshotIDs) }

// ManifestPath is the frozen manifest path of the transaction.
func (bc *BuildContext) ManifestPath() string { return bc.manifestPath }

// BuildDeadline is when the server aborts a transaction without a manifest.
func (bc *BuildContext) BuildDeadline() time.Time { return bc.buildDeadline }

// SnapshotTarget is where the snapshots of the target go.
func (bc *BuildContext) SnapshotTarget() snapshot.Target {
	return snapshot.Target{
		RemoteDir: bc.remoteDataDir, Database: bc.handle.Target.Database, Table: bc.handle.Target.Table,
		TableID: bc.handle.TableID, Partition: bc.handle.Target.Partition, PartitionID: bc.handle.PartitionID,
	}
}

// wireContext is the serialized form; the field order is the wire order.
type wireContext struct {
	Version         int             `json:"version"`
	Database        string          `json:"database"`
	Table           string          `json:"table"`
	Partition       string          `json:"partition"`
	TableID         int64           `json:"table_id"`
	PartitionID     int64           `json:"partition_id"`
	TxnID           string          `json:"txn_id"`
	SchemaID        int16           `json:"schema_id"`
	Schema          json.RawMessage `json:"schema"`
	Buckets         int             `json:"buckets"`
	Bucketing       string          `json:"bucketing"`
	RemoteDataDir   string          `json:"remote_data_dir"`
	SnapshotIDs     []int64         `json:"snapshot_ids"`
	ManifestPath    string          `json:"manifest_path"`
	BuildDeadlineMS int64           `json:"build_deadline_ms"`
}

// Marshal returns the stable, versioned JSON form of bc:
// {"version":1,"database":..,"table":..,"partition":..,"table_id":..,
// "partition_id":..,"txn_id":..,"schema_id":..,"schema":{..},"buckets":..,
// "bucketing":..,"remote_data_dir":..,"snapshot_ids":[..],
// "manifest_path":..,"build_deadline_ms":..}.
func (bc *BuildContext) Marshal() ([]byte, error) {
	if bc == nil {
		return nil, errNoContext
	}
	var schema bytes.Buffer
	if err := json.Compact(&schema, bc.schemaJSON); err != nil {
		return nil, fmt.Errorf("bulkloadclient: marshal build context: schema: %w", err)
	}
	w := wireContext{
		Version: BuildContextVersion, Database: bc.handle.Target.Database, Table: bc.handle.Target.Table,
		Partition: bc.handle.Target.Partition, TableID: bc.handle.TableID, PartitionID: bc.handle.PartitionID,
		TxnID: bc.handle.TxnID, SchemaID: bc.schemaID, Schema: schema.Bytes(), Buckets: bc.buckets,
		Bucketing: bc.bucketing, RemoteDataDir: bc.remoteDataDir, SnapshotIDs: bc.snapshotIDs,
		ManifestPath: bc.manifestPath, BuildDeadlineMS: bc.buildDeadline.UnixMilli(),
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("bulkloadclient: marshal build context: %w", err)
	}
	return b, nil
}

// contextMembers are the members of the serialized form, all required.
var contextMembers = []string{
	"version", "database", "table", "partition", "table_id", "partition_id", "txn_id", "schema_id", "schema",
	"buckets", "bucketing", "remote_data_dir", "snapshot_ids", "manifest_path", "build_deadline_ms",
}

// UnmarshalBuildContext parses what Marshal returned. It is strict: a
// version other than BuildContextVersion, an unknown, missing, repeated or
// null member (member names match exactly, at any depth, the schema's
// included), trailing data, invalid UTF-8, a value out of range and
// inconsistent facts are errors wrapping bulkload.ErrInvalidRequest that
// name the member at fault.
func UnmarshalBuildContext(b []byte) (*BuildContext, error) {
	fail := func(format string, args ...any) (*BuildContext, error) {
		return nil, fmt.Errorf("bulkloadclient: unmarshal build context: %w: %s", bulkload.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if err := scanJSON(b); err != nil {
		return fail("%v", err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil || members == nil {
		return fail("not a JSON object")
	}
	// The version first, so that a context of another version says so
	// rather than naming the members this one does not know.
	rawVersion, ok := members["version"]
	if !ok {
		return fail("no version")
	}
	var version int
	if err := json.Unmarshal(rawVersion, &version); err != nil || string(rawVersion) == "null" {
		return fail("version %s is not an integer", rawVersion)
	}
	if version != BuildContextVersion {
		return fail("version %d, want %d", version, BuildContextVersion)
	}
	if err := checkMembers(members, contextMembers, nil); err != nil {
		return fail("%v", err)
	}
	// A null element reads as snapshot id 0 (scanJSON checks members).
	var ids []*int64
	if err := json.Unmarshal(members["snapshot_ids"], &ids); err == nil {
		for b, id := range ids {
			if id == nil {
				return fail("snapshot id of bucket %d is null", b)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireContext
	if err := dec.Decode(&w); err != nil {
		return fail("%v", err)
	}
	if w.BuildDeadlineMS <= 0 {
		return fail("build_deadline_ms %d not positive", w.BuildDeadlineMS)
	}
	bc := &BuildContext{
		handle: bulkload.Handle{
			Target:  bulkload.Target{Database: w.Database, Table: w.Table, Partition: w.Partition},
			TableID: w.TableID, PartitionID: w.PartitionID, TxnID: w.TxnID,
		},
		schemaJSON: bytes.Clone(w.Schema), schemaID: w.SchemaID, buckets: w.Buckets, bucketing: w.Bucketing,
		remoteDataDir: w.RemoteDataDir, snapshotIDs: w.SnapshotIDs, manifestPath: w.ManifestPath,
		buildDeadline: time.UnixMilli(w.BuildDeadlineMS).UTC(),
	}
	if err := bc.init(); err != nil {
		return fail("%v", err)
	}
	return bc, nil
}

// Members of a serialized snapshotbuild.BucketResult.
var (
	resultMembers = []string{
		"bucket", "snapshot_id", "metadata_path", "metadata_length", "metadata_sha256", "row_count",
		"duplicates", "bytes", "files", "log_offset",
	}
	resultOptional = []string{"min_key", "max_key", "metadata_adopted"}
)

// UnmarshalBucketResults parses the results of builds as a builder ships
// them to the committer: the JSON of a []snapshotbuild.BucketResult (what
// json.Marshal of Finish's results and `thaw bulkload build` write), or of
// one snapshotbuild.BucketResult. It is strict, like
// UnmarshalBuildContext: an unknown, missing, repeated or null member,
// trailing data, invalid UTF-8 and a value out of range (a negative count,
// a bucket outside [0, kv.MaxBuckets), a digest that is not 64 lowercase
// hex digits, keys that are not lowercase hex or out of order, keys of an
// empty bucket) are errors wrapping bulkload.ErrInvalidRequest that name
// the result and the member. Whether the results cover a context's buckets
// is CheckCoverage's question.
func UnmarshalBucketResults(b []byte) ([]snapshotbuild.BucketResult, error) {
	fail := func(format string, args ...any) ([]snapshotbuild.BucketResult, error) {
		return nil, fmt.Errorf("bulkloadclient: unmarshal bucket results: %w: %s", bulkload.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if err := scanJSON(b); err != nil {
		return fail("%v", err)
	}
	var raws []json.RawMessage
	switch t := bytes.TrimLeft(b, " \t\r\n"); {
	case len(t) > 0 && t[0] == '{':
		raws = []json.RawMessage{b}
	case len(t) > 0 && t[0] == '[':
		if err := json.Unmarshal(b, &raws); err != nil {
			return fail("%v", err)
		}
	default:
		return fail("not a JSON array of results or one result object")
	}
	out := make([]snapshotbuild.BucketResult, 0, len(raws))
	for i, raw := range raws {
		r, err := unmarshalBucketResult(raw)
		if err != nil {
			return fail("result %d: %v", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func unmarshalBucketResult(raw json.RawMessage) (snapshotbuild.BucketResult, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return snapshotbuild.BucketResult{}, errors.New("not a JSON object")
	}
	if err := checkMembers(members, resultMembers, resultOptional); err != nil {
		return snapshotbuild.BucketResult{}, err
	}
	var r snapshotbuild.BucketResult
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return snapshotbuild.BucketResult{}, err
	}
	if err := validateBucketResult(r); err != nil {
		return snapshotbuild.BucketResult{}, fmt.Errorf("bucket %d: %w", r.Bucket, err)
	}
	return r, nil
}

// validateBucketResult checks the ranges and forms of one result's values.
func validateBucketResult(r snapshotbuild.BucketResult) error {
	switch {
	case r.Bucket < 0 || r.Bucket >= kv.MaxBuckets:
		return fmt.Errorf("bucket %d not in [0,%d)", r.Bucket, kv.MaxBuckets)
	case r.SnapshotID < 0:
		return fmt.Errorf("snapshot_id %d negative", r.SnapshotID)
	case r.MetadataPath == "":
		return errors.New("metadata_path empty")
	case r.MetadataLength <= 0 || r.MetadataLength > snapshot.MaxDocumentSize:
		return fmt.Errorf("metadata_length %d not in 1..%d", r.MetadataLength, snapshot.MaxDocumentSize)
	case len(r.MetadataSHA256) != 64 || !lowerHex(r.MetadataSHA256):
		return fmt.Errorf("metadata_sha256 %q is not 64 lowercase hex digits", r.MetadataSHA256)
	case r.RowCount < 0:
		return fmt.Errorf("row_count %d negative", r.RowCount)
	case r.Duplicates < 0:
		return fmt.Errorf("duplicates %d negative", r.Duplicates)
	case r.Bytes < 0:
		return fmt.Errorf("bytes %d negative", r.Bytes)
	case r.Files < 0:
		return fmt.Errorf("files %d negative", r.Files)
	case r.LogOffset < 0:
		return fmt.Errorf("log_offset %d negative", r.LogOffset)
	case len(r.MinKey)%2 != 0 || !lowerHex(r.MinKey):
		return fmt.Errorf("min_key %q is not lowercase hex bytes", r.MinKey)
	case len(r.MaxKey)%2 != 0 || !lowerHex(r.MaxKey):
		return fmt.Errorf("max_key %q is not lowercase hex bytes", r.MaxKey)
	case r.RowCount == 0 && (r.MinKey != "" || r.MaxKey != ""):
		return errors.New("min_key or max_key of an empty bucket")
	case r.MinKey > r.MaxKey: // lowercase hex sorts as the bytes it encodes
		return fmt.Errorf("min_key %s above max_key %s", r.MinKey, r.MaxKey)
	}
	return nil
}

func lowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// checkMembers checks the members of one object of a document that
// scanJSON accepted (see strictjson.Members).
func checkMembers(members map[string]json.RawMessage, required, optional []string) error {
	nulls := make(map[string]bool, len(members))
	for k, v := range members {
		nulls[k] = string(v) == "null"
	}
	return strictjson.Members(nulls, required, optional)
}

// maxJSONDepth bounds the nesting of the documents this package parses (a
// build context with its schema is four levels deep).
const maxJSONDepth = 16

// scanJSON checks what encoding/json does not (strictjson.Check): member
// names then match exactly, and repeated members, null members at any
// depth (encoding/json reads them as zero values: "nullable": null as NOT
// NULL, "bucket_key": null as the default bucket key), invalid UTF-8,
// deep nesting and trailing data are errors.
func scanJSON(b []byte) error {
	_, err := strictjson.Check(b, strictjson.Options{MaxDepth: maxJSONDepth, NoNull: true})
	return err
}

// Members every schema and column document the tier writes has: one
// missing would read as its zero value (a NOT NULL column, 0 buckets).
// partition_keys and bucket_key are left out when empty.
var (
	schemaMembers = []string{"schema_id", "columns", "primary_key", "buckets", "bucketing"}
	columnMembers = []string{"name", "type", "nullable"}
)

// checkSchemaMembers refuses a schema document (checked by scanJSON) that
// lacks one of schemaMembers, or a column one of columnMembers.
func checkSchemaMembers(b []byte) error {
	var top struct {
		Columns []map[string]json.RawMessage `json:"columns"`
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	for _, k := range schemaMembers {
		if _, ok := members[k]; !ok {
			return fmt.Errorf("no member %q", k)
		}
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return err
	}
	for i, c := range top.Columns {
		for _, k := range columnMembers {
			if _, ok := c[k]; !ok {
				return fmt.Errorf("column %d: no member %q", i, k)
			}
		}
	}
	return nil
}

// fromTargetInfo builds a context from Begin's target info.
func fromTargetInfo(ti *tierv1.BulkLoadTargetInfo) (*BuildContext, error) {
	bc := &BuildContext{
		handle:     handleFromProto(ti.GetHandle()),
		schemaJSON: bytes.Clone(ti.GetTableSchemaJson()), schemaID: int16(ti.GetSchemaId()),
		buckets: int(ti.GetBucketCount()), bucketing: ti.GetBucketing(), remoteDataDir: ti.GetRemoteDataDir(),
		snapshotIDs: slices.Clone(ti.GetSnapshotIds()), manifestPath: ti.GetManifestPath(),
		buildDeadline: time.UnixMilli(ti.GetBuildDeadlineMs()).UTC(),
	}
	if err := bc.init(); err != nil {
		return nil, fmt.Errorf("bulkloadclient: target info of Begin: %w", err)
	}
	return bc, nil
}

// init validates bc and compiles its schema.
func (bc *BuildContext) init() error {
	h := bc.handle
	switch {
	case h.Target.Database == "" || h.Target.Table == "":
		return errors.New("empty database or table")
	case h.TableID <= 0:
		return fmt.Errorf("table id %d not positive", h.TableID)
	case (h.Target.Partition == "") != (h.PartitionID == 0) || h.PartitionID < 0:
		return fmt.Errorf("partition %q with partition id %d", h.Target.Partition, h.PartitionID)
	case bc.buckets <= 0 || bc.buckets > kv.MaxBuckets:
		return fmt.Errorf("bucket count %d", bc.buckets)
	case len(bc.snapshotIDs) != bc.buckets:
		return fmt.Errorf("%d snapshot ids for %d buckets", len(bc.snapshotIDs), bc.buckets)
	case bc.remoteDataDir == "":
		return errors.New("empty remote data dir")
	case bc.manifestPath == "":
		return errors.New("empty manifest path")
	case bc.schemaID < 0:
		return fmt.Errorf("schema id %d", bc.schemaID)
	}
	if err := bulkload.ValidateTxnID(h.TxnID); err != nil {
		return err
	}
	if err := bc.SnapshotTarget().Validate(); err != nil {
		return err
	}
	for b, id := range bc.snapshotIDs {
		if id < 0 {
			return fmt.Errorf("negative snapshot id %d of bucket %d", id, b)
		}
	}
	// The schema strictly too: a member this client does not know may
	// change the encoding, so it is an error, not ignored.
	if err := scanJSON(bc.schemaJSON); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := checkSchemaMembers(bc.schemaJSON); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	var s kv.TableSchema
	dec := json.NewDecoder(bytes.NewReader(bc.schemaJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	t, err := kv.NewTable(s)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	switch {
	case t.Buckets() != bc.buckets:
		return fmt.Errorf("schema has %d buckets, context %d", t.Buckets(), bc.buckets)
	case t.SchemaID() != bc.schemaID:
		return fmt.Errorf("schema id %d, context %d", t.SchemaID(), bc.schemaID)
	case t.Bucketing().String() != bc.bucketing:
		return fmt.Errorf("schema bucketing %s, context %s", t.Bucketing(), bc.bucketing)
	case (len(t.PartitionKeys()) > 0) != (h.Target.Partition != ""):
		return fmt.Errorf("partitioned table %v but partition %q", len(t.PartitionKeys()) > 0, h.Target.Partition)
	}
	// The committer writes the manifest there: only where the layout puts
	// this transaction's manifest.
	if want := bc.SnapshotTarget().ManifestPath(h.TxnID); bc.manifestPath != want {
		return fmt.Errorf("manifest path %q, but the layout puts the transaction's manifest at %q", bc.manifestPath, want)
	}
	bc.table = t
	return nil
}
