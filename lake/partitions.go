package lake

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// PartitionStats describes one partition of a snapshot: the live data and
// delete files whose partition tuple, under one partition spec, is Values.
// After partition evolution the same data can sit in partitions of several
// specs; each (SpecID, Path) is its own PartitionStats. An unpartitioned table
// (or the files of an unpartitioned spec) is one PartitionStats with an empty
// Path and no Values.
type PartitionStats struct {
	SpecID int `json:"spec_id"`
	// Path is Iceberg's partition path, "event_day=2024-01-15/region=eu":
	// field names and human-readable values, URL-query-escaped, joined by "/".
	// (SpecID, Path) identifies the partition; see PartitionRef.
	Path   string           `json:"path"`
	Values []PartitionValue `json:"values"`

	// RecordCount is the sum of the data files' record counts. It is an UPPER
	// BOUND on the live rows: position and equality deletes are not
	// subtracted (only a scan can apply them).
	RecordCount int64 `json:"record_count"`
	// FileCount and TotalBytes count the live data files.
	FileCount  int   `json:"file_count"`
	TotalBytes int64 `json:"total_bytes"`
	// Delete files and the records they hold. Deletion vectors (format v3)
	// count as position deletes.
	PositionDeleteRecords int64 `json:"position_delete_records"`
	PositionDeleteFiles   int   `json:"position_delete_files"`
	EqualityDeleteRecords int64 `json:"equality_delete_records"`
	EqualityDeleteFiles   int   `json:"equality_delete_files"`

	// LastUpdatedSnapshotID is the snapshot that added the partition's newest
	// live file (data or delete), read from the manifest entry, so it is known
	// even after that snapshot has expired. LastUpdatedSequenceNumber is that
	// file's sequence number (0 in format v1 tables). A later snapshot that
	// removed a data file of the partition (a delete of whole files, an
	// overwrite) counts instead, at its sequence number, while the manifest
	// entry that records the removal is in the snapshot's manifests (until a
	// manifest rewrite, or a writer's later commit, drops it), also once the
	// removing snapshot has expired. So does a newer global equality delete
	// (one written under an unpartitioned spec of a partitioned table, which
	// applies to every partition's older data files).
	LastUpdatedSnapshotID     int64 `json:"last_updated_snapshot_id"`
	LastUpdatedSequenceNumber int64 `json:"last_updated_sequence_number"`
	// LastUpdatedAt is when that snapshot was committed, by the writer's clock;
	// LastUpdatedAtSource says how it was found (see TimeSource). It is the
	// zero time when the source is TimeUnknown.
	LastUpdatedAt       time.Time  `json:"last_updated_at"`
	LastUpdatedAtSource TimeSource `json:"last_updated_at_source"`

	// Removed marks a partition whose every data file was removed (a
	// delete of whole files, an overwrite) while the manifests still
	// record the removal: it holds no row, and its LastUpdated fields are
	// the removal's. It is listed so that a caller grouping lake
	// partitions (several mapped to one tier partition) sees the change;
	// Live drops it.
	Removed bool `json:"removed,omitempty"`
}

// Live returns the partitions that hold data files (not Removed).
func Live(parts []PartitionStats) []PartitionStats {
	out := make([]PartitionStats, 0, len(parts))
	for _, p := range parts {
		if !p.Removed {
			out = append(out, p)
		}
	}
	return out
}

// Ref returns the reference that selects this partition in ScanOptions.
func (p PartitionStats) Ref() PartitionRef { return PartitionRef{SpecID: p.SpecID, Path: p.Path} }

// PartitionRef identifies a lake partition: a partition spec and a partition
// path under it, as in PartitionStats.
type PartitionRef struct {
	SpecID int    `json:"spec_id"`
	Path   string `json:"path"`
}

