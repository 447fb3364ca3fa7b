package benchload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/bulkload/bulkloadclient"
	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshotbuild"
	"github.com/thawdb/thaw/tier/tierclient"
)

type config struct {
	rows         int64
	buckets      int
	keyBytes     int
	valueBytes   int
	batchRows    int
	batchBytes   int
	inflight     int
	perBucket    int
	arrowRows    int
	bulkInput    string
	memory       int64
	workers      int
	commitBudget time.Duration
	dataDir      string
	tablets      int
	replication  int
	sample       int
	fullCount    bool
	seed         uint64
	cpuProfile   string // bulk path
	cpuProfileA  string // ordinary path
	runs         int
	scoped       bool // bulk path through the upload gateway
	objectStore  string
	signed       bool                // scoped uploads signed for the store where it signs them
	gatherer     prometheus.Gatherer // the embedded tier's metrics
}

func parseArgs(stdout io.Writer, args []string) (config, error) {
	var c config
	fs := flagutil.New("thaw bench load", "", stdout)
	fs.Int64Var(&c.rows, "rows", 1_000_000, "rows loaded by each path")
	fs.IntVar(&c.buckets, "buckets", 8, "bucket count of both tables")
	fs.IntVar(&c.keyBytes, "key-bytes", 8, "key bytes: 8 makes a BIGINT id, other sizes a BYTES key")
	fs.IntVar(&c.valueBytes, "value-bytes", 100, "bytes of the STRING payload column")
	fs.IntVar(&c.batchRows, "batch", tierclient.DefaultMaxBatchRows, "ordinary path: most rows per write request")
	fs.IntVar(&c.batchBytes, "batch-bytes", tierclient.DefaultMaxBatchBytes, "ordinary path: most key+value bytes per write request")
	fs.IntVar(&c.inflight, "inflight", tierclient.DefaultMaxInFlight, "ordinary path: most requests in flight over all buckets")
	fs.IntVar(&c.perBucket, "inflight-per-bucket", tierclient.DefaultMaxInFlightPerBucket, "ordinary path: most write requests in flight per bucket")
	fs.IntVar(&c.arrowRows, "arrow-batch", 8192, "bulk path: rows per Arrow record batch")
	fs.StringVar(&c.bulkInput, "bulk-input", "arrow", "bulk path input: arrow (Session.Add of record batches) or rows (Session.AddRow)")
	mem := fs.String("memory", "256MiB", "bulk path: memory budget of the build session (e.g. 256MiB, 1GiB, bytes)")
	fs.IntVar(&c.workers, "workers", 0, "bulk path: buckets built concurrently (0: GOMAXPROCS)")
	fs.DurationVar(&c.commitBudget, "commit-budget", 30*time.Minute, "bulk path: how long Commit may retry")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory of the embedded tier and the build's temporary files, new or empty (default: a new temporary directory, removed afterwards)")
	fs.IntVar(&c.tablets, "tablets", daemon.DefaultTabletServers, "tablet servers of the embedded tier")
	fs.IntVar(&c.replication, "replication", 0, "replication factor of both tables (0: the tier's default)")
	fs.IntVar(&c.sample, "verify-sample", 1000, "rows of each table read back with Get and compared")
	fs.BoolVar(&c.fullCount, "verify-count", true, "count every row of each table with a Scan of every bucket")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the synthetic data")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the bulk path's measurement (whole process, Begin to Commit) to this file")
	fs.StringVar(&c.cpuProfileA, "cpuprofile-ordinary", "", "write a CPU profile of the ordinary path's measurement (whole process) to this file")
	fs.IntVar(&c.runs, "runs", 1, "measure both paths this many times, each on a fresh embedded tier, and end with the median ratio")
	fs.BoolVar(&c.scoped, "scoped-uploads", false, "bulk path: write snapshot files and the manifest through the coordinator's upload gateway with scoped credentials, not into the store directly")
	fs.StringVar(&c.objectStore, "object-store", "", "snapshot store URL of the embedded tier (default: file:// under the data directory); s3:// takes its credentials from the AWS SDK's default chain")
	fs.BoolVar(&c.signed, "signed-uploads", true, "with --scoped-uploads on an s3:// store: the gateway signs a PUT per object and the bytes go straight to the store (false: through the gateway)")
	if err := flagutil.Parse(fs, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, flagutil.Usagef("bench load: unexpected arguments %q", fs.Args())
	}
	var err error
	if c.memory, err = parseBytes(*mem); err != nil {
		return c, fmt.Errorf("bench load: --memory: %w", err)
	}
	switch {
	case c.rowGen().Validate(c.rows) != nil:
		return c, fmt.Errorf("bench load: %w", c.rowGen().Validate(c.rows))
	case c.arrowRows < 1:
		return c, errors.New("bench load: --arrow-batch must be at least 1")
	case c.bulkInput != "arrow" && c.bulkInput != "rows":
		return c, fmt.Errorf("bench load: --bulk-input %q: want arrow or rows", c.bulkInput)
	case c.workers < 0:
		return c, errors.New("bench load: --workers must not be negative")
	case c.commitBudget <= 0:
		return c, errors.New("bench load: --commit-budget must be positive")
	case c.tablets < 1:
		return c, errors.New("bench load: --tablets must be at least 1")
	case c.sample < 0:
		return c, errors.New("bench load: --verify-sample must not be negative")
	case c.replication < 0:
		return c, errors.New("bench load: --replication must not be negative")
	case c.runs < 1:
		return c, errors.New("bench load: --runs must be at least 1")
	case c.runs > 1 && (c.cpuProfile != "" || c.cpuProfileA != ""):
		return c, errors.New("bench load: --cpuprofile and --cpuprofile-ordinary profile one run: use them with --runs 1")
	}
	if c.workers == 0 {
		c.workers = runtime.GOMAXPROCS(0)
	}
	return c, nil
}

