package policies

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Document identity: every policy document carries exactly these.
const (
	APIVersion = "thaw.dev/v1"
	Kind       = "PromotionPolicy"
)

// Bucketing functions a target may use.
const (
	BucketingFluss   = "fluss"
	BucketingPaimon  = "paimon"
	BucketingIceberg = "iceberg"
)

// Duplicate-key policies.
const (
	DuplicateKeysLast  = "last"
	DuplicateKeysError = "error"
)

// Window anchors.
const (
	AnchorNow    = "now"
	AnchorLatest = "latest"
)

// Limits on values. MaxBuckets and MaxReplicationFactor are the tier's
// (kv.MaxBuckets, tierpb.MaxReplicationFactor: a test keeps them equal),
// so that a policy that loads can create its table.
const (
	MaxBuckets           = 4096
	MaxReplicationFactor = 16
	maxNameLen           = 63
	maxTierName          = 200
	maxListItems         = 10000
)

// ErrInvalid is matched (errors.Is) by every *Error and by Errors: the input
// is not a valid policy document.
var ErrInvalid = errors.New("policies: invalid policy")

// Error is one problem in a policy document, at the line and column (both
// 1-based) of the offending YAML node. Field is the dotted path of that node
// ("spec.target.buckets"), empty when the problem is the document itself.
type Error struct {
	File         string
	Line, Column int
	Field        string
	Msg          string
}

// Error renders "file:line:col: field: msg".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is reports ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Errors is every problem found, sorted by file, line and column.
type Errors []*Error

// Error joins the errors with newlines.
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the individual errors, so errors.As finds an *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Is reports ErrInvalid.
func (es Errors) Is(target error) bool { return target == ErrInvalid }

func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		if a.File != b.File {
			return strings.Compare(a.File, b.File)
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// Source is the lake table a policy promotes from.
type Source struct {
	// Catalog names a catalog of the promoter's configuration.
	Catalog string
	// Table is "namespace.table"; the namespace may have several levels
	// ("a.b.events").
	Table string
}

// Split returns the namespace and the table name of Source.Table.
func (s Source) Split() (namespace, table string) {
	i := strings.LastIndexByte(s.Table, '.')
	if i < 0 {
		return "", s.Table
	}
	return s.Table[:i], s.Table[i+1:]
}

// Target is the tier table a policy promotes into.
type Target struct {
	Database, Table string
	// Buckets is the tier bucket count; 0 means "the lake table's Iceberg
	// bucket[N] partition field decides" (the planner fails the plan when
	// the lake table has none).
	Buckets   int
	Bucketing string
	// PrimaryKey overrides the lake table's identifier fields; nil = use them.
	PrimaryKey        []string
	CreateIfMissing   bool
	ReplicationFactor int // 0 = the tier's default
}

// Schedule is a cron trigger: a standard 5-field expression or a descriptor
// (@daily, @every 1h, ...) evaluated in TimeZone (an IANA zone name; "UTC"
// when the document leaves it out).
type Schedule struct {
	Cron, TimeZone string
}

// Triggers say when a policy's partitions are promoted.
type Triggers struct {
	Schedule     *Schedule // nil: no schedule
	OnLakeCommit bool
	OnRequest    bool
}

// Limits bound the work of one policy.
type Limits struct {
	ConcurrentPromotions int
	BuildWorkers         int   // 0 = GOMAXPROCS
	UploadBytesPerSecond int64 // 0 = unlimited
	MemoryBytes          int64 // 0 = the builder's default
}

// Condition is one predicate on a partition field's value. Op is one of eq,
// ne, in, notIn, gt, gte, lt, lte; Values has one element except for in and
// notIn.
type Condition struct {
	Field  string
	Op     string
	Values []string
}

// Window selects partitions whose time range overlaps [anchor-Duration, anchor).
type Window struct {
	Field    string
	Last     string // as written, canonical: "7d", "36h", "2w"
	Duration time.Duration
	Anchor   string // AnchorNow or AnchorLatest
}

// Selection is which partitions a policy selects. A zero Selection is the
// whole table.
type Selection struct {
	Where  []Condition // sorted by field, then op
	Window *Window
	Names  []string
	// Bounds on the lake partition's record count and bytes; a Max of 0 is
	// no bound.
	MinRows, MaxRows   int64
	MinBytes, MaxBytes int64
}

// Policy is a compiled, validated policy. It is immutable: accessors return
// copies. Safe for concurrent use.
type Policy struct {
	name      string
	source    Source
	target    Target
	sel       Selection
	triggers  Triggers
	limits    Limits
	uploadMB  int64
	dupKeys   string
	doc       []byte
	file      string
	line, col int // of metadata.name
}

// Name is metadata.name.
func (p *Policy) Name() string { return p.name }

// Source is spec.source with defaults applied.
func (p *Policy) Source() Source { return p.source }

// Target is spec.target with defaults applied.
func (p *Policy) Target() Target {
	t := p.target
	t.PrimaryKey = slices.Clone(t.PrimaryKey)
	return t
}

// Triggers is spec.triggers with defaults applied.
func (p *Policy) Triggers() Triggers {
	t := p.triggers
	if t.Schedule != nil {
		s := *t.Schedule
		t.Schedule = &s
	}
	return t
}

// Limits is spec.limits with defaults applied.
func (p *Policy) Limits() Limits { return p.limits }

// DuplicateKeys is "last" or "error".
func (p *Policy) DuplicateKeys() string { return p.dupKeys }

// WholeTable reports that the policy has no partition conditions (no where,
// window or names); row and byte bounds may still apply.
func (p *Policy) WholeTable() bool {
	return len(p.sel.Where) == 0 && p.sel.Window == nil && len(p.sel.Names) == 0
}

// Selection is spec.selection.
func (p *Policy) Selection() Selection {
	s := p.sel
	s.Where = make([]Condition, len(p.sel.Where))
	for i, c := range p.sel.Where {
		c.Values = slices.Clone(c.Values)
		s.Where[i] = c
	}
	if s.Window != nil {
		w := *s.Window
		s.Window = &w
	}
	s.Names = slices.Clone(s.Names)
	if len(s.Where) == 0 {
		s.Where = nil
	}
	return s
}

// Doc is the canonical YAML of the policy: every field, defaults filled in,
// in a fixed order. Parsing it gives the same policy.
func (p *Policy) Doc() []byte { return slices.Clone(p.doc) }

// Position is where metadata.name was written.
func (p *Policy) Position() (file string, line, col int) { return p.file, p.line, p.col }
