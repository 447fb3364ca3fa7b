package promoter

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

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
	// Get returns a record; ErrNotFound when there is none.
	Get(ctx context.Context, id string) (Record, error)
	// List returns every record, newest first (by CreatedAt, then ID).
	List(ctx context.Context) ([]Record, error)
}

// EtcdLedger is a Ledger in etcd: one JSON value per record under
// prefix+"/promotions/{id}", updated by compare-and-swap on the key's mod
// revision. With a Leadership every write is fenced: it runs only while
// that term of the promoter's election is current (fencing.Leadership.Txn),
// so a deposed promoter changes nothing.
type EtcdLedger struct {
	cli    *clientv3.Client
	prefix string
	lead   *fencing.Leadership
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
	if r.Revision <= 0 {
		return Record{}, fmt.Errorf("%w: %s has no revision", ErrConflict, r.ID)
	}
	b, err := encodeRecord(r)
	if err != nil {
		return Record{}, err
	}
	k := l.key(r.ID)
	resp, ok, err := l.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", r.Revision)},
		[]clientv3.Op{clientv3.OpPut(k, string(b))},
		[]clientv3.Op{clientv3.OpGet(k, clientv3.WithCountOnly())})
	if err != nil {
		return Record{}, fmt.Errorf("promoter: ledger update %s: %w", r.ID, err)
	}
	if !ok {
		if len(resp.Responses) == 1 && resp.Responses[0].GetResponseRange().GetCount() == 0 {
			return Record{}, fmt.Errorf("%w: promotion %s", ErrNotFound, r.ID)
		}
		return Record{}, fmt.Errorf("%w: %s (revision %d)", ErrConflict, r.ID, r.Revision)
	}
	r.Revision = resp.Header.Revision
	return r, nil
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
		return Record{}, fmt.Errorf("promoter: ledger get %s: %w", id, err)
	}
	r.Revision = resp.Kvs[0].ModRevision
	return r, nil
}

// List implements Ledger.
func (l *EtcdLedger) List(ctx context.Context) ([]Record, error) {
	resp, err := l.cli.Get(ctx, l.dir(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("promoter: ledger list: %w", err)
	}
	out := make([]Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeRecord(strings.TrimPrefix(string(kv.Key), l.dir()), kv.Value)
		if err != nil {
			return nil, fmt.Errorf("promoter: ledger list %s: %w", kv.Key, err)
		}
		r.Revision = kv.ModRevision
		out = append(out, r)
	}
	sortNewestFirst(out)
	return out, nil
}

func sortNewestFirst(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// encodeRecord is the record's JSON (the ledger's stored form).
func encodeRecord(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
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
	recordOptional = []string{"lake_partitions", "txn_id", "error", "retriable", "begun_at", "committed_at"}
)

// decodeRecord parses the record stored under the key of id strictly:
// invalid UTF-8, an unknown, missing, repeated or null member (names match
// exactly), trailing data, a value of the wrong type or out of range, and
// a record of another id are errors that name the member at fault.
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
	if err := strictjson.Members(members, recordMembers, recordOptional); err != nil {
		return fail("%v", err)
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return fail("%v", err)
	}
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
	case r.Retriable && r.Error == "":
		return errors.New("retriable without an error")
	}
	if r.TxnID != "" {
		if err := bulkload.ValidateTxnID(r.TxnID); err != nil {
			return fmt.Errorf("txn_id: %w", err)
		}
	}
	return nil
}
