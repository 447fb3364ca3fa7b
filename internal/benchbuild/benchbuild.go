// Package benchbuild is the `thaw bench build` harness. In one run and on
// one data shape (a BYTES primary key of --key-bytes and a BYTES value of
// --value-bytes, --buckets buckets, Fluss bucketing) it measures:
//
//	(a)  the raw sstable writer writing the same number of pre-sorted pairs,
//	     of the build's encoded sizes, one stream: the write limit the
//	     ratio line compares against;
//	(a') the same on min(--workers, --buckets) streams (printed for context,
//	     with its own ratio line);
//	(b)  Arrow → key/value encoding and bucket routing alone;
//	(c)  the full offline build (route, encode, deduplicate, sort under the
//	     --memory budget, spill, merge, write, ingest, checkpoint, upload
//	     into a file:// store under --dir);
//	(c1) with --compare-workers: the same build with 1 worker, run before
//	     (c), for the line "ratio W workers/1 worker: R" (wall time of (c1)
//	     over (c)).
//
// It prints rows/s, MB/s (encoded key+value bytes), each stage's share of
// the run, CPU time and peak RSS, a breakdown of (c), and last the line
// "ratio full/limit: R" with R = rate(c) / rate(a).
//
// Synthetic input is generated outside the timed sections (its cost is
// printed). Stages run one after another in one process; before each one the
// harness collects garbage and resets the kernel's peak-RSS mark
// (/proc/self/clear_refs), so each stage's VmHWM is its own; where the reset
// is not allowed the figures are cumulative and the report says so.
package benchbuild

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

type config struct {
	rows        int64
	keyBytes    int
	valueBytes  int
	buckets     int
	workers     int
	memory      int64
	dir         string
	seed        uint64
	batchRows   int
	compression snapshotbuild.Compression
	blockSize   int
	keep        bool
	cpuProfile  string
	trace       bool
	compare     bool
	pairs       int
}

