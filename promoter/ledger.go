package promoter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/fencing"
	"github.com/thawdb/thaw/internal/strictjson"
	"github.com/thawdb/thaw/kv"
)

// Ledger stores promotion records durably. Implementations are safe for
// concurrent use.
type Ledger interface {
	// Create stores a new record; ErrExists when its ID exists. The returned
	// record carries the new Revision.
	Create(ctx context.Context, r Record) (Record, error)
	// Update replaces a record if its Revision is still r.Revision
	// (ErrConflict otherwise, ErrNotFound when it is gone).
	Update(ctx context.Context, r Record) (Record, error)
	// Delete removes a record if its Revision is still revision
	// (ErrConflict otherwise, ErrNotFound when it is gone).
	Delete(ctx context.Context, id string, revision int64) error
	// Get returns a record; ErrNotFound when there is none.
	Get(ctx context.Context, id string) (Record, error)
	// List returns every record, newest first (by CreatedAt, then ID).
	// A record it cannot read (corrupt, or of a format this promoter does
	// not read: ErrRecordVersion) is left as it is and reported: List then
	// returns the records it read together with an error that joins one
	// *UnreadableRecordError (errors.Is ErrUnreadable) per such key. Any
	// other error returns no records.
	List(ctx context.Context) ([]Record, error)

	// PutRequests stores on-demand requests (see StoredRequest), each
	// replacing its key's, and returns the revision that stored each. On
	// an error it returns the revisions of those stored before it (a
	// prefix of rs; the rest are not stored).
	PutRequests(ctx context.Context, rs []StoredRequest) ([]int64, error)
	// DeleteRequest removes k's stored request if it is still the one
	// stored at revision rev (a later one stays; none is no error).
	DeleteRequest(ctx context.Context, k Key, rev int64) error
	// Requests returns the stored requests, oldest first, each with its
	// Revision. Like List, requests it cannot read are left as they are
	// and reported in an error joining one *UnreadableRecordError each.
	Requests(ctx context.Context) ([]StoredRequest, error)
}

// LedgerRecordVersion is the newest format version of the ledger records
// this promoter writes (member "version", first); it reads every version
// from 1 to this one. A record without "version" is version 1: what
// promoters wrote before records carried a version, so those keep
// decoding. Version 2 adds the member "interrupted_builds"
// (Record.InterruptedBuilds). A record is written at the lowest version
// that holds it: version 2 only while it counts builds — while one runs
// (it is counted as it begins) and after builds a crash interrupted,
// until a commit clears the count — so promoters that read version 1 only
// keep reading every other record during a rolling upgrade (a record
// being built they refuse with ErrRecordVersion until its build returns).
//
// Records are decoded strictly (a member this promoter does not know is an
// error), so any change of the members — one added, removed, or read
// differently — is a new version. A record of another version is refused
// with ErrRecordVersion, an error naming the version found and the one read
// here, before its members are looked at: a promoter older than the record
// says to upgrade it rather than "unknown member". A promoter that reads
// version N must also read every version below N. What every version
// keeps, so that its version can be read: one JSON object in valid UTF-8,
// member names lowercase snake_case and never repeated, nesting at most 8
// deep, "version" a JSON integer.
const LedgerRecordVersion = 2

var (
	// ErrRecordVersion: a ledger record has a version this promoter does
	// not read (a newer promoter wrote it: upgrade this one).
	ErrRecordVersion = errors.New("promoter: unsupported ledger record version")
	// ErrUnreadable: a ledger record could not be decoded (see
	// UnreadableRecordError). The promoter never writes over it.
	ErrUnreadable = errors.New("promoter: unreadable ledger record")
)

// UnreadableRecordError is a ledger record that could not be decoded: Key
// is its etcd key, Err why (a decode error; errors.Is ErrRecordVersion
// when a newer promoter wrote it). It matches ErrUnreadable.
type UnreadableRecordError struct {
	Key string
	Err error
}

func (e *UnreadableRecordError) Error() string {
	return "promoter: unreadable ledger record " + e.Key + ": " + e.Err.Error()
}

func (e *UnreadableRecordError) Unwrap() error { return e.Err }

// Is makes the error match ErrUnreadable.
func (e *UnreadableRecordError) Is(target error) bool { return target == ErrUnreadable }