// parseBytes parses "256MiB", "1GiB", "64KiB" or a plain byte count.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size", s)
	}
	return n * mult, nil
}

// Run parses args, loads the rows through both paths (--runs times, each
// on a fresh embedded tier) and prints the report to stdout; the last line
// is "ratio bulk/ordinary: R", with several runs their median.
func Run(ctx context.Context, stdout io.Writer, args []string) error {
	cfg, err := parseArgs(stdout, args)
	if err != nil {
		return err
	}
	var ratios, cpuRatios []float64
	for i := range cfg.runs {
		dataDir := cfg.dataDir
		if cfg.runs > 1 {
			fmt.Fprintf(stdout, "=== run %d of %d\n", i+1, cfg.runs)
			if dataDir != "" {
				dataDir = filepath.Join(dataDir, fmt.Sprintf("run-%d", i+1))
			}
		}
		m, err := runOnce(ctx, stdout, cfg, dataDir)
		if err != nil {
			return err
		}
		ratios, cpuRatios = append(ratios, m.ratio), append(cpuRatios, m.cpuRatio)
		if cfg.runs > 1 {
			fmt.Fprintln(stdout)
		}
	}
	if cfg.runs > 1 {
		fmt.Fprintf(stdout, "ratios bulk/ordinary of the %d runs: %s\n", cfg.runs, benchutil.FmtRatios(ratios))
		fmt.Fprintf(stdout, "CPU per row, ordinary/bulk, median: %.2f\n", benchutil.Median(cpuRatios))
		fmt.Fprintf(stdout, "ratio bulk/ordinary: %.2f\n", benchutil.Median(ratios))
	}
	return nil
}

// measurement is what one run ends with.
type measurement struct {
	ratio    float64 // bulk rows/s over ordinary rows/s
	cpuRatio float64 // ordinary CPU over bulk CPU (0: not known)
}

