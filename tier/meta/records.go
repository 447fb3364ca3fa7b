package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/snapshot"
)

// RecordVersion is the version every record is written with and the only
// one read.
const RecordVersion = 1

// MaxRecordBytes bounds one encoded record, well inside etcd's default
// 1.5 MiB request limit. An assignment of 4096 buckets with three replicas
// each fits comfortably with server ids of up to about 40 characters.
const MaxRecordBytes = 1 << 20

// maxServerID is the longest tablet server id (a DNS label).
const maxServerID = 63

// Target names a physical target by its ids: a non-partitioned table
// (PartitionID 0) or one partition of a partitioned table. Ids start at 1,
// so 0 never names a table or a partition.
type Target struct {
	TableID     int64
	PartitionID int64
}

// Partitioned reports whether the target is a partition.
func (t Target) Partitioned() bool { return t.PartitionID != 0 }

// Validate checks that the ids are positive (the partition id may be 0).
func (t Target) Validate() error {
	if t.TableID < 1 || t.PartitionID < 0 {
		return fmt.Errorf("%w: target %s", ErrInvalid, t)
	}
	return nil
}

// String returns "table 5" or "table 5 partition 7".
func (t Target) String() string {
	s := "table " + strconv.FormatInt(t.TableID, 10)
	if t.Partitioned() {
		s += " partition " + strconv.FormatInt(t.PartitionID, 10)
	}
	return s
}

// path is "{tableId}" or "{tableId}/p{partitionId}".
func (t Target) path() string {
	s := strconv.FormatInt(t.TableID, 10)
	if t.Partitioned() {
		s += "/p" + strconv.FormatInt(t.PartitionID, 10)
	}
	return s
}

// TargetName names a physical target by the names its registration (the
// record holding its data state) is kept under.
type TargetName struct {
	Database, Table string
	Partition       string // "" for a non-partitioned table
}

func (n TargetName) String() string {
	if n.Partition == "" {
		return n.Database + "." + n.Table
	}
	return n.Database + "." + n.Table + " partition " + n.Partition
}

// DataState is the data state of a physical target: ACTIVE (readable and
// writable) or LOADING (fenced by the bulk load named by its id).
type DataState string

// Data states.
const (
	Active  DataState = "ACTIVE"
	Loading DataState = "LOADING"
)

// checkDataState checks the data state of the target what names: ACTIVE
// or LOADING, LOADING only with a bulk-load id, and the id a valid path
// segment (it names the transaction's directory).
func checkDataState(what string, state DataState, bulkLoadID string) error {
	switch state {
	case Active, Loading:
	default:
		return fmt.Errorf("%w: %s: data state %q (want ACTIVE or LOADING)", ErrInvalid, what, state)
	}
	if state == Loading && bulkLoadID == "" {
		return fmt.Errorf("%w: %s: data state LOADING requires a bulk load id", ErrInvalid, what)
	}
	if bulkLoadID != "" {
		if err := snapshot.ValidateTxnID(bulkLoadID); err != nil {
			return fmt.Errorf("%w: %s: bulk load id: %w", ErrInvalid, what, err)
		}
	}
	return nil
}

// DatabaseRecord is kept at {p}/databases/{db}.
type DatabaseRecord struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	CreatedMs int64  `json:"created_ms"`
}

// Validate checks the record.
func (r DatabaseRecord) Validate() error {
	return errors.Join(checkVersion(r.Version), checkName("database", r.Name))
}

// TableRecord is kept at {p}/tables/{db}/{table}. A non-partitioned table
// is a target and carries its data state; a partitioned table does not (its
// partitions do), and has empty DataState and BulkLoadID.
type TableRecord struct {
	Version           int            `json:"version"`
	ID                int64          `json:"table_id"`
	Database          string         `json:"database"`
	Name              string         `json:"name"`
	Schema            kv.TableSchema `json:"schema"`
	ReplicationFactor int            `json:"replication_factor"`
	RemoteDataDir     string         `json:"remote_data_dir"`
	DataState         DataState      `json:"data_state,omitempty"`
	BulkLoadID        string         `json:"bulk_load_id,omitempty"`
	// Dropping is set by the first step of DropTable; the record goes once
	// everything under the table's id is gone.
	Dropping   bool  `json:"dropping,omitempty"`
	CreatedMs  int64 `json:"created_ms"`
	ModifiedMs int64 `json:"modified_ms"`
}

// Partitioned reports whether the table has partition keys.
func (r TableRecord) Partitioned() bool { return len(r.Schema.PartitionKeys) > 0 }

// Target returns the table's target (meaningful for a non-partitioned table).
func (r TableRecord) Target() Target { return Target{TableID: r.ID} }