// UnreadableRecords returns the unreadable records that err reports (as
// List's error joins them), in its order; nil when there is none.
func UnreadableRecords(err error) []*UnreadableRecordError {
	switch e := err.(type) {
	case nil:
		return nil
	case *UnreadableRecordError:
		return []*UnreadableRecordError{e}
	case interface{ Unwrap() []error }:
		var out []*UnreadableRecordError
		for _, w := range e.Unwrap() {
			out = append(out, UnreadableRecords(w)...)
		}
		return out
	case interface{ Unwrap() error }:
		return UnreadableRecords(e.Unwrap())
	}
	return nil
}

// EtcdLedger is a Ledger in etcd: one JSON value per record under
// prefix+"/promotions/{id}" (stored requests under prefix+"/requests/"), updated by compare-and-swap on the key's mod
// revision. With a Leadership every write is fenced: it runs only while
// that term of the promoter's election is current (fencing.Leadership.Txn),
// so a deposed promoter changes nothing.
type EtcdLedger struct {
	cli    *clientv3.Client
	prefix string
	lead   *fencing.Leadership

	// decoded memoizes List's decoding by key: a key at the same mod
	// revision holds the same bytes, so only records written since the
	// last List are read and decoded again (strict decoding is ~45 µs a
	// record: BenchmarkEtcdLedgerList).
	mu      sync.Mutex
	decoded map[string]decodedRecord

	afterKeys func() // test hook: runs between a List's two reads
}

// decodedRecord is one key's decoding at a mod revision: the record, or
// why it could not be read.
type decodedRecord struct {
	rev int64
	rec Record
	err error
}

var _ Ledger = (*EtcdLedger)(nil)

// NewEtcdLedger returns a ledger under prefix (e.g. "/thaw/promoter"),
// fenced by lead when it is not nil.
func NewEtcdLedger(cli *clientv3.Client, prefix string, lead *fencing.Leadership) *EtcdLedger {
	return &EtcdLedger{cli: cli, prefix: prefix, lead: lead}
}

func (l *EtcdLedger) dir() string { return l.prefix + "/promotions/" }

func (l *EtcdLedger) key(id string) string { return l.dir() + id }

// txn runs If(cmps).Then(then).Else(els), fenced when the ledger has a
// leadership. It reports whether cmps held.
func (l *EtcdLedger) txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, bool, error) {
	if l.lead == nil {
		resp, err := l.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return nil, false, err
		}
		return resp, resp.Succeeded, nil
	}
	resp, err := l.lead.Txn(ctx, cmps, then, els)
	switch {
	case errors.Is(err, fencing.ErrPreconditionFailed):
		return resp, false, nil
	case err != nil:
		return nil, false, err
	}
	return resp, true, nil
}

// Create implements Ledger.
func (l *EtcdLedger) Create(ctx context.Context, r Record) (Record, error) {
	if err := validID(r.ID); err != nil {
		return Record{}, err
	}
	b, err := encodeRecord(r)
	if err != nil {
		return Record{}, err
	}
	k := l.key(r.ID)
	resp, ok, err := l.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(k, string(b))}, nil)
	if err != nil {
		return Record{}, fmt.Errorf("promoter: ledger create %s: %w", r.ID, err)
	}
	if !ok {
		return Record{}, fmt.Errorf("%w: %s", ErrExists, r.ID)
	}
	r.Revision = resp.Header.Revision
	return r, nil
}

// Update implements Ledger.
func (l *EtcdLedger) Update(ctx context.Context, r Record) (Record, error) {
	if err := validID(r.ID); err != nil {
		return Record{}, err
	}
	b, err := encodeRecord(r)
	if err != nil {
		return Record{}, err
	}
	rev, err := l.casOp(ctx, "update", r.ID, r.Revision, clientv3.OpPut(l.key(r.ID), string(b)))
	if err != nil {
		return Record{}, err
	}
	r.Revision = rev
	return r, nil
}

// Delete implements Ledger.
func (l *EtcdLedger) Delete(ctx context.Context, id string, revision int64) error {
	if err := validID(id); err != nil {
		return err
	}
	_, err := l.casOp(ctx, "delete", id, revision, clientv3.OpDelete(l.key(id)))
	return err
}