func parseArgs(stdout io.Writer, args []string) (config, error) {
	var c config
	fs := flagutil.New("thaw bench build", "", stdout)
	fs.Int64Var(&c.rows, "rows", 1_000_000, "number of input rows")
	fs.IntVar(&c.keyBytes, "key-bytes", 16, "bytes of the (BYTES) primary key column, at least 8")
	fs.IntVar(&c.valueBytes, "value-bytes", 100, "bytes of the (BYTES) value column")
	fs.IntVar(&c.buckets, "buckets", 4, "bucket count of the table")
	fs.IntVar(&c.workers, "workers", 0, "buckets built concurrently in (c); write streams of (a') (0: GOMAXPROCS)")
	mem := fs.String("memory", "256MiB", "memory budget of the build (e.g. 256MiB, 1GiB, bytes)")
	fs.StringVar(&c.dir, "dir", "", "working directory (default: a new temporary directory, removed afterwards)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the synthetic data")
	fs.IntVar(&c.batchRows, "batch-rows", 8192, "rows per Arrow record batch")
	comp := fs.String("compression", "snappy", "SST compression: snappy, zstd or none")
	fs.IntVar(&c.blockSize, "block-size", snapshotbuild.DefaultBlockSize, "uncompressed bytes per SST data block")
	fs.BoolVar(&c.keep, "keep", false, "keep the files written under --dir")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of stage (c) to this file")
	fs.BoolVar(&c.trace, "trace", false, "print stage (c)'s bucket phase changes with timestamps, and the cores it keeps busy every 10 ms")
	fs.BoolVar(&c.compare, "compare-workers", false, "also run (c) with 1 worker, before the --workers run, and print the speedup")
	fs.IntVar(&c.pairs, "pairs", 1, "with --compare-workers: run the 1-worker and the --workers build this many times, alternating, and print the median speedup")
	if err := flagutil.Parse(fs, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, flagutil.Usagef("bench build: unexpected arguments %q", fs.Args())
	}
	var err error
	if c.memory, err = parseBytes(*mem); err != nil {
		return c, fmt.Errorf("bench build: --memory: %w", err)
	}
	switch *comp {
	case "snappy":
		c.compression = snapshotbuild.CompressionSnappy
	case "zstd":
		c.compression = snapshotbuild.CompressionZstd
	case "none":
		c.compression = snapshotbuild.CompressionNone
	default:
		return c, fmt.Errorf("bench build: --compression %q: want snappy, zstd or none", *comp)
	}
	switch {
	case c.rows < 1:
		return c, errors.New("bench build: --rows must be at least 1")
	case c.keyBytes < 8 || c.keyBytes > 1<<20:
		// Shorter keys cannot be both unique and random: the build would
		// get fewer rows than (a) wrote, or (a) keys out of order.
		return c, errors.New("bench build: --key-bytes must be in [8, 1MiB]")
	case c.memory < snapshotbuild.MinMemoryBudget:
		return c, fmt.Errorf("bench build: --memory must be at least %s", benchutil.FmtBytes(snapshotbuild.MinMemoryBudget))
	case c.valueBytes < 0 || c.valueBytes > 16<<20:
		return c, errors.New("bench build: --value-bytes must be in [0, 16MiB]")
	case c.buckets < 1 || c.buckets > 4096:
		return c, errors.New("bench build: --buckets must be in [1, 4096]")
	case c.workers < 0:
		return c, errors.New("bench build: --workers must not be negative")
	case c.batchRows < 1:
		return c, errors.New("bench build: --batch-rows must be at least 1")
	case c.pairs < 1 || c.pairs > 1000:
		return c, errors.New("bench build: --pairs must be in [1, 1000]")
	case c.pairs > 1 && !c.compare:
		return c, errors.New("bench build: --pairs needs --compare-workers")
	case int64(c.batchRows)*int64(max(c.keyBytes, c.valueBytes)) >= 1<<31:
		return c, errors.New("bench build: --batch-rows times the column size must stay below 2 GiB")
	}
	if c.workers == 0 {
		c.workers = runtime.GOMAXPROCS(0)
	}
	if c.compare && c.workers < 2 {
		return c, fmt.Errorf("bench build: --compare-workers compares 1 worker with --workers, which is %d: want at least 2", c.workers)
	}
	return c, nil
}

// parseBytes reads "123", "64KiB", "256MiB", "1GiB" (also K, M, G, KB, MB, GB as powers of 1024).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suf)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return n * mult, nil
}

// stage is one measured stage.
type stage struct {
	name    string
	elapsed time.Duration
	cpu     time.Duration // user+system CPU time of the process during the stage
	faults  int64         // page faults of the process during the stage
	rows    int64
	bytes   int64 // logical key+value bytes
	peakRSS int64 // bytes; -1 unknown
	notes   []string
}