// SnapshotTarget returns the table's snapshot layout target.
func (r TableRecord) SnapshotTarget() snapshot.Target {
	return snapshot.Target{RemoteDir: r.RemoteDataDir, Database: r.Database, Table: r.Name, TableID: r.ID}
}

// Validate checks the record: names, remote directory, schema (kv.NewTable),
// replication factor and data state.
func (r TableRecord) Validate() error {
	if err := checkVersion(r.Version); err != nil {
		return err
	}
	if r.ID < 1 {
		return fmt.Errorf("%w: table id %d", ErrInvalid, r.ID)
	}
	if err := errors.Join(checkName("database", r.Database), checkName("table", r.Name)); err != nil {
		return err
	}
	if err := r.SnapshotTarget().Validate(); err != nil {
		return fmt.Errorf("%w: table %s.%s: %w", ErrInvalid, r.Database, r.Name, err)
	}
	if _, err := kv.NewTable(r.Schema); err != nil {
		return fmt.Errorf("%w: table %s.%s: %w", ErrInvalid, r.Database, r.Name, err)
	}
	if r.ReplicationFactor < 1 {
		return fmt.Errorf("%w: table %s.%s: replication factor %d", ErrInvalid, r.Database, r.Name, r.ReplicationFactor)
	}
	if r.Partitioned() {
		if r.DataState != "" || r.BulkLoadID != "" {
			return fmt.Errorf("%w: partitioned table %s.%s carries a data state (its partitions do)", ErrInvalid, r.Database, r.Name)
		}
		return nil
	}
	return checkDataState("table "+r.Database+"."+r.Name, r.DataState, r.BulkLoadID)
}

// PartitionRecord is kept at {p}/partitions/{tableId}/{partitionName}.
type PartitionRecord struct {
	Version    int       `json:"version"`
	ID         int64     `json:"partition_id"`
	TableID    int64     `json:"table_id"`
	Name       string    `json:"name"`
	DataState  DataState `json:"data_state"`
	BulkLoadID string    `json:"bulk_load_id,omitempty"`
	// Dropping is set by the first step of DropPartition.
	Dropping   bool  `json:"dropping,omitempty"`
	CreatedMs  int64 `json:"created_ms"`
	ModifiedMs int64 `json:"modified_ms"`
}

// Target returns the partition's target.
func (r PartitionRecord) Target() Target { return Target{TableID: r.TableID, PartitionID: r.ID} }