// casOp runs op on the record id if its key is still at mod revision rev
// and returns the revision it wrote: ErrConflict when the record changed
// since, ErrNotFound when it is gone.
func (l *EtcdLedger) casOp(ctx context.Context, what, id string, rev int64, op clientv3.Op) (int64, error) {
	if rev <= 0 {
		return 0, fmt.Errorf("%w: %s has no revision", ErrConflict, id)
	}
	k := l.key(id)
	resp, ok, err := l.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", rev)},
		[]clientv3.Op{op},
		[]clientv3.Op{clientv3.OpGet(k, clientv3.WithCountOnly())})
	if err != nil {
		return 0, fmt.Errorf("promoter: ledger %s %s: %w", what, id, err)
	}
	if !ok {
		if len(resp.Responses) == 1 && resp.Responses[0].GetResponseRange().GetCount() == 0 {
			return 0, fmt.Errorf("%w: promotion %s", ErrNotFound, id)
		}
		return 0, fmt.Errorf("%w: %s (revision %d)", ErrConflict, id, rev)
	}
	return resp.Header.Revision, nil
}

// Get implements Ledger.
func (l *EtcdLedger) Get(ctx context.Context, id string) (Record, error) {
	if err := validID(id); err != nil {
		return Record{}, fmt.Errorf("%w: promotion %q", ErrNotFound, id)
	}
	resp, err := l.cli.Get(ctx, l.key(id))
	if err != nil {
		return Record{}, fmt.Errorf("promoter: ledger get %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return Record{}, fmt.Errorf("%w: promotion %s", ErrNotFound, id)
	}
	r, err := decodeRecord(id, resp.Kvs[0].Value)
	if err != nil {
		return Record{}, &UnreadableRecordError{Key: string(resp.Kvs[0].Key), Err: err}
	}
	r.Revision = resp.Kvs[0].ModRevision
	return r, nil
}

// List implements Ledger. Once an earlier List has decoded the records,
// it reads the keys and their mod revisions only and fetches, at the same
// revision, the values of the few keys that changed (more than
// maxChangedGets: every value again).
func (l *EtcdLedger) List(ctx context.Context) ([]Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kvs, err := l.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("promoter: ledger list: %w", err)
	}
	out := make([]Record, 0, len(kvs))
	var unreadable []error
	seen := make(map[string]decodedRecord, len(kvs))
	for _, kv := range kvs {
		k := string(kv.Key)
		d, ok := l.decoded[k]
		if !ok || d.rev != kv.ModRevision {
			d = decodedRecord{rev: kv.ModRevision}
			d.rec, d.err = decodeRecord(strings.TrimPrefix(k, l.dir()), kv.Value)
			d.rec.Revision = kv.ModRevision
		}
		seen[k] = d
		if d.err != nil {
			unreadable = append(unreadable, &UnreadableRecordError{Key: k, Err: d.err})
			continue
		}
		out = append(out, cloneRecord(d.rec))
	}
	l.decoded = seen // keys gone from etcd are forgotten
	sortNewestFirst(out)
	return out, errors.Join(unreadable...)
}

// maxChangedGets bounds the single-key reads of a List; with more changed
// keys it reads every value in one range.
const maxChangedGets = 32

