package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/lake"
)

func lakeCommands() []command {
	return []command{
		{name: "tables", summary: "list the tables of a namespace (all namespaces by default)", run: runLakeTables},
		{name: "describe", summary: "describe a table: schemas, partition specs, sort order, properties, snapshots", run: runLakeDescribe},
		{name: "partitions", summary: "list a table's partitions with statistics", run: runLakePartitions},
		{name: "scan", summary: "print a table's or partition's rows, deletes applied", run: runLakeScan},
		{name: "sample", summary: "create a sample Iceberg table in a local SQL catalog", run: runLakeSample},
	}
}

// runLake is `thaw lake`: read Apache Iceberg tables.
func runLake(ctx context.Context, stdout io.Writer, args []string) error {
	return dispatch(ctx, "thaw lake", lakeCommands(), args, stdout)
}

// catalogFlags are the flags that select the catalog. Secrets come from a
// config file or the environment, never from flags (they would show in ps).
type catalogFlags struct {
	config, catalog, typ, uri, warehouse, name string
}

func (c *catalogFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "lake config file: a lake.Config as JSON (see docs/lake.md), or a promoter config (YAML), whose catalog --catalog names")
	fs.StringVar(&c.catalog, "catalog", "", `with a promoter --config: which of its catalogs (default: "default", or its only one)`)
	fs.StringVar(&c.typ, "type", "", "catalog type: sql, rest, glue or hive (overrides the config file)")
	fs.StringVar(&c.uri, "uri", "", "catalog URI: a SQLite file, postgres:// URL, REST base URL or thrift:// URL")
	fs.StringVar(&c.warehouse, "warehouse", "", "warehouse location")
	fs.StringVar(&c.name, "catalog-name", "", `catalog name (default "default")`)
}