// Run parses args (the flags after `thaw bench build`), runs the stages and
// prints the report to stdout. --help prints the flags.
func Run(ctx context.Context, stdout io.Writer, args []string) (err error) {
	cfg, err := parseArgs(stdout, args)
	if err != nil {
		return err
	}
	dir := cfg.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "thaw-bench-build-"); err != nil {
			return fmt.Errorf("bench build: %w", err)
		}
		if !cfg.keep {
			defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
		}
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("bench build: %w", err)
		}
		for _, sub := range []string{"limit", "store", "tmp"} {
			if _, err := os.Stat(filepath.Join(dir, sub)); err == nil {
				return fmt.Errorf("bench build: %s already exists; use an empty --dir", filepath.Join(dir, sub))
			}
		}
		if !cfg.keep {
			defer func() {
				for _, sub := range []string{"limit", "store", "tmp"} {
					err = errors.Join(err, os.RemoveAll(filepath.Join(dir, sub)))
				}
			}()
		}
	}
	table, err := kv.NewTable(kv.TableSchema{
		SchemaID: 1,
		Columns: []kv.Column{
			{Name: "k", Type: kv.Type{Kind: kv.KindBytes}},
			{Name: "v", Type: kv.Type{Kind: kv.KindBytes}, Nullable: true},
		},
		PrimaryKey: []string{"k"},
		Buckets:    cfg.buckets,
	})
	if err != nil {
		return fmt.Errorf("bench build: %w", err)
	}
	g := newGenerator(cfg)
	keyLen, valLen := g.encodedSizes()
	logical := cfg.rows * int64(keyLen+valLen)

	fmt.Fprintf(stdout, "thaw bench build: rows=%d key-bytes=%d value-bytes=%d buckets=%d workers=%d memory=%s compression=%s block-size=%s seed=%d GOMAXPROCS=%d\n",
		cfg.rows, cfg.keyBytes, cfg.valueBytes, cfg.buckets, cfg.workers, benchutil.FmtBytes(cfg.memory), cfg.compression, benchutil.FmtBytes(int64(cfg.blockSize)), cfg.seed, runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "encoded pair: key %d B, value %d B; %s logical key+value bytes\n", keyLen, valLen, benchutil.FmtBytes(logical))
	resetOK := benchutil.ResetPeakRSS()

	cpu0, f0 := benchutil.CPUTime(), benchutil.PageFaults()
	a, err := runLimit(ctx, cfg, g, filepath.Join(dir, "limit"), 1)
	if err != nil {
		return err
	}
	a.bytes, a.cpu, a.faults = logical, benchutil.CPUTime()-cpu0, benchutil.PageFaults()-f0
	benchutil.ResetPeakRSS()
	var ap *stage
	if w := min(cfg.workers, cfg.buckets); w > 1 {
		if err := os.RemoveAll(filepath.Join(dir, "limit")); err != nil {
			return fmt.Errorf("bench build: %w", err)
		}
		cpu0, f0 = benchutil.CPUTime(), benchutil.PageFaults()
		if ap, err = runLimit(ctx, cfg, g, filepath.Join(dir, "limit"), w); err != nil {
			return err
		}
		ap.bytes, ap.cpu, ap.faults = logical, benchutil.CPUTime()-cpu0, benchutil.PageFaults()-f0
		benchutil.ResetPeakRSS()
	}
	cpu0, f0 = benchutil.CPUTime(), benchutil.PageFaults()
	b, err := runEncode(ctx, cfg, g, table)
	if err != nil {
		return err
	}
	b.bytes, b.cpu, b.faults = logical, benchutil.CPUTime()-cpu0, benchutil.PageFaults()-f0
	benchutil.ResetPeakRSS()
	// (c), and with --compare-workers (c1) before it, --pairs times: the
	// table shows the last pair, the speedup line the median of all.
	compare := cfg.compare
	rounds := 1
	if compare {
		rounds = cfg.pairs
	}
	var c1, c *stage
	var pairs [][2]time.Duration
	for i := range rounds {
		last := i == rounds-1
		if compare {
			one := cfg
			one.workers, one.cpuProfile = 1, ""
			if c1, err = measureFull(ctx, one, g, table, dir, logical); err != nil {
				return err
			}
			c1.name = "(c1) full build, 1 worker"
			if err := cleanFull(dir); err != nil {
				return err
			}
		}
		run := cfg
		if !last {
			run.cpuProfile = ""
		}
		if c, err = measureFull(ctx, run, g, table, dir, logical); err != nil {
			return err
		}
		if compare {
			c.name = fmt.Sprintf("(c) full build, %d workers", cfg.workers)
			pairs = append(pairs, [2]time.Duration{c1.elapsed, c.elapsed})
		}
		if !last {
			if err := cleanFull(dir); err != nil {
				return err
			}
		}
	}

	stages := []*stage{a}
	if ap != nil {
		stages = append(stages, ap)
	}
	stages = append(stages, b)
	if c1 != nil {
		stages = append(stages, c1)
	}
	stages = append(stages, c)
	var total time.Duration
	for _, s := range stages {
		total += s.elapsed
	}
	fmt.Fprintf(stdout, "\n%-24s %9s %12s %9s %7s %9s %10s %8s\n", "stage", "time", "rows/s", "MB/s", "share", "CPU", "peak RSS", "faults")
	for _, s := range stages {
		secs := s.elapsed.Seconds()
		fmt.Fprintf(stdout, "%-24s %8.2fs %12.0f %9.1f %6.1f%% %8.2fs %10s %8d\n", s.name, secs,
			float64(s.rows)/secs, float64(s.bytes)/secs/1e6, 100*secs/total.Seconds(), s.cpu.Seconds(), benchutil.FmtRSS(s.peakRSS), s.faults)
		for _, n := range s.notes {
			fmt.Fprintf(stdout, "    %s\n", n)
		}
	}
	if !resetOK {
		fmt.Fprintln(stdout, "note: peak RSS could not be reset between stages; figures are cumulative (VmHWM)")
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(stdout, "loadavg at end: %s\n", strings.TrimSpace(string(l)))
	}
	if ap != nil {
		fmt.Fprintf(stdout, "ratio full/limit at equal parallelism, (c) vs (a') %d streams: %.2f\n",
			min(cfg.workers, cfg.buckets), ap.elapsed.Seconds()/c.elapsed.Seconds())
	}
	if len(pairs) > 1 {
		ratios := make([]float64, len(pairs))
		var ones, many []string
		for i, p := range pairs {
			ratios[i] = p[0].Seconds() / p[1].Seconds()
			ones = append(ones, fmt.Sprintf("%.2fs", p[0].Seconds()))
			many = append(many, fmt.Sprintf("%.2fs", p[1].Seconds()))
		}
		fmt.Fprintf(stdout, "%d alternating pairs: 1 worker %s; %d workers %s\n", len(pairs), strings.Join(ones, " "), cfg.workers, strings.Join(many, " "))
		fmt.Fprintf(stdout, "ratio %d workers/1 worker per pair: %s\n", cfg.workers, benchutil.FmtRatios(ratios))
		slices.Sort(ratios)
		fmt.Fprintf(stdout, "ratio %d workers/1 worker: %.2f (median of %d pairs; lowest %.2f, highest %.2f)\n",
			cfg.workers, benchutil.Median(ratios), len(ratios), ratios[0], ratios[len(ratios)-1])
	} else if c1 != nil {
		fmt.Fprintf(stdout, "ratio %d workers/1 worker: %.2f\n", cfg.workers, c1.elapsed.Seconds()/c.elapsed.Seconds())
	}
	fmt.Fprintf(stdout, "ratio full/limit: %.2f\n", a.elapsed.Seconds()/c.elapsed.Seconds())
	return nil
}