// PartitionValue is one field of a partition tuple.
type PartitionValue struct {
	Name      string `json:"name"` // the partition field's name
	FieldID   int    `json:"field_id"`
	SourceID  int    `json:"source_id"`
	Transform string `json:"transform"`
	// Type is the Iceberg type of the value: the transform's result type
	// (int for year, month, hour and bucket; date for day; the source type
	// for identity and truncate).
	Type string `json:"type"`
	// Value is nil for null, else by Type: boolean bool; int int32; long
	// int64; float float32; double float64; date int32 days since 1970-01-01;
	// time int64 microseconds of the day; timestamp and timestamptz int64
	// microseconds since the epoch (UTC); timestamp_ns and timestamptz_ns
	// int64 nanoseconds; string string; uuid string (canonical form);
	// fixed and binary []byte; decimal string (plain decimal notation).
	// year, month and hour values are Iceberg's: units since 1970.
	Value any `json:"value"`
	// Human is Iceberg's human-readable value, as in the partition path
	// ("2024-01-15", "2024-01", "2024-01-15-13", "null").
	Human string `json:"human"`
}

// TimeSource says how PartitionStats.LastUpdatedAt was found.
type TimeSource string

const (
	// TimeFromSnapshot: the snapshot is retained; the time is its commit time.
	TimeFromSnapshot TimeSource = "snapshot"
	// TimeFromSnapshotLog: the snapshot has expired but the metadata's
	// snapshot log still records its commit time.
	TimeFromSnapshotLog TimeSource = "snapshot-log"
	// TimeUpperBound: the snapshot has expired; the time is the commit time of
	// the oldest retained snapshot with a higher sequence number, so the
	// partition was last updated no later than that.
	TimeUpperBound TimeSource = "upper-bound"
	// TimeUnknown: no retained snapshot bounds it (format v1 tables, whose
	// sequence numbers are all 0, after expiry).
	TimeUnknown TimeSource = "unknown"
)

