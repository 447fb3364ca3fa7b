package kafkalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/thawdb/thaw/tier/changelog"
)

// brokers starts a kfake cluster (a Kafka that speaks the real protocol)
// with n brokers.
func brokers(t testing.TB, n int) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// provider is one host's Provider over the cluster.
func provider(t testing.TB, addrs []string, mods ...func(*Config)) *Provider {
	t.Helper()
	cfg := Config{Brokers: addrs, PollInterval: 50 * time.Millisecond, MaxBatchBytes: 64 << 10}
	for _, m := range mods {
		m(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func open(t testing.TB, p *Provider, id changelog.BucketLogID) changelog.Log {
	t.Helper()
	l, err := p.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func rec(off int64, n int) []byte {
	b := fmt.Appendf(nil, "record-%06d:", off)
	for len(b) < n {
		b = append(b, byte('a'+off%26))
	}
	return b
}

func appendN(t *testing.T, l changelog.Log, from int64, sizes ...int) [][]byte {
	t.Helper()
	var all [][]byte
	next := from
	for _, n := range sizes {
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = rec(next+int64(i), 40)
		}
		first, err := l.Append(t.Context(), batch)
		if err != nil || first != next {
			t.Fatalf("append of %d at %d: %d, %v", n, next, first, err)
		}
		next += int64(n)
		all = append(all, batch...)
	}
	return all
}

func offsets(t *testing.T, l changelog.Log, start, end int64) {
	t.Helper()
	s, e, err := l.Offsets(t.Context())
	if err != nil || s != start || e != end {
		t.Fatalf("offsets: [%d, %d), %v; want [%d, %d)", s, e, err, start, end)
	}
}

// readAll reads [from, end) in reads of maxBytes and checks every record.
func readAll(t *testing.T, l changelog.Log, from int64, maxBytes int, want [][]byte) {
	t.Helper()
	next := from
	for next < from+int64(len(want)) {
		recs, err := l.Read(t.Context(), next, maxBytes)
		if err != nil || len(recs) == 0 {
			t.Fatalf("read at %d: %d records, %v", next, len(recs), err)
		}
		for _, r := range recs {
			if r.Offset != next || !bytes.Equal(r.Data, want[next-from]) {
				t.Fatalf("record %d: offset %d %q, want %q", next, r.Offset, r.Data, want[next-from])
			}
			next++
		}
	}
}

// TestConformance: the contract every changelog.Log keeps (the same checks
// as changelog's TestLogConformance).
func TestConformance(t *testing.T) {
	ctx := t.Context()
	l := open(t, provider(t, brokers(t, 1)), changelog.BucketLogID{TableID: 1})
	offsets(t, l, 0, 0)
	var want [][]byte
	for i := range 20 {
		batch := [][]byte{rec(int64(len(want)), 100), rec(int64(len(want)+1), 100)}
		first, err := l.Append(ctx, batch)
		if err != nil || first != int64(2*i) {
			t.Fatalf("append %d: %d, %v", i, first, err)
		}
		want = append(want, batch...)
	}
	readAll(t, l, 0, 500, want)
	if end, err := l.Wait(ctx, 39); err != nil || end != 40 {
		t.Fatalf("wait: %d, %v", end, err)
	}
	if _, err := l.Read(ctx, 41, 10); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if recs, err := l.Read(ctx, 40, 10); err != nil || len(recs) != 0 {
		t.Fatalf("read at end: %d records, %v", len(recs), err)
	}
	if err := l.TruncateBefore(ctx, 40); err != nil {
		t.Fatal(err)
	}
	offsets(t, l, 40, 40)
	if err := l.ResetTo(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if first, err := l.Append(ctx, [][]byte{{1}}); err != nil || first != 100 {
		t.Fatalf("append after reset: %d, %v", first, err)
	}
	if err := l.ResetTo(ctx, 200); !errors.Is(err, changelog.ErrNotEmpty) {
		t.Fatalf("reset of a non-empty log: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Offsets(ctx); !errors.Is(err, changelog.ErrClosed) {
		t.Fatalf("offsets after close: %v", err)
	}
}

// TestHosts: what one host's handle appends, another host's handle (its
// own client) waits for and reads, a batch at a time within maxBytes and
// from inside a batch; a handle opened later finds the same log.
func TestHosts(t *testing.T) {
	addrs := brokers(t, 3)
	id := changelog.BucketLogID{TableID: 7, Partitioned: true, PartitionID: 3, Bucket: 5}
	a, b := provider(t, addrs), provider(t, addrs)
	if got := a.Topic(id); got != "thaw.changelog.t7.p3.b5" {
		t.Fatalf("topic %q", got)
	}
	la, lb := open(t, a, id), open(t, b, id)
	offsets(t, lb, 0, 0)

	woke := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		end, err := lb.Wait(ctx, 2)
		if err == nil && end < 3 {
			err = fmt.Errorf("woke at end %d", end)
		}
		woke <- err
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-woke:
		t.Fatalf("wait returned before any append: %v", err)
	default:
	}
	want := appendN(t, la, 0, 3, 1, 5, 2)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	offsets(t, lb, 0, 11)
	readAll(t, lb, 0, 1, want)        // a batch at a time
	readAll(t, lb, 4, 1000, want[4:]) // from inside a batch, several batches
	readAll(t, lb, 6, 120, want[6:])
	// A read's first batch comes whole however small maxBytes is; the
	// next batch only if it fits.
	recs, err := lb.Read(t.Context(), 4, 1)
	if err != nil || len(recs) != 5 {
		t.Fatalf("read at 4: %d records, %v; want the 5 of its batch", len(recs), err)
	}
	lc := open(t, provider(t, addrs), id)
	offsets(t, lc, 0, 11)
	readAll(t, lc, 9, 10, want[9:])
	// The second host appends now (it becomes leader): the first reads it.
	more := appendN(t, lb, 11, 2)
	readAll(t, la, 11, 10, more)
	appendN(t, la, 13, 1) // having read them, the first appends after them
	offsets(t, lc, 0, 14)
}

// TestStaleWriter: a deposed leader's append lands in Kafka after the new
// leader's; it is refused to its writer (ErrConflict) and no reader ever
// returns it; its writer's retry continues the log.
func TestStaleWriter(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 2}
	old, cur, reader := open(t, provider(t, addrs), id), open(t, provider(t, addrs), id), open(t, provider(t, addrs), id)
	want := appendN(t, old, 0, 2)
	want = append(want, appendN(t, cur, 2, 3)...) // cur syncs first: appends at 2
	stale := [][]byte{[]byte("stale write")}
	_, err := old.Append(t.Context(), stale)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale append: %v", err)
	}
	want = append(want, appendN(t, cur, 5, 1)...)
	// old learnt of [2, 5) from its conflict, not of 5: it conflicts again.
	if _, err := old.Append(t.Context(), stale); !errors.Is(err, ErrConflict) {
		t.Fatalf("second stale append: %v", err)
	}
	want = append(want, appendN(t, old, 6, 2)...) // now its retry continues the log
	offsets(t, reader, 0, 8)
	readAll(t, reader, 0, 1<<20, want)
	for from := range int64(8) {
		recs, err := reader.Read(t.Context(), from, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if bytes.Equal(r.Data, stale[0]) {
				t.Fatalf("stale record returned at %d", r.Offset)
			}
		}
	}
}

// TestTruncateReset: truncation drops whole Kafka records below the batch
// holding the offset, and other handles see the new start; emptying keeps
// the end; a reset moves an empty log up, never down; a restarted handle
// finds all of it.
func TestTruncateReset(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 3, Bucket: 1}
	l, other := open(t, provider(t, addrs), id), open(t, provider(t, addrs), id)
	ctx := t.Context()
	want := appendN(t, l, 0, 4, 4, 4)
	offsets(t, other, 0, 12)
	if err := l.TruncateBefore(ctx, 6); err != nil {
		t.Fatal(err)
	}
	offsets(t, l, 4, 12) // the batch [4, 8) holds 6: it stays whole
	offsets(t, other, 4, 12)
	if _, err := other.Read(ctx, 3, 100); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("read below the start: %v", err)
	}
	readAll(t, other, 5, 100, want[5:])
	if err := l.TruncateBefore(ctx, 13); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("truncate past the end: %v", err)
	}
	if err := l.TruncateBefore(ctx, 2); err != nil {
		t.Fatalf("truncate below the start: %v", err)
	}
	if err := l.ResetTo(ctx, 20); !errors.Is(err, changelog.ErrNotEmpty) {
		t.Fatalf("reset of a log holding records: %v", err)
	}
	if err := other.TruncateBefore(ctx, 12); err != nil {
		t.Fatal(err)
	}
	offsets(t, l, 12, 12)
	if err := l.ResetTo(ctx, 11); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("reset below the end: %v", err)
	}
	if err := l.ResetTo(ctx, 12); err != nil {
		t.Fatalf("reset to the end: %v", err)
	}
	if err := l.ResetTo(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	offsets(t, other, 1000, 1000)
	more := appendN(t, other, 1000, 3)
	fresh := open(t, provider(t, addrs), id)
	offsets(t, fresh, 1000, 1003)
	readAll(t, fresh, 1000, 10, more)
	if _, err := fresh.Read(ctx, 999, 10); !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("read below a reset: %v", err)
	}
}