// runOnce measures both paths on a tier of its own under dataDir ("": a
// temporary directory).
func runOnce(ctx context.Context, stdout io.Writer, cfg config, dataDir string) (m measurement, err error) {
	tier, dir, stop, err := benchutil.StartTier(ctx, "bench load", dataDir, cfg.tablets, func(ec *daemon.EmbeddedConfig) {
		ec.ObjectStore = cfg.objectStore
		if !cfg.signed {
			ec.Coordinator.BulkLoad.SignedUploadTTL = -1
		}
	})
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	where := fmt.Sprintf("embedded tier in this process (%d tablet servers, data under %s, snapshots in %s)", cfg.tablets, dir, tier.Objects().Base())
	cfg.gatherer = tier.Gatherer()
	return bench(ctx, stdout, cfg, tier.HostPort(), where, dir)
}

// result is one path's measurement.
type result struct {
	elapsed time.Duration
	cpu     time.Duration
	faults  int64 // page faults of the process
}

func (r result) rowsPerSec(rows int64) float64 { return float64(rows) / r.elapsed.Seconds() }

// bench creates the two tables and measures both paths against the tier
// at addr.
func bench(ctx context.Context, stdout io.Writer, cfg config, addr, where, dir string) (measurement, error) {
	// Each run's peak RSS is its own (the memory an earlier run freed may
	// still be resident: glibc keeps the C memory Pebble freed).
	peakSince := "the run began"
	if !benchutil.ResetPeakRSS() {
		peakSince = "the process began"
	}
	var m measurement
	client, err := tierclient.New(ctx, addr,
		tierclient.WithLogger(slog.New(slog.DiscardHandler)),
		tierclient.WithMaxBatchRows(cfg.batchRows),
		tierclient.WithMaxBatchBytes(cfg.batchBytes),
		tierclient.WithMaxInFlight(cfg.inflight),
		tierclient.WithMaxInFlightPerBucket(cfg.perBucket),
		tierclient.WithMaxBufferedBytes(max(tierclient.DefaultMaxBufferedBytes, 4*int64(cfg.batchBytes))))
	if err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	defer client.Close()

	g := benchutil.NewRowGen(cfg.rowGen())
	const db = "bench"
	suffix := time.Now().UnixNano()
	ordinary := tierclient.Target{Database: db, Table: fmt.Sprintf("load_ordinary_%d", suffix)}
	bulk := tierclient.Target{Database: db, Table: fmt.Sprintf("load_bulk_%d", suffix)}
	if err := client.CreateDatabase(ctx, db); err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	var info *tierclient.TableInfo
	for _, t := range []tierclient.Target{ordinary, bulk} {
		if info, err = client.CreateTable(ctx, t.Database, t.Table, g.Schema(), cfg.replication); err != nil {
			return m, fmt.Errorf("bench load: %w", err)
		}
		if err := benchutil.WaitServing(ctx, client, t, info); err != nil {
			return m, fmt.Errorf("bench load: %w", err)
		}
	}
	keyLen, valLen, err := g.EncodedSizes(info.KV)
	if err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	logical := cfg.rows * int64(keyLen+valLen)
	fmt.Fprintf(stdout, "thaw bench load: rows=%d buckets=%d key-bytes=%d value-bytes=%d replication=%d GOMAXPROCS=%d\n",
		cfg.rows, cfg.buckets, cfg.keyBytes, cfg.valueBytes, info.ReplicationFactor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "tier: %s\n", where)
	fmt.Fprintf(stdout, "tables %v and %v: %s; encoded row: key %d B, value %d B; %s logical key+value bytes per path\n",
		ordinary, bulk, g.Describe(), keyLen, valLen, benchutil.FmtBytes(logical))

	// (a) The ordinary write path.
	fmt.Fprintf(stdout, "\n(a) ordinary write path: tierclient.Writer, batch=%d batch-bytes=%d inflight=%d inflight-per-bucket=%d\n",
		cfg.batchRows, cfg.batchBytes, cfg.inflight, cfg.perBucket)
	writeBack(stdout)
	fmt.Fprintf(stdout, "    loadavg before: %s\n", benchutil.LoadAvg())
	stopA, err := startProfile(cfg.cpuProfileA)
	if err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	ra, err := runOrdinary(ctx, stdout, client, ordinary, g, cfg)
	if err := errors.Join(err, stopA()); err != nil {
		return m, fmt.Errorf("bench load: ordinary path: %w", err)
	}
	fmt.Fprintf(stdout, "    loadavg after: %s\n", benchutil.LoadAvg())
	report(stdout, "ordinary", ra, cfg.rows, logical)
	if err := verify(ctx, stdout, client, ordinary, info, g, cfg); err != nil {
		return m, fmt.Errorf("bench load: ordinary path: verify: %w", err)
	}

	// (b) The bulk path.
	uploads := "into the store directly"
	if cfg.scoped {
		uploads = "with scoped credentials (signed PUTs straight to an s3:// store, else through the upload gateway)"
		if !cfg.signed {
			uploads = "through the upload gateway (scoped credentials)"
		}
	}
	fmt.Fprintf(stdout, "\n(b) bulk path: bulkloadclient, input=%s arrow-batch=%d memory=%s workers=%d, uploads %s\n",
		cfg.bulkInput, cfg.arrowRows, benchutil.FmtBytes(cfg.memory), cfg.workers, uploads)
	// The tier goes on compacting the ordinary table after its rows are
	// readable; that work is not the bulk path's to pay for.
	waited, idle, err := settle(ctx, settleMax)
	if err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	if idle {
		fmt.Fprintf(stdout, "    waited %.2fs for the process to go idle (the tier's background work after (a))\n", waited.Seconds())
	} else {
		fmt.Fprintf(stdout, "    the process did not go idle within %v (the tier's background work after (a)); measuring anyway\n", settleMax)
	}
	writeBack(stdout)
	fmt.Fprintf(stdout, "    loadavg before: %s\n", benchutil.LoadAvg())
	stopB, err := startProfile(cfg.cpuProfile)
	if err != nil {
		return m, fmt.Errorf("bench load: %w", err)
	}
	rb, err := runBulk(ctx, stdout, addr, bulk, g, cfg, dir)
	if err := errors.Join(err, stopB()); err != nil {
		return m, fmt.Errorf("bench load: bulk path: %w", err)
	}
	fmt.Fprintf(stdout, "    loadavg after: %s\n", benchutil.LoadAvg())
	report(stdout, "bulk", rb, cfg.rows, logical)
	if err := verify(ctx, stdout, client, bulk, info, g, cfg); err != nil {
		return m, fmt.Errorf("bench load: bulk path: verify: %w", err)
	}

	fmt.Fprintf(stdout, "\npeak RSS (VmHWM since %s, whole process: client, builder, etcd, coordinator and tablet servers): %s\n", peakSince, benchutil.FmtRSS(benchutil.PeakRSS()))
	if rb.cpu > 0 {
		// What the two paths cost, apart from how long they take.
		m.cpuRatio = ra.cpu.Seconds() / rb.cpu.Seconds()
		fmt.Fprintf(stdout, "CPU per row, ordinary/bulk: %.2f\n", m.cpuRatio)
	}
	m.ratio = rb.rowsPerSec(cfg.rows) / ra.rowsPerSec(cfg.rows)
	fmt.Fprintf(stdout, "ratio bulk/ordinary: %.2f\n", m.ratio)
	return m, nil
}

