package bulkloadtest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierpb"
)

// answer classes of one Lookup of one bucket's rows on one replica.
const (
	ansEmpty   = iota // no row found (before the load)
	ansLoading        // TARGET_LOADING
	ansFull           // every row, with its value
	ansOther          // anything else: a subset, a wrong value, an error
)

// hammer looks up every row of every bucket on every replica in a loop
// and classifies each answer, until stop is closed.
type hammer struct {
	h      *harness
	tp     *tierv1.TargetPath
	tid    *tierv1.TargetId
	keys   map[int][][]byte
	vals   map[int][][]byte
	reps   map[int][]string
	counts [4]atomic.Int64
	// sawFull is set once any replica answered every row; an empty answer
	// after that is a replica serving ACTIVE without the loaded data.
	sawFull  atomic.Bool
	mu       sync.Mutex
	problems []string
}

func newHammer(h *harness, tp *tierv1.TargetPath, tb *kv.Table, rows []kv.Row) *hammer {
	loc, err := h.locations(tp)
	if err != nil {
		h.t.Fatal(err)
	}
	hm := &hammer{h: h, tp: tp, tid: loc.GetTargetId(), keys: map[int][][]byte{}, vals: map[int][][]byte{}, reps: map[int][]string{}}
	for _, r := range rows {
		b, err := tb.Bucket(r)
		if err != nil {
			h.t.Fatal(err)
		}
		k, _ := tb.EncodeKey(r)
		v, _ := tb.EncodeValue(r)
		hm.keys[b], hm.vals[b] = append(hm.keys[b], k), append(hm.vals[b], v)
	}
	for _, b := range loc.GetBuckets() {
		hm.reps[int(b.GetBucket())] = b.GetReplicas()
	}
	return hm
}

func (hm *hammer) problem(format string, args ...any) {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	if len(hm.problems) < 20 {
		hm.problems = append(hm.problems, fmt.Sprintf(format, args...))
	}
}

func (hm *hammer) classify(b int, server string, resp *connect.Response[tierv1.LookupResponse], err error) int {
	switch {
	case tierpb.IsTargetLoading(err):
		return ansLoading
	case tierpb.ReasonOf(err) == tierpb.ReasonUnavailable:
		return -1 // a replica restoring or not caught up: no data shown
	case err != nil:
		hm.problem("bucket %d on %s: %v", b, server, err)
		return ansOther
	}
	found := 0
	for i, r := range resp.Msg.GetResults() {
		if r.GetFound() {
			if !bytes.Equal(r.GetValue(), hm.vals[b][i]) {
				hm.problem("bucket %d on %s: key %d has a wrong value", b, server, i)
				return ansOther
			}
			found++
		}
	}
	switch found {
	case 0:
		if hm.sawFull.Load() {
			hm.problem("bucket %d on %s: empty after a replica served the load", b, server)
			return ansOther
		}
		return ansEmpty
	case len(hm.keys[b]):
		hm.sawFull.Store(true)
		return ansFull
	}
	hm.problem("bucket %d on %s: %d of %d rows", b, server, found, len(hm.keys[b]))
	return ansOther
}

func (hm *hammer) run(ctx context.Context) {
	for ctx.Err() == nil {
		for b, keys := range hm.keys {
			for _, s := range hm.reps[b] {
				resp, err := hm.h.tablet(s).Lookup(ctx, connect.NewRequest(&tierv1.LookupRequest{Target: hm.tid, Bucket: int32(b), Keys: keys}))
				if ctx.Err() != nil {
					return
				}
				if c := hm.classify(b, s, resp, err); c >= 0 {
					hm.counts[c].Add(1)
				}
			}
		}
	}
}

// A reader hammering lookups while a load runs sees the target empty
// before Begin, TARGET_LOADING while the transaction holds it, and every
// row after Commit: never a subset of a bucket, never an empty replica
// once one served the load, and every row on every replica once Commit
// returned.
func TestNoPartialVisibility(t *testing.T) {
	h := newHarness(t)
	n := h.standard()
	tp := h.createTable(n, "items", 4, "")
	rows := makeRows(400, "")
	// The frozen schema equals the created one; compile it without a
	// transaction to set up the readers before Begin.
	tb, err := kv.NewTable(kvSchema(t, itemsSchema(4, false)))
	if err != nil {
		t.Fatal(err)
	}
	hm := newHammer(h, tp, tb, rows)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { hm.run(ctx) })
	}
	time.Sleep(100 * time.Millisecond)

	info := h.mustBegin(n, tp, "job-1")
	m := h.load(info, rows)
	if _, err := commit(t.Context(), n, info.GetHandle(), m); err != nil {
		t.Fatal(err)
	}
	// From here on, every read must see everything.
	for range 5 {
		h.expectAll(tp, tb, rows)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	for _, p := range hm.problems {
		t.Error(p)
	}
	t.Logf("answers: empty %d, loading %d, full %d, other %d",
		hm.counts[ansEmpty].Load(), hm.counts[ansLoading].Load(), hm.counts[ansFull].Load(), hm.counts[ansOther].Load())
	if hm.counts[ansEmpty].Load() == 0 || hm.counts[ansLoading].Load() == 0 || hm.counts[ansFull].Load() == 0 {
		t.Errorf("the readers did not see every phase")
	}
}

// kvSchema converts a wire schema of the test tables to kv's.
func kvSchema(t *testing.T, p *tierv1.TableSchema) kv.TableSchema {
	t.Helper()
	s := kv.TableSchema{SchemaID: int16(p.GetSchemaId()), PrimaryKey: p.GetPrimaryKey(), PartitionKeys: p.GetPartitionKeys(), Buckets: int(p.GetBuckets())}
	for _, c := range p.GetColumns() {
		ty, err := kv.ParseType(c.GetType())
		if err != nil {
			t.Fatal(err)
		}
		s.Columns = append(s.Columns, kv.Column{Name: c.GetName(), Type: ty, Nullable: c.GetNullable()})
	}
	return s
}