// lakeConfig builds the config: the file, then flags, then THAW_LAKE_TOKEN,
// THAW_LAKE_CREDENTIAL and THAW_LAKE_PASSWORD from the environment.
func (c *catalogFlags) lakeConfig() (lake.Config, error) {
	var cfg lake.Config
	if c.config != "" {
		var err error
		if cfg, err = c.readConfig(); err != nil {
			return cfg, err
		}
	} else if c.catalog != "" {
		return cfg, usageError("--catalog names a catalog of a promoter --config")
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{{&cfg.Type, c.typ}, {&cfg.URI, c.uri}, {&cfg.Warehouse, c.warehouse}, {&cfg.Name, c.name}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	for _, e := range []struct {
		dst *lake.Secret
		env string
	}{{&cfg.Token, "THAW_LAKE_TOKEN"}, {&cfg.Credential, "THAW_LAKE_CREDENTIAL"}, {&cfg.Password, "THAW_LAKE_PASSWORD"}} {
		if v := os.Getenv(e.env); v != "" {
			*e.dst = lake.Secret(v)
		}
	}
	if c.config == "" && cfg.URI == "" && cfg.Type != lake.CatalogGlue {
		return cfg, usageError("no catalog: give --config or --uri")
	}
	return cfg, nil
}

// readConfig reads --config: a JSON document is a lake.Config; anything
// else is read as a promoter config (strictly, as thaw promoter reads it),
// and --catalog picks one of its catalogs.
func (c *catalogFlags) readConfig() (lake.Config, error) {
	b, err := os.ReadFile(c.config)
	if err != nil {
		return lake.Config{}, fmt.Errorf("read lake config: %w", err)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		if c.catalog != "" {
			return lake.Config{}, usageError("--catalog names a catalog of a promoter config; %s is a lake config (JSON)", c.config)
		}
		cfg, err := lake.DecodeConfigJSON(b)
		if err != nil {
			return cfg, fmt.Errorf("lake config %s: %w", c.config, err)
		}
		return cfg, nil
	}
	// Only the catalog is read: the rest of the promoter config is the
	// promoter's to validate, and the catalog is validated when it opens.
	var pc daemon.PromoterConfig
	if err := daemon.DecodeConfig(bytes.NewReader(b), c.config, &pc); err != nil {
		return lake.Config{}, fmt.Errorf("%w (--config takes a lake config as JSON or a promoter config)", err)
	}
	names := slices.Sorted(maps.Keys(pc.Catalogs))
	if len(names) == 0 {
		return lake.Config{}, usageError("promoter config %s has no catalogs", c.config)
	}
	name := c.catalog
	switch {
	case name != "":
	case len(names) == 1:
		name = names[0]
	default:
		name = "default"
	}
	cfg, ok := pc.Catalogs[name]
	if !ok {
		return cfg, usageError("promoter config %s has no catalog %q (catalogs: %s)", c.config, name, strings.Join(names, ", "))
	}
	return cfg, nil
}

func (c *catalogFlags) open(ctx context.Context) (*lake.Lake, error) {
	cfg, err := c.lakeConfig()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageError("%v", err)
	}
	return lake.Open(ctx, cfg)
}

// tableArg parses the flags, which may come before or after the one TABLE
// argument (or between flags), and returns the table.
func tableArg(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(pos) == 0:
		return "", usageError("%s needs a table (namespace.table)", fs.Name())
	case len(pos) > 1:
		return "", usageError("%s: unexpected arguments: %s", fs.Name(), strings.Join(pos[1:], " "))
	}
	return pos[0], nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func closeLake(l *lake.Lake, err *error) {
	if cerr := l.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

func runLakeTables(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := newFlagSet("thaw lake tables", stdout)
	var cf catalogFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("thaw lake tables takes at most one namespace")
	}
	var ns string
	if len(pos) == 1 {
		ns = pos[0]
	}
	l, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer closeLake(l, &err)
	tables, err := l.Tables(ctx, ns)
	if err != nil {
		return err
	}
	if *asJSON {
		if tables == nil {
			tables = []string{}
		}
		return writeJSON(stdout, tables)
	}
	for _, t := range tables {
		fmt.Fprintln(stdout, t)
	}
	return nil
}

// mappingFlags request the tier mapping of a table.
type mappingFlags struct {
	tier      bool
	buckets   int
	bucketing string
	pk        string
}

func (m *mappingFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&m.tier, "tier", false, "also map the table to a tier schema")
	fs.IntVar(&m.buckets, "buckets", 0, "tier bucket count (taken from an Iceberg bucket field when there is one)")
	fs.StringVar(&m.bucketing, "bucketing", "", "tier bucketing: fluss, paimon or iceberg")
	fs.StringVar(&m.pk, "primary-key", "", "comma-separated tier primary key (default: the identifier fields)")
}

// check refuses mapping flags without --tier (they were ignored) and
// values the mapping would refuse only after the catalog was read.
func (m *mappingFlags) check(cmd string) error {
	if !m.tier && (m.buckets != 0 || m.bucketing != "" || m.pk != "") {
		return usageError("%s: --buckets, --bucketing and --primary-key shape the tier mapping: add --tier", cmd)
	}
	if m.buckets < 0 {
		return usageError("--buckets must not be negative")
	}
	if m.bucketing != "" {
		if _, err := kv.ParseBucketing(m.bucketing); err != nil {
			return usageError("--bucketing: %v", err)
		}
	}
	if slices.Contains(splitList(m.pk), "") {
		return usageError("--primary-key %q: an empty column name", m.pk)
	}
	return nil
}

func (m *mappingFlags) options(snapshot *int64) lake.MappingOptions {
	return lake.MappingOptions{Buckets: m.buckets, Bucketing: m.bucketing, SnapshotID: snapshot, PrimaryKey: splitList(m.pk)}
}