// startProfile starts a CPU profile into path ("" : none) and returns the
// function that stops it and closes the file. The profile covers a little
// more than the measurement (the stop runs after the clock stopped).
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("cpu profile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		return nil
	}, nil
}

func report(w io.Writer, name string, r result, rows, logical int64) {
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "    %s: %d rows readable in %.2fs: %.0f rows/s, %.1f MB/s (logical key+value)\n",
		name, rows, secs, float64(rows)/secs, float64(logical)/secs/1e6)
	fmt.Fprintf(w, "    CPU (user+sys, whole process): %.2fs, %.2f µs/row, %.2f of %d cores busy on average; %d page faults\n",
		r.cpu.Seconds(), float64(r.cpu.Microseconds())/float64(rows), r.cpu.Seconds()/secs, runtime.NumCPU(), r.faults)
}

// runOrdinary writes every row through one Writer and closes it: every
// row acknowledged, hence readable from its bucket's leader.
func runOrdinary(ctx context.Context, stdout io.Writer, c *tierclient.Client, t tierclient.Target, g *benchutil.RowGen, cfg config) (result, error) {
	cpu0, f0 := benchutil.CPUTime(), benchutil.PageFaults()
	start := time.Now()
	w, err := c.NewWriter(ctx, t)
	if err != nil {
		return result{}, err
	}
	if err := rowsAhead(ctx, g, cfg.rows, func(i int64, row kv.Row) error {
		if err := w.Write(ctx, row); err != nil {
			return fmt.Errorf("row %d: %w", i, err)
		}
		return nil
	}); err != nil {
		_ = w.Close(ctx)
		return result{}, err
	}
	if err := w.Close(ctx); err != nil {
		return result{}, err
	}
	r := result{elapsed: time.Since(start), cpu: benchutil.CPUTime() - cpu0, faults: benchutil.PageFaults() - f0}
	st := w.Stats()
	if st.AckedRows != cfg.rows {
		return result{}, fmt.Errorf("%d rows acknowledged, want %d", st.AckedRows, cfg.rows)
	}
	fmt.Fprintf(stdout, "    batches: %d acknowledged, %.0f rows/batch on average, %d retries\n",
		st.Batches, float64(st.AckedRows)/float64(max(st.Batches, 1)), st.Retries)
	return r, nil
}