// measureFull runs stage (c) with cfg and fills in its bytes and CPU time;
// the peak RSS is reset afterwards for the next stage.
func measureFull(ctx context.Context, cfg config, g *generator, table *kv.Table, dir string, logical int64) (*stage, error) {
	cpu0, f0 := benchutil.CPUTime(), benchutil.PageFaults()
	st, err := runFull(ctx, cfg, g, table, dir)
	if err != nil {
		return nil, err
	}
	st.bytes, st.cpu, st.faults = logical, benchutil.CPUTime()-cpu0, benchutil.PageFaults()-f0
	benchutil.ResetPeakRSS()
	return st, nil
}

// cleanFull removes what a run of stage (c) left under dir.
func cleanFull(dir string) error {
	for _, sub := range []string{"store", "tmp"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return fmt.Errorf("bench build: %w", err)
		}
	}
	return nil
}

// runLimit writes cfg.rows pre-sorted pairs of the build's encoded sizes
// with the raw sstable writer, the build's writer options and target file
// size, one file sequence per bucket, on the given number of goroutines
// (streams). With one stream it is the raw writer's rate, the "limit" of
// the ratio line.
func runLimit(ctx context.Context, cfg config, g *generator, dir string, streams int) (*stage, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench build: %w", err)
	}
	wopts := snapshotbuild.WriterOptions(cfg.compression, cfg.blockSize)
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var files, fileBytes atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			for {
				bucket := int(next.Add(1) - 1)
				if bucket >= cfg.buckets || ctx.Err() != nil {
					return
				}
				lo := cfg.rows * int64(bucket) / int64(cfg.buckets)
				hi := cfg.rows * int64(bucket+1) / int64(cfg.buckets)
				n, size, err := writeSorted(filepath.Join(dir, fmt.Sprintf("bucket-%d", bucket)), wopts, g, lo, hi)
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				files.Add(n)
				fileBytes.Add(size)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, fmt.Errorf("bench build: raw write: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := "(a) raw sstable write"
	if streams > 1 {
		name = fmt.Sprintf("(a') raw write, %d streams", streams)
	}
	s := &stage{name: name, elapsed: elapsed, rows: cfg.rows, peakRSS: benchutil.PeakRSS()}
	s.notes = append(s.notes, fmt.Sprintf("pre-sorted pairs, %d SST files, %s on disk", files.Load(), benchutil.FmtBytes(fileBytes.Load())))
	return s, nil
}

func writeSorted(dir string, wopts sstable.WriterOptions, g *generator, lo, hi int64) (files, size int64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	var w *sstable.Writer
	var path string
	closeFile := func() error {
		if w == nil {
			return nil
		}
		err := w.Close()
		w = nil
		files++
		if err != nil {
			return err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		size += fi.Size()
		return nil
	}
	key := make([]byte, 0, 1+binary.MaxVarintLen64+g.cfg.keyBytes)
	for i := lo; i < hi; i++ {
		if w == nil {
			path = filepath.Join(dir, fmt.Sprintf("%06d.sst", files+1))
			f, err := snapshotbuild.LocalFS().Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				return files, size, err
			}
			w = sstable.NewWriter(snapshotbuild.NewFileWritable(f), wopts)
		}
		key = g.sortedKey(key[:0], i)
		if err := w.Set(key, g.encodedValue(i)); err != nil {
			return files, size, errors.Join(err, closeFile())
		}
		if w.Raw().EstimatedSize() >= snapshotbuild.DefaultTargetFileSize {
			if err := closeFile(); err != nil {
				return files, size, err
			}
		}
	}
	return files, size, closeFile()
}

// runEncode converts the synthetic Arrow batches to key/value pairs and
// buckets, and does nothing else.
func runEncode(ctx context.Context, cfg config, g *generator, table *kv.Table) (*stage, error) {
	enc := snapshotbuild.NewRowEncoder(table, "")
	perBucket := make([]int64, cfg.buckets)
	var genTime time.Duration
	start := time.Now()
	for batch, lo := int64(0), int64(0); lo < cfg.rows; batch, lo = batch+1, lo+int64(cfg.batchRows) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		rec := g.batch(lo, min(int64(cfg.batchRows), cfg.rows-lo))
		genTime += time.Since(t0)
		err := enc.Encode(rec, batch, func(_, bucket int, key, value []byte) error {
			perBucket[bucket] += int64(len(key) + len(value))
			return nil
		})
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("bench build: encode: %w", err)
		}
	}
	elapsed := time.Since(start) - genTime
	s := &stage{name: "(b) encode + route", elapsed: elapsed, rows: cfg.rows, peakRSS: benchutil.PeakRSS()}
	s.notes = append(s.notes, fmt.Sprintf("input generation %.2fs excluded", genTime.Seconds()))
	return s, nil
}

