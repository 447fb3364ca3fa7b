package promoterhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/thawdb/thaw/internal/strictjson"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
)

// Duration is a time.Duration that reads and writes JSON as Go's duration
// string ("1.5s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// Item is one target of a plan or of an on-demand request.
type Item struct {
	Policy           string   `json:"policy"`
	Partition        string   `json:"partition"` // tier partition; "" = the whole table
	Action           string   `json:"action"`    // "promote" or "skip"
	Reason           string   `json:"reason,omitempty"`
	PromotionID      string   `json:"promotion_id,omitempty"`
	LakePartitions   []string `json:"lake_partitions,omitempty"`
	SourceSnapshotID int64    `json:"source_snapshot_id"`
	Rows             int64    `json:"rows"`
	Bytes            int64    `json:"bytes"`
	EstimatedBuild   Duration `json:"estimated_build"`
	// Attempt is, for promote, the attempt of PromotionID the promotion
	// will run as; an earlier attempt's record is not its end.
	Attempt int `json:"attempt,omitempty"`
}

// ItemOf converts a plan item.
func ItemOf(it promoter.PlanItem) Item {
	return Item{
		Policy:           it.Key.Policy,
		Partition:        it.Key.Partition,
		Action:           it.Action,
		Reason:           it.Reason,
		PromotionID:      it.PromotionID,
		LakePartitions:   it.LakePartitions,
		SourceSnapshotID: it.SourceSnapshotID,
		Rows:             it.Rows,
		Bytes:            it.Bytes,
		EstimatedBuild:   Duration(it.EstimatedBuild),
		Attempt:          it.Attempt,
	}
}

func itemsOf(its []promoter.PlanItem) []Item {
	out := make([]Item, 0, len(its))
	for _, it := range its {
		out = append(out, ItemOf(it))
	}
	return out
}

// PromoteResponse answers POST /v1/promotions.
type PromoteResponse struct {
	Items []Item `json:"items"`
}

// Plan is a policy's dry-run plan. The totals count the items whose action
// is "promote".
type Plan struct {
	Policy         string         `json:"policy"`
	Catalog        string         `json:"catalog"`
	LakeTable      string         `json:"lake_table"`
	LakeSnapshotID int64          `json:"lake_snapshot_id"`
	Database       string         `json:"database"`
	Table          string         `json:"table"`
	TableExists    bool           `json:"table_exists"`
	WillCreate     bool           `json:"will_create"`
	Buckets        int            `json:"buckets"`
	Schema         kv.TableSchema `json:"schema"`
	Items          []Item         `json:"items"`

	Promote        int      `json:"promote"`
	Skip           int      `json:"skip"`
	Rows           int64    `json:"rows"`
	Bytes          int64    `json:"bytes"`
	EstimatedBuild Duration `json:"estimated_build"`
}

// PlanOf converts a plan and computes its totals.
func PlanOf(p *promoter.Plan) Plan {
	out := Plan{
		Policy: p.Policy, Catalog: p.Catalog, LakeTable: p.LakeTable, LakeSnapshotID: p.LakeSnapshotID,
		Database: p.Database, Table: p.Table, TableExists: p.TableExists, WillCreate: p.WillCreate,
		Buckets: p.Buckets, Schema: p.Schema, Items: itemsOf(p.Items),
	}
	for _, it := range p.Items {
		if it.Action != "promote" {
			out.Skip++
			continue
		}
		out.Promote++
		out.Rows += it.Rows
		out.Bytes += it.Bytes
		// Saturating: each item's estimate may be the largest
		// Duration already.
		out.EstimatedBuild = Duration(min(uint64(out.EstimatedBuild)+uint64(it.EstimatedBuild), math.MaxInt64))
	}
	return out
}

// PlansResponse answers GET /v1/plan.
type PlansResponse struct {
	Plans []Plan `json:"plans"`
	// Errors are the policies a plan of every policy could not plan (their
	// lake or the tier failed them), each with why; the others' plans are
	// in Plans. Absent when every policy planned.
	Errors PlanErrors `json:"errors,omitempty"`
}