// runBulk loads every row through the bulk-load SDK: Begin, one build
// session for every bucket, Finish, Commit (readable when it returns).
func runBulk(ctx context.Context, stdout io.Writer, addr string, t tierclient.Target, g *benchutil.RowGen, cfg config, dir string) (result, error) {
	var (
		opts   []bulkloadclient.Opt
		direct *objstore.Store // the store with --object-store's parameters (an s3:// endpoint, say)
	)
	if cfg.scoped {
		opts = append(opts, bulkloadclient.WithScopedUploads())
	} else if cfg.objectStore != "" {
		var err error
		if direct, err = objstore.Open(ctx, cfg.objectStore); err != nil {
			return result{}, err
		}
		defer direct.Close()
		opts = append(opts, bulkloadclient.WithObjectStore(direct))
	}
	c, err := bulkloadclient.New(ctx, addr, opts...)
	if err != nil {
		return result{}, err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)

	cpu0, f0 := benchutil.CPUTime(), benchutil.PageFaults()
	start := time.Now()
	bc, err := c.Begin(ctx, bulkload.Target{Database: t.Database, Table: t.Table}, fmt.Sprintf("bench-load-%d", start.UnixNano()), bulkloadclient.BeginOptions{})
	if err != nil {
		return result{}, fmt.Errorf("begin: %w", err)
	}
	tBegin, cBegin := time.Since(start), benchutil.CPUTime()-cpu0
	sopts := bulkloadclient.SessionOptions{TempDir: tmp, MemoryBudget: cfg.memory, Workers: cfg.workers}
	if direct != nil {
		sopts.Store = direct
	}
	var gw *countingStore
	if cfg.scoped {
		gw = &countingStore{Store: c.ScopedStore(bc)}
		sopts.Store = gw
	}
	s, err := bulkloadclient.OpenBuildSession(ctx, bc, sopts)
	if err != nil {
		return result{}, errors.Join(fmt.Errorf("open build session: %w", err), abort(ctx, c, bc))
	}
	defer s.Close()
	if err := addRows(ctx, s, g, cfg); err != nil {
		return result{}, errors.Join(err, abort(ctx, c, bc))
	}
	tAdd, cAdd := time.Since(start), benchutil.CPUTime()-cpu0
	results, err := s.Finish(ctx)
	if err != nil {
		return result{}, errors.Join(fmt.Errorf("finish: %w", err), abort(ctx, c, bc))
	}
	tFinish, cFinish := time.Since(start), benchutil.CPUTime()-cpu0
	st, err := c.Commit(ctx, bc, results, cfg.commitBudget)
	if err != nil {
		return result{}, fmt.Errorf("commit: %w", err)
	}
	r := result{elapsed: time.Since(start), cpu: benchutil.CPUTime() - cpu0, faults: benchutil.PageFaults() - f0}
	if st.State != bulkload.Committed {
		return result{}, fmt.Errorf("commit: transaction %s, want COMMITTED", st.State)
	}
	var built int64
	for _, br := range results {
		built += br.RowCount
	}
	if built != cfg.rows {
		return result{}, fmt.Errorf("the snapshots hold %d rows, want %d", built, cfg.rows)
	}
	bs := s.Stats()
	fmt.Fprintf(stdout, "    phases: begin %s, add %s, finish (merge, write, upload) %s, commit (validate, restore on every replica) %s\n",
		phase(tBegin, cBegin), phase(tAdd-tBegin, cAdd-cBegin), phase(tFinish-tAdd, cFinish-cAdd), phase(r.elapsed-tFinish, r.cpu-cFinish))
	fmt.Fprintf(stdout, "    build: %d buckets, %d rows in the snapshots, %s, peak budget %s of %s\n",
		len(results), built, benchutil.Spills(bs), benchutil.FmtBytes(bs.PeakBudget), benchutil.FmtBytes(bs.MemoryBudget))
	fmt.Fprintf(stdout, "    build %s\n", benchutil.BuildBusy(bs))
	if gw != nil {
		signed, through, err := gatewayCounts(cfg.gatherer)
		if err != nil {
			return result{}, err
		}
		fmt.Fprintf(stdout, "    uploads with scoped credentials: %d objects, %s (and the manifest); the gateway signed %d uploads straight to the store and stored %s itself\n",
			gw.objects.Load(), benchutil.FmtBytes(gw.bytes.Load()), signed, benchutil.FmtBytes(through))
	}
	return r, nil
}