// runFull builds every bucket's snapshot into a file:// store under dir.
func runFull(ctx context.Context, cfg config, g *generator, table *kv.Table, dir string) (*stage, error) {
	storeDir := filepath.Join(dir, "store")
	tmpDir := filepath.Join(dir, "tmp")
	for _, d := range []string{storeDir, tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("bench build: %w", err)
		}
	}
	abs, err := filepath.Abs(storeDir)
	if err != nil {
		return nil, fmt.Errorf("bench build: %w", err)
	}
	store, err := objstore.Open(ctx, "file://"+filepath.ToSlash(abs))
	if err != nil {
		return nil, fmt.Errorf("bench build: %w", err)
	}
	defer store.Close()
	ids := make([]int64, cfg.buckets)
	for i := range ids {
		ids[i] = 1
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("bench build: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, fmt.Errorf("bench build: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var genTime time.Duration
	start := time.Now()
	if cfg.trace {
		stop := make(chan struct{})
		defer close(stop)
		go traceCores(start, stop)
	}
	var progress func(snapshotbuild.BucketProgress)
	if cfg.trace {
		var mu sync.Mutex
		last := map[int]snapshotbuild.Phase{}
		progress = func(p snapshotbuild.BucketProgress) {
			mu.Lock()
			defer mu.Unlock()
			if last[p.Bucket] != p.Phase {
				last[p.Bucket] = p.Phase
				fmt.Fprintf(os.Stderr, "%8.3fs bucket %d %s rows=%d bytes=%d\n", time.Since(start).Seconds(), p.Bucket, p.Phase, p.Rows, p.Bytes)
			}
		}
	}
	b, err := snapshotbuild.New(store, snapshotbuild.Target{
		Table:       table,
		Snapshot:    snapshot.Target{RemoteDir: store.Base(), Database: "bench", Table: "t", TableID: 1},
		SnapshotIDs: ids,
	}, snapshotbuild.Options{
		Workers:      cfg.workers,
		MemoryBudget: cfg.memory,
		TempDir:      tmpDir,
		Compression:  cfg.compression,
		BlockSize:    cfg.blockSize,
		Progress:     progress,
	})
	if err != nil {
		return nil, fmt.Errorf("bench build: %w", err)
	}
	defer b.Close()
	for lo := int64(0); lo < cfg.rows; lo += int64(cfg.batchRows) {
		t0 := time.Now()
		rec := g.batch(lo, min(int64(cfg.batchRows), cfg.rows-lo))
		genTime += time.Since(t0)
		err := b.Add(ctx, rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("bench build: %w", err)
		}
	}
	addDone := time.Now()
	if cfg.trace {
		fmt.Fprintf(os.Stderr, "%8.3fs add phase done\n", addDone.Sub(start).Seconds())
	}
	res, err := b.Finish(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench build: %w", err)
	}
	end := time.Now()
	if cfg.trace {
		fmt.Fprintf(os.Stderr, "%8.3fs finish returned\n", end.Sub(start).Seconds())
	}
	elapsed := end.Sub(start) - genTime
	st := b.Stats()
	var rows, dups, snapBytes int64
	files := 0
	for _, r := range res {
		rows += r.RowCount
		dups += r.Duplicates
		snapBytes += r.Bytes
		files += r.Files
	}
	s := &stage{name: "(c) full build", elapsed: elapsed, rows: cfg.rows, peakRSS: benchutil.PeakRSS()}
	s.notes = append(s.notes,
		fmt.Sprintf("input generation %.2fs excluded; add phase %.2fs, finish %.2fs (wall)",
			genTime.Seconds(), (addDone.Sub(start)-genTime).Seconds(), end.Sub(addDone).Seconds()),
		benchutil.BuildBusy(st),
		fmt.Sprintf("%s; budget peak %s of %s; %s prefaulted by a second core; %d snapshot rows, %d duplicates, %d private files, %s uploaded",
			benchutil.Spills(st), benchutil.FmtBytes(st.PeakBudget), benchutil.FmtBytes(st.MemoryBudget), benchutil.FmtBytes(st.Prefaulted), rows, dups, files, benchutil.FmtBytes(snapBytes)))
	if st.UnreproducibleManifests > 0 {
		s.notes = append(s.notes, fmt.Sprintf("WARNING: %d MANIFESTs could not be normalized (not byte-reproducible)", st.UnreproducibleManifests))
	}
	return s, nil
}

// traceCores prints, every 10 ms until stop is closed, how many cores the
// process kept busy since the previous line (CPU time over wall time).
func traceCores(start time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	lastWall, lastCPU := time.Now(), benchutil.CPUTime()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		wall, cpu := time.Now(), benchutil.CPUTime()
		fmt.Fprintf(os.Stderr, "%8.3fs cores busy %.2f\n", wall.Sub(start).Seconds(), float64(cpu-lastCPU)/float64(wall.Sub(lastWall)))
		lastWall, lastCPU = wall, cpu
	}
}