// PlanError is a policy that could not be planned, and why.
type PlanError struct {
	Policy string `json:"policy"`
	Error  string `json:"error"`
}

// PlanErrors are the policies a plan of every policy could not plan:
// Client.Plan returns them as its error, with the other policies' plans.
type PlanErrors []PlanError

func (e PlanErrors) Error() string {
	msgs := make([]string, len(e))
	for i, pe := range e {
		msgs[i] = "policy " + pe.Policy + ": " + pe.Error
	}
	return fmt.Sprintf("%d policies could not be planned: %s", len(e), strings.Join(msgs, "; "))
}

// Progress is the live progress of a running promotion.
type Progress struct {
	Phase       string           `json:"phase"`
	RowsRead    int64            `json:"rows_read"`
	BytesRead   int64            `json:"bytes_read"`
	Buckets     []BucketProgress `json:"buckets"`
	BucketsDone int              `json:"buckets_done"`
	Started     time.Time        `json:"started"`
}

// BucketProgress is one bucket's build.
type BucketProgress struct {
	Bucket int   `json:"bucket"`
	Rows   int64 `json:"rows"`
	Bytes  int64 `json:"bytes"`
	Done   bool  `json:"done"`
}

// ProgressOf converts live progress.
func ProgressOf(p promoter.Progress) *Progress {
	out := &Progress{Phase: string(p.Phase), RowsRead: p.RowsRead, BytesRead: p.BytesRead,
		Buckets: make([]BucketProgress, 0, len(p.Buckets)), Started: p.Started}
	for _, b := range p.Buckets {
		out.Buckets = append(out.Buckets, BucketProgress{Bucket: b.Bucket, Rows: b.Rows, Bytes: b.Bytes, Done: b.Done})
		if b.Done {
			out.BucketsDone++
		}
	}
	return out
}

// Promotion is a ledger record and, while it runs, its live progress.
type Promotion struct {
	Record   promoter.Record `json:"record"`
	Progress *Progress       `json:"progress,omitempty"`
	// Skipped: the promotion was requested again after this record was
	// written, and skipped when its turn came (promoter.Promoter.Skipped).
	// A request of a promotion that has no record and was skipped answers
	// GET /v1/promotions/{id} with a conflict naming the reason instead.
	Skipped *promoter.Skip `json:"skipped,omitempty"`
	// Queued: the promotion was requested again after this record was
	// written (its next attempt) and waits in the queue for its turn.
	Queued *QueuedPromotion `json:"queued,omitempty"`
}

// PromotionsResponse answers GET /v1/promotions: the records the promoter
// can read, newest first, the requested promotions waiting in the queue
// (omitted when there is none), and the records it cannot read (omitted
// when there is none). Unreadable lists every such record whatever the
// policy asked for: its policy cannot be read.
type PromotionsResponse struct {
	Promotions []Promotion        `json:"promotions"`
	Queued     []QueuedPromotion  `json:"queued,omitempty"`
	Unreadable []UnreadableRecord `json:"unreadable,omitempty"`
}

// CancelResponse answers DELETE /v1/promotions/{id}: the queued promotion
// withdrawn (where it waited).
type CancelResponse struct {
	Cancelled QueuedPromotion `json:"cancelled"`
}

// CancelledResponse is what `thaw cancel --output json` prints: the
// queued promotions it withdrew.
type CancelledResponse struct {
	Cancelled []QueuedPromotion `json:"cancelled"`
}

// QueuedPromotion is a requested promotion waiting in the queue for its
// turn (promoter.QueuedRequest): it has no record yet, or only the record
// of its earlier attempts.
type QueuedPromotion struct {
	ID        string `json:"id"`
	Policy    string `json:"policy"`
	Database  string `json:"database"`
	Table     string `json:"table"`
	Partition string `json:"partition"`
	// Ahead: keys queued before it; -1: it waits for the promotion of its
	// target that runs.
	Ahead int    `json:"ahead"`
	Where string `json:"where"` // Ahead in words: "next to start", "behind 3 other keys", ...
}

