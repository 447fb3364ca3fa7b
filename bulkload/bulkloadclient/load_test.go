package bulkloadclient_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// loadRows is the size of TestLoadPartitionWhileSiblingServes (100,000
// under the race detector, see race_test.go); THAW_TEST_LOAD_ROWS overrides
// it (for measuring).
const loadRows = 1_000_000

// The rows of the loaded partition: id i in [0, n) first with version 1,
// then every id divisible by dupEvery again with version 2 (in an Arrow
// batch), then every id divisible by dup3Every with version 3 (one AddRow
// each). Last wins, so the final row of i is its highest version.
const (
	dupEvery  = 97
	dup3Every = 97 * 5
)

func loadRow(region string, i int64, version int) kv.Row {
	switch version {
	case 1:
		return kv.Row{region, i, "u" + strconv.FormatInt(i, 10), int32(i % 1000)}
	case 2:
		return kv.Row{region, i, "u" + strconv.FormatInt(i, 10) + "-v2", -int32(i % 1000)}
	default:
		return kv.Row{region, i, "u" + strconv.FormatInt(i, 10) + "-v3", nil}
	}
}

func finalRow(region string, i int64) kv.Row {
	switch {
	case i%dup3Every == 0:
		return loadRow(region, i, 3)
	case i%dupEvery == 0:
		return loadRow(region, i, 2)
	default:
		return loadRow(region, i, 1)
	}
}

// arrowBatch returns the rows of ids (with version) as an Arrow record
// batch of the events schema.
func arrowBatch(region string, ids []int64, version int) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "region", Type: arrow.BinaryTypes.String},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	reg := b.Field(0).(*array.StringBuilder)
	id := b.Field(1).(*array.Int64Builder)
	name := b.Field(2).(*array.StringBuilder)
	qty := b.Field(3).(*array.Int32Builder)
	for _, i := range ids {
		r := loadRow(region, i, version)
		reg.Append(r[0].(string))
		id.Append(r[1].(int64))
		name.Append(r[2].(string))
		if r[3] == nil {
			qty.AppendNull()
		} else {
			qty.Append(r[3].(int32))
		}
	}
	return b.NewRecordBatch()
}

// rowSum is an order-independent checksum of rows of the events schema:
// the row count and the sum of each row's FNV-1a hash over all its values.
type rowSum struct {
	n   int64
	sum uint64
}

func (s *rowSum) add(r kv.Row) {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	str := func(v string) {
		for i := range len(v) {
			h = (h ^ uint64(v[i])) * prime
		}
		h = (h ^ 0xff) * prime
	}
	num := func(v uint64) {
		for range 8 {
			h = (h ^ (v & 0xff)) * prime
			v >>= 8
		}
	}
	str(r[0].(string))
	num(uint64(r[1].(int64)))
	str(r[2].(string))
	if r[3] == nil {
		h = (h ^ 0xfe) * prime
	} else {
		num(uint64(r[3].(int32)))
	}
	s.n++
	s.sum += h
}

// sibling keeps a partition busy: a writer upserting new rows (each batch
// flushed) and a reader looking up rows written before the load, both
// until stop. Any error is recorded; the rows acknowledged are counted.
type sibling struct {
	tc     *tierclient.Client
	info   *tierclient.TableInfo
	target tierclient.Target
	pre    int64 // rows 0..pre-1 exist before the load

	written atomic.Int64 // rows pre..pre+written-1 are acknowledged
	reads   atomic.Int64 // successful lookups
	mu      sync.Mutex
	errs    []error
}

func (s *sibling) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, err)
	}
}

func (s *sibling) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

func (s *sibling) write(ctx, stop context.Context) {
	w, err := s.tc.NewWriter(ctx, s.target)
	if err != nil {
		s.fail(err)
		return
	}
	tick := time.NewTicker(10 * time.Millisecond) // pacing, not waiting
	defer tick.Stop()
	next := s.pre
	for stop.Err() == nil {
		for range 50 {
			if err := w.Write(ctx, loadRow(s.target.Partition, next, 1)); err != nil {
				s.fail(fmt.Errorf("sibling write: %w", err))
				return
			}
			next++
		}
		if err := w.Flush(ctx); err != nil {
			s.fail(fmt.Errorf("sibling flush: %w", err))
			return
		}
		s.written.Store(next - s.pre)
		select {
		case <-stop.Done():
		case <-tick.C:
		}
	}
	if err := w.Close(ctx); err != nil {
		s.fail(fmt.Errorf("sibling close: %w", err))
	}
}

