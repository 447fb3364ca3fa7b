package kafka

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/thawdb/thaw/internal/strictjson"
	"github.com/thawdb/thaw/kv"
)

// ErrInvalidEvent reports a record value that is not a control event.
var ErrInvalidEvent = errors.New("kafka: invalid control event")

// EventVersion is the only event version this package reads.
const EventVersion = 1

// MaxEventBytes bounds a control event's record value.
const MaxEventBytes = 64 << 10

// maxName bounds every name an event carries.
const maxName = 512

// Event types.
const (
	// TypePromote asks for an on-demand promotion, like POST /v1/promotions:
	// Policy and/or Table name the policy, Partition (optional) one target.
	TypePromote = "promote"
	// TypeReconcile asks for a reconcile of Policy, or of every policy when
	// Policy is empty.
	TypeReconcile = "reconcile"
	// TypeLakeCommit reports a commit to the lake table Table of catalog
	// Catalog: the policies that promote it on lake commits reconcile.
	// SnapshotID, if given, is the committed snapshot (it is logged; the
	// reconcile reads the table's current snapshot either way).
	TypeLakeCommit = "lake_commit"
)

// Event is one control event: the JSON object of a record's value.
//
//	{"version":1,"type":"promote","table":"quickstart.events","partition":"2024-01-04"}
//	{"version":1,"type":"reconcile","policy":"events-recent"}
//	{"version":1,"type":"lake_commit","catalog":"default","table":"sample.events","snapshot_id":42}
type Event struct {
	Version    int    `json:"version"`
	Type       string `json:"type"`
	Policy     string `json:"policy,omitempty"`
	Table      string `json:"table,omitempty"`
	Partition  string `json:"partition,omitempty"`
	Catalog    string `json:"catalog,omitempty"`
	SnapshotID *int64 `json:"snapshot_id,omitempty"`
}

// members lists each type's required and optional members.
var members = map[string]struct{ required, optional []string }{
	TypePromote:    {[]string{"version", "type"}, []string{"policy", "table", "partition"}},
	TypeReconcile:  {[]string{"version", "type"}, []string{"policy"}},
	TypeLakeCommit: {[]string{"version", "type", "catalog", "table"}, []string{"snapshot_id"}},
}

// ParseEvent decodes and checks one control event strictly: a JSON object
// of at most MaxEventBytes, valid UTF-8, nothing after it, no repeated,
// unknown or null member, version 1, a known type with the members that
// type takes, and well-formed names. Errors wrap ErrInvalidEvent and say
// what is wrong.
func ParseEvent(b []byte) (Event, error) {
	var e Event
	if err := parseEvent(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	return e, nil
}

func parseEvent(b []byte, e *Event) error {
	if len(b) > MaxEventBytes {
		return fmt.Errorf("%d bytes, more than %d", len(b), MaxEventBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("empty: want a JSON object")
	}
	top, err := strictjson.Check(b, strictjson.Options{NoNull: true})
	if err != nil {
		return err
	}
	if top == nil {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(e); err != nil {
		return err
	}
	for _, k := range []string{"version", "type"} {
		if _, ok := top[k]; !ok {
			return fmt.Errorf("missing member %q", k)
		}
	}
	if e.Version != EventVersion {
		return fmt.Errorf("version %d: this promoter reads version %d", e.Version, EventVersion)
	}
	m, ok := members[e.Type]
	if !ok {
		return fmt.Errorf("type %q: want %s, %s or %s", e.Type, TypePromote, TypeReconcile, TypeLakeCommit)
	}
	if err := strictjson.Members(top, m.required, m.optional); err != nil {
		return fmt.Errorf("%s event: %w", e.Type, err)
	}
	for _, f := range []struct{ name, v string }{
		{"policy", e.Policy}, {"table", e.Table}, {"catalog", e.Catalog},
	} {
		if _, present := top[f.name]; present {
			if err := checkName(f.v); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	if _, present := top["partition"]; present {
		if err := kv.ValidatePartitionName(e.Partition); err != nil {
			return fmt.Errorf("partition %q: %w", e.Partition, err)
		}
	}
	switch e.Type {
	case TypePromote:
		if e.Policy == "" && e.Table == "" {
			return errors.New("promote event: names neither a policy nor a table")
		}
		if e.Table != "" {
			if err := checkTable(e.Table); err != nil {
				return err
			}
		}
	case TypeLakeCommit:
		if err := checkTable(e.Table); err != nil {
			return err
		}
		if e.SnapshotID != nil && *e.SnapshotID < 0 {
			return fmt.Errorf("snapshot_id %d is negative", *e.SnapshotID)
		}
	}
	return nil
}

// checkName accepts a non-empty name of at most maxName bytes without
// control characters or surrounding spaces.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > maxName:
		return fmt.Errorf("%d bytes, more than %d", len(s), maxName)
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%q has surrounding spaces", s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%q holds a control character", s)
	}
	return nil
}

// checkTable accepts "a.b" (a tier table DATABASE.TABLE or a lake table
// NAMESPACE.TABLE; lake namespaces may have several levels).
func checkTable(s string) error {
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" || len(parts) < 2 {
			return fmt.Errorf("table %q: want DATABASE.TABLE (or the lake table NAMESPACE.TABLE)", s)
		}
	}
	return nil
}
