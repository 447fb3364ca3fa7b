package bulkload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"unicode/utf8"
)

// RecordVersion is the version every record is written with and the only
// one read.
const RecordVersion = 1

// MaxBuckets is the largest bucket count of a target (kv.MaxBuckets).
const MaxBuckets = 4096

// MaxRecordSize bounds an encoded record (4096 snapshot ids and a schema
// fit easily), well inside etcd's 1.5 MiB request limit.
const MaxRecordSize = 1 << 20

// ErrInvalidRecord: a transaction record is malformed (decoding) or breaks
// a rule of Record.Validate.
var ErrInvalidRecord = errors.New("bulkload: invalid transaction record")

// Record is the persisted transaction record, the one source of truth a
// coordinator resumes from. Times are Unix milliseconds.
//
// Besides State, the record holds the progress markers a successor needs:
// SnapshotIDs (non-nil: the fence is ready, Fluss's fenceReady), Manifest
// (frozen by the first Commit), AbortReason in BEGUN (an abort is in
// progress) and AdoptedBuckets (buckets [0, AdoptedBuckets) are adopted
// into the snapshot registry).
type Record struct {
	TxnID         string
	State         State
	CallerToken   string
	Target        Target
	TableID       int64
	PartitionID   int64 // 0 exactly when Target.Partition is ""
	Creator       Principal
	RemoteDataDir string
	SchemaID      int16
	Schema        json.RawMessage // kv.TableSchema JSON object, opaque here
	Buckets       int
	Bucketing     string
	SnapshotIDs   []int64 // nil until the fence is ready; then one per bucket

	CreatedMs                int64
	UpdatedMs                int64
	BuildDeadlineMs          int64
	CommitDecisionDeadlineMs int64 // set exactly when Manifest is
	ResultExpireMs           int64 // set exactly in a terminal state

	Manifest       *ManifestRef
	AbortReason    *AbortReason // set in ABORTED, and in BEGUN while the abort is in progress
	AbortMessage   string
	AdoptedBuckets int
}

// Handle returns the transaction's handle.
func (r *Record) Handle() Handle {
	return Handle{Target: r.Target, TableID: r.TableID, PartitionID: r.PartitionID, TxnID: r.TxnID}
}

// FenceReady reports whether Begin completed: every replica confirmed the
// fence, the target was proven empty and the snapshot ids are frozen.
func (r *Record) FenceReady() bool { return r.SnapshotIDs != nil }

// Aborting reports whether an abort is in progress (BEGUN with a reason).
func (r *Record) Aborting() bool { return r.State == Begun && r.AbortReason != nil }

// Status returns the transaction's status. The abort reason is reported
// only once the transaction is ABORTED.
func (r *Record) Status() Status {
	s := Status{Handle: r.Handle(), State: r.State}
	if r.State == Aborted && r.AbortReason != nil {
		reason := *r.AbortReason
		s.AbortReason, s.AbortMessage = &reason, r.AbortMessage
	}
	return s
}

// Clone returns a deep copy of r.
func (r *Record) Clone() Record {
	c := *r
	c.Schema = slices.Clone(r.Schema)
	c.SnapshotIDs = slices.Clone(r.SnapshotIDs)
	if r.Manifest != nil {
		m := *r.Manifest
		c.Manifest = &m
	}
	if r.AbortReason != nil {
		a := *r.AbortReason
		c.AbortReason = &a
	}
	return c
}

// Validate checks that r is a well-formed record in a reachable state.
// Errors wrap ErrInvalidRecord.
func (r *Record) Validate() error {
	if why := r.check(); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidRecord, why)
	}
	return nil
}