func (s *sibling) read(ctx, stop context.Context) {
	rng := rand.New(rand.NewPCG(1, 2))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for stop.Err() == nil {
		keys := make([]kv.Row, 0, 50)
		ids := make([]int64, 0, 50)
		for range 50 {
			i := rng.Int64N(s.pre)
			k, err := s.info.KeyRow(s.target.Partition, i)
			if err != nil {
				s.fail(err)
				return
			}
			keys, ids = append(keys, k), append(ids, i)
		}
		got, err := s.tc.Get(ctx, s.target, keys)
		if err != nil {
			s.fail(fmt.Errorf("sibling get: %w", err))
			return
		}
		for j, r := range got {
			if want := loadRow(s.target.Partition, ids[j], 1); fmt.Sprint(r) != fmt.Sprint(want) {
				s.fail(fmt.Errorf("sibling get %d: %v, want %v", ids[j], r, want))
				return
			}
		}
		s.reads.Add(1)
		select {
		case <-stop.Done():
		case <-tick.C:
		}
	}
}

// waitProgress waits until the sibling read and wrote more since the last
// call: proof that it is served at this point of the load.
func (s *sibling) waitProgress(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	r, w := s.reads.Load(), s.written.Load()
	eventually(ctx, t, "sibling served "+what, func() error {
		if err := s.err(); err != nil {
			t.Fatalf("sibling %s: %v", what, err)
		}
		if s.reads.Load() > r && s.written.Load() > w {
			return nil
		}
		return errors.New("no progress yet")
	})
}