// generator makes the synthetic data, deterministic for a seed: row i has
// a pseudo-random key of key-bytes (at least 8) bytes (unique: the first
// 8 bytes are a bijection of i) and a value of value-bytes bytes, 40
// pseudo-random then a repeating pattern (compressible like real rows). The
// values come from a pool of distinct values, so generating is cheap.
type generator struct {
	cfg     config
	pool    []byte // poolSize values of valueBytes each
	extPool []byte // pool, then its first batchRows values again: any window of a batch is contiguous
	keyBuf  []byte
	koff    []int32
	voff    []int32 // 0, V, 2V, ...: the offsets of every value window
	// Encoded value template of stage (a): the build's encoded value length.
	encVal []byte
}

const poolSize = 4096

func newGenerator(cfg config) *generator {
	g := &generator{cfg: cfg, pool: make([]byte, poolSize*cfg.valueBytes)}
	pattern := []byte("thaw-bench-build-pattern-")
	for i := range poolSize {
		v := g.pool[i*cfg.valueBytes : (i+1)*cfg.valueBytes]
		x := cfg.seed ^ uint64(i)*0x9e3779b97f4a7c15
		for j := range v {
			if j < 40 {
				if j%8 == 0 {
					x = benchutil.SplitMix(x)
				}
				v[j] = byte(x >> (8 * (j % 8)))
			} else {
				v[j] = pattern[j%len(pattern)]
			}
		}
	}
	g.extPool = make([]byte, 0, (poolSize+cfg.batchRows)*cfg.valueBytes)
	g.extPool = append(g.extPool, g.pool...)
	for i := range cfg.batchRows {
		j := i % poolSize
		g.extPool = append(g.extPool, g.pool[j*cfg.valueBytes:(j+1)*cfg.valueBytes]...)
	}
	g.keyBuf = make([]byte, 0, cfg.batchRows*cfg.keyBytes)
	g.koff = make([]int32, cfg.batchRows+1)
	g.voff = make([]int32, cfg.batchRows+1)
	for i := range g.voff {
		g.voff[i] = int32(i * cfg.valueBytes)
	}
	// Stage (a) values: byte for byte what the table encodes for a row
	// (schema id, null bitmap, length-prefixed key and value columns), so
	// both stages compress alike.
	_, vl := g.encodedSizes()
	g.encVal = make([]byte, 0, vl*poolSize)
	for i := range poolSize {
		g.encVal = append(g.encVal, 1, 0, 0)
		g.encVal = binary.AppendUvarint(g.encVal, uint64(cfg.keyBytes))
		g.encVal = g.rowKey(g.encVal, int64(i))
		g.encVal = binary.AppendUvarint(g.encVal, uint64(cfg.valueBytes))
		g.encVal = append(g.encVal, g.pool[i*cfg.valueBytes:(i+1)*cfg.valueBytes]...)
	}
	return g
}