// UnreadableRecord is a ledger record the promoter cannot read (see
// promoter.UnreadableRecordError): of a newer format version — Error then
// says "record version N: this promoter reads versions 1 to M; upgrade it" —
// or corrupt. The promoter leaves it as it is.
type UnreadableRecord struct {
	Key   string `json:"key"`   // its etcd key, {prefix}/promotions/{id}
	Error string `json:"error"` // why it cannot be read
}

// UnreadableOf lists the unreadable records that err reports (as
// promoter.Promoter.Promotions and Client.Promotions report them), in its
// order; nil when there is none.
func UnreadableOf(err error) []UnreadableRecord {
	var out []UnreadableRecord
	for _, u := range promoter.UnreadableRecords(err) {
		why := "unreadable"
		if u.Err != nil {
			why = u.Err.Error()
		}
		out = append(out, UnreadableRecord{Key: u.Key, Error: why})
	}
	return out
}

// unreadableError is the error that Client.Promotions returns for the
// unreadable records of an answer: one *promoter.UnreadableRecordError per
// record, joined (errors.Is promoter.ErrUnreadable); nil when there is none.
func unreadableError(us []UnreadableRecord) error {
	errs := make([]error, 0, len(us))
	for _, u := range us {
		errs = append(errs, &promoter.UnreadableRecordError{Key: u.Key, Err: errors.New(u.Error)})
	}
	return errors.Join(errs...)
}

// PolicyInfo describes a loaded policy.
type PolicyInfo struct {
	Name         string `json:"name"`
	Catalog      string `json:"catalog"`
	LakeTable    string `json:"lake_table"`
	Database     string `json:"database"`
	Table        string `json:"table"`
	Schedule     string `json:"schedule,omitempty"` // cron expression, with " (TZ)" when a time zone is set
	OnLakeCommit bool   `json:"on_lake_commit"`
	OnRequest    bool   `json:"on_request"`
	Doc          string `json:"doc"` // canonical YAML
}

// PolicyInfoOf describes p.
func PolicyInfoOf(p *policies.Policy) PolicyInfo {
	src, dst, tr := p.Source(), p.Target(), p.Triggers()
	info := PolicyInfo{
		Name: p.Name(), Catalog: src.Catalog, LakeTable: src.Table, Database: dst.Database, Table: dst.Table,
		OnLakeCommit: tr.OnLakeCommit, OnRequest: tr.OnRequest, Doc: string(p.Doc()),
	}
	if s := tr.Schedule; s != nil {
		info.Schedule = s.Cron
		if s.TimeZone != "" {
			info.Schedule += " (" + s.TimeZone + ")"
		}
	}
	return info
}

// PoliciesResponse answers GET /v1/policies.
type PoliciesResponse struct {
	Policies []PolicyInfo `json:"policies"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// decodeBody decodes a request body, one JSON object, strictly into v (a
// pointer to a struct whose JSON names are lowercase snake_case): an empty
// body, invalid UTF-8, malformed JSON, anything but an object, an unknown,
// repeated or null member (names match exactly: encoding/json alone
// matches them case-insensitively and keeps the last of repeated ones), a
// value of the wrong type and trailing data are errors for which the
// handler answers 400, naming the problem.
func decodeBody(body []byte, v any) error {
	if len(bytes.Trim(body, " \t\r\n")) == 0 {
		return invalidf("empty request body: want a JSON object")
	}
	if !utf8.Valid(body) {
		return invalidf("request body: invalid utf-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalidf("request body: trailing data after the JSON object")
	}
	members, err := strictjson.Check(body, strictjson.Options{})
	if err == nil && members == nil {
		err = errors.New("not a JSON object")
	}
	if err != nil {
		return invalidf("request body: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if members[k] {
			return invalidf("request body: member %q is null", k)
		}
	}
	return nil
}