// TestResetFresh: a never-written log reset to a bulk-loaded snapshot's
// log_offset continues there, for every handle.
func TestResetFresh(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 4}
	l := open(t, provider(t, addrs), id)
	if err := l.ResetTo(t.Context(), 1_250_000); err != nil {
		t.Fatal(err)
	}
	offsets(t, l, 1_250_000, 1_250_000)
	want := appendN(t, l, 1_250_000, 2)
	other := open(t, provider(t, addrs), id)
	offsets(t, other, 1_250_000, 1_250_002)
	readAll(t, other, 1_250_000, 10, want)
}

// TestCloseAndDelete: Close ends a blocked Wait with ErrClosed; Delete
// refuses a log open in the process and removes the topic otherwise.
func TestCloseAndDelete(t *testing.T) {
	addrs := brokers(t, 1)
	p := provider(t, addrs)
	id := changelog.BucketLogID{TableID: 5}
	l, err := p.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 0, 2)
	done := make(chan error, 1)
	go func() {
		_, err := l.Wait(context.Background(), 10)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if deleted, err := p.Delete(t.Context(), id); !errors.Is(err, changelog.ErrInUse) || deleted {
		t.Fatalf("delete of an open log: %v, %v; want false, ErrInUse", deleted, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, changelog.ErrClosed) {
		t.Fatalf("wait after close: %v", err)
	}
	if _, err := l.Append(t.Context(), [][]byte{{1}}); !errors.Is(err, changelog.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if deleted, err := p.Delete(t.Context(), id); err != nil || !deleted {
		t.Fatalf("delete of a closed log: %v, %v; want true", deleted, err)
	}
	if deleted, err := p.Delete(t.Context(), id); err != nil || deleted {
		t.Fatalf("delete of a deleted log: %v, %v; want false (nothing deleted), no error", deleted, err)
	}
	offsets(t, open(t, p, id), 0, 0)
}

// TestBadInput: a batch over the limit writes nothing; a record in the
// topic that is not a bucket log record is corruption, reported, not
// skipped; bad configurations are refused.
func TestBadInput(t *testing.T) {
	addrs := brokers(t, 1)
	p := provider(t, addrs)
	id := changelog.BucketLogID{TableID: 6}
	l := open(t, p, id)
	if _, err := l.Append(t.Context(), [][]byte{make([]byte, 64<<10+1)}); !errors.Is(err, changelog.ErrTooLarge) {
		t.Fatalf("oversize append: %v", err)
	}
	offsets(t, l, 0, 0)
	if _, err := p.Open(t.Context(), changelog.BucketLogID{TableID: -1}); err == nil {
		t.Fatal("open of an invalid id succeeded")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: p.Topic(id), Value: []byte("not a changelog record")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(t, provider(t, addrs), id).Offsets(t.Context()); !errors.Is(err, changelog.ErrCorrupt) {
		t.Fatalf("offsets over a foreign record: %v", err)
	}
	for name, cfg := range map[string]Config{
		"no brokers":  {},
		"bad prefix":  {Brokers: addrs, TopicPrefix: "thaw/changelog"},
		"tiny batch":  {Brokers: addrs, MaxBatchBytes: 10},
		"bad replica": {Brokers: addrs, ReplicationFactor: -2},
		"long poll":   {Brokers: addrs, PollInterval: time.Hour},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestManyWaiters: Waits on many logs of one provider, each woken by an
// append on another host; closing the provider ends the Waits still
// blocked with ErrClosed.
func TestManyWaiters(t *testing.T) {
	addrs := brokers(t, 3)
	writer, reader := provider(t, addrs), provider(t, addrs)
	const logs = 40
	woke := make(chan error, logs)
	blocked := make(chan error, 1)
	for i := range logs + 1 {
		l := open(t, reader, changelog.BucketLogID{TableID: 8, Bucket: int32(i)})
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			end, err := l.Wait(ctx, 0)
			if i == logs {
				blocked <- err // never appended to
				return
			}
			if err == nil && end != 1 {
				err = fmt.Errorf("log %d: end %d", i, end)
			}
			woke <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for i := range logs {
		appendN(t, open(t, writer, changelog.BucketLogID{TableID: 8, Bucket: int32(i)}), 0, 1)
	}
	for range logs {
		select {
		case err := <-woke:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Wait was not woken")
		}
	}
	select {
	case err := <-blocked:
		t.Fatalf("the Wait on an idle log returned: %v", err)
	default:
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, changelog.ErrClosed) {
			t.Fatalf("wait after the provider closed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the provider left a Wait blocked")
	}
}

// TestConcurrentReaders: goroutines sharing one handle Read anywhere and
// Wait while another host appends and truncates; every record read is the
// one appended at its offset (run with -race).
func TestConcurrentReaders(t *testing.T) {
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 10}
	w, r := open(t, provider(t, addrs), id), open(t, provider(t, addrs), id)
	const batches, size = 150, 3
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			var err error
			defer func() { errs <- err }()
			for i := int64(g); ; i = (i*7 + 3) % (batches * size) {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
				_, werr := r.Wait(ctx, i)
				cancel()
				if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
					err = werr
					return
				}
				recs, rerr := r.Read(t.Context(), i, 200)
				if errors.Is(rerr, changelog.ErrOutOfRange) {
					continue // truncated, or not yet appended
				}
				if rerr != nil {
					err = rerr
					return
				}
				for _, rec := range recs {
					if want := fmt.Appendf(nil, "record-%06d:", rec.Offset); !bytes.HasPrefix(rec.Data, want) {
						err = fmt.Errorf("offset %d holds %q", rec.Offset, rec.Data)
						return
					}
				}
			}
		}()
	}
	for b := range batches {
		appendN(t, w, int64(b*size), size)
		if b%50 == 49 {
			if err := w.TruncateBefore(t.Context(), int64(b*size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestThinIndex: with an index far smaller than the log (thinned many
// times over), reads anywhere, truncations by this handle and by another
// host at offsets the index does not hold, and appends all stay exact.
func TestThinIndex(t *testing.T) {
	defer func(n int) { maxIdx = n }(maxIdx)
	maxIdx = 8
	addrs := brokers(t, 1)
	id := changelog.BucketLogID{TableID: 12}
	w, r := open(t, provider(t, addrs), id), open(t, provider(t, addrs), id)
	sizes := make([]int, 200)
	for i := range sizes {
		sizes[i] = 1 + i%3
	}
	want := appendN(t, w, 0, sizes...) // 399 records in 200 batches
	end := int64(len(want))
	offsets(t, r, 0, end)
	kl := r.(*kafkaLog)
	kl.mu.Lock()
	n := len(kl.mu.idx)
	kl.mu.Unlock()
	if n > maxIdx+1 {
		t.Fatalf("index of %d entries, limit %d", n, maxIdx)
	}
	for _, from := range []int64{0, 1, 5, 77, 200, 201, 398} {
		readAll(t, r, from, 50, want[from:])
	}
	// The leader truncates where its own (equally thin) index allows: at
	// or below the offset, never above it.
	if err := w.TruncateBefore(t.Context(), 250); err != nil {
		t.Fatal(err)
	}
	s, e, err := r.Offsets(t.Context())
	if err != nil || s > 250 || e != end {
		t.Fatalf("after truncating before 250: [%d, %d), %v", s, e, err)
	}
	readAll(t, r, 250, 10, want[250:])
	readAll(t, r, s, 1000, want[s:])
	if _, err := r.Read(t.Context(), s-1, 10); s > 0 && !errors.Is(err, changelog.ErrOutOfRange) {
		t.Fatalf("read below the start %d: %v", s, err)
	}
	more := appendN(t, r, end, 5, 5) // the follower becomes the leader
	readAll(t, w, end, 3, more)
	if err := r.TruncateBefore(t.Context(), end+10); err != nil {
		t.Fatal(err)
	}
	offsets(t, w, end+10, end+10)
}

// TestList: List names the provider's logs, sorted, and no topic of
// another prefix, even one that starts like its own.
func TestList(t *testing.T) {
	addrs := brokers(t, 1)
	p := provider(t, addrs)
	ids := []changelog.BucketLogID{
		{TableID: 9, Bucket: 1},
		{TableID: 2, Partitioned: true, PartitionID: 0, Bucket: 0},
		{TableID: 2, Bucket: 3},
	}
	for _, id := range ids {
		open(t, p, id)
	}
	for _, prefix := range []string{"thaw.changelogs", "thaw.changelog.t07", "thaw.changelog.x", "thaw"} {
		open(t, provider(t, addrs, func(c *Config) { c.TopicPrefix = prefix }), changelog.BucketLogID{TableID: 1})
	}
	want := []changelog.BucketLogID{ids[2], ids[1], ids[0]}
	got, err := p.List(t.Context())
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	if _, err := p.Delete(t.Context(), ids[0]); !errors.Is(err, changelog.ErrInUse) {
		t.Fatalf("delete of an open log: %v", err)
	}
	other := provider(t, addrs) // another host: its Delete does not wait for p's handles
	if deleted, err := other.Delete(t.Context(), ids[0]); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v; want true", deleted, err)
	}
	if got, err := other.List(t.Context()); err != nil || !slices.Equal(got, want[:2]) {
		t.Fatalf("after a delete: List = %v, %v; want %v", got, err, want[:2])
	}
	other.Close()
	if _, err := other.List(t.Context()); !errors.Is(err, changelog.ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
}
