package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/tier/changelog"
)

func TestWriteAndRead(t *testing.T) {
	e := newEnv(t)
	h, _ := e.host(t)
	r := open(t, h, e.id(0), nil)
	want := map[string]string{}

	batches := [][]Mutation{
		upserts(0, 50, "a"),
		upserts(40, 20, "b"), // overwrites 40..49
		{{Op: OpDelete, Key: key(3)}, {Op: OpDelete, Key: key(999)}, {Op: OpUpsert, Key: key(3), Value: []byte("back")}, {Op: OpDelete, Key: key(4)}},
		{{Op: OpUpsert, Key: []byte("empty-value")}},
	}
	next := int64(0)
	for _, b := range batches {
		if first := write(t, r, b); first != next {
			t.Fatalf("Write returned first offset %d, want %d", first, next)
		}
		next += int64(len(b))
		model(want, b)
	}
	if got := r.AppliedOffset(); got != next-1 {
		t.Fatalf("AppliedOffset = %d, want %d", got, next-1)
	}
	sameContents(t, r, want)

	// The replica's state record is no row: scans (above) and lookups skip it.
	vals, err := r.Lookup(t.Context(), [][]byte{key(3), key(4), key(45), []byte("nope"), []byte("empty-value"), metaKey})
	if err != nil {
		t.Fatal(err)
	}
	if string(vals[0]) != "back" || vals[1] != nil || string(vals[2]) != "v00045-b" || vals[3] != nil || vals[5] != nil {
		t.Fatalf("Lookup = %q", vals)
	}
	if vals[4] == nil || len(vals[4]) != 0 {
		t.Fatalf("Lookup of an empty value = %#v, want a non-nil empty slice", vals[4])
	}
	// Keys out of order and repeated: each answer is its own key's, in the
	// caller's order, and repeats do not share memory.
	keys := [][]byte{key(45), key(3), key(45), []byte("nope"), key(4), key(3), []byte("empty-value"), []byte("empty-value"), []byte("nope"), key(0)}
	if vals, err = r.Lookup(t.Context(), keys); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		w, ok := want[string(k)]
		if got := vals[i]; got == nil && ok || got != nil && (!ok || string(got) != w) {
			t.Errorf("Lookup of %q (%d) = %q; want %q (exists %v)", k, i, got, w, ok)
		}
	}
	vals[0][0] = 'X'
	if string(vals[2]) != "v00045-b" {
		t.Errorf("two answers of one key share memory: %q", vals[2])
	}

	rows, err := r.PrefixLookup(t.Context(), []byte("k0001"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 || string(rows[0].Key) != "k00010" || string(rows[9].Key) != "k00019" {
		t.Fatalf("PrefixLookup k0001 = %d rows %q..", len(rows), rows[0].Key)
	}
	if rows, _ = r.PrefixLookup(t.Context(), []byte("k0001"), 3); len(rows) != 3 {
		t.Fatalf("PrefixLookup limit 3 = %d rows", len(rows))
	}
	if rows, _ = r.PrefixLookup(t.Context(), []byte{0xff, 0xff}, 3); len(rows) != 0 {
		t.Fatalf("PrefixLookup 0xffff = %d rows", len(rows))
	}

	// Paging: every page but the last is full and ends where the next starts.
	page, nextKey, err := r.Scan(t.Context(), nil, 10)
	if err != nil || len(page) != 10 || !bytes.Equal(nextKey, page[9].Key) {
		t.Fatalf("first page: %d rows, next %q, err %v", len(page), nextKey, err)
	}
	page, nextKey, err = r.Scan(t.Context(), key(55), 10)
	if err != nil || len(page) != 4 || nextKey != nil || string(page[0].Key) != "k00056" {
		t.Fatalf("last page: %d rows, next %q, err %v", len(page), nextKey, err)
	}
}

func TestRequestsRejected(t *testing.T) {
	e := newEnv(t)
	h, _ := e.host(t, WithRequestLimits(4, 64))
	r := open(t, h, e.id(0), nil)
	write(t, r, upserts(0, 2, "a"))
	end := logEnd(t, e, r.ID())

	for _, tc := range []struct {
		name string
		muts []Mutation
		want error
	}{
		{"empty batch", nil, ErrInvalidRequest},
		{"too many mutations", upserts(0, 5, "x"), ErrTooLarge},
		{"too many bytes", []Mutation{{Op: OpUpsert, Key: []byte("k"), Value: make([]byte, 63)}}, ErrTooLarge},
		{"empty key", []Mutation{{Op: OpUpsert, Key: key(1), Value: []byte("v")}, {Op: OpUpsert, Value: []byte("v")}}, ErrEmptyKey},
		{"empty key delete", []Mutation{{Op: OpDelete, Key: []byte{}}}, ErrEmptyKey},
		{"unknown op", []Mutation{{Op: 3, Key: key(1)}}, ErrInvalidRequest},
		{"delete with value", []Mutation{{Op: OpDelete, Key: key(1), Value: []byte("v")}}, ErrInvalidRequest},
		{"reserved key", []Mutation{{Op: OpUpsert, Key: metaKey, Value: []byte("v")}}, ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Write(t.Context(), tc.muts); !errors.Is(err, tc.want) {
				t.Fatalf("Write: %v, want %v", err, tc.want)
			}
			if got := logEnd(t, e, r.ID()); got != end {
				t.Fatalf("changelog end moved from %d to %d", end, got)
			}
			if got := r.AppliedOffset(); got != end-1 {
				t.Fatalf("AppliedOffset moved to %d", got)
			}
		})
	}
	// The largest batch that fits is accepted: 1 op + 1 length + 1 key + 61 value bytes.
	write(t, r, []Mutation{{Op: OpUpsert, Key: []byte("k"), Value: make([]byte, 61)}})

	if _, err := r.Lookup(t.Context(), [][]byte{key(1), nil}); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Lookup with an empty key: %v", err)
	}
	if _, err := r.Lookup(t.Context(), make([][]byte, 5)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Lookup of 5 keys: %v", err)
	}
	if _, err := r.PrefixLookup(t.Context(), nil, 1); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("PrefixLookup with an empty prefix: %v", err)
	}
	for _, limit := range []int{0, -1, 5} {
		if _, _, err := r.Scan(t.Context(), nil, limit); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Scan limit %d: %v", limit, err)
		}
	}
	// A record over the changelog's own limit (1 MiB by default) is
	// refused by the changelog, with the same error and nothing written.
	r2 := open(t, e.hostOnly(t), e.id(1), nil)
	if _, err := r2.Write(t.Context(), []Mutation{{Op: OpUpsert, Key: key(1), Value: make([]byte, 3<<19)}}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Write of a 1.5 MiB record: %v", err)
	}
	if r2.AppliedOffset() != -1 || logEnd(t, e, r2.ID()) != 0 {
		t.Fatalf("refused record moved the replica to %d", r2.AppliedOffset())
	}

	if _, err := h.Open(t.Context(), e.id(0), nil); !errors.Is(err, ErrAlreadyOpen) {
		t.Fatalf("second Open: %v", err)
	}
	if _, err := h.Open(t.Context(), e.id(-1), nil); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Open of bucket -1: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write(t.Context(), upserts(0, 1, "z")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if _, err := r.Lookup(t.Context(), [][]byte{key(1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Lookup after Close: %v", err)
	}
}

// A leader and a follower of one bucket on two hosts share the bucket's
// changelog; the follower tails it and converges.
func TestLeaderFollowerConverge(t *testing.T) {
	e := newEnv(t)
	hl, _ := e.host(t)
	hf, _ := e.host(t)
	leader := open(t, hl, e.id(1), nil)
	want := map[string]string{}
	pre := upserts(0, 30, "pre")
	write(t, leader, pre)
	model(want, pre)

	follower := open(t, hf, e.id(1), nil) // replays what is there
	if follower.AppliedOffset() != 29 {
		t.Fatalf("follower opened at %d, want 29", follower.AppliedOffset())
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var followErr error
	wg.Go(func() { followErr = follower.Follow(ctx) })

	var last int64
	for i := range 20 {
		b := upserts(i*7, 10, fmt.Sprint("w", i))
		if i%3 == 0 {
			b = append(b, Mutation{Op: OpDelete, Key: key(i)})
		}
		last = write(t, leader, b) + int64(len(b)) - 1
		model(want, b)
	}
	waitApplied(t, follower, last)
	cancel()
	wg.Wait()
	if followErr != nil {
		t.Fatalf("Follow: %v", followErr)
	}
	sameContents(t, leader, want)
	sameContents(t, follower, want)

	// Close ends a running Follow with ErrClosed.
	errc := make(chan error, 1)
	go func() { errc <- follower.Follow(t.Context()) }()
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Follow after Close: %v", err)
	}
}

// A replica dropped without Close (a crash) is restored elsewhere from its
// latest snapshot plus the changelog: every acknowledged write is there.
func TestKillAndRestore(t *testing.T) {
	e := newEnv(t)
	h1, _ := e.host(t)
	r := open(t, h1, e.id(2), nil)
	want := map[string]string{}
	var md *snapshot.Metadata
	for i := range 6 {
		b := upserts(i*20, 25, fmt.Sprint("b", i))
		b = append(b, Mutation{Op: OpDelete, Key: key(i * 3)})
		write(t, r, b)
		model(want, b)
		if i == 2 {
			md = snap(t, r, 1, nil)
		}
	}
	acked := r.AppliedOffset()
	t.Cleanup(func() { _ = r.Close() }) // only to release its resources at the end

	h2, _ := e.host(t)
	r2 := open(t, h2, e.id(2), md)
	if r2.AppliedOffset() != acked {
		t.Fatalf("restored replica at %d, want %d", r2.AppliedOffset(), acked)
	}
	sameContents(t, r2, want)

	// The restored replica leads on: offsets continue.
	if first := write(t, r2, upserts(500, 1, "after")); first != acked+1 {
		t.Fatalf("first offset after restore %d, want %d", first, acked+1)
	}
	model(want, upserts(500, 1, "after"))

	// Close and reopen empty: the whole changelog is replayed.
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	r3 := open(t, h2, e.id(2), nil)
	sameContents(t, r3, want)
	if err := r3.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// Writers, readers, snapshots and a follower at once (for -race): the end
// state is the model's everywhere, and the last snapshot plus the log
// restores it.
func TestConcurrentUse(t *testing.T) {
	e := newEnv(t)
	hl, _ := e.host(t)
	hf, _ := e.host(t)
	leader := open(t, hl, e.id(3), nil)
	follower := open(t, hf, e.id(3), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var bg sync.WaitGroup
	bg.Go(func() {
		if err := follower.Follow(ctx); err != nil {
			t.Error(err)
		}
	})

	const writers, batches, rows = 3, 15, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				// Writers own disjoint keys, so the end state is known.
				if _, err := leader.Write(ctx, upserts(w*1000+b*rows, rows, "c")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	readerStop := make(chan struct{})
	bg.Go(func() {
		for {
			select {
			case <-readerStop:
				return
			default:
			}
			if _, _, err := leader.Scan(t.Context(), nil, 50); err != nil {
				t.Error(err)
				return
			}
			if _, err := follower.Lookup(t.Context(), [][]byte{key(0), key(1005)}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var last *snapshot.Metadata
	for id := int64(1); id <= 3; id++ {
		md, _, err := leader.Snapshot(ctx, id, last)
		if err != nil {
			t.Fatal(err)
		}
		last = md
	}
	wg.Wait()
	close(readerStop)
	want := map[string]string{}
	for w := range writers {
		model(want, upserts(w*1000, batches*rows, "c"))
	}
	waitApplied(t, follower, leader.AppliedOffset())
	cancel()
	bg.Wait()
	sameContents(t, leader, want)
	sameContents(t, follower, want)

	h3, _ := e.host(t)
	sameContents(t, open(t, h3, e.id(3), last), want)
}

func TestRecordCodec(t *testing.T) {
	for _, m := range []Mutation{
		{Op: OpUpsert, Key: []byte("k"), Value: []byte("value")},
		{Op: OpUpsert, Key: bytes.Repeat([]byte{0xff}, 300), Value: []byte{}},
		{Op: OpDelete, Key: []byte{0}},
	} {
		rec := appendRecord(nil, m)
		if len(rec) != encodedLen(m) {
			t.Fatalf("encodedLen %d, record %d bytes", encodedLen(m), len(rec))
		}
		got, err := decodeRecord(rec)
		if err != nil || got.Op != m.Op || !bytes.Equal(got.Key, m.Key) || !bytes.Equal(got.Value, m.Value) {
			t.Fatalf("round trip of %v: %v, %v", m, got, err)
		}
	}
	if rec := appendRecord(nil, Mutation{Op: OpUpsert, Key: []byte("ab"), Value: []byte("c")}); !bytes.Equal(rec, []byte{1, 2, 'a', 'b', 'c'}) {
		t.Fatalf("record bytes %v", rec)
	}
	for _, bad := range [][]byte{
		nil,
		{3, 1, 'k'},      // unknown op
		{1},              // no key length
		{1, 0},           // empty key
		{1, 5, 'k'},      // key longer than the record
		{2, 1, 'k', 'v'}, // delete with a value
		{1, 0x80},        // truncated varint
		{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // overlong varint
	} {
		if _, err := decodeRecord(bad); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("decodeRecord(%v) = %v", bad, err)
		}
	}
}

// A follower whose next offset lies past the end of a log that a reset
// moved back (emptied by retention, then ResetTo a lower offset by a bulk
// load's restore) stops with ErrOutOfRange, which the tablet server
// answers by restoring it; it was left waiting, and once the new history
// passed its offset it applied that history's records on top of its old
// state. Nor is its state snapshotted while it lies past the log's end.
func TestFollowAcrossLowerReset(t *testing.T) {
	e := newEnv(t)
	id := e.id(0)
	leader := open(t, e.hostOnly(t), id, nil)
	follower := open(t, e.hostOnly(t), id, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	followErr := make(chan error, 1)
	go func() { followErr <- follower.Follow(ctx) }()

	write(t, leader, upserts(0, 100, "old")) // offsets 0..99
	waitApplied(t, follower, 99)
	l := resetLower(t, e, leader, 100, 40)
	if _, _, err := follower.Snapshot(t.Context(), 1, nil); !errors.Is(err, ErrLogGap) {
		t.Fatalf("snapshot of a state past the log's end: %v, want ErrLogGap", err)
	}
	recs := make([][]byte, 0, 100)
	for i := range 100 {
		recs = append(recs, appendRecord(nil, Mutation{Op: OpUpsert, Key: []byte{'n', byte(i)}, Value: []byte("new")}))
	}
	if _, err := l.Append(t.Context(), recs); err != nil { // offsets 40..139
		t.Fatal(err)
	}
	select {
	case err := <-followErr:
		if !errors.Is(err, changelog.ErrOutOfRange) {
			t.Fatalf("Follow across a lower reset: %v, want ErrOutOfRange", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the follower did not stop: applied offset %d, rows %d", follower.AppliedOffset(), follower.RowCount())
	}
	if n := follower.RowCount(); n != 100 {
		t.Fatalf("the follower holds %d rows, want its 100 old ones (nothing of the new history)", n)
	}
}

// resetLower empties the log leader writes below end (a snapshot, then
// retention) and moves it back to offset to (a bulk load's restore, say),
// with leader closed; it returns a handle of the log.
func resetLower(t *testing.T, e *env, leader *Replica, end, to int64) changelog.Log {
	t.Helper()
	if err := leader.TruncateLog(t.Context(), end); err != nil {
		t.Fatal(err)
	}
	id := leader.id
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := e.logs.Open(t.Context(), id.LogID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.ResetTo(t.Context(), to); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFollowStartedAfterLowerReset: a follower that was not waiting when
// the reset moved the log back below its next offset (between two
// iterations, or before Follow started again) stops with ErrOutOfRange
// too; its Wait took the lowered end for the start and waited on.
func TestFollowStartedAfterLowerReset(t *testing.T) {
	e := newEnv(t)
	id := e.id(0)
	leader := open(t, e.hostOnly(t), id, nil)
	follower := open(t, e.hostOnly(t), id, nil)
	write(t, leader, upserts(0, 100, "old")) // offsets 0..99
	fctx, fcancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- follower.Follow(fctx) }()
	waitApplied(t, follower, 99)
	fcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	resetLower(t, e, leader, 100, 40)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := follower.Follow(ctx); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("Follow started after a lower reset: %v, want ErrOutOfRange", err)
	}
}
