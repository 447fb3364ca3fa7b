package lake

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// TableInfo describes an Iceberg table: its schemas, partition specs, sort
// order, properties and snapshots. Types and transforms are Iceberg's own
// spellings ("long", "decimal(10, 2)", "timestamptz", "struct<...>", "day",
// "bucket[16]"), so TableInfo is plain data that marshals to JSON and needs
// no iceberg-go import to read.
type TableInfo struct {
	Name          string `json:"name"` // "namespace.table"
	UUID          string `json:"uuid"`
	Location      string `json:"location"`
	FormatVersion int    `json:"format_version"`
	// MetadataLocation is the current metadata file.
	MetadataLocation string    `json:"metadata_location"`
	LastUpdated      time.Time `json:"last_updated"`
	// Schema is the current schema; Schemas holds every schema by ascending id.
	Schema  SchemaInfo   `json:"schema"`
	Schemas []SchemaInfo `json:"schemas"`
	// Spec is the default partition spec (new data is written with it); Specs
	// holds every spec by ascending id, since files of older specs stay live
	// after partition evolution.
	Spec       PartitionSpecInfo   `json:"spec"`
	Specs      []PartitionSpecInfo `json:"specs"`
	SortOrder  SortOrderInfo       `json:"sort_order"`
	Properties map[string]string   `json:"properties"`
	// CurrentSnapshotID is nil for a table without data.
	CurrentSnapshotID *int64 `json:"current_snapshot_id"`
	// Snapshots are the retained snapshots, oldest first by sequence number.
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// CheckRef reports whether ref can name a partition of the table: its spec
// is one of the table's, and its path names the spec's fields in order, as
// PartitionStats.Path does ("name=value" joined by "/", URL-query-escaped;
// the empty path for an unpartitioned spec). Values are not checked: a
// value no data has is a partition that does not exist, not a malformed
// one.
func (t *TableInfo) CheckRef(ref PartitionRef) error {
	i := slices.IndexFunc(t.Specs, func(s PartitionSpecInfo) bool { return s.ID == ref.SpecID })
	if i < 0 {
		ids := make([]string, len(t.Specs))
		for j, s := range t.Specs {
			ids[j] = strconv.Itoa(s.ID)
		}
		return fmt.Errorf("%s has no partition spec %d (its specs: %s)", t.Name, ref.SpecID, strings.Join(ids, ", "))
	}
	spec := t.Specs[i]
	if len(spec.Fields) == 0 {
		if ref.Path != "" {
			return fmt.Errorf("spec %d of %s is unpartitioned: its one partition has the empty path", spec.ID, t.Name)
		}
		return nil
	}
	form := make([]string, len(spec.Fields))
	for j, f := range spec.Fields {
		form[j] = url.QueryEscape(f.Name) + "=VALUE"
	}
	segs := strings.Split(ref.Path, "/")
	fits := len(segs) == len(spec.Fields)
	for j := 0; fits && j < len(segs); j++ {
		name, _, ok := strings.Cut(segs[j], "=")
		fits = ok && name == url.QueryEscape(spec.Fields[j].Name)
	}
	if !fits {
		return fmt.Errorf("not a partition path of spec %d of %s: its paths read %s", spec.ID, t.Name, strings.Join(form, "/"))
	}
	return nil
}

// SchemaInfo is one schema of a table.
type SchemaInfo struct {
	ID     int         `json:"id"`
	Fields []FieldInfo `json:"fields"`
	// IdentifierFields names the identifier (row key) columns, in the order of
	// the schema's identifier field ids.
	IdentifierFields []string `json:"identifier_fields"`
}

// FieldInfo is one top-level column. Nested columns are described by Type only
// ("struct<...>", "list<...>", "map<...>"); the tier has no nested types.
type FieldInfo struct {
	ID       int    `json:"id"`
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required"`
	Doc      string `json:"doc,omitempty"`
}

// PartitionSpecInfo is one partition spec; no fields means unpartitioned.
type PartitionSpecInfo struct {
	ID     int                  `json:"id"`
	Fields []PartitionFieldInfo `json:"fields"`
}

// PartitionFieldInfo is one field of a partition spec.
type PartitionFieldInfo struct {
	FieldID  int    `json:"field_id"`
	Name     string `json:"name"`
	SourceID int    `json:"source_id"`
	// Source is the source column's name in the current schema ("" when the
	// column has been dropped).
	Source    string `json:"source"`
	Transform string `json:"transform"`
}

// SortOrderInfo is the table's default sort order; no fields means unsorted.
type SortOrderInfo struct {
	ID     int             `json:"id"`
	Fields []SortFieldInfo `json:"fields"`
}

// SortFieldInfo is one sort key.
type SortFieldInfo struct {
	Source    string `json:"source"`
	SourceID  int    `json:"source_id"`
	Transform string `json:"transform"`
	Direction string `json:"direction"`  // "asc" or "desc"
	NullOrder string `json:"null_order"` // "nulls-first" or "nulls-last"
}

// SnapshotInfo is one retained snapshot.
type SnapshotInfo struct {
	ID             int64             `json:"id"`
	ParentID       *int64            `json:"parent_id"`
	SequenceNumber int64             `json:"sequence_number"`
	Timestamp      time.Time         `json:"timestamp"`
	Operation      string            `json:"operation"`
	SchemaID       *int              `json:"schema_id"`
	Summary        map[string]string `json:"summary"`
}

// Describe loads table ("namespace.table") and describes it.
func (l *Lake) Describe(ctx context.Context, name string) (*TableInfo, error) {
	tbl, err := l.loadTable(ctx, name)
	if err != nil {
		return nil, err
	}
	return describe(name, tbl), nil
}

func describe(name string, tbl *table.Table) *TableInfo {
	meta := tbl.Metadata()
	cur := meta.CurrentSchema()
	info := &TableInfo{
		Name:             name,
		UUID:             meta.TableUUID().String(),
		Location:         meta.Location(),
		FormatVersion:    meta.Version(),
		MetadataLocation: tbl.MetadataLocation(),
		LastUpdated:      time.UnixMilli(meta.LastUpdatedMillis()).UTC(),
		Schema:           schemaInfo(cur),
		Properties:       maps.Clone(map[string]string(meta.Properties())),
	}
	if info.Properties == nil {
		info.Properties = map[string]string{}
	}
	for _, s := range meta.Schemas() {
		info.Schemas = append(info.Schemas, schemaInfo(s))
	}
	slices.SortFunc(info.Schemas, func(a, b SchemaInfo) int { return a.ID - b.ID })
	for _, spec := range meta.PartitionSpecs() {
		si := specInfo(spec, cur)
		info.Specs = append(info.Specs, si)
		if spec.ID() == meta.DefaultPartitionSpec() {
			info.Spec = si
		}
	}
	slices.SortFunc(info.Specs, func(a, b PartitionSpecInfo) int { return a.ID - b.ID })
	so := meta.SortOrder()
	info.SortOrder = SortOrderInfo{ID: so.OrderID(), Fields: []SortFieldInfo{}}
	for _, f := range so.Fields() {
		sf := SortFieldInfo{Transform: f.Transform.String(), Direction: string(f.Direction), NullOrder: string(f.NullOrder)}
		if len(f.SourceIDs) > 0 {
			sf.SourceID = f.SourceIDs[0]
			sf.Source, _ = cur.FindColumnName(sf.SourceID)
		}
		info.SortOrder.Fields = append(info.SortOrder.Fields, sf)
	}
	if s := meta.CurrentSnapshot(); s != nil {
		id := s.SnapshotID
		info.CurrentSnapshotID = &id
	}
	for _, s := range meta.Snapshots() {
		si := SnapshotInfo{
			ID:             s.SnapshotID,
			ParentID:       s.ParentSnapshotID,
			SequenceNumber: s.SequenceNumber,
			Timestamp:      time.UnixMilli(s.TimestampMs).UTC(),
			SchemaID:       s.SchemaID,
			Summary:        map[string]string{},
		}
		if s.Summary != nil {
			si.Operation = string(s.Summary.Operation)
			maps.Copy(si.Summary, s.Summary.Properties)
		}
		info.Snapshots = append(info.Snapshots, si)
	}
	slices.SortStableFunc(info.Snapshots, func(a, b SnapshotInfo) int {
		if a.SequenceNumber != b.SequenceNumber {
			return cmpInt64(a.SequenceNumber, b.SequenceNumber)
		}
		return a.Timestamp.Compare(b.Timestamp)
	})
	return info
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func schemaInfo(s *iceberg.Schema) SchemaInfo {
	si := SchemaInfo{ID: s.ID, Fields: []FieldInfo{}, IdentifierFields: []string{}}
	for _, f := range s.Fields() {
		si.Fields = append(si.Fields, FieldInfo{ID: f.ID, Name: f.Name, Type: f.Type.String(), Required: f.Required, Doc: f.Doc})
	}
	for _, id := range s.IdentifierFieldIDs {
		name, ok := s.FindColumnName(id)
		if !ok {
			name = "#" + strconv.Itoa(id)
		}
		si.IdentifierFields = append(si.IdentifierFields, name)
	}
	return si
}

func specInfo(spec iceberg.PartitionSpec, cur *iceberg.Schema) PartitionSpecInfo {
	si := PartitionSpecInfo{ID: spec.ID(), Fields: []PartitionFieldInfo{}}
	for _, f := range spec.Fields() {
		pf := PartitionFieldInfo{FieldID: f.FieldID, Name: f.Name, SourceID: f.SourceID(), Transform: f.Transform.String()}
		pf.Source, _ = cur.FindColumnName(pf.SourceID)
		si.Fields = append(si.Fields, pf)
	}
	return si
}

// schemaByID returns the schema with the given id.
func (t *TableInfo) schemaByID(id int) (SchemaInfo, bool) {
	for _, s := range t.Schemas {
		if s.ID == id {
			return s, true
		}
	}
	return SchemaInfo{}, false
}