// read returns the ledger's keys as of one revision, each with its value
// unless l.decoded holds its decoding at its mod revision. l.mu is held.
func (l *EtcdLedger) read(ctx context.Context) ([]*mvccpb.KeyValue, error) {
	if len(l.decoded) > 0 {
		kvs, ok, err := l.readChanged(ctx)
		if err != nil || ok {
			return kvs, err
		}
	}
	resp, err := l.cli.Get(ctx, l.dir(), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	return resp.Kvs, nil
}

// readChanged reads the keys only, then the values of the keys whose
// decoding is not memoized, at the keys' revision. It reports false when
// more than maxChangedGets changed or that revision has been compacted
// meanwhile: the caller reads everything.
func (l *EtcdLedger) readChanged(ctx context.Context) ([]*mvccpb.KeyValue, bool, error) {
	keys, err := l.cli.Get(ctx, l.dir(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, false, err
	}
	if l.afterKeys != nil {
		l.afterKeys()
	}
	var changed []int
	for i, kv := range keys.Kvs {
		if d, ok := l.decoded[string(kv.Key)]; !ok || d.rev != kv.ModRevision {
			changed = append(changed, i)
		}
	}
	if len(changed) > maxChangedGets {
		return nil, false, nil
	}
	rev := keys.Header.Revision
	for _, i := range changed {
		want := keys.Kvs[i]
		resp, err := l.cli.Get(ctx, string(want.Key), clientv3.WithRev(rev))
		switch {
		case errors.Is(err, rpctypes.ErrCompacted):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		case len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != want.ModRevision:
			// At one revision a key cannot change: etcd broke its promise.
			return nil, false, fmt.Errorf("key %s at revision %d: %d values, mod revision %d then %d",
				want.Key, rev, len(resp.Kvs), want.ModRevision, modRevision(resp.Kvs))
		}
		keys.Kvs[i] = resp.Kvs[0]
	}
	return keys.Kvs, true, nil
}

func modRevision(kvs []*mvccpb.KeyValue) int64 {
	if len(kvs) == 0 {
		return 0
	}
	return kvs[0].ModRevision
}

// cloneRecord copies r so that the caller may change it, reference members
// included (TestEtcdLedgerListCopies fails when Record gains one it does
// not copy).
func cloneRecord(r Record) Record {
	r.LakePartitions = slices.Clone(r.LakePartitions)
	if r.BegunAt != nil {
		t := *r.BegunAt
		r.BegunAt = &t
	}
	if r.CommittedAt != nil {
		t := *r.CommittedAt
		r.CommittedAt = &t
	}
	return r
}

func sortNewestFirst(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// storedRecord is the ledger's stored form of a record: the format
// version, then the record's members.
type storedRecord struct {
	Version int `json:"version"`
	Record
}

// encodeRecord is the record's JSON (the ledger's stored form), of the
// lowest version that holds it (see LedgerRecordVersion).
func encodeRecord(r Record) ([]byte, error) {
	b, err := json.Marshal(storedRecord{Version: r.version(), Record: r})
	if err != nil {
		return nil, fmt.Errorf("promoter: encode record %s: %w", r.ID, err)
	}
	return b, nil
}

// Members of a stored record: recordMembers are always written,
// recordOptional only when not empty.
var (
	recordMembers = []string{
		"id", "policy", "catalog", "lake_table", "partition", "source_snapshot_id", "scan_snapshot_id",
		"database", "table", "caller_token", "attempt", "phase", "buckets", "rows", "bytes", "duplicates",
		"created_at", "updated_at",
	}
	recordOptional = []string{"version", "lake_partitions", "txn_id", "error", "retriable", "begun_at", "committed_at", "interrupted_builds"}
)

// version is the lowest record version that holds r: 2 with interrupted
// builds, else 1.
func (r Record) version() int {
	if r.InterruptedBuilds != 0 {
		return 2
	}
	return 1
}

// recordVersionError is a record of a version this promoter does not read.
type recordVersionError struct {
	found string // the version's JSON number, as stored
}

func (e *recordVersionError) Error() string {
	return fmt.Sprintf("decode record: record version %s: this promoter reads versions 1 to %d; upgrade it", e.found, LedgerRecordVersion)
}

func (e *recordVersionError) Is(target error) bool { return target == ErrRecordVersion }

// checkVersion checks the member "version" of a record that strictjson.Check
// accepted (its names are exact) and returns the version: absent is 1; 1
// to LedgerRecordVersion are read; another positive integer is a
// recordVersionError; anything else an error naming the member.
func checkVersion(b []byte, members map[string]bool) (int, error) {
	if _, ok := members["version"]; !ok {
		return 1, nil
	}
	var v struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("decode record: member \"version\": %w", err)
	}
	raw := string(v.Version)
	positive := raw != "" && raw[0] >= '1' && raw[0] <= '9'
	for _, c := range []byte(raw) {
		positive = positive && c >= '0' && c <= '9'
	}
	if !positive {
		return 0, fmt.Errorf("decode record: member \"version\": %s is not a positive integer", abbreviate(raw))
	}
	for n := 1; n <= LedgerRecordVersion; n++ {
		if raw == strconv.Itoa(n) {
			return n, nil
		}
	}
	return 0, &recordVersionError{found: abbreviate(raw)}
}

// recordTimes are the members of a record that hold times.
var recordTimes = []string{"created_at", "updated_at", "begun_at", "committed_at"}

// checkTimes checks that each time member a record holds is a JSON string
// with an RFC 3339 time, and names the member when one is not (the JSON
// decoder's time errors do not). Only a record the decoder refused is
// parsed again for it.
func checkTimes(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, k := range recordTimes {
		v, ok := raw[k]
		if !ok {
			continue
		}
		var str string
		if err := json.Unmarshal(v, &str); err != nil {
			return fmt.Errorf("member %q: %s is not a time (an RFC 3339 string)", k, abbreviate(string(v)))
		}
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			return fmt.Errorf("member %q: %q is not an RFC 3339 time", k, abbreviate(str))
		}
	}
	return nil
}

// abbreviate shortens a stored value quoted in an error to 32 bytes and
// an ellipsis.
func abbreviate(s string) string { return shorten(s, 32) }

// shorten cuts s to at most limit bytes, at a rune boundary, and marks the
// cut with an ellipsis.
func shorten(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// decodeRecord parses the record stored under the key of id strictly:
// invalid UTF-8, an unknown, missing, repeated or null member (names match
// exactly), trailing data, a value of the wrong type or out of range, and
// a record of another id are errors that name the member at fault. The
// version (see LedgerRecordVersion) is checked once the document is known
// to be one JSON object with exact names and before its members: a record
// of another version is a recordVersionError (errors.Is ErrRecordVersion)
// whatever its members.
func decodeRecord(id string, b []byte) (Record, error) {
	fail := func(format string, args ...any) (Record, error) {
		return Record{}, fmt.Errorf("decode record: %s", fmt.Sprintf(format, args...))
	}
	// A record is two levels deep.
	members, err := strictjson.Check(b, strictjson.Options{MaxDepth: 8})
	if err != nil {
		return fail("%v", err)
	}
	if members == nil {
		return fail("not a JSON object")
	}
	version, err := checkVersion(b, members)
	if err != nil {
		return Record{}, err
	}
	if err := strictjson.Members(members, recordMembers, recordOptional); err != nil {
		return fail("%v", err)
	}
	if _, ok := members["interrupted_builds"]; ok && version < 2 {
		return fail("member \"interrupted_builds\" in a record of version %d (it came with version 2)", version)
	}
	var s storedRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// Name the member, not the Go types of the stored form.
			return fail("member %q: %s is not %s", strings.TrimPrefix(te.Field, "Record."), te.Value, te.Type)
		}
		// The decoder's time errors do not say which member; find it.
		if terr := checkTimes(b); terr != nil {
			return fail("%v", terr)
		}
		return fail("%v", err)
	}
	r := s.Record
	if err := r.validate(); err != nil {
		return fail("%v", err)
	}
	if r.ID != id {
		return fail("record %s stored under the key of %s", r.ID, id)
	}
	return r, nil
}