// Partitions returns the partitions of the given snapshot (nil: the current
// one) with their statistics, sorted by spec id and path: those with live
// data files, and those whose data files were all removed while the
// manifests still record it (Removed; Live drops them). A partition
// holding only delete files (they outlive their data files after a
// rewrite, or a delete of whole files under partition evolution) holds no
// row, and a scan requiring it would find no data file (ErrNotFound). A
// table without snapshots has no partitions. The statistics come from the
// manifests alone; no data file is read.
func (l *Lake) Partitions(ctx context.Context, name string, snapshotID *int64) ([]PartitionStats, error) {
	tbl, err := l.loadTable(ctx, name)
	if err != nil {
		return nil, err
	}
	snap, err := resolveSnapshot(name, tbl, snapshotID)
	if err != nil || snap == nil {
		return []PartitionStats{}, err
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, fmt.Errorf("lake: open file IO of %s: %w", name, err)
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return nil, fmt.Errorf("lake: read manifest list of %s snapshot %d: %w", name, snap.SnapshotID, err)
	}
	pt := newPartitionTyper(tbl.Metadata())
	type agg struct {
		stats   PartitionStats
		lastSeq int64
		lastSet bool
		removed bool // a data file's removal is recorded
	}
	byKey := map[PartitionRef]*agg{}
	md := tbl.Metadata()
	// The newest delete file of an unpartitioned spec: a global one, which
	// applies to the data files of every partition (of every spec)
	// written before it (an equality delete) or up to it (a position
	// delete: a merge-on-read delete after the partition fields were
	// dropped), so it changes each of them.
	var globalSeq, globalSnap int64
	globalSet := false
	for _, m := range manifests {
		for entry, err := range m.Entries(fs, false) {
			if err != nil {
				return nil, fmt.Errorf("lake: read manifest %s of %s: %w", m.FilePath(), name, err)
			}
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("lake: partitions of %s: %w", name, err)
			}
			df := entry.DataFile()
			values, path, err := pt.values(int(df.SpecID()), df.Partition())
			if err != nil {
				return nil, fmt.Errorf("lake: partition of %s in %s: %w", df.FilePath(), name, err)
			}
			ref := PartitionRef{SpecID: int(df.SpecID()), Path: path}
			a := byKey[ref]
			if a == nil {
				a = &agg{stats: PartitionStats{SpecID: ref.SpecID, Path: path, Values: values}}
				byKey[ref] = a
			}
			s := &a.stats
			if entry.Status() == iceberg.EntryStatusDELETED {
				// A removal changed the partition: the removing snapshot
				// (the entry's), at its own sequence number. A DELETED
				// entry is written only in a manifest of the removing
				// commit, so the manifest's sequence number is the
				// removal's also once that snapshot has expired (the
				// removal was forgotten then: the identity went back to
				// one already promoted).
				if df.ContentType() == iceberg.EntryContentData {
					a.removed = true
					rmSeq := m.SequenceNum()
					if rm := md.SnapshotByID(entry.SnapshotID()); rm != nil {
						rmSeq = rm.SequenceNumber
					}
					if !a.lastSet || rmSeq > a.lastSeq {
						a.lastSet, a.lastSeq = true, rmSeq
						s.LastUpdatedSnapshotID, s.LastUpdatedSequenceNumber = entry.SnapshotID(), rmSeq
					}
				}
				continue
			}
			switch df.ContentType() {
			case iceberg.EntryContentData:
				s.RecordCount += df.Count()
				s.FileCount++
				s.TotalBytes += df.FileSizeBytes()
			case iceberg.EntryContentPosDeletes:
				s.PositionDeleteRecords += df.Count()
				s.PositionDeleteFiles++
			case iceberg.EntryContentEqDeletes:
				s.EqualityDeleteRecords += df.Count()
				s.EqualityDeleteFiles++
			}
			seq := entry.SequenceNum()
			if fseq := entry.FileSequenceNum(); fseq != nil {
				seq = *fseq
			}
			if df.ContentType() != iceberg.EntryContentData {
				if spec := md.PartitionSpecByID(int(df.SpecID())); spec != nil && spec.IsUnpartitioned() && (!globalSet || seq > globalSeq) {
					globalSet, globalSeq, globalSnap = true, seq, entry.SnapshotID()
				}
			}
			if !a.lastSet || seq > a.lastSeq {
				a.lastSet, a.lastSeq = true, seq
				s.LastUpdatedSnapshotID = entry.SnapshotID()
				s.LastUpdatedSequenceNumber = seq
			}
		}
	}
	out := make([]PartitionStats, 0, len(byKey))
	for _, a := range byKey {
		s := a.stats
		switch {
		case s.FileCount == 0 && a.removed:
			s.Removed = true
		case s.FileCount == 0:
			continue // delete files only: no row
		case globalSet && a.lastSeq < globalSeq:
			// Conservative: a data file written after the delete is not
			// touched by it, but the partition is taken as changed.
			s.LastUpdatedSnapshotID, s.LastUpdatedSequenceNumber = globalSnap, globalSeq
		}
		s.LastUpdatedAt, s.LastUpdatedAtSource = snapshotTime(md, s.LastUpdatedSnapshotID, s.LastUpdatedSequenceNumber)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PartitionStats) int {
		if a.SpecID != b.SpecID {
			return a.SpecID - b.SpecID
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out, nil
}

// snapshotTime finds when snapshot id (sequence number seq) was committed,
// falling back as TimeSource describes once it has expired.
func snapshotTime(meta table.Metadata, id, seq int64) (time.Time, TimeSource) {
	if s := meta.SnapshotByID(id); s != nil {
		return time.UnixMilli(s.TimestampMs).UTC(), TimeFromSnapshot
	}
	for e := range meta.SnapshotLogs() {
		if e.SnapshotID == id {
			return time.UnixMilli(e.TimestampMs).UTC(), TimeFromSnapshotLog
		}
	}
	var bound *table.Snapshot
	for _, s := range meta.Snapshots() {
		if s.SequenceNumber > seq && (bound == nil || s.SequenceNumber < bound.SequenceNumber) {
			bound = &s
		}
	}
	if bound != nil {
		return time.UnixMilli(bound.TimestampMs).UTC(), TimeUpperBound
	}
	return time.Time{}, TimeUnknown
}

// partitionTyper turns the raw partition maps of data files into typed,
// normalized PartitionValues and paths, per spec.
type partitionTyper struct {
	specs map[int]*specTypes
}

type specTypes struct {
	fields []iceberg.PartitionField
	types  []iceberg.Type // result type per field; nil when the source is gone
}

func newPartitionTyper(meta table.Metadata) *partitionTyper {
	pt := &partitionTyper{specs: map[int]*specTypes{}}
	schemas := meta.Schemas()
	// Prefer the current schema, then the newest that has the source column.
	slices.SortFunc(schemas, func(a, b *iceberg.Schema) int { return b.ID - a.ID })
	schemas = append([]*iceberg.Schema{meta.CurrentSchema()}, schemas...)
	for _, spec := range meta.PartitionSpecs() {
		st := &specTypes{}
		for _, f := range spec.Fields() {
			var rt iceberg.Type
			for _, s := range schemas {
				if t, ok := s.FindTypeByID(f.SourceID()); ok {
					rt = f.Transform.ResultType(t)
					break
				}
			}
			st.fields = append(st.fields, f)
			st.types = append(st.types, rt)
		}
		pt.specs[spec.ID()] = st
	}
	return pt
}

func (pt *partitionTyper) values(specID int, raw map[int]any) ([]PartitionValue, string, error) {
	st, ok := pt.specs[specID]
	if !ok {
		return nil, "", fmt.Errorf("unknown partition spec %d", specID)
	}
	values := make([]PartitionValue, 0, len(st.fields))
	var path strings.Builder
	for i, f := range st.fields {
		pv := PartitionValue{Name: f.Name, FieldID: f.FieldID, SourceID: f.SourceID(), Transform: f.Transform.String()}
		t := st.types[i]
		if t != nil {
			pv.Type = t.String()
		}
		v, err := normalizeValue(t, raw[f.FieldID])
		if err != nil {
			return nil, "", fmt.Errorf("partition field %q: %w", f.Name, err)
		}
		pv.Value = v
		pv.Human = humanValue(f.Transform, pv.Type, v)
		values = append(values, pv)
		if i > 0 {
			path.WriteByte('/')
		}
		path.WriteString(url.QueryEscape(f.Name))
		path.WriteByte('=')
		if v != nil && pv.Human == "null" {
			// The value "null" (a string) is not the null value, whose
			// segment is Iceberg's "null": the two partitions would
			// otherwise share a path and be merged. The escape still
			// unescapes to "null".
			path.WriteString("%6Eull")
			continue
		}
		path.WriteString(url.QueryEscape(pv.Human))
	}
	return values, path.String(), nil
}

// normalizeValue converts a partition value as iceberg-go decodes it into the
// representation PartitionValue documents.
func normalizeValue(t iceberg.Type, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	if lit, ok := v.(iceberg.Literal); ok {
		v = lit.Any()
	}
	if t == nil { // dropped source column: keep what we have
		return v, nil
	}
	bad := func() (any, error) { return nil, fmt.Errorf("value %v (%T) does not fit type %s", v, v, t) }
	switch t.(type) {
	case iceberg.BooleanType:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return bad()
	case iceberg.Int32Type:
		if n, ok := asInt64(v); ok {
			return int32(n), nil
		}
		return bad()
	case iceberg.DateType:
		switch x := v.(type) {
		case time.Time:
			return int32(floorDiv(x.Unix(), 86400)), nil
		}
		if n, ok := asInt64(v); ok {
			return int32(n), nil
		}
		return bad()
	case iceberg.Int64Type, iceberg.TimeType, iceberg.TimestampType, iceberg.TimestampTzType,
		iceberg.TimestampNsType, iceberg.TimestampTzNsType:
		switch x := v.(type) {
		case time.Time:
			switch t.(type) {
			case iceberg.TimestampNsType, iceberg.TimestampTzNsType:
				return x.UnixNano(), nil
			case iceberg.TimeType:
				return int64(x.Sub(x.Truncate(24*time.Hour)) / time.Microsecond), nil
			}
			return x.UnixMicro(), nil
		case time.Duration:
			return int64(x / time.Microsecond), nil
		}
		if n, ok := asInt64(v); ok {
			return n, nil
		}
		return bad()
	case iceberg.Float32Type:
		switch x := v.(type) {
		case float32:
			return x, nil
		case float64:
			return float32(x), nil
		}
		return bad()
	case iceberg.Float64Type:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		}
		return bad()
	case iceberg.StringType:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
		return bad()
	case iceberg.UUIDType:
		switch x := v.(type) {
		case uuid.UUID:
			return x.String(), nil
		case [16]byte:
			return uuid.UUID(x).String(), nil
		case []byte:
			u, err := uuid.FromBytes(x)
			if err != nil {
				return bad()
			}
			return u.String(), nil
		case string:
			u, err := uuid.Parse(x)
			if err != nil {
				return bad()
			}
			return u.String(), nil
		}
		return bad()
	case iceberg.FixedType, iceberg.BinaryType:
		switch x := v.(type) {
		case []byte:
			return slices.Clone(x), nil
		case string:
			return []byte(x), nil
		case [16]byte:
			return x[:], nil
		}
		return bad()
	case iceberg.DecimalType:
		dt := t.(iceberg.DecimalType)
		switch x := v.(type) {
		case iceberg.Decimal:
			return x.String(), nil
		case *big.Rat:
			return x.FloatString(dt.Scale()), nil
		case []byte: // unscaled big-endian two's complement
			n := new(big.Int).SetBytes(x)
			if len(x) > 0 && x[0]&0x80 != 0 {
				n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(x))))
			}
			return new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(dt.Scale())), nil)).FloatString(dt.Scale()), nil
		}
		return fmt.Sprint(v), nil
	}
	return v, nil
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case iceberg.Date:
		return int64(x), true
	case iceberg.Time:
		return int64(x), true
	case iceberg.Timestamp:
		return int64(x), true
	case iceberg.TimestampNano:
		return int64(x), true
	}
	return 0, false
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