// TestLoadPartitionWhileSiblingServes loads a million rows (with
// duplicates, last wins) into an empty partition of a table whose sibling
// partition keeps taking writes and serving reads from before Begin until
// after Commit; then every loaded row is readable and every sibling write
// landed.
func TestLoadPartitionWhileSiblingServes(t *testing.T) {
	n := int64(loadRows)
	if raceLoadRows > 0 {
		n = raceLoadRows
	}
	if v := os.Getenv("THAW_TEST_LOAD_ROWS"); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tr := startTier(ctx, t)
	info := tr.createPartitioned(ctx, t, "shop", "events", 8, 3, "eu", "us")
	eu := tierclient.Target{Database: "shop", Table: "events", Partition: "eu"}
	target := bulkload.Target{Database: "shop", Table: "events", Partition: "us"}

	// The sibling has rows before the load.
	sib := &sibling{tc: tr.tc, info: info, target: eu, pre: 2000}
	var pre []kv.Row
	for i := range sib.pre {
		pre = append(pre, loadRow("eu", i, 1))
	}
	eventually(ctx, t, "write the sibling's first rows", func() error { return tr.tc.Upsert(ctx, eu, pre) })
	stopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sib.write(ctx, stopCtx) })
	wg.Go(func() { sib.read(ctx, stopCtx) })
	stopped := false
	stopSibling := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	defer stopSibling()
	sib.waitProgress(ctx, t, "before Begin")

	start := time.Now()
	c, err := bulkloadclient.New(ctx, tr.e.Address())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := begin(ctx, c, target, "load-us-1")
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Logf("begin: %v", time.Since(start))
	sib.waitProgress(ctx, t, "after Begin")

	buildStart := time.Now()
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, bulkloadclient.SessionOptions{
		TempDir: t.TempDir(), MemoryBudget: 64 << 20, Workers: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const batch = 1 << 16
	ids := make([]int64, 0, batch)
	addBatch := func(version int) {
		rec := arrowBatch("us", ids, version)
		defer rec.Release()
		if err := s.Add(ctx, rec); err != nil {
			t.Fatalf("add: %v", err)
		}
		ids = ids[:0]
	}
	for i := range n {
		if ids = append(ids, i); len(ids) == batch {
			addBatch(1)
		}
	}
	if len(ids) > 0 {
		addBatch(1)
	}
	var inputRows, dups int64 = n, 0
	for i := int64(0); i < n; i += dupEvery {
		ids = append(ids, i)
	}
	inputRows += int64(len(ids))
	dups += int64(len(ids))
	addBatch(2)
	for i := int64(0); i < n; i += dup3Every {
		if err := s.AddRow(ctx, loadRow("us", i, 3)); err != nil {
			t.Fatalf("add row: %v", err)
		}
		inputRows++
		dups++
	}
	sib.waitProgress(ctx, t, "during the build")
	results, err := s.Finish(ctx)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("build of %d input rows: %v", inputRows, time.Since(buildStart))
	var rows, gotDups int64
	for _, r := range results {
		rows += r.RowCount
		gotDups += r.Duplicates
	}
	if rows != n || gotDups != dups || len(results) != bc.Buckets() {
		t.Fatalf("results: %d rows, %d duplicates in %d buckets; want %d, %d in %d", rows, gotDups, len(results), n, dups, bc.Buckets())
	}
	sib.waitProgress(ctx, t, "before Commit")

	commitStart := time.Now()
	st, err := c.Commit(ctx, bc, results, 2*time.Minute)
	if err != nil || st.State != bulkload.Committed {
		t.Fatalf("commit: %+v, %v", st, err)
	}
	t.Logf("commit: %v", time.Since(commitStart))
	sib.waitProgress(ctx, t, "after Commit")

	// Every row is there, exactly once, with its last value.
	verifyStart := time.Now()
	var want, got rowSum
	for i := range n {
		want.add(finalRow("us", i))
	}
	if err := tr.tc.Scan(ctx, tierclient.Target(target), func(r kv.Row) error {
		got.add(r)
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if got != want {
		t.Fatalf("scan: %d rows with checksum %x, want %d rows with %x", got.n, got.sum, want.n, want.sum)
	}
	// Sampled lookups: every version-3 id, and random others.
	rng := rand.New(rand.NewPCG(3, 4))
	var sample []int64
	for i := int64(0); i < n; i += dup3Every {
		sample = append(sample, i)
	}
	for range 3000 {
		sample = append(sample, rng.Int64N(n))
	}
	keys := make([]kv.Row, len(sample))
	for j, i := range sample {
		if keys[j], err = info.KeyRow("us", i); err != nil {
			t.Fatal(err)
		}
	}
	found, err := tr.tc.Get(ctx, tierclient.Target(target), keys)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for j, r := range found {
		if want := finalRow("us", sample[j]); fmt.Sprint(r) != fmt.Sprint(want) {
			t.Fatalf("get %d: %v, want %v", sample[j], r, want)
		}
	}
	t.Logf("verify: %v", time.Since(verifyStart))

	// The sibling never failed, and every row it wrote landed.
	stopSibling()
	if err := sib.err(); err != nil {
		t.Fatalf("sibling: %v", err)
	}
	total := sib.pre + sib.written.Load()
	var sibWant, sibGot rowSum
	for i := range total {
		sibWant.add(loadRow("eu", i, 1))
	}
	if err := tr.tc.Scan(ctx, eu, func(r kv.Row) error { sibGot.add(r); return nil }); err != nil {
		t.Fatalf("scan sibling: %v", err)
	}
	if sibGot != sibWant {
		t.Fatalf("sibling: %d rows with checksum %x, want %d rows with %x", sibGot.n, sibGot.sum, sibWant.n, sibWant.sum)
	}
	t.Logf("sibling: %d lookups, %d rows written during the load; total %v", sib.reads.Load(), sib.written.Load(), time.Since(start))

	if recs := tr.transactions(ctx, t, bc.Handle()); len(recs) != 1 || recs[0].State != bulkload.Committed {
		t.Fatalf("transactions of %s: %+v", target, recs)
	}
}