func (r *Record) check() string {
	if err := ValidateTxnID(r.TxnID); err != nil {
		return "bulk_load_id: not a canonical lowercase uuid"
	}
	if err := ValidateCallerToken(r.CallerToken); err != nil {
		return "caller_token: " + err.Error()
	}
	switch {
	case !r.State.Valid():
		return fmt.Sprintf("state %d unknown", uint8(r.State))
	case r.Target.Database == "" || r.Target.Table == "":
		return "empty database or table name"
	case r.TableID <= 0:
		return fmt.Sprintf("table_id %d not positive", r.TableID)
	case (r.Target.Partition == "") != (r.PartitionID == 0):
		return "partition_name and partition_id must be both present or both absent"
	case r.PartitionID < 0:
		return fmt.Sprintf("partition_id %d negative", r.PartitionID)
	case r.Creator.Name == "" || r.Creator.Type == "":
		return "empty creator_name or creator_type"
	case r.RemoteDataDir == "":
		return "empty remote_data_dir"
	case r.SchemaID < 0:
		return fmt.Sprintf("schema_id %d negative", r.SchemaID)
	case len(r.Schema) == 0 || r.Schema[0] != '{' || !json.Valid(r.Schema):
		return "table_schema is not a json object"
	case r.Buckets < 1 || r.Buckets > MaxBuckets:
		return fmt.Sprintf("bucket_count %d not in 1..%d", r.Buckets, MaxBuckets)
	case r.Bucketing == "":
		return "empty bucketing"
	case r.SnapshotIDs != nil && len(r.SnapshotIDs) != r.Buckets:
		return fmt.Sprintf("%d snapshot ids for %d buckets", len(r.SnapshotIDs), r.Buckets)
	case r.CreatedMs <= 0 || r.UpdatedMs < r.CreatedMs || r.BuildDeadlineMs <= r.CreatedMs:
		return fmt.Sprintf("times out of order: created %d, updated %d, build deadline %d", r.CreatedMs, r.UpdatedMs, r.BuildDeadlineMs)
	case (r.Manifest != nil) != (r.CommitDecisionDeadlineMs != 0):
		return "manifest and commit_decision_deadline_ms must be both present or both absent"
	case r.Manifest != nil && r.SnapshotIDs == nil:
		return "manifest frozen before the fence was ready"
	case r.State.Terminal() != (r.ResultExpireMs != 0):
		return "result_expire_time_ms must be present exactly in a terminal state"
	case r.AdoptedBuckets < 0 || r.AdoptedBuckets > r.Buckets:
		return fmt.Sprintf("adopted_buckets %d not in 0..%d", r.AdoptedBuckets, r.Buckets)
	case r.AdoptedBuckets > 0 && r.State != Committing && r.State != Committed:
		return "buckets adopted outside COMMITTING and COMMITTED"
	case r.AbortReason == nil && r.AbortMessage != "":
		return "abort_message without abort_reason"
	case r.AbortReason != nil && !r.AbortReason.Valid():
		return fmt.Sprintf("abort_reason %d unknown", uint8(*r.AbortReason))
	}
	for b, id := range r.SnapshotIDs {
		if id < 0 {
			return fmt.Sprintf("snapshot id %d of bucket %d negative", id, b)
		}
	}
	if m := r.Manifest; m != nil {
		if err := m.Validate(); err != nil {
			return "manifest: " + err.Error()
		}
		if r.CommitDecisionDeadlineMs <= r.CreatedMs {
			return "commit_decision_deadline_ms before created_time_ms"
		}
	}
	switch r.State {
	case Committing, Committed:
		switch {
		case r.Manifest == nil:
			return r.State.String() + " without a manifest"
		case r.AbortReason != nil:
			return r.State.String() + " with an abort_reason"
		case r.State == Committed && r.AdoptedBuckets != r.Buckets:
			return fmt.Sprintf("COMMITTED with %d of %d buckets adopted", r.AdoptedBuckets, r.Buckets)
		}
	case Aborted:
		if r.AbortReason == nil {
			return "ABORTED without an abort_reason"
		}
	}
	return ""
}

// recordJSON is the wire form: Fluss's transaction JSON v1 field names
// and order, then thaw's own fields.
type recordJSON struct {
	Version                  int             `json:"version"`
	BulkLoadID               string          `json:"bulk_load_id"`
	State                    uint8           `json:"state"`
	CallerToken              string          `json:"caller_token"`
	DatabaseName             string          `json:"database_name"`
	TableName                string          `json:"table_name"`
	PartitionName            *string         `json:"partition_name,omitempty"`
	TableID                  int64           `json:"table_id"`
	PartitionID              *int64          `json:"partition_id,omitempty"`
	CreatorName              string          `json:"creator_name"`
	CreatorType              string          `json:"creator_type"`
	RemoteDataDir            string          `json:"remote_data_dir"`
	SchemaID                 int16           `json:"schema_id"`
	SnapshotIDs              []int64         `json:"snapshot_ids,omitempty"`
	CreatedTimeMs            int64           `json:"created_time_ms"`
	UpdatedTimeMs            int64           `json:"updated_time_ms"`
	BuildDeadlineMs          int64           `json:"build_deadline_ms"`
	CommitDecisionDeadlineMs *int64          `json:"commit_decision_deadline_ms,omitempty"`
	ResultExpireTimeMs       *int64          `json:"result_expire_time_ms,omitempty"`
	ManifestPath             *string         `json:"manifest_path,omitempty"`
	ManifestLength           *int64          `json:"manifest_length,omitempty"`
	ManifestSHA256           *string         `json:"manifest_sha256,omitempty"`
	AbortReason              *uint8          `json:"abort_reason,omitempty"`
	AbortMessage             *string         `json:"abort_message,omitempty"`
	BucketCount              int             `json:"bucket_count"`
	Bucketing                string          `json:"bucketing"`
	TableSchema              json.RawMessage `json:"table_schema"`
	AdoptedBuckets           int             `json:"adopted_buckets"`
}

