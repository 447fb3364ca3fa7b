package snapshotbuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

type buildCfg struct {
	nb      int
	budget  int64
	target  int64
	workers int
	owned   []int
	offsets map[int]int64
	dups    Duplicates
	comp    Compression
	block   int
}

func buildPairs(t *testing.T, s *testStore, in []inputPair, cfg buildCfg) ([]BucketResult, Stats, error) {
	t.Helper()
	tmp := t.TempDir()
	b, err := New(s, Target{
		NumBuckets:  cfg.nb,
		Snapshot:    testTarget(s),
		SnapshotIDs: snapIDs(cfg.nb),
		LogOffsets:  cfg.offsets,
		Buckets:     cfg.owned,
	}, Options{
		Workers:        cfg.workers,
		MemoryBudget:   cfg.budget,
		TempDir:        tmp,
		TargetFileSize: cfg.target,
		Duplicates:     cfg.dups,
		Compression:    cfg.comp,
		BlockSize:      cfg.block,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if left := dirEntries(t, tmp); len(left) > 0 {
			t.Errorf("temp files left behind: %v", left)
		}
	}()
	for _, p := range in {
		if err := b.AddPair(t.Context(), p.bucket, p.k, p.v); err != nil {
			return nil, b.Stats(), err
		}
	}
	res, err := b.Finish(t.Context())
	return res, b.Stats(), err
}

// TestRoundTripPairs: pairs in, snapshot per bucket out; every bucket
// restores through the tablet path to exactly the last value per key, with
// and without spilling and with several SST files per bucket.
func TestRoundTripPairs(t *testing.T) {
	const nb = 5
	in, want, dups := genPairs(1, 30000, nb, 0.2)
	for _, tc := range []struct {
		name    string
		budget  int64
		target  int64
		spill   bool
		chunks  int // sealed chunks; -1: many
		workers int
	}{
		{"in-memory", 64 << 20, 128 << 20, false, 0, 2},
		{"two-chunks-in-memory", 4 << 20, 128 << 20, false, 1, 2},
		{"spilled", 256 << 10, 128 << 20, true, -1, 2},
		{"spilled-small-files", 256 << 10, 64 << 10, true, -1, 2},
		// One worker: chunks are sorted and spilled on the caller's
		// goroutine, runs are written as one part.
		{"spilled-one-worker", 256 << 10, 128 << 20, true, -1, 1},
		{"two-chunks-one-worker", 4 << 20, 128 << 20, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			res, st, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: tc.budget, target: tc.target, workers: tc.workers})
			if err != nil {
				t.Fatal(err)
			}
			if (st.Spills > 0) != tc.spill {
				t.Fatalf("spills = %d, want spilling %v", st.Spills, tc.spill)
			}
			if tc.chunks >= 0 && st.Chunks != tc.chunks || tc.chunks < 0 && st.Chunks < 3 {
				t.Fatalf("%d chunks sealed, want %d", st.Chunks, tc.chunks)
			}
			if st.InputRows != int64(len(in)) {
				t.Fatalf("input rows %d, want %d", st.InputRows, len(in))
			}
			if st.PeakBudget > st.MemoryBudget {
				t.Fatalf("peak budget %d above the budget %d", st.PeakBudget, st.MemoryBudget)
			}
			if st.UnreproducibleManifests != 0 {
				t.Fatalf("%d manifests not normalized", st.UnreproducibleManifests)
			}
			if len(res) != nb {
				t.Fatalf("%d results, want %d", len(res), nb)
			}
			multi := false
			for b, r := range res {
				if r.Bucket != b || r.SnapshotID != int64(100+b) {
					t.Fatalf("result %d is bucket %d snapshot %d", b, r.Bucket, r.SnapshotID)
				}
				m, got := restoreBucket(t, s, r)
				equalPairs(t, b, got, want[b])
				if r.RowCount != int64(len(want[b])) || r.Duplicates != dups[b] || r.LogOffset != r.RowCount {
					t.Fatalf("bucket %d: rows %d dups %d log offset %d, want %d %d %d",
						b, r.RowCount, r.Duplicates, r.LogOffset, len(want[b]), dups[b], len(want[b]))
				}
				if m.RowCount == nil || *m.RowCount != r.RowCount || m.LogOffset != r.LogOffset ||
					m.TableID != 7 || m.BucketID != int32(b) || m.SnapshotID != r.SnapshotID ||
					len(m.SharedFiles) != 0 || m.PartitionID != nil {
					t.Fatalf("bucket %d: metadata %+v", b, m)
				}
				if m.SnapshotLocation != testTarget(s).SnapshotDir(b, r.SnapshotID) {
					t.Fatalf("bucket %d: snapshot location %s", b, m.SnapshotLocation)
				}
				var sum int64
				ssts := 0
				for _, f := range m.PrivateFiles {
					sum += f.Handle.Size
					if strings.HasSuffix(f.LocalPath, ".sst") {
						ssts++
					}
				}
				if sum != m.IncrementalSize || sum != r.Bytes {
					t.Fatalf("bucket %d: incremental size %d, Σ sizes %d, result bytes %d", b, m.IncrementalSize, sum, r.Bytes)
				}
				multi = multi || ssts > 1
				if r.MinKey != fmt.Sprintf("%x", want[b][0].k) || r.MaxKey != fmt.Sprintf("%x", want[b][len(want[b])-1].k) {
					t.Fatalf("bucket %d: key range %s..%s", b, r.MinKey, r.MaxKey)
				}
			}
			if (tc.target < 1<<20) != multi {
				t.Fatalf("several SST files in a bucket: %v, target %d", multi, tc.target)
			}
		})
	}
}