// encodedSizes are the lengths of one row's key and value bytes as the
// table encodes them: key = uvarint(len) + key; value = 2-byte schema id +
// 1-byte null bitmap + both columns length-prefixed.
func (g *generator) encodedSizes() (int, int) {
	k := uvarintLen(g.cfg.keyBytes) + g.cfg.keyBytes
	v := 2 + 1 + k + uvarintLen(g.cfg.valueBytes) + g.cfg.valueBytes
	return k, v
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// rowKey appends row i's key column bytes.
func (g *generator) rowKey(dst []byte, i int64) []byte {
	x := benchutil.SplitMix(uint64(i) ^ g.cfg.seed*0xd1342543de82ef95)
	var w [8]byte
	for need := g.cfg.keyBytes; need > 0; {
		binary.BigEndian.PutUint64(w[:], x)
		n := min(8, need)
		dst = append(dst, w[:n]...)
		need -= n
		x = benchutil.SplitMix(x)
	}
	return dst
}

// sortedKey appends the i-th key of stage (a): the build's encoded key
// (uvarint length + key-bytes bytes), strictly ascending in i, and as
// random as the build's sorted keys: the first 8 bytes are i*step plus a
// random offset below step (step = 2^64/rows), so neighbours share the same
// few leading bytes as sorted random keys do; the rest is random (keys
// have at least 8 bytes: parseArgs).
func (g *generator) sortedKey(dst []byte, i int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(g.cfg.keyBytes))
	var w [8]byte
	step := math.MaxUint64 / uint64(g.cfg.rows)
	x := benchutil.SplitMix(uint64(i) ^ g.cfg.seed*0xd1342543de82ef95)
	binary.BigEndian.PutUint64(w[:], uint64(i)*step+x%step)
	dst = append(dst, w[:]...)
	for need := g.cfg.keyBytes - 8; need > 0; {
		x = benchutil.SplitMix(x)
		binary.BigEndian.PutUint64(w[:], x)
		n := min(8, need)
		dst = append(dst, w[:n]...)
		need -= n
	}
	return dst
}

