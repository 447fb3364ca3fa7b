package meta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/fencing"
)

// Transaction budgets. etcd allows 128 operations per transaction level by
// default, and the fencing guard's nesting leaves 127 to the inner one.
const (
	// maxTxnOps bounds the comparisons, and separately the operations, of
	// every transaction this package builds, callers' additions included.
	maxTxnOps = 100
	// sweepBatch is how many keys one drop transaction deletes (one range
	// delete, so one operation).
	sweepBatch = 500
	// snapshotIDBatch is how many snapshot ids one transaction allocates.
	snapshotIDBatch = 64
	// listPage and assignmentPage bound the keys of one read.
	listPage       = 256
	assignmentPage = 8
)

// Guard names the coordinator term a write is made in: the leader key of
// its election and the epoch (the key's create revision). Every etcd
// transaction of a write compares the key's create revision with the epoch
// (fencing.GuardedTxn), so a deposed coordinator changes nothing.
type Guard struct {
	LeaderKey string
	Epoch     fencing.Epoch
}

// GuardOf returns the guard of a leadership term, such as a
// *fencing.Leadership.
func GuardOf(term interface {
	Key() string
	Epoch() fencing.Epoch
}) Guard {
	return Guard{LeaderKey: term.Key(), Epoch: term.Epoch()}
}

// Store reads and writes the tier's metadata under one key prefix. It is
// safe for concurrent use.
type Store struct {
	cli *clientv3.Client
	k   keys
	log *slog.Logger
	now func() time.Time

	testAfterMark func() error // run after a drop has marked its record
}

// Option configures a Store.
type Option func(*Store)

// WithLogger sets the logger of the watches (default: discard).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithClock sets the clock that stamps created_ms, modified_ms and
// started_ms (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns a Store over cli under prefix ("" means DefaultPrefix). The
// prefix starts with "/" and does not end with one.
func New(cli *clientv3.Client, prefix string, opts ...Option) (*Store, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if cli == nil || !strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("%w: new store: prefix %q (want /name, no trailing slash) and a client", ErrInvalid, prefix)
	}
	s := &Store{cli: cli, k: keys{p: prefix}, log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.k.p }

// ElectionPrefix returns {prefix}/coordinator/election, the prefix to elect
// the coordinator under (fencing.Elect).
func (s *Store) ElectionPrefix() string { return s.k.election() }

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// txn runs If(cmps).Then(then).Else(els) guarded by g.
func (s *Store) txn(ctx context.Context, g Guard, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if g.LeaderKey == "" || g.Epoch <= 0 {
		return nil, fmt.Errorf("%w: guard %+v", ErrInvalid, g)
	}
	if len(cmps) > maxTxnOps || len(then) > maxTxnOps || len(els) > maxTxnOps {
		return nil, fmt.Errorf("%w: transaction of %d comparisons, %d and %d operations exceeds %d", ErrInvalid, len(cmps), len(then), len(els), maxTxnOps)
	}
	return fencing.GuardedTxn(ctx, s.cli, g.LeaderKey, g.Epoch, cmps, then, els)
}

// failed reports whether err is a guarded transaction's precondition
// failure, after which resp holds the else branch's responses.
func failed(err error) bool { return errors.Is(err, fencing.ErrPreconditionFailed) }

// count returns the number of keys the i-th else operation found.
func count(resp *clientv3.TxnResponse, i int) int64 {
	return resp.Responses[i].GetResponseRange().GetCount()
}

// decodeKV decodes a stored record.
func decodeKV[T Record](kv *mvccpb.KeyValue) (Versioned[T], error) {
	v, err := Unmarshal[T](kv.Value)
	if err != nil {
		return Versioned[T]{}, fmt.Errorf("%w (key %s)", err, kv.Key)
	}
	return Versioned[T]{Value: v, Rev: kv.ModRevision}, nil
}

// get reads one record; ErrNotFound if the key is absent.
func get[T Record](ctx context.Context, s *Store, key, what string) (Versioned[T], error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Versioned[T]{}, fmt.Errorf("meta: read %s: %w", what, err)
	}
	if len(resp.Kvs) == 0 {
		return Versioned[T]{}, fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	return decodeKV[T](resp.Kvs[0])
}

// list reads every record under prefix at one revision, in key order.
func list[T Record](ctx context.Context, s *Store, prefix string, page int64) ([]Versioned[T], int64, error) {
	var out []Versioned[T]
	rev, err := s.scan(ctx, prefix, page, func(kv *mvccpb.KeyValue) error {
		v, err := decodeKV[T](kv)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

// scan calls fn for every key under prefix, in key order, reading page keys
// at a time all at the revision of the first read, which it returns.
func (s *Store) scan(ctx context.Context, prefix string, page int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, key, opts...)
		if err != nil {
			return 0, fmt.Errorf("meta: list %s: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// readSeq returns the next value of a sequence (1 if it was never used)
// and the mod revision to compare-and-swap it at (0: absent).
func (s *Store) readSeq(ctx context.Context, key string) (next, rev int64, err error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return 0, 0, fmt.Errorf("meta: read sequence %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 1, 0, nil
	}
	next, err = parseSeqValue(key, resp.Kvs[0].Value)
	return next, resp.Kvs[0].ModRevision, err
}

// sweep deletes every key under prefix, sweepBatch keys per guarded
// transaction, each one only while the record at key still has revision
// rev. It is idempotent: an interrupted sweep is finished by the next. Its
// errors are for the caller to prefix.
func (s *Store) sweep(ctx context.Context, g Guard, prefix, key string, rev int64) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.cli.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(sweepBatch))
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		first, last := string(resp.Kvs[0].Key), string(resp.Kvs[len(resp.Kvs)-1].Key)
		_, err = s.txn(ctx, g,
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
			[]clientv3.Op{clientv3.OpDelete(first, clientv3.WithRange(last+"\x00"))}, nil)
		if err != nil {
			return fmt.Errorf("delete %d keys under %s: %w", len(resp.Kvs), prefix, err)
		}
	}
}

// put is an etcd put of a marshalled record.
func put[R Record](key string, r R) (clientv3.Op, error) {
	b, err := Marshal(r)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(key, string(b)), nil
}