// TestDeterminism: the same input gives byte-identical objects (every data
// file, MANIFEST and OPTIONS included, and _METADATA) whatever the memory
// budget, spilling and worker count; a rebuild into the same store adopts
// everything.
func TestDeterminism(t *testing.T) {
	const nb = 4
	in, _, _ := genPairs(2, 20000, nb, 0.1)
	s1, s2 := newTestStore(t), newTestStore(t)
	// Same remote dir for both stores so the object URIs (inside _METADATA)
	// are comparable: give store 2 store 1's base.
	s2.Store = objstore.New(s2.faults, s1.Base())

	r1, st1, err := buildPairs(t, s1, in, buildCfg{nb: nb, budget: 64 << 20, workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Pebble stamps ingested tables with the Unix second: make sure the two
	// builds see different seconds, so only normalization can make the
	// MANIFESTs equal.
	for start := time.Now().Unix(); time.Now().Unix() == start; {
		time.Sleep(10 * time.Millisecond)
	}
	r2, st2, err := buildPairs(t, s2, in, buildCfg{nb: nb, budget: 128 << 10, workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if st1.Spills != 0 || st2.Spills == 0 {
		t.Fatalf("spills %d and %d: want none and some", st1.Spills, st2.Spills)
	}
	if st2.PeakBudget > 128<<10 || st2.PeakBudget < 64<<10 {
		t.Fatalf("peak budget %d with a 128 KiB budget", st2.PeakBudget)
	}
	s3 := newTestStore(t)
	s3.Store = objstore.New(s3.faults, s1.Base())
	// Also on a "different machine": Pebble derives some defaults from
	// GOMAXPROCS.
	procs := runtime.GOMAXPROCS(1)
	r3, st3, err := buildPairs(t, s3, in, buildCfg{nb: nb, budget: 3 << 20, workers: 2})
	runtime.GOMAXPROCS(procs)
	if err != nil {
		t.Fatal(err)
	}
	if st3.Spills != 0 || st3.Chunks != 1 {
		t.Fatalf("third build: %d spills, %d chunks; want the kept-chunk path (0, 1)", st3.Spills, st3.Chunks)
	}
	if canPopulate() && st3.Prefaulted == 0 {
		t.Fatal("third build (two workers): nothing prefaulted")
	}
	o1 := s1.objects(t)
	for i, s := range []*testStore{s2, s3} {
		o2 := s.objects(t)
		if len(o1) == 0 || !slices.Equal(slices.Sorted(maps.Keys(o1)), slices.Sorted(maps.Keys(o2))) {
			t.Fatalf("object sets differ:\n%v\n%v", slices.Sorted(maps.Keys(o1)), slices.Sorted(maps.Keys(o2)))
		}
		for k, v := range o1 {
			if !bytes.Equal(v, o2[k]) {
				t.Fatalf("object %s differs between build 1 and build %d", k, i+2)
			}
		}
	}
	j1, _ := json.Marshal(r1)
	for _, r := range [][]BucketResult{r2, r3} {
		if j2, _ := json.Marshal(r); !bytes.Equal(j1, j2) {
			t.Fatalf("results differ:\n%s\n%s", j1, j2)
		}
	}
	// Every kind of checkpoint file is covered by the comparison above.
	kinds := map[string]bool{}
	for _, r := range r1 {
		m, _ := restoreBucket(t, s1, r)
		for _, f := range m.PrivateFiles {
			for _, k := range []string{"MANIFEST-", "OPTIONS-", "marker.", ".sst", ".log"} {
				if strings.HasPrefix(f.LocalPath, k) || strings.HasSuffix(f.LocalPath, k) {
					kinds[k] = true
				}
			}
		}
	}
	for _, k := range []string{"MANIFEST-", "OPTIONS-", "marker.", ".sst"} {
		if !kinds[k] {
			t.Fatalf("no %s file among the snapshot files: %v", k, kinds)
		}
	}

	// A retry into the same store adopts every object.
	puts := s1.faults.Calls(objstore.OpPut)
	r4, _, err := buildPairs(t, s1, in, buildCfg{nb: nb, budget: 1 << 20, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range r4 {
		if !r.MetadataAdopted {
			t.Fatalf("bucket %d: _METADATA not adopted on retry", r.Bucket)
		}
	}
	if n := s1.faults.Calls(objstore.OpPut) - puts; n != len(o1) {
		t.Fatalf("retry made %d puts, want %d (one per object)", n, len(o1))
	}
	if o3 := s1.objects(t); len(o3) != len(o1) {
		t.Fatalf("retry changed the object count from %d to %d", len(o1), len(o3))
	}
}

// TestSpillLargeRecords: records larger than the merge read buffers (a tiny
// budget with many runs) still round-trip.
func TestSpillLargeRecords(t *testing.T) {
	var in []inputPair
	want := make([][]pair, 2)
	for i := range 600 {
		k := fmt.Appendf(nil, "key-%05d", (i*7919)%600)
		v := bytes.Repeat([]byte{byte(i)}, 200+(i*37)%3000)
		b := i % 2
		in = append(in, inputPair{b, k, v})
		want[b] = append(want[b], pair{k, v})
	}
	for b := range want {
		slices.SortFunc(want[b], func(x, y pair) int { return bytes.Compare(x.k, y.k) })
	}
	s := newTestStore(t)
	res, st, err := buildPairs(t, s, in, buildCfg{nb: 2, budget: 64 << 10, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Spills < 20 {
		t.Fatalf("%d spills, want many", st.Spills)
	}
	for b, r := range res {
		_, got := restoreBucket(t, s, r)
		equalPairs(t, b, got, want[b])
	}
}

// TestCompressions: every SST compression builds snapshots that restore to
// the same pairs, and the restored tables say they were written with it.
func TestCompressions(t *testing.T) {
	const nb = 2
	in, want, _ := genPairs(3, 5000, nb, 0.1)
	for c, name := range map[Compression]string{
		CompressionSnappy: "Snappy",
		CompressionZstd:   "ZSTD",
		CompressionNone:   "NoCompression",
	} {
		t.Run(c.String(), func(t *testing.T) {
			s := newTestStore(t)
			res, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 2, comp: c})
			if err != nil {
				t.Fatal(err)
			}
			for b, r := range res {
				_, got := restoreBucketWith(t, s, r, func(db *pebble.DB) {
					levels, err := db.SSTables(pebble.WithProperties())
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, tables := range levels {
						for _, tbl := range tables {
							n++
							if !strings.HasPrefix(tbl.Properties.CompressionName, name) {
								t.Errorf("bucket %d: table %s compressed with %q, want %s", b, tbl.FileNum, tbl.Properties.CompressionName, name)
							}
						}
					}
					if n == 0 {
						t.Errorf("bucket %d: no tables", b)
					}
				})
				equalPairs(t, b, got, want[b])
			}
		})
	}
}

// TestBlockSize: the SST files' data blocks have the configured size
// (DefaultBlockSize by default): the uncompressed key and value bytes per
// block are close to it, and the rows read back equal.
func TestBlockSize(t *testing.T) {
	const nb = 1
	in, want, _ := genPairs(9, 20000, nb, 0)
	for _, block := range []int{0, 16 << 10, 64 << 10} {
		t.Run(fmt.Sprint(block), func(t *testing.T) {
			s := newTestStore(t)
			res, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 1 << 20, workers: 1, block: block})
			if err != nil {
				t.Fatal(err)
			}
			target := block
			if target == 0 {
				target = DefaultBlockSize
			}
			_, got := restoreBucketWith(t, s, res[0], func(db *pebble.DB) {
				levels, err := db.SSTables(pebble.WithProperties())
				if err != nil {
					t.Fatal(err)
				}
				var raw, blocks uint64
				for _, tables := range levels {
					for _, tbl := range tables {
						raw += tbl.Properties.RawKeySize + tbl.Properties.RawValueSize
						blocks += tbl.Properties.NumDataBlocks
					}
				}
				if blocks < 2 {
					t.Fatalf("%d data blocks for %d raw bytes", blocks, raw)
				}
				if avg := float64(raw) / float64(blocks); avg < 0.5*float64(target) || avg > 1.3*float64(target) {
					t.Errorf("%.0f raw bytes per data block, want about %d", avg, target)
				}
			})
			equalPairs(t, 0, got, want[0])
		})
	}
	for _, bad := range []int{MinBlockSize - 1, MaxBlockSize + 1, -1} {
		if _, err := New(newTestStore(t), Target{NumBuckets: 1}, Options{BlockSize: bad, TempDir: t.TempDir()}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("block size %d: %v, want ErrInvalidOptions", bad, err)
		}
	}
}

func TestDuplicatesError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
	}{
		{"same-chunk", 64 << 20},
		{"across-runs", 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			in, _, _ := genPairs(3, 5000, 3, 0)
			dup := in[10]
			// The duplicate comes much later, so with a tiny budget it lands
			// in a different run.
			in = append(in, inputPair{bucket: dup.bucket, k: dup.k, v: []byte("again")})
			_, st, err := buildPairs(t, s, in, buildCfg{nb: 3, budget: tc.budget, dups: DuplicatesError})
			var de *DuplicateKeyError
			if !errors.As(err, &de) || !errors.Is(err, ErrDuplicateKey) {
				t.Fatalf("err = %v, want a DuplicateKeyError", err)
			}
			if !bytes.Equal(de.Key, dup.k) || de.Bucket != dup.bucket {
				t.Fatalf("duplicate %q in bucket %d, want %q in %d", de.Key, de.Bucket, dup.k, dup.bucket)
			}
			if (st.Spills > 0) != (tc.budget < 1<<20) {
				t.Fatalf("spills = %d", st.Spills)
			}
			if keys := s.metadataKeys(t); len(keys) != 0 {
				t.Fatalf("_METADATA written: %v", keys)
			}
		})
	}
}

func TestDuplicatesLastWinsCount(t *testing.T) {
	s := newTestStore(t)
	var in []inputPair
	for i := range 10 {
		in = append(in, inputPair{0, []byte("a"), fmt.Appendf(nil, "a%d", i)})
		in = append(in, inputPair{0, []byte("b"), fmt.Appendf(nil, "b%d", i)})
	}
	res, _, err := buildPairs(t, s, in, buildCfg{nb: 1, budget: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	_, got := restoreBucket(t, s, res[0])
	equalPairs(t, 0, got, []pair{{[]byte("a"), []byte("a9")}, {[]byte("b"), []byte("b9")}})
	if res[0].Duplicates != 18 || res[0].RowCount != 2 {
		t.Fatalf("duplicates %d rows %d, want 18 and 2", res[0].Duplicates, res[0].RowCount)
	}
}

// TestEmptyBucketsAndOffsets: buckets without rows still get a snapshot that
// restores (to nothing); explicit log offsets override the row count.
func TestEmptyBucketsAndOffsets(t *testing.T) {
	s := newTestStore(t)
	in := []inputPair{{1, []byte("x"), []byte("1")}, {1, []byte("y"), []byte("2")}}
	res, _, err := buildPairs(t, s, in, buildCfg{nb: 3, budget: 1 << 20, offsets: map[int]int64{2: 42}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		m, got := restoreBucket(t, s, r)
		switch r.Bucket {
		case 1:
			if len(got) != 2 || r.LogOffset != 2 || r.MinKey != "78" || r.MaxKey != "79" {
				t.Fatalf("bucket 1: %d pairs, offset %d, range %s..%s", len(got), r.LogOffset, r.MinKey, r.MaxKey)
			}
		default:
			if len(got) != 0 || r.RowCount != 0 || r.MinKey != "" {
				t.Fatalf("bucket %d: %d pairs, %d rows", r.Bucket, len(got), r.RowCount)
			}
			wantOff := int64(0)
			if r.Bucket == 2 {
				wantOff = 42
			}
			if r.LogOffset != wantOff || m.LogOffset != wantOff {
				t.Fatalf("bucket %d: log offset %d/%d, want %d", r.Bucket, r.LogOffset, m.LogOffset, wantOff)
			}
			for _, f := range m.PrivateFiles {
				if strings.HasSuffix(f.LocalPath, ".sst") {
					t.Fatalf("empty bucket %d has table %s", r.Bucket, f.LocalPath)
				}
			}
		}
	}
}

// TestOwnedBuckets: a builder owning some buckets builds exactly those,
// rejects rows of the others, or skips them when told to.
func TestOwnedBuckets(t *testing.T) {
	s := newTestStore(t)
	in := []inputPair{{0, []byte("a"), []byte("1")}, {2, []byte("c"), []byte("3")}}
	res, _, err := buildPairs(t, s, in, buildCfg{nb: 4, budget: 1 << 20, owned: []int{2, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Bucket != 0 || res[1].Bucket != 2 {
		t.Fatalf("results %+v", res)
	}
	if keys := s.metadataKeys(t); len(keys) != 2 {
		t.Fatalf("_METADATA files %v", keys)
	}

	s2 := newTestStore(t)
	in = append(in, inputPair{3, []byte("d"), []byte("4")})
	_, _, err = buildPairs(t, s2, in, buildCfg{nb: 4, budget: 1 << 20, owned: []int{0, 2}})
	if !errors.Is(err, ErrBucketNotOwned) {
		t.Fatalf("err = %v, want ErrBucketNotOwned", err)
	}

	b, err := New(s2, Target{NumBuckets: 4, Snapshot: testTarget(s2), SnapshotIDs: snapIDs(4), Buckets: []int{0}},
		Options{OtherBuckets: OtherBucketsSkip, TempDir: t.TempDir(), MemoryBudget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	feedPairs(t, b, in)
	res, err = b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.SkippedRows != 2 || st.InputRows != 1 || len(res) != 1 || res[0].RowCount != 1 {
		t.Fatalf("stats %+v results %+v", st, res)
	}
}

func TestInvalidTargets(t *testing.T) {
	s := newTestStore(t)
	good := Target{NumBuckets: 2, Snapshot: testTarget(s), SnapshotIDs: snapIDs(2)}
	for name, mod := range map[string]func(*Target, *Options){
		"no buckets":          func(t *Target, _ *Options) { t.NumBuckets = 0 },
		"ids short":           func(t *Target, _ *Options) { t.SnapshotIDs = t.SnapshotIDs[:1] },
		"negative id":         func(t *Target, _ *Options) { t.SnapshotIDs = []int64{1, -1} },
		"owned out of range":  func(t *Target, _ *Options) { t.Buckets = []int{2} },
		"owned twice":         func(t *Target, _ *Options) { t.Buckets = []int{1, 1} },
		"owned none":          func(t *Target, _ *Options) { t.Buckets = []int{} },
		"offset bucket":       func(t *Target, _ *Options) { t.LogOffsets = map[int]int64{5: 1} },
		"negative offset":     func(t *Target, _ *Options) { t.LogOffsets = map[int]int64{0: -1} },
		"bad remote":          func(t *Target, _ *Options) { t.Snapshot.RemoteDir = "relative/dir" },
		"tiny budget":         func(_ *Target, o *Options) { o.MemoryBudget = 1024 },
		"tiny files":          func(_ *Target, o *Options) { o.TargetFileSize = 100 },
		"unknown compression": func(_ *Target, o *Options) { o.Compression = CompressionNone + 1 },
	} {
		tg, o := good, Options{TempDir: t.TempDir()}
		tg.SnapshotIDs = slices.Clone(good.SnapshotIDs)
		mod(&tg, &o)
		if b, err := New(s, tg, o); !errors.Is(err, ErrInvalidOptions) {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
}

// TestUploadFailures injects a failure at every Put of a build, one build
// per step, plus torn writes: each failed build leaves no temporary files
// and a _METADATA only if the failure came once every data file was up
// (the _METADATA phase: the last nb puts), and a clean retry into the same
// store succeeds, adopting what is there.
func TestUploadFailures(t *testing.T) {
	const nb = 3
	in, want, _ := genPairs(4, 3000, nb, 0.05)
	clean := newTestStore(t)
	if _, _, err := buildPairs(t, clean, in, buildCfg{nb: nb, budget: 256 << 10, workers: 2}); err != nil {
		t.Fatal(err)
	}
	steps := clean.faults.Calls(objstore.OpPut)
	if steps < 3*nb {
		t.Fatalf("only %d puts in a clean build", steps)
	}
	injected := errors.New("injected put failure")
	for n := 1; n <= steps; n++ {
		s := newTestStore(t)
		s.faults.FailNth(objstore.OpPut, n, injected)
		_, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 2})
		if !errors.Is(err, injected) {
			t.Fatalf("step %d: err = %v, want the injected failure", n, err)
		}
		var be *BucketError
		if !errors.As(err, &be) {
			t.Fatalf("step %d: error does not name the bucket: %v", n, err)
		}
		keys := s.metadataKeys(t)
		if len(keys) != 0 && (n <= steps-nb || len(keys) >= nb) {
			t.Fatalf("step %d of %d: _METADATA left: %v", n, steps, keys)
		}
		if n == steps || len(keys) > 0 {
			// Retry the last one into the same store: adopts what is there.
			s.faults.Reset()
			res, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 2})
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			for b, r := range res {
				_, got := restoreBucket(t, s, r)
				equalPairs(t, b, got, want[b])
			}
		}
	}
	// Torn uploads of data files and of _METADATA.
	for name, match := range map[string]func(string) bool{
		"data":     func(k string) bool { return strings.Contains(k, "/private-") },
		"metadata": func(k string) bool { return strings.HasSuffix(k, "/_METADATA") },
	} {
		s := newTestStore(t)
		s.faults.TruncateWrite(match, 10)
		_, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 2})
		if !errors.Is(err, objstore.ErrInjected) {
			t.Fatalf("%s: err = %v, want ErrInjected", name, err)
		}
		if keys := s.metadataKeys(t); len(keys) != 0 {
			t.Fatalf("%s: _METADATA left: %v", name, keys)
		}
	}
}

// TestCancel cancels a build at each phase: the error is the cancellation,
// no temporary file is left and no _METADATA exists, except, when it is
// cancelled in the _METADATA phase, those of buckets whose write was under
// way (complete buckets, never all of them).
func TestCancel(t *testing.T) {
	const nb = 3
	in, _, _ := genPairs(5, 3000, nb, 0)
	for _, phase := range []Phase{PhaseMerge, PhaseIngest, PhaseUpload, PhaseMetadata} {
		t.Run(string(phase), func(t *testing.T) {
			s := newTestStore(t)
			tmp := t.TempDir()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var b *Builder
			b, err := New(s, Target{NumBuckets: nb, Snapshot: testTarget(s), SnapshotIDs: snapIDs(nb)}, Options{
				TempDir: tmp, MemoryBudget: 256 << 10, Workers: 2,
				Progress: func(p BucketProgress) {
					// Stats from a progress callback must not deadlock.
					if st := b.Stats(); st.InputRows != int64(len(in)) {
						t.Errorf("stats during Finish: %d input rows", st.InputRows)
					}
					if p.Phase == phase {
						cancel()
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			feedPairs(t, b, in)
			_, err = b.Finish(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if keys := s.metadataKeys(t); len(keys) != 0 && (phase != PhaseMetadata || len(keys) >= nb) {
				t.Fatalf("_METADATA left: %v", keys)
			}
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("temp files left: %v", left)
			}
		})
	}
	t.Run("add", func(t *testing.T) {
		s := newTestStore(t)
		tmp := t.TempDir()
		b, err := New(s, Target{NumBuckets: nb, Snapshot: testTarget(s), SnapshotIDs: snapIDs(nb)},
			Options{TempDir: tmp, MemoryBudget: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var addErr error
		for i, p := range in {
			if i == len(in)/2 {
				cancel()
			}
			if addErr = b.AddPair(ctx, p.bucket, p.k, p.v); addErr != nil {
				break
			}
		}
		if !errors.Is(addErr, context.Canceled) {
			t.Fatalf("add err = %v, want context.Canceled", addErr)
		}
		if _, err := b.Finish(t.Context()); !errors.Is(err, context.Canceled) {
			t.Fatalf("finish after failed add: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if left := dirEntries(t, tmp); len(left) != 0 {
			t.Fatalf("temp files left: %v", left)
		}
	})
}

func TestResultJSON(t *testing.T) {
	r := BucketResult{Bucket: 3, SnapshotID: 9, MetadataPath: "file:///r/_METADATA", MetadataLength: 10,
		MetadataSHA256: strings.Repeat("a", 64), RowCount: 5, Duplicates: 1, Bytes: 100, Files: 4,
		MinKey: "00", MaxKey: "ff", LogOffset: 5}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back BucketResult
	if err := json.Unmarshal(b, &back); err != nil || back != r {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	if ref := r.MetadataRef(); ref != (snapshot.MetadataRef{Path: r.MetadataPath, Length: 10, SHA256: r.MetadataSHA256}) {
		t.Fatalf("ref %+v", ref)
	}
}

// TestUploadTrustsStamp: every SST goes to the store with the stamp taken
// after it was written, which it still has at upload (so a file:// store
// links it without hashing it again: the digest is computed once, while
// writing); the small checkpoint files go without one.
func TestUploadTrustsStamp(t *testing.T) {
	s := newTestStore(t)
	in, _, _ := genPairs(7, 20000, 3, 0.1)
	b, err := New(s, Target{NumBuckets: 3, Snapshot: testTarget(s), SnapshotIDs: snapIDs(3)}, Options{TempDir: t.TempDir(), TargetFileSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	feedPairs(t, b, in)
	res, err := b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, r := range res {
		files += r.Files
	}
	fresh, stale, other := s.sstFresh.Load(), s.sstStale.Load(), s.nonSST.Load()
	if fresh < 6 || stale != 0 || other == 0 || fresh+other != int64(files) {
		t.Fatalf("%d files uploaded: %d SSTs with a fresh stamp, %d SSTs without, %d others", files, fresh, stale, other)
	}
}

// TestLocalIntegrity: an SST file changed between being written (and
// hashed) and being uploaded fails the build instead of uploading bytes
// whose name and _METADATA digest would lie: the write changes the file's
// stamp, so the store reads it and finds the digest wrong.
func TestLocalIntegrity(t *testing.T) {
	s := newTestStore(t)
	tmp := t.TempDir()
	in, _, _ := genPairs(6, 2000, 1, 0)
	corrupted := false
	b, err := New(s, Target{NumBuckets: 1, Snapshot: testTarget(s), SnapshotIDs: snapIDs(1)}, Options{
		TempDir: tmp,
		Progress: func(p BucketProgress) {
			if p.Phase != PhaseUpload || corrupted {
				return
			}
			ssts, _ := filepath.Glob(filepath.Join(tmp, "thaw-build-*", "bucket-*", "ckpt", "*.sst"))
			if len(ssts) != 1 {
				t.Errorf("found %d checkpoint SSTs", len(ssts))
				return
			}
			// Past the file's modification time, so that the write below
			// changes it even with timestamps as coarse as a clock tick: the
			// upload trusts the digest of an SST whose stamp is unchanged.
			if fi, err := os.Stat(ssts[0]); err == nil {
				time.Sleep(time.Until(fi.ModTime().Add(20 * time.Millisecond)))
			}
			f, err := os.OpenFile(ssts[0], os.O_RDWR, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			var one [1]byte
			if _, err := f.ReadAt(one[:], 100); err != nil {
				t.Error(err)
				return
			}
			one[0] ^= 0xff
			if _, err := f.WriteAt(one[:], 100); err != nil {
				t.Error(err)
			}
			corrupted = true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	feedPairs(t, b, in)
	_, err = b.Finish(t.Context())
	if !corrupted || !errors.Is(err, ErrLocalIntegrity) {
		t.Fatalf("corrupted=%v err=%v, want ErrLocalIntegrity", corrupted, err)
	}
	if keys := s.metadataKeys(t); len(keys) != 0 {
		t.Fatalf("_METADATA written: %v", keys)
	}
}

// TestFailedRebuildKeepsAdoptedMetadata: a build that adopts some buckets'
// _METADATA (an earlier build of the same context wrote them) and then
// fails on another bucket leaves them: they belong to the earlier build
// (and, once committed, to the live snapshot).
func TestFailedRebuildKeepsAdoptedMetadata(t *testing.T) {
	const nb = 3
	in, _, _ := genPairs(6, 3000, nb, 0)
	s := newTestStore(t)
	if _, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 1}); err != nil {
		t.Fatal(err)
	}
	before := s.objects(t)
	keys := s.metadataKeys(t)
	if len(keys) != nb {
		t.Fatalf("_METADATA of the first build: %v", keys)
	}
	// The same pairs again, but bucket 1's last value differs: buckets 0
	// and 2 adopt, bucket 1's _METADATA conflicts.
	changed := slices.Clone(in)
	for i := len(changed) - 1; i >= 0; i-- {
		if changed[i].bucket == 1 {
			changed[i].v = append(slices.Clone(changed[i].v), 'x')
			break
		}
	}
	_, _, err := buildPairs(t, s, changed, buildCfg{nb: nb, budget: 256 << 10, workers: 1})
	if !errors.Is(err, objstore.ErrConflict) || !strings.Contains(err.Error(), "bucket 1: write _METADATA: ") ||
		!strings.Contains(err.Error(), "another build of this bucket wrote its snapshot first") {
		t.Fatalf("err = %v, want ErrConflict naming bucket 1 and saying why", err)
	}
	after := s.objects(t)
	for _, k := range keys {
		if !bytes.Equal(after[k], before[k]) {
			t.Errorf("%s: withdrawn or changed by the failed rebuild", k)
		}
	}
	// Bucket 1's conflict is found before its data files go up: the
	// rebuild leaves no file that no _METADATA lists.
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: left behind by the failed rebuild", k)
		}
	}
	// The same pairs, and the put of bucket 2's _METADATA fails after
	// buckets 0 and 1 adopted theirs: every _METADATA of the first build
	// stays.
	injected := errors.New("injected put failure")
	s.faults.FailKey(objstore.OpPut, func(k string) bool { return k == keys[2] }, injected)
	if _, _, err := buildPairs(t, s, in, buildCfg{nb: nb, budget: 256 << 10, workers: 1}); !errors.Is(err, injected) {
		t.Fatalf("retry: err = %v, want the injected failure", err)
	}
	s.faults.Reset()
	after = s.objects(t)
	for _, k := range keys {
		if !bytes.Equal(after[k], before[k]) {
			t.Errorf("%s: withdrawn or changed by the failed retry", k)
		}
	}
}

// TestFailedBuildKeepsMetadataAnotherAdopted: a build that wrote a
// bucket's _METADATA and then failed on another bucket leaves it: a second
// build of the same input, running meanwhile, adopted it and returned it
// in its results. The failed build used to withdraw what it had written
// and so deleted the _METADATA the other build's results (perhaps already
// committed) point to.
func TestFailedBuildKeepsMetadataAnotherAdopted(t *testing.T) {
	const nb = 3
	in, _, _ := genPairs(6, 3000, nb, 0)
	s := newTestStore(t)
	cfg := buildCfg{nb: nb, budget: 256 << 10, workers: 1}
	injected := errors.New("injected put failure")
	var (
		state  atomic.Int32 // 0: armed, 1: the other build runs, 2: done
		other  []BucketResult
		oerr   error
		adopts int
	)
	s.faults.FailKey(objstore.OpPut, func(k string) bool {
		if !strings.HasSuffix(k, "/1/snap-101/"+snapshot.MetadataFileName) || !state.CompareAndSwap(0, 1) {
			return false
		}
		// The first build has written bucket 0's _METADATA and is about
		// to write bucket 1's: the other build runs now, all the way.
		other, _, oerr = buildPairs(t, s, in, cfg)
		state.Store(2)
		return true
	}, injected)
	if _, _, err := buildPairs(t, s, in, cfg); !errors.Is(err, injected) {
		t.Fatalf("first build: %v, want the injected failure", err)
	}
	if state.Load() != 2 || oerr != nil || len(other) != nb {
		t.Fatalf("the other build: state %d, %d results, %v", state.Load(), len(other), oerr)
	}
	for _, r := range other {
		if r.MetadataAdopted {
			adopts++
		}
		key, err := s.Key(r.MetadataPath)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(t.Context(), key); err != nil {
			t.Errorf("bucket %d: the other build's _METADATA: %v", r.Bucket, err)
		}
	}
	if adopts != 1 {
		t.Fatalf("the other build adopted %d _METADATA, want 1 (bucket 0's)", adopts)
	}
}

// TestReservedKeyRefused: a pair under the tier's replica state key (which
// a composite primary key can encode to) fails the build: the snapshot
// would pass the commit's validation and then fail every restore.
func TestReservedKeyRefused(t *testing.T) {
	s := newTestStore(t)
	in := []inputPair{
		{0, []byte("a"), []byte("1")},
		{1, []byte(snapshot.StateKey), []byte("row")},
	}
	_, _, err := buildPairs(t, s, in, buildCfg{nb: 2, budget: 1 << 20, workers: 1})
	if !errors.Is(err, ErrInvalidRow) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("build with the reserved key: %v", err)
	}
}