// Validate checks the record.
func (r PartitionRecord) Validate() error {
	if err := checkVersion(r.Version); err != nil {
		return err
	}
	if r.ID < 1 || r.TableID < 1 {
		return fmt.Errorf("%w: partition id %d of table id %d", ErrInvalid, r.ID, r.TableID)
	}
	if err := kv.ValidatePartitionName(r.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return checkDataState("partition "+r.Name, r.DataState, r.BulkLoadID)
}

// BucketAssignment is one bucket's replica set. Leader is "" while the
// bucket has none; LeaderEpoch grows by one each time the leader changes.
// Changelog is the identity of the changelog its replicas share (the
// ServerRecord.Changelog of the servers that may hold them); "" in an
// assignment written before the coordinator recorded it.
type BucketAssignment struct {
	Replicas    []string `json:"replicas"`
	Leader      string   `json:"leader"`
	LeaderEpoch int32    `json:"leader_epoch"`
	Changelog   string   `json:"changelog,omitempty"`
}

// Assignment is kept at {p}/assignment/{tableId}[/p{partitionId}]: bucket i
// is Buckets[i].
type Assignment struct {
	Version     int                `json:"version"`
	TableID     int64              `json:"table_id"`
	PartitionID int64              `json:"partition_id,omitempty"` // 0: a non-partitioned table
	Buckets     []BucketAssignment `json:"buckets"`
}

// Target returns the target the assignment is for.
func (a Assignment) Target() Target { return Target{TableID: a.TableID, PartitionID: a.PartitionID} }

// Validate checks the structure: 1..kv.MaxBuckets buckets, replicas valid
// server ids without duplicates, the leader one of them or "", epochs not
// negative.
func (a Assignment) Validate() error {
	if err := checkVersion(a.Version); err != nil {
		return err
	}
	if err := a.Target().Validate(); err != nil {
		return err
	}
	if msg := checkBuckets(a.Buckets, 0, 0); msg != "" {
		return fmt.Errorf("%w: assignment of %s: %s", ErrInvalid, a.Target(), msg)
	}
	return nil
}

// DroppedData is kept at {p}/dropped/{tableId}[/p{partitionId}] from the
// moment a table or partition is marked dropping (in the same transaction)
// until the coordinator has deleted everything under Dir, the target's
// snapshot directory in object storage (snapshot.Target.Dir: a dropped
// partitioned table's directory holds its partitions').
type DroppedData struct {
	Version     int    `json:"version"`
	TableID     int64  `json:"table_id"`
	PartitionID int64  `json:"partition_id,omitempty"` // 0: a table
	Dir         string `json:"dir"`
	DroppedMs   int64  `json:"dropped_ms"`
}

// Target returns the dropped target.
func (d DroppedData) Target() Target { return Target{TableID: d.TableID, PartitionID: d.PartitionID} }

// Validate checks the target, that Dir is an absolute URI with a path
// under /kv/ and no trailing slash, and that the drop time is set.
func (d DroppedData) Validate() error {
	if err := checkVersion(d.Version); err != nil {
		return err
	}
	if err := d.Target().Validate(); err != nil {
		return err
	}
	scheme, rest, ok := strings.Cut(d.Dir, "://")
	if !ok || scheme == "" || !strings.Contains(rest, "/kv/") || strings.HasSuffix(d.Dir, "/") {
		return fmt.Errorf("%w: dropped data of %s: directory %q", ErrInvalid, d.Target(), d.Dir)
	}
	if d.DroppedMs <= 0 {
		return fmt.Errorf("%w: dropped data of %s: drop time %d", ErrInvalid, d.Target(), d.DroppedMs)
	}
	return nil
}

// checkBuckets returns what is wrong with the buckets of an assignment, or
// "". With n > 0 there must be n buckets of at most rf replicas each.
func checkBuckets(bs []BucketAssignment, n, rf int) string {
	switch {
	case len(bs) < 1 || len(bs) > kv.MaxBuckets:
		return fmt.Sprintf("%d buckets (want 1..%d)", len(bs), kv.MaxBuckets)
	case n > 0 && len(bs) != n:
		return fmt.Sprintf("%d buckets, the table has %d", len(bs), n)
	}
	for i, b := range bs {
		if msg := b.check(rf); msg != "" {
			return fmt.Sprintf("bucket %d: %s", i, msg)
		}
	}
	return ""
}

// check returns what is wrong with b, or "". With rf > 0 it may have at
// most rf replicas.
func (b BucketAssignment) check(rf int) string {
	if rf > 0 && len(b.Replicas) > rf {
		return fmt.Sprintf("%d replicas, replication factor %d", len(b.Replicas), rf)
	}
	for i, r := range b.Replicas {
		if !isServerID(r) {
			return fmt.Sprintf("replica %q is not a server id", r)
		}
		if slices.Contains(b.Replicas[:i], r) {
			return fmt.Sprintf("replica %q listed twice", r)
		}
	}
	if b.Leader != "" && !slices.Contains(b.Replicas, b.Leader) {
		return fmt.Sprintf("leader %q is not a replica", b.Leader)
	}
	if b.LeaderEpoch < 0 {
		return fmt.Sprintf("leader epoch %d", b.LeaderEpoch)
	}
	if err := CheckChangelogIdentity(b.Changelog); err != nil {
		return err.Error()
	}
	return ""
}

// ServerRecord is a tablet server's registration, kept at
// {p}/servers/{serverId} under the server's lease. Changelog is the
// identity of the changelog the server's bucket logs live in
// (changelog.LocalProvider.Identity, kafkalog.Provider.Identity): only
// servers with the same one may hold replicas of one bucket, since a
// follower replicates by reading its leader's log. "" from a server of an
// older release, which placement lets hold any bucket while it is
// registered (coordinator.Placement).
type ServerRecord struct {
	Version   int    `json:"version"`
	ID        string `json:"id"`
	Address   string `json:"address"`
	StartedMs int64  `json:"started_ms"`
	Changelog string `json:"changelog,omitempty"`
}

// Validate checks the record: the id is 1..63 characters [a-z0-9-], the
// address is not empty, the changelog identity is well formed.
func (r ServerRecord) Validate() error {
	if err := errors.Join(checkVersion(r.Version), checkServerID(r.ID)); err != nil {
		return err
	}
	if r.Address == "" {
		return fmt.Errorf("%w: server %s has no address", ErrInvalid, r.ID)
	}
	if err := CheckChangelogIdentity(r.Changelog); err != nil {
		return fmt.Errorf("%w: server %s: %w", ErrInvalid, r.ID, err)
	}
	return nil
}

// MaxChangelogIdentity bounds a changelog identity's length.
const MaxChangelogIdentity = 512

// CheckChangelogIdentity checks a changelog identity: at most
// MaxChangelogIdentity printable ASCII characters without spaces ("" is
// valid: not known).
func CheckChangelogIdentity(s string) error {
	if len(s) > MaxChangelogIdentity {
		return fmt.Errorf("changelog identity of %d bytes (at most %d)", len(s), MaxChangelogIdentity)
	}
	for i := range len(s) {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("changelog identity %q: byte %d is not printable ASCII", s, i)
		}
	}
	return nil
}