func (g *generator) encodedValue(i int64) []byte {
	_, vl := g.encodedSizes()
	j := int(i % poolSize)
	return g.encVal[j*vl : (j+1)*vl]
}

// batch builds rows [lo, lo+n) as an Arrow record batch: the key column is
// generated into a reused buffer, the value column is a zero-copy window
// over the value pool, so generating input costs little next to what is
// measured. The batch is valid until the next call (the builder and the
// encoder do not retain batches).
func (g *generator) batch(lo, n int64) arrow.RecordBatch {
	vb := g.cfg.valueBytes
	keys := g.keyBuf[:0]
	koff := g.koff[:n+1]
	for r := range n {
		keys = g.rowKey(keys, lo+r)
		koff[r+1] = int32(len(keys))
	}
	g.keyBuf = keys
	start := int(lo%poolSize) * vb
	vals := g.extPool[start : start+int(n)*vb]
	kArr := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, int(n),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(koff)), memory.NewBufferBytes(keys)}, nil, 0, 0))
	vArr := array.NewBinaryData(array.NewData(arrow.BinaryTypes.Binary, int(n),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(g.voff[:n+1])), memory.NewBufferBytes(vals)}, nil, 0, 0))
	defer kArr.Release()
	defer vArr.Release()
	return array.NewRecordBatch(g.schema(), []arrow.Array{kArr, vArr}, n)
}

var benchSchema = arrow.NewSchema([]arrow.Field{
	{Name: "k", Type: arrow.BinaryTypes.Binary},
	{Name: "v", Type: arrow.BinaryTypes.Binary, Nullable: true},
}, nil)

func (g *generator) schema() *arrow.Schema { return benchSchema }