// gatewayCounts reads the upload gateway's counters: signed uploads and
// bytes stored through it (nil g: none known).
func gatewayCounts(g prometheus.Gatherer) (signed, through int64, err error) {
	if g == nil {
		return 0, 0, nil
	}
	v, _, err := metricvalue.Value(g, "thaw_coordinator_upload_requests_total", map[string]string{"op": "sign", "result": "ok"})
	if err != nil {
		return 0, 0, err
	}
	b, _, err := metricvalue.Value(g, "thaw_coordinator_upload_bytes_total", nil)
	return int64(v), int64(b), err
}

// phase formats a phase's wall time and the process's CPU time in it.
func phase(wall, cpu time.Duration) string {
	return fmt.Sprintf("%.2fs (%.2f CPU-s)", wall.Seconds(), cpu.Seconds())
}

func abort(ctx context.Context, c *bulkloadclient.Client, bc *bulkloadclient.BuildContext) error {
	if _, err := c.Abort(context.WithoutCancel(ctx), bc.Handle()); err != nil {
		return fmt.Errorf("abort: %w", err)
	}
	return nil
}

// addRows feeds every row to s: as Arrow record batches of --arrow-batch
// rows, or row by row.
func addRows(ctx context.Context, s *bulkloadclient.Session, g *benchutil.RowGen, cfg config) error {
	if cfg.bulkInput == "rows" {
		row := make(kv.Row, 2)
		for i := range cfg.rows {
			g.Row(row, i)
			if err := s.AddRow(ctx, row); err != nil {
				return fmt.Errorf("add row %d: %w", i, err)
			}
		}
		return nil
	}
	ab := newArrowBatcher(g)
	defer ab.release()
	batches := func(yield func(arrow.RecordBatch, error) bool) {
		for lo := int64(0); lo < cfg.rows; lo += int64(cfg.arrowRows) {
			if !yield(ab.batch(lo, min(int64(cfg.arrowRows), cfg.rows-lo)), nil) {
				return
			}
		}
	}
	lo := int64(0)
	for rec, err := range bulkloadclient.ReadAhead(ctx, aheadChunks, batches) {
		if err != nil {
			return err
		}
		n := rec.NumRows()
		err = s.Add(ctx, rec)
		rec.Release()
		if err != nil {
			return fmt.Errorf("add rows %d..: %w", lo, err)
		}
		lo += n
	}
	if lo != cfg.rows {
		return fmt.Errorf("added %d rows, want %d", lo, cfg.rows)
	}
	return nil
}

