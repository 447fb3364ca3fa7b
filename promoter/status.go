package promoter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/thawdb/thaw/internal/strictjson"
)

// StatusEventVersion is the version of StatusEvent's JSON form. A change
// that a strict reader of this version would refuse (a new member, a
// changed meaning) takes a new version.
const StatusEventVersion = 1

// StatusEventType is StatusEvent.Type.
const StatusEventType = "promotion"

// MaxStatusEventBytes bounds one status event's JSON. Its lake partitions
// have no small bound (a tier table without partitions promoted from a
// lake table partitioned by hour holds every hour's name: a year is 8,760
// names, about 250 KB), so the bound is what Kafka takes by default: a
// broker's message.max.bytes and franz-go's batch limit are about 1 MB.
// Marshal refuses a larger event (its record is near etcd's 1.5 MiB limit
// on the ledger record itself).
const MaxStatusEventBytes = 960 << 10

// maxEventError is where an event's error message is cut, so that an
// event stays far below MaxStatusEventBytes.
const maxEventError = 4 << 10

// ErrInvalidStatusEvent reports bytes ParseStatusEvent refuses.
var ErrInvalidStatusEvent = errors.New("promoter: invalid status event")

// StatusEvent is a promotion's state right after a write of its ledger
// record: one event per write, in the order of the writes, carrying the
// record's etcd revision (a consumer that sees an event twice, or a stale
// one after a leader change, keeps the highest revision per promotion).
// It holds what the ledger record holds but for the caller token and the
// interrupted-build count (Record.InterruptedBuilds: a failure for it says
// the count in its error; a promotion whose builds are interrupted
// publishes a "building" event per build): names, ids, counts, times and
// error messages, never a credential.
type StatusEvent struct {
	Version   int    `json:"version"`
	Type      string `json:"type"`
	Promotion string `json:"promotion"` // the record id, "p-" + 16 hex digits
	Revision  int64  `json:"revision"`
	Policy    string `json:"policy"`
	Catalog   string `json:"catalog"`
	LakeTable string `json:"lake_table"`
	// LakePartitions are the "spec/path" names of the lake partitions
	// promoted into Partition.
	LakePartitions   []string   `json:"lake_partitions"`
	SourceSnapshotID int64      `json:"source_snapshot_id"`
	ScanSnapshotID   int64      `json:"scan_snapshot_id"`
	Database         string     `json:"database"`
	Table            string     `json:"table"`
	Partition        string     `json:"partition"` // "": the whole table
	Attempt          int        `json:"attempt"`
	Phase            Phase      `json:"phase"`
	TxnID            string     `json:"txn_id"`
	Buckets          int        `json:"buckets"`
	Rows             int64      `json:"rows"`
	Bytes            int64      `json:"bytes"`
	Duplicates       int64      `json:"duplicates"`
	Error            string     `json:"error"`
	Retriable        bool       `json:"retriable"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	BegunAt          *time.Time `json:"begun_at,omitempty"`
	CommittedAt      *time.Time `json:"committed_at,omitempty"`
}

// StatusEventOf returns the event of record r as the ledger stored it.
func StatusEventOf(r Record) StatusEvent {
	e := StatusEvent{
		Version: StatusEventVersion, Type: StatusEventType,
		Promotion: r.ID, Revision: r.Revision, Policy: r.Policy, Catalog: r.Catalog, LakeTable: r.LakeTable,
		LakePartitions:   append([]string{}, r.LakePartitions...),
		SourceSnapshotID: r.SourceSnapshotID, ScanSnapshotID: r.ScanSnapshotID,
		Database: r.Database, Table: r.Table, Partition: r.Partition,
		Attempt: r.Attempt, Phase: r.Phase, TxnID: r.TxnID, Buckets: r.Buckets,
		Rows: r.Rows, Bytes: r.Bytes, Duplicates: r.Duplicates,
		Error: r.Error, Retriable: r.Retriable,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, BegunAt: r.BegunAt, CommittedAt: r.CommittedAt,
	}
	e.Error = shorten(e.Error, maxEventError)
	return e
}

// Key is the event's Kafka record key: its promotion id, so that the
// events of one promotion stay in order in one topic partition.
func (e StatusEvent) Key() string { return e.Promotion }

// Marshal returns the event's JSON, members in the order of the struct; an
// event larger than MaxStatusEventBytes, which ParseStatusEvent would
// refuse, is an error.
func (e StatusEvent) Marshal() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("promoter: status event: %w", err)
	}
	if len(b) > MaxStatusEventBytes {
		return nil, fmt.Errorf("promoter: status event of %s: %d bytes (%d lake partitions), more than %d",
			e.Promotion, len(b), len(e.LakePartitions), MaxStatusEventBytes)
	}
	return b, nil
}

// Members of an event: statusRequired always, statusOptional only when
// set.
var (
	statusRequired = []string{
		"version", "type", "promotion", "revision", "policy", "catalog", "lake_table", "lake_partitions",
		"source_snapshot_id", "scan_snapshot_id", "database", "table", "partition", "attempt", "phase",
		"txn_id", "buckets", "rows", "bytes", "duplicates", "error", "retriable", "created_at", "updated_at",
	}
	statusOptional = []string{"begun_at", "committed_at"}
)

// ParseStatusEvent decodes one status event strictly, for consumers: one
// JSON object of at most MaxStatusEventBytes, nothing after it, every
// member present once (begun_at and committed_at only when set), none
// unknown or null, version StatusEventVersion, type StatusEventType, and
// values of the forms the ledger's records take (a promotion id, a known
// phase, counts not negative). Errors wrap ErrInvalidStatusEvent.
func ParseStatusEvent(data []byte) (StatusEvent, error) {
	e, err := parseStatusEvent(data)
	if err != nil {
		return StatusEvent{}, fmt.Errorf("%w: %w", ErrInvalidStatusEvent, err)
	}
	return e, nil
}

func parseStatusEvent(data []byte) (StatusEvent, error) {
	var e StatusEvent
	if len(data) > MaxStatusEventBytes {
		return e, fmt.Errorf("%d bytes, more than %d", len(data), MaxStatusEventBytes)
	}
	top, err := strictjson.Check(data, strictjson.Options{MaxDepth: 2, NoNull: true})
	if err != nil {
		return e, err
	}
	if top == nil {
		return e, errors.New("not a JSON object")
	}
	if err := strictjson.Members(top, statusRequired, statusOptional); err != nil {
		return e, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return StatusEvent{}, err
	}
	switch {
	case e.Version != StatusEventVersion:
		return StatusEvent{}, fmt.Errorf("version %d: this reader reads version %d", e.Version, StatusEventVersion)
	case e.Type != StatusEventType:
		return StatusEvent{}, fmt.Errorf("type %q, want %q", e.Type, StatusEventType)
	case e.Revision < 1:
		return StatusEvent{}, fmt.Errorf("revision %d below 1", e.Revision)
	}
	r := Record{
		ID: e.Promotion, Phase: e.Phase, Attempt: e.Attempt, Buckets: e.Buckets, Rows: e.Rows, Bytes: e.Bytes,
		Duplicates: e.Duplicates, Error: e.Error, Retriable: e.Retriable, TxnID: e.TxnID,
	}
	if err := r.validate(); err != nil {
		return StatusEvent{}, err
	}
	return e, nil
}

// StatusSink receives the promoter's status events (Config.Status). The
// promoter calls Publish after every successful write of a promotion's
// ledger record, from the goroutine that wrote it, in write order; Publish
// must not block (queue and return) and reports nothing back: the ledger
// stays the record of truth, events are notifications.
type StatusSink interface {
	Publish(e StatusEvent)
}

// publish hands r's event to the configured sink.
func (p *Promoter) publish(r Record) {
	if p.cfg.Status != nil {
		p.cfg.Status.Publish(StatusEventOf(r))
	}
}