// validate checks the values of a stored record: the forms and ranges
// that the executor writes.
func (r Record) validate() error {
	if validID(r.ID) != nil {
		return fmt.Errorf("id %q is not p- and 16 lowercase hex digits", r.ID)
	}
	switch r.Phase {
	case PhasePlanned, PhaseBegun, PhaseBuilding, PhaseCommitting, PhaseCommitted, PhaseAborted, PhaseFailed:
	default:
		return fmt.Errorf("phase %q is not one of planned, begun, building, committing, committed, aborted, failed", r.Phase)
	}
	switch {
	case r.Attempt < 1:
		return fmt.Errorf("attempt %d below 1", r.Attempt)
	case r.Buckets < 0 || r.Buckets > kv.MaxBuckets:
		return fmt.Errorf("buckets %d not in 0..%d", r.Buckets, kv.MaxBuckets)
	case r.Rows < 0:
		return fmt.Errorf("rows %d negative", r.Rows)
	case r.Bytes < 0:
		return fmt.Errorf("bytes %d negative", r.Bytes)
	case r.Duplicates < 0:
		return fmt.Errorf("duplicates %d negative", r.Duplicates)
	case r.InterruptedBuilds < 0:
		return fmt.Errorf("interrupted_builds %d negative", r.InterruptedBuilds)
	case r.Retriable && r.Error == "":
		return errors.New("retriable without an error")
	}
	if r.TxnID != "" {
		if err := bulkload.ValidateTxnID(r.TxnID); err != nil {
			return fmt.Errorf("txn_id: %w", err)
		}
	}
	if r.LakePartitions != nil && len(r.LakePartitions) == 0 {
		return errors.New("lake_partitions [] (an empty list is written as nothing)")
	}
	for i, ref := range r.LakePartitions {
		// "spec/path" (partitionRefString); a null element decodes as "".
		spec, _, ok := strings.Cut(ref, "/")
		if n, err := strconv.Atoi(spec); !ok || err != nil || n < 0 || strconv.Itoa(n) != spec {
			return fmt.Errorf("lake_partitions[%d] %q is not spec/path", i, abbreviate(ref))
		}
	}
	return nil
}