func runLakeDescribe(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw lake describe", "NAMESPACE.TABLE", stdout)
	var cf catalogFlags
	cf.register(fs)
	var mf mappingFlags
	mf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	name, err := tableArg(fs, args)
	if err != nil {
		return err
	}
	if err := mf.check("thaw lake describe"); err != nil {
		return err
	}
	l, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer closeLake(l, &err)
	info, err := l.Describe(ctx, name)
	if err != nil {
		return err
	}
	type tierOut struct {
		Schema  kv.TableSchema        `json:"schema"`
		Mapping lake.PartitionMapping `json:"mapping"`
	}
	var tier *tierOut
	if mf.tier {
		ts, pm, err := lake.MapSchema(info, mf.options(nil))
		if err != nil {
			return err
		}
		tier = &tierOut{Schema: ts, Mapping: pm}
	}
	if *asJSON {
		return writeJSON(stdout, struct {
			*lake.TableInfo
			Tier *tierOut `json:"tier,omitempty"`
		}{info, tier})
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s\nlocation\t%s\nformat\tv%d\nuuid\t%s\nlast updated\t%s\n", info.Name, info.Location, info.FormatVersion, info.UUID, info.LastUpdated.Format(time.RFC3339))
	cur := "none"
	if info.CurrentSnapshotID != nil {
		cur = strconv.FormatInt(*info.CurrentSnapshotID, 10)
	}
	fmt.Fprintf(w, "current snapshot\t%s\n\nschema %d (identifier fields: %s)\n", cur, info.Schema.ID, strings.Join(info.Schema.IdentifierFields, ", "))
	for _, f := range info.Schema.Fields {
		req := "optional"
		if f.Required {
			req = "required"
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\n", f.ID, f.Name, f.Type, req)
	}
	if len(info.Schemas) > 1 {
		fmt.Fprintf(w, "  (%d schemas in all)\n", len(info.Schemas))
	}
	for _, s := range info.Specs {
		marker := ""
		if s.ID == info.Spec.ID {
			marker = " (default)"
		}
		fmt.Fprintf(w, "\npartition spec %d%s\n", s.ID, marker)
		if len(s.Fields) == 0 {
			fmt.Fprintln(w, "  unpartitioned")
		}
		for _, f := range s.Fields {
			fmt.Fprintf(w, "  %d\t%s\t%s(%s)\n", f.FieldID, f.Name, f.Transform, f.Source)
		}
	}
	fmt.Fprintf(w, "\nsort order %d\n", info.SortOrder.ID)
	if len(info.SortOrder.Fields) == 0 {
		fmt.Fprintln(w, "  unsorted")
	}
	for _, f := range info.SortOrder.Fields {
		fmt.Fprintf(w, "  %s(%s)\t%s\t%s\n", f.Transform, f.Source, f.Direction, f.NullOrder)
	}
	fmt.Fprintln(w, "\nproperties")
	for _, k := range sortedKeys(info.Properties) {
		fmt.Fprintf(w, "  %s\t%s\n", k, info.Properties[k])
	}
	fmt.Fprintln(w, "\nsnapshots\n  id\tseq\ttime\toperation\tschema\tadded records\ttotal records")
	for _, s := range info.Snapshots {
		schema := "-"
		if s.SchemaID != nil {
			schema = strconv.Itoa(*s.SchemaID)
		}
		fmt.Fprintf(w, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.SequenceNumber, s.Timestamp.Format(time.RFC3339), s.Operation, schema,
			orDash(s.Summary["added-records"]), orDash(s.Summary["total-records"]))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if tier != nil {
		printTier(stdout, tier.Schema, tier.Mapping)
	}
	return nil
}

func printTier(stdout io.Writer, ts kv.TableSchema, pm lake.PartitionMapping) {
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\ntier schema (from partition spec %d)\n", pm.SpecID)
	for _, c := range ts.Columns {
		null := "NOT NULL"
		if c.Nullable {
			null = "NULL"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", c.Name, c.Type, null)
	}
	fmt.Fprintf(w, "  primary key\t%s\n  partition keys\t%s\n  bucket key\t%s\n  buckets\t%d (%s bucketing)\n",
		strings.Join(ts.PrimaryKey, ", "), orDash(strings.Join(ts.PartitionKeys, ", ")), strings.Join(ts.BucketKey, ", "), ts.Buckets, ts.Bucketing)
	for _, k := range pm.Keys {
		how := "the column itself"
		if k.Derived {
			how = "derived per row"
		}
		fmt.Fprintf(w, "  partition key %s\t= %s(%s)\t%s\n", k.Column, k.Transform, k.Source, how)
	}
	_ = w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func parseSnapshot(s string) (*int64, error) {
	if s == "" {
		return nil, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, usageError("--snapshot %q is not a snapshot id", s)
	}
	return &id, nil
}

func runLakePartitions(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw lake partitions", "NAMESPACE.TABLE", stdout)
	var cf catalogFlags
	cf.register(fs)
	var mf mappingFlags
	mf.register(fs)
	snapshot := fs.String("snapshot", "", "snapshot id (default: the current snapshot)")
	asJSON := fs.Bool("json", false, "print JSON")
	name, err := tableArg(fs, args)
	if err != nil {
		return err
	}
	if err := mf.check("thaw lake partitions"); err != nil {
		return err
	}
	snap, err := parseSnapshot(*snapshot)
	if err != nil {
		return err
	}
	l, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer closeLake(l, &err)
	parts, err := l.Partitions(ctx, name, snap)
	if err != nil {
		return err
	}
	parts = lake.Live(parts) // (those holding rows)
	// With --tier, each partition also gets its tier partition name.
	tierNames := make([]string, len(parts))
	if mf.tier {
		info, err := l.Describe(ctx, name)
		if err != nil {
			return err
		}
		_, pm, err := lake.MapSchema(info, mf.options(snap))
		if err != nil {
			return err
		}
		for i, p := range parts {
			n, err := pm.PartitionName(p)
			if err != nil {
				if !errors.Is(err, lake.ErrNoTierPartition) {
					return err
				}
				n = "(none: " + err.Error() + ")"
			}
			tierNames[i] = n
		}
	}
	if *asJSON {
		type row struct {
			lake.PartitionStats
			TierPartition *string `json:"tier_partition,omitempty"`
		}
		out := make([]row, len(parts))
		for i, p := range parts {
			out[i].PartitionStats = p
			if mf.tier {
				out[i].TierPartition = &tierNames[i]
			}
		}
		return writeJSON(stdout, out)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "SPEC\tPARTITION\tRECORDS (UPPER BOUND)\tFILES\tBYTES\tPOS DELETES\tEQ DELETES\tLAST UPDATED\tSNAPSHOT"
	if mf.tier {
		header += "\tTIER PARTITION"
	}
	fmt.Fprintln(w, header)
	for i, p := range parts {
		path := p.Path
		if path == "" {
			path = "(unpartitioned)"
		}
		when := "unknown"
		if !p.LastUpdatedAt.IsZero() {
			when = p.LastUpdatedAt.Format(time.RFC3339)
			if p.LastUpdatedAtSource == lake.TimeUpperBound {
				when = "<= " + when
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d", p.SpecID, path, p.RecordCount, p.FileCount, p.TotalBytes,
			p.PositionDeleteRecords, p.EqualityDeleteRecords, when, p.LastUpdatedSnapshotID)
		if mf.tier {
			fmt.Fprintf(w, "\t%s", tierNames[i])
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runLakeScan(ctx context.Context, stdout io.Writer, args []string) (err error) {
	fs := tierFlagSet("thaw lake scan", "NAMESPACE.TABLE", stdout)
	var cf catalogFlags
	cf.register(fs)
	snapshot := fs.String("snapshot", "", "snapshot id (default: the current snapshot)")
	var partitions stringList
	fs.Var(&partitions, "partition", "partition path as `lake partitions` prints it, e.g. event_day=2024-01-01 (repeatable; spec given as SPEC:PATH, default the default spec)")
	columns := fs.String("columns", "", "comma-separated columns (default all), printed in the table's order")
	limit := fs.Int("limit", 20, "print at most this many rows (0 = all)")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	name, err := tableArg(fs, args)
	if err != nil {
		return err
	}
	snap, err := parseSnapshot(*snapshot)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usageError("--limit must not be negative")
	}
	cols := splitList(*columns)
	for i, c := range cols {
		switch {
		case c == "":
			return usageError("--columns %q: an empty column name", *columns)
		case slices.Contains(cols[:i], c):
			return usageError("--columns %q: %s given twice", *columns, c)
		}
	}
	l, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer closeLake(l, &err)
	opts := lake.ScanOptions{SnapshotID: snap, Columns: cols}
	if len(partitions) > 0 {
		info, err := l.Describe(ctx, name)
		if err != nil {
			return err
		}
		for _, p := range partitions {
			ref := lake.PartitionRef{SpecID: info.Spec.ID, Path: p}
			if spec, path, ok := strings.Cut(p, ":"); ok {
				id, err := strconv.Atoi(spec)
				if err != nil {
					return usageError("--partition %q: spec %q is not a number", p, spec)
				}
				ref = lake.PartitionRef{SpecID: id, Path: path}
			}
			if err := info.CheckRef(ref); err != nil {
				return usageError("--partition %q: %v (thaw lake partitions %s lists them)", p, err, name)
			}
			opts.Partitions = append(opts.Partitions, ref)
		}
	}
	scanCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	schema, batches, err := l.Scan(scanCtx, name, opts)
	if err != nil {
		return err
	}
	var w *alignedTable
	if !*asJSON {
		names := make([]string, len(schema.Fields()))
		for i, f := range schema.Fields() {
			names[i] = f.Name
		}
		w = newAlignedTable(stdout, names)
	}
	enc := json.NewEncoder(stdout)
	printed := 0
	total := int64(0)
	more := false // a row past --limit was seen
	for rec, err := range batches {
		if err != nil {
			return err
		}
		if *limit > 0 && printed >= *limit {
			// The limit was reached at the end of the last batch: "first"
			// only if another row follows.
			more = rec.NumRows() > 0
			rec.Release()
			if more {
				break
			}
			continue
		}
		total += rec.NumRows()
		printed, err = printRows(w, enc, rec, printed, *limit)
		rec.Release()
		if err != nil {
			return err
		}
		if *limit > 0 && printed >= *limit && total > int64(printed) {
			more = true
			break
		}
	}
	if w != nil {
		if err := w.flush(); err != nil {
			return err
		}
		if more {
			fmt.Fprintf(stdout, "(first %s)\n", plural(printed, "row", "rows"))
		} else {
			fmt.Fprintf(stdout, "(%s)\n", plural(total, "row", "rows"))
		}
	}
	if len(opts.Partitions) > 0 {
		return noteMissingPartitions(ctx, stdout, l, name, snap, opts.Partitions, *asJSON)
	}
	return nil
}

// noteMissingPartitions says which of the partitions a scan named are not
// in the table (a typo reads nothing, which is not an error): on stdout
// after the table, on stderr with --json.
func noteMissingPartitions(ctx context.Context, stdout io.Writer, l *lake.Lake, name string, snap *int64, refs []lake.PartitionRef, asJSON bool) error {
	parts, err := l.Partitions(ctx, name, snap)
	if err != nil {
		return err
	}
	parts = lake.Live(parts)
	w := stdout
	if asJSON {
		w = progressOutput
	}
	for _, ref := range refs {
		if !slices.ContainsFunc(parts, func(p lake.PartitionStats) bool { return p.Ref() == ref }) {
			fmt.Fprintf(w, "(%s has no partition %s in spec %d: thaw lake partitions %s lists them)\n", name, ref.Path, ref.SpecID, name)
		}
	}
	return nil
}

// decimalText is a decimal cell's plain text with its scale's digits
// ("0.0000000001"), as thaw get prints one and put takes it: Arrow's own
// text switches to an exponent below 1e-4 ("1e-10").
func decimalText(col arrow.Array, i int) (string, bool) {
	switch a := col.(type) {
	case *array.Decimal128:
		return kv.DecimalFromBig(a.Value(i).BigInt()).String(int(a.DataType().(*arrow.Decimal128Type).Scale)), true
	case *array.Decimal256:
		return kv.DecimalFromBig(a.Value(i).BigInt()).String(int(a.DataType().(*arrow.Decimal256Type).Scale)), true
	}
	return "", false
}

func printRows(w *alignedTable, enc *json.Encoder, rec arrow.RecordBatch, printed, limit int) (int, error) {
	fields := rec.Schema().Fields()
	for i := range int(rec.NumRows()) {
		if limit > 0 && printed >= limit {
			break
		}
		if w != nil {
			cells := make([]string, len(fields))
			for c := range fields {
				col := rec.Column(c)
				if col.IsNull(i) {
					cells[c] = "null"
				} else if d, ok := decimalText(col, i); ok {
					cells[c] = d
				} else {
					cells[c] = col.ValueStr(i)
				}
			}
			if err := w.line(cells); err != nil {
				return printed, err
			}
		} else {
			obj := make(map[string]any, len(fields))
			for c, f := range fields {
				col := rec.Column(c)
				v := col.GetOneForMarshal(i)
				// NaN and the infinities, which JSON numbers cannot hold,
				// as thaw get prints them (Arrow says "-Inf" of a float32
				// and fails on a float64's).
				var x float64
				switch a := col.(type) {
				case *array.Float32:
					x = float64(a.Value(i))
				case *array.Float64:
					x = a.Value(i)
				}
				if !col.IsNull(i) && (math.IsNaN(x) || math.IsInf(x, 0)) {
					v = nonFiniteText(x)
				}
				if d, ok := decimalText(col, i); ok && !col.IsNull(i) {
					v = d
				}
				obj[f.Name] = v
			}
			if err := enc.Encode(obj); err != nil {
				return printed, err
			}
		}
		printed++
	}
	return printed, nil
}

func runLakeSample(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlagSet("thaw lake sample", stdout)
	dir := fs.String("dir", "", "directory for catalog.db and warehouse/ (required)")
	rows := fs.Int("rows", 10_000, "distinct ids")
	days := fs.Int("days", 7, "day partitions, from 2024-01-01")
	seed := fs.Uint64("seed", 1, "data seed")
	appendOnly := fs.Bool("append-only", false, "only the two initial appends: no updates or deletes")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *dir == "" {
		return usageError("thaw lake sample needs --dir")
	}
	if *rows < 2 || *days < 1 {
		return usageError("thaw lake sample needs --rows >= 2 and --days >= 1")
	}
	start := time.Now()
	info, err := lake.Sample(ctx, lake.SampleOptions{Dir: *dir, Rows: *rows, Days: *days, Seed: *seed, AppendOnly: *appendOnly})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, info)
	}
	fmt.Fprintf(stdout, "created %s in %s (%s)\n", info.Table, *dir, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(stdout, "  catalog   %s (sql on SQLite)\n  warehouse %s\n", info.Config.URI, info.Config.Warehouse)
	fmt.Fprintf(stdout, "  %d live ids, %d rows in a scan, %d day partitions\n", info.Keys, info.Rows, info.Partitions)
	fmt.Fprintf(stdout, "  updated by equality delete + append: %d ids; by append only: %d ids; position-deleted: %d ids\n",
		len(info.UpdatedByDelete), len(info.UpdatedByAppend), len(info.Deleted))
	fmt.Fprintln(stdout, "snapshots:")
	for i, s := range info.Snapshots {
		fmt.Fprintf(stdout, "  %d. %d %-9s %s\n", i+1, s.ID, s.Operation, s.What)
	}
	uri := strings.TrimPrefix(info.Config.URI, "file:")
	fmt.Fprintf(stdout, "try:\n  thaw lake partitions %s --uri %s\n  thaw lake scan %s --uri %s --limit 5\n", info.Table, uri, info.Table, uri)
	return nil
}