// aheadChunks is how many batches of generated input may wait for either
// path: both generate their rows on a goroutine of their own, as a real
// loader decodes its input while it writes.
const aheadChunks = 2

// rowsAhead calls fn for rows [0, n) of g in order, generating them on
// another goroutine up to aheadChunks chunks of 8,192 rows ahead. fn must not
// keep the row after it returns.
func rowsAhead(ctx context.Context, g *benchutil.RowGen, n int64, fn func(i int64, row kv.Row) error) error {
	const chunk = 8192
	full := make(chan []kv.Row, aheadChunks)
	free := make(chan []kv.Row, aheadChunks+1)
	for range aheadChunks + 1 {
		rows, cells := make([]kv.Row, chunk), make([]any, 2*chunk)
		for j := range rows {
			rows[j] = cells[2*j : 2*j+2 : 2*j+2]
		}
		free <- rows
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for range full { // until the producer has finished
		}
	}()
	go func() {
		defer close(full)
		for lo := int64(0); lo < n; lo += chunk {
			var rows []kv.Row
			select {
			case rows = <-free:
			case <-ctx.Done():
				return
			}
			rows = rows[:min(chunk, n-lo)]
			for j := range rows {
				g.Row(rows[j], lo+int64(j))
			}
			select {
			case full <- rows:
			case <-ctx.Done():
				return
			}
		}
	}()
	var i int64
	for rows := range full {
		for _, r := range rows {
			if err := fn(i, r); err != nil {
				return err
			}
			i++
		}
		free <- rows[:cap(rows)]
	}
	if i != n {
		return fmt.Errorf("generated %d rows, want %d: %w", i, n, context.Cause(ctx))
	}
	return nil
}

// arrowBatcher makes Arrow record batches of the generator's rows.
type arrowBatcher struct {
	g      *benchutil.RowGen
	schema *arrow.Schema
	b      *array.RecordBuilder
}