var epoch = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// humanValue renders a normalized value as Iceberg's human-readable string
// (Transform.ToHumanStrType), which partition paths use.
func humanValue(tr iceberg.Transform, typ string, v any) string {
	if v == nil {
		return "null"
	}
	if _, ok := tr.(iceberg.VoidTransform); ok {
		return "null"
	}
	if n, ok := asInt64(v); ok {
		switch tr.(type) {
		case iceberg.YearTransform:
			return epoch.AddDate(int(n), 0, 0).Format("2006")
		case iceberg.MonthTransform:
			return epoch.AddDate(0, int(n), 0).Format("2006-01")
		case iceberg.DayTransform:
			return epoch.AddDate(0, 0, int(n)).Format("2006-01-02")
		case iceberg.HourTransform:
			return time.Unix(n*3600, 0).UTC().Format("2006-01-02-15")
		}
		switch typ {
		case "date":
			return epoch.AddDate(0, 0, int(n)).Format("2006-01-02")
		case "time":
			return time.UnixMicro(n).UTC().Format("15:04:05.999999")
		case "timestamp":
			return time.UnixMicro(n).UTC().Format("2006-01-02T15:04:05.999999")
		case "timestamptz":
			return time.UnixMicro(n).UTC().Format("2006-01-02T15:04:05.999999") + "+00:00"
		case "timestamp_ns":
			return time.Unix(0, n).UTC().Format("2006-01-02T15:04:05.999999999")
		case "timestamptz_ns":
			return time.Unix(0, n).UTC().Format("2006-01-02T15:04:05.999999999") + "+00:00"
		}
	}
	switch x := v.(type) {
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}