// recordKeys maps every member name to whether it is required.
var recordKeys = map[string]bool{
	"version": true, "bulk_load_id": true, "state": true, "caller_token": true,
	"database_name": true, "table_name": true, "partition_name": false, "table_id": true, "partition_id": false,
	"creator_name": true, "creator_type": true, "remote_data_dir": true, "schema_id": true,
	"snapshot_ids": false, "created_time_ms": true, "updated_time_ms": true, "build_deadline_ms": true,
	"commit_decision_deadline_ms": false, "result_expire_time_ms": false,
	"manifest_path": false, "manifest_length": false, "manifest_sha256": false,
	"abort_reason": false, "abort_message": false,
	"bucket_count": true, "bucketing": true, "table_schema": true, "adopted_buckets": true,
}

func ptrIf[T comparable](v T, set bool) *T {
	if !set {
		return nil
	}
	return &v
}

// EncodeRecord validates r and returns its canonical JSON: no whitespace,
// members in the order of the format, optional members omitted when
// absent, no HTML escaping.
func EncodeRecord(r Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	w := recordJSON{
		Version:                  RecordVersion,
		BulkLoadID:               r.TxnID,
		State:                    uint8(r.State),
		CallerToken:              r.CallerToken,
		DatabaseName:             r.Target.Database,
		TableName:                r.Target.Table,
		PartitionName:            ptrIf(r.Target.Partition, r.Target.Partition != ""),
		TableID:                  r.TableID,
		PartitionID:              ptrIf(r.PartitionID, r.PartitionID != 0),
		CreatorName:              r.Creator.Name,
		CreatorType:              r.Creator.Type,
		RemoteDataDir:            r.RemoteDataDir,
		SchemaID:                 r.SchemaID,
		SnapshotIDs:              r.SnapshotIDs,
		CreatedTimeMs:            r.CreatedMs,
		UpdatedTimeMs:            r.UpdatedMs,
		BuildDeadlineMs:          r.BuildDeadlineMs,
		CommitDecisionDeadlineMs: ptrIf(r.CommitDecisionDeadlineMs, r.CommitDecisionDeadlineMs != 0),
		ResultExpireTimeMs:       ptrIf(r.ResultExpireMs, r.ResultExpireMs != 0),
		AbortMessage:             ptrIf(r.AbortMessage, r.AbortMessage != ""),
		BucketCount:              r.Buckets,
		Bucketing:                r.Bucketing,
		TableSchema:              r.Schema,
		AdoptedBuckets:           r.AdoptedBuckets,
	}
	if m := r.Manifest; m != nil {
		w.ManifestPath, w.ManifestLength, w.ManifestSHA256 = &m.Path, &m.Length, &m.SHA256
	}
	if r.AbortReason != nil {
		w.AbortReason = ptrIf(uint8(*r.AbortReason), true)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrInvalidRecord, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxRecordSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrInvalidRecord, len(b), MaxRecordSize)
	}
	return b, nil
}