func newArrowBatcher(g *benchutil.RowGen) *arrowBatcher {
	key := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	if g.Config().KeyBytes != 8 {
		key = arrow.Field{Name: "k", Type: arrow.BinaryTypes.Binary}
	}
	schema := arrow.NewSchema([]arrow.Field{key, {Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	// The batches' buffers go back to a pool when Add has consumed them
	// (rec.Release), so the generator reuses its memory as rowsAhead reuses
	// its rows; a few batches are in flight at a time.
	pool := benchutil.NewArrowPool(64 << 20)
	return &arrowBatcher{g: g, schema: schema, b: array.NewRecordBuilder(pool, schema)}
}

// batch makes the batch of rows [lo, lo+n) column by column, as a
// columnar reader (Parquet into Arrow) fills its arrays, without a kv.Row
// in between.
func (a *arrowBatcher) batch(lo, n int64) arrow.RecordBatch {
	a.b.Reserve(int(n))
	switch k := a.b.Field(0).(type) {
	case *array.Int64Builder:
		for i := lo; i < lo+n; i++ {
			k.UnsafeAppend(a.g.ID(i))
		}
	case *array.BinaryBuilder:
		row := make(kv.Row, 2)
		for i := lo; i < lo+n; i++ {
			a.g.Row(row, i)
			k.Append(row[0].([]byte))
		}
	}
	payload := a.b.Field(1).(*array.StringBuilder)
	payload.ReserveData(int(n) * a.g.Config().ValueBytes)
	for i := lo; i < lo+n; i++ {
		payload.Append(a.g.Payload(i))
	}
	return a.b.NewRecordBatch()
}

func (a *arrowBatcher) release() { a.b.Release() }

// writeBack writes back the system's dirty pages before a path's clock
// starts: the ordinary table's flushes and compactions leave gigabytes
// dirty, and the bulk path's fsyncs (and etcd's) would wait behind them.
func writeBack(stdout io.Writer) {
	took, dirty := benchutil.SyncDirty()
	if dirty >= 0 {
		fmt.Fprintf(stdout, "    wrote back %s of dirty pages first (sync, %.2fs)\n", benchutil.FmtBytes(dirty), took.Seconds())
	}
}

// settleMax bounds the wait for an idle process before the bulk path.
const settleMax = time.Minute

// settle waits until this process (client and embedded tier) keeps less
// than 0.1 core busy over two consecutive 250 ms windows, or limit has
// passed; it reports how long it waited and whether the process went idle.
func settle(ctx context.Context, limit time.Duration) (time.Duration, bool, error) {
	const window, busy = 250 * time.Millisecond, 0.1
	start := time.Now()
	quiet := 0
	for time.Since(start) < limit {
		cpu0, t0 := benchutil.CPUTime(), time.Now()
		select {
		case <-ctx.Done():
			return time.Since(start), false, ctx.Err()
		case <-time.After(window):
		}
		if float64(benchutil.CPUTime()-cpu0)/float64(time.Since(t0)) < busy {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == 2 {
			return time.Since(start), true, nil
		}
	}
	return time.Since(start), false, nil
}

// verify reads back a sample of t's rows and compares them, and with
// --verify-count counts every row; untimed.
func verify(ctx context.Context, stdout io.Writer, c *tierclient.Client, t tierclient.Target, info *tierclient.TableInfo, g *benchutil.RowGen, cfg config) error {
	start := time.Now()
	n := min(int64(cfg.sample), cfg.rows)
	if err := benchutil.VerifySample(ctx, c, t, info, g, cfg.rows, cfg.sample); err != nil {
		return err
	}
	note := fmt.Sprintf("verified: %d sampled rows read back equal (%.2fs)", n, time.Since(start).Seconds())
	if cfg.fullCount {
		cstart := time.Now()
		var count int64
		if err := c.Scan(ctx, t, func(kv.Row) error { count++; return nil }); err != nil {
			return err
		}
		if count != cfg.rows {
			return fmt.Errorf("a scan of every bucket counted %d rows, want %d", count, cfg.rows)
		}
		note += fmt.Sprintf("; a Scan of every bucket counted %d rows (%.2fs)", count, time.Since(cstart).Seconds())
	}
	fmt.Fprintf(stdout, "    %s\n", note)
	return nil
}

// rowGen is the row generator's part of the configuration.
func (c config) rowGen() benchutil.RowGenConfig {
	return benchutil.RowGenConfig{Buckets: c.buckets, KeyBytes: c.keyBytes, ValueBytes: c.valueBytes, Seed: c.seed}
}

// countingStore counts what a build stores through it.
type countingStore struct {
	snapshotbuild.Store
	objects, bytes atomic.Int64
}

func (c *countingStore) count(o objstore.Object, err error) (objstore.Object, error) {
	if err == nil {
		c.objects.Add(1)
		c.bytes.Add(o.Size)
	}
	return o, err
}

func (c *countingStore) PutIfAbsent(ctx context.Context, key string, src objstore.Source) (objstore.Object, error) {
	return c.count(c.Store.PutIfAbsent(ctx, key, src))
}

func (c *countingStore) PutFileStamped(ctx context.Context, key, path string, size int64, sha string, st objstore.FileStamp) (objstore.Object, error) {
	return c.count(c.Store.PutFileStamped(ctx, key, path, size, sha, st))
}