// BucketSnapshot is a completed snapshot of one bucket in the registry, at
// {p}/snapshots/{tableId}[/p{partitionId}]/{bucket}/{snapshotId:020d}. Its
// JSON is byte for byte Fluss's ZooKeeper BucketSnapshot:
//
//	{"version":1,"snapshot_id":1,"log_offset":1002,"metadata_path":"oss://test/a2"}
type BucketSnapshot struct {
	Version      int    `json:"version"`
	SnapshotID   int64  `json:"snapshot_id"`
	LogOffset    int64  `json:"log_offset"`
	MetadataPath string `json:"metadata_path"`
}

// Validate checks the record: ids and offsets not negative, a metadata path.
func (s BucketSnapshot) Validate() error {
	if err := checkVersion(s.Version); err != nil {
		return err
	}
	if s.SnapshotID < 0 || s.LogOffset < 0 || s.MetadataPath == "" {
		return fmt.Errorf("%w: bucket snapshot %d: log offset %d, metadata path %q", ErrInvalid, s.SnapshotID, s.LogOffset, s.MetadataPath)
	}
	return nil
}

// Record is the set of records this package stores.
type Record interface {
	DatabaseRecord | TableRecord | PartitionRecord | Assignment | ServerRecord | BucketSnapshot | DroppedData | DataAccess
	Validate() error
}

// Versioned is a record as read, with the mod revision of its key: pass Rev
// back to a write to make it a compare-and-swap.
type Versioned[T any] struct {
	Value T
	Rev   int64
}

// Marshal validates r and returns its JSON: fields in declaration order, no
// insignificant space, '<', '>' and '&' unescaped (as Jackson writes them).
func Marshal[R Record](r R) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if b.Len() > MaxRecordBytes {
		return nil, fmt.Errorf("%w: %T is %d bytes, limit %d", ErrTooLarge, r, b.Len(), MaxRecordBytes)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Unmarshal decodes one record strictly: every object key must be a known
// field spelled exactly (snake_case), at most once; nothing may follow the
// value; the version must be RecordVersion and the record valid. Errors
// wrap ErrCorrupt.
func Unmarshal[R Record](data []byte) (R, error) {
	var r R
	if err := checkKeys(data); err != nil {
		return r, fmt.Errorf("%w: %T: %v", ErrCorrupt, r, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, fmt.Errorf("%w: %T: %v", ErrCorrupt, r, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, fmt.Errorf("%w: %T: trailing data after the value", ErrCorrupt, r)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%w: %T: %v", ErrCorrupt, r, err)
	}
	return r, nil
}

// checkKeys rejects duplicate object keys and keys that are not snake_case.
// encoding/json matches field names case-insensitively and keeps the last
// of duplicate keys; all our fields are snake_case, so this makes matching
// exact.
func checkKeys(data []byte) error {
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]struct{}
	}
	var stack []frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if key, ok := tok.(string); ok {
				if !isSnakeCase(key) {
					return fmt.Errorf("unknown field %q", key)
				}
				if _, dup := stack[n-1].keys[key]; dup {
					return fmt.Errorf("duplicate key %q", key)
				}
				stack[n-1].keys[key] = struct{}{}
				stack[n-1].wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{obj: true, wantKey: true, keys: map[string]struct{}{}})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

func isSnakeCase(s string) bool {
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return s != ""
}

func checkVersion(v int) error {
	if v != RecordVersion {
		return fmt.Errorf("%w: unsupported record version %d (want %d)", ErrInvalid, v, RecordVersion)
	}
	return nil
}

// checkName checks a database or table name: 1..200 characters
// [A-Za-z0-9_-], as the snapshot layout requires of path segments.
func checkName(what, name string) error {
	ok := name != "" && len(name) <= 200
	for _, c := range []byte(name) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w: %s name %q (want 1..200 characters [A-Za-z0-9_-])", ErrInvalid, what, name)
	}
	return nil
}

// checkServerID checks a tablet server id: 1..63 characters [a-z0-9-].
func checkServerID(id string) error {
	if !isServerID(id) {
		return fmt.Errorf("%w: server id %q (want 1..%d characters [a-z0-9-])", ErrInvalid, id, maxServerID)
	}
	return nil
}

func isServerID(id string) bool {
	ok := id != "" && len(id) <= maxServerID
	for _, c := range []byte(id) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	return ok
}