// DecodeRecord decodes and validates a record strictly. It rejects, with
// an error wrapping ErrInvalidRecord: more than MaxRecordSize bytes, a
// UTF-8 byte order mark, invalid UTF-8, malformed JSON, anything but one
// JSON object, trailing data, a key repeated in any object, a member the
// format does not define (names match exactly), a missing required member,
// null as a member's value, a value of the wrong type or out of range
// (fractions and exponents included), a version other than 1, and a record
// Validate rejects.
func DecodeRecord(b []byte) (Record, error) {
	fail := func(format string, args ...any) (Record, error) {
		return Record{}, fmt.Errorf("%w: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
	}
	switch {
	case len(b) > MaxRecordSize:
		return fail("%d bytes, limit %d", len(b), MaxRecordSize)
	case bytes.HasPrefix(b, []byte("\xef\xbb\xbf")):
		return fail("utf-8 byte order mark")
	case !utf8.Valid(b):
		return fail("invalid utf-8")
	}
	present, err := scanRecord(b)
	if err != nil {
		return fail("%s", err)
	}
	for _, k := range slices.Sorted(maps.Keys(recordKeys)) {
		if recordKeys[k] && !present[k] {
			return fail("missing member %q", k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w recordJSON
	if err := dec.Decode(&w); err != nil {
		return fail("%s", err)
	}
	if w.Version != RecordVersion {
		return fail("unsupported version %d", w.Version)
	}
	if (w.ManifestPath == nil) != (w.ManifestLength == nil) || (w.ManifestPath == nil) != (w.ManifestSHA256 == nil) {
		return fail("manifest_path, manifest_length and manifest_sha256 must be all present or all absent")
	}
	r := Record{
		TxnID:         w.BulkLoadID,
		State:         State(w.State),
		CallerToken:   w.CallerToken,
		Target:        Target{Database: w.DatabaseName, Table: w.TableName},
		TableID:       w.TableID,
		Creator:       Principal{Name: w.CreatorName, Type: w.CreatorType},
		RemoteDataDir: w.RemoteDataDir,
		SchemaID:      w.SchemaID,
		Schema:        w.TableSchema,
		Buckets:       w.BucketCount,
		Bucketing:     w.Bucketing,
		SnapshotIDs:   w.SnapshotIDs,
		CreatedMs:     w.CreatedTimeMs,
		UpdatedMs:     w.UpdatedTimeMs,

		BuildDeadlineMs: w.BuildDeadlineMs,
		AdoptedBuckets:  w.AdoptedBuckets,
	}
	// Present optional members must not hold their "absent" value, so that
	// every record has exactly one encoding.
	if w.PartitionName != nil {
		if r.Target.Partition = *w.PartitionName; r.Target.Partition == "" {
			return fail("empty partition_name")
		}
	}
	if w.PartitionID != nil {
		if r.PartitionID = *w.PartitionID; r.PartitionID == 0 {
			return fail("partition_id 0")
		}
	}
	if w.SnapshotIDs != nil && len(w.SnapshotIDs) == 0 {
		return fail("empty snapshot_ids")
	}
	if w.CommitDecisionDeadlineMs != nil {
		if r.CommitDecisionDeadlineMs = *w.CommitDecisionDeadlineMs; r.CommitDecisionDeadlineMs == 0 {
			return fail("commit_decision_deadline_ms 0")
		}
	}
	if w.ResultExpireTimeMs != nil {
		if r.ResultExpireMs = *w.ResultExpireTimeMs; r.ResultExpireMs == 0 {
			return fail("result_expire_time_ms 0")
		}
	}
	if w.ManifestPath != nil {
		r.Manifest = &ManifestRef{Path: *w.ManifestPath, Length: *w.ManifestLength, SHA256: *w.ManifestSHA256}
	}
	if w.AbortReason != nil {
		a := AbortReason(*w.AbortReason)
		r.AbortReason = &a
	}
	if w.AbortMessage != nil {
		if r.AbortMessage = *w.AbortMessage; r.AbortMessage == "" {
			return fail("empty abort_message")
		}
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// maxDepth bounds JSON nesting; a record is three levels deep at most, its
// schema a few more.
const maxDepth = 32

// scanRecord checks the token structure of a record: one JSON object and
// nothing after it, no key repeated in any object, top-level members known
// by their exact names and never null. It returns the top-level members.
func scanRecord(b []byte) (map[string]bool, error) {
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	var top map[string]bool
	done := false
	valueDone := func() {
		if len(stack) == 0 {
			done = true
		} else if f := stack[len(stack)-1]; f.object {
			f.expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		switch {
		case err == io.EOF && done:
			return top, nil
		case done:
			return nil, errors.New("trailing data after the record")
		case err == io.EOF:
			return nil, errors.New("unexpected end of json")
		case err != nil:
			return nil, err
		}
		if len(stack) == 0 && tok != json.Delim('{') {
			return nil, errors.New("not a json object")
		}
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object && f.expectKey {
				if tok == json.Delim('}') {
					stack = stack[:len(stack)-1]
					valueDone()
					continue
				}
				key := tok.(string) // json.Decoder yields only strings in key position
				if f.keys[key] {
					return nil, fmt.Errorf("duplicate key %q", key)
				}
				if len(stack) == 1 {
					if _, known := recordKeys[key]; !known {
						return nil, fmt.Errorf("unknown member %q", key)
					}
				}
				f.keys[key] = true
				f.expectKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == maxDepth {
				return nil, fmt.Errorf("nested deeper than %d", maxDepth)
			}
			f := &frame{object: tok == json.Delim('{'), expectKey: true, keys: map[string]bool{}}
			if len(stack) == 0 {
				top = f.keys
			}
			stack = append(stack, f)
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		case nil:
			if len(stack) == 1 {
				return nil, errors.New("null member value")
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
