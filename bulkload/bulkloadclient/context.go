package bulkloadclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
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

// UnmarshalBuildContext parses what Marshal returned. It is strict: an
// unknown version, an unknown field, trailing data or inconsistent facts are
// errors wrapping bulkload.ErrInvalidRequest.
func UnmarshalBuildContext(b []byte) (*BuildContext, error) {
	fail := func(format string, args ...any) (*BuildContext, error) {
		return nil, fmt.Errorf("bulkloadclient: unmarshal build context: %w: %s", bulkload.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return fail("%v", err)
	}
	if probe.Version == nil {
		return fail("no version")
	}
	if *probe.Version != BuildContextVersion {
		return fail("version %d, want %d", *probe.Version, BuildContextVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireContext
	if err := dec.Decode(&w); err != nil {
		return fail("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail("trailing data")
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
	for b, id := range bc.snapshotIDs {
		if id < 0 {
			return fmt.Errorf("negative snapshot id %d of bucket %d", id, b)
		}
	}
	var s kv.TableSchema
	dec := json.NewDecoder(bytes.NewReader(bc.schemaJSON))
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
	bc.table = t
	return nil
}
