package benchwrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/flagutil"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

type config struct {
	rows        int64
	buckets     int
	batchRows   int
	batchBytes  int
	inflight    int
	perBucket   int
	keyBytes    int
	valueBytes  int
	dataDir     string
	server      string
	tablets     int
	replication int
	protocol    tierclient.Protocol
	sample      int
	fullCount   bool
	seed        uint64
	debug       bool
	cpuProfile  string
}

func parseArgs(stdout io.Writer, args []string) (config, error) {
	var c config
	fs := flagutil.New("thaw bench write", "", stdout)
	fs.Int64Var(&c.rows, "rows", 1_000_000, "rows to write")
	fs.IntVar(&c.buckets, "buckets", 8, "bucket count of the table")
	fs.IntVar(&c.batchRows, "batch", tierclient.DefaultMaxBatchRows, "most rows per write request")
	fs.IntVar(&c.batchBytes, "batch-bytes", tierclient.DefaultMaxBatchBytes, "most key+value bytes per write request")
	fs.IntVar(&c.inflight, "inflight", tierclient.DefaultMaxInFlight, "most requests in flight over all buckets")
	fs.IntVar(&c.perBucket, "inflight-per-bucket", tierclient.DefaultMaxInFlightPerBucket, "most write requests in flight per bucket (1 keeps per-key order)")
	fs.IntVar(&c.keyBytes, "key-bytes", 8, "key bytes: 8 makes a BIGINT id, other sizes a BYTES key")
	fs.IntVar(&c.valueBytes, "value-bytes", 100, "bytes of the STRING payload column")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory of the embedded tier, new or empty (default: a new temporary directory, removed afterwards)")
	fs.StringVar(&c.server, "server", "", "HOST:PORT of a running tier's coordinator (default: start an embedded tier in the process)")
	fs.IntVar(&c.tablets, "tablets", daemon.DefaultTabletServers, "tablet servers of the embedded tier")
	fs.IntVar(&c.replication, "replication", 0, "replication factor of the table (0: the tier's default)")
	proto := fs.String("protocol", tierclient.ProtocolConnectHTTP1.String(), "wire protocol: connect+http1, connect+h2c or grpc+h2c")
	fs.IntVar(&c.sample, "verify-sample", 1000, "rows read back with Get and compared")
	fs.BoolVar(&c.fullCount, "verify-count", true, "count every row with a Scan of every bucket")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the synthetic data")
	fs.BoolVar(&c.debug, "debug", false, "log the client's retries to stdout")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured part (whole process) to this file")
	if err := flagutil.Parse(fs, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, flagutil.Usagef("bench write: unexpected arguments %q", fs.Args())
	}
	var err error
	if c.protocol, err = tierclient.ParseProtocol(*proto); err != nil {
		return c, fmt.Errorf("bench write: --protocol: %w", err)
	}
	switch {
	case c.rowGen().Validate(c.rows) != nil:
		return c, fmt.Errorf("bench write: %w", c.rowGen().Validate(c.rows))
	case c.sample < 0:
		return c, errors.New("bench write: --verify-sample must not be negative")
	case c.replication < 0:
		return c, errors.New("bench write: --replication must not be negative")
	}
	return c, nil
}

// Run parses args, writes the rows and prints the report to stdout; the
// last line is "ordinary write: R rows/s".
func Run(ctx context.Context, stdout io.Writer, args []string) (err error) {
	cfg, err := parseArgs(stdout, args)
	if err != nil {
		return err
	}
	addr := cfg.server
	where := "server " + addr
	if addr == "" {
		// serr, not err: the deferred stop's error must reach the named
		// result, which a declared err would shadow.
		tier, dir, stop, serr := benchutil.StartTier(ctx, "bench write", cfg.dataDir, cfg.tablets)
		if serr != nil {
			return serr
		}
		defer func() { err = errors.Join(err, stop()) }()
		addr = tier.HostPort()
		where = fmt.Sprintf("embedded tier in this process (%d tablet servers, data under %s)", cfg.tablets, dir)
	}
	return bench(ctx, stdout, cfg, addr, where)
}

// bench runs the measurement against the tier at addr.
func bench(ctx context.Context, stdout io.Writer, cfg config, addr, where string) error {
	var lat latencies
	logger := slog.New(slog.DiscardHandler)
	if cfg.debug {
		logger = slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	trust, err := daemon.ClientTLSFromEnv() // for an https:// --server
	if err != nil {
		return err
	}
	client, err := tierclient.New(ctx, addr,
		tierclient.WithTLSConfig(trust),
		tierclient.WithConnectOptions(daemon.BearerFromEnv()...), // for a tier that authorizes data access
		tierclient.WithLogger(logger),
		tierclient.WithProtocol(cfg.protocol),
		tierclient.WithMaxBatchRows(cfg.batchRows),
		tierclient.WithMaxBatchBytes(cfg.batchBytes),
		tierclient.WithMaxInFlight(cfg.inflight),
		tierclient.WithMaxInFlightPerBucket(cfg.perBucket),
		tierclient.WithMaxBufferedBytes(max(tierclient.DefaultMaxBufferedBytes, 4*int64(cfg.batchBytes))),
		tierclient.WithOnBatch(lat.add))
	if err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	defer client.Close()

	g := benchutil.NewRowGen(cfg.rowGen())
	target := tierclient.Target{Database: "bench", Table: fmt.Sprintf("write_%d", time.Now().UnixNano())}
	createdDB, err := client.CreateNewDatabase(ctx, target.Database)
	if err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	if cfg.server != "" {
		// A server's tier is left as it was: the table goes, and the
		// database too when this run created it and it holds nothing else.
		defer func() {
			dctx := context.WithoutCancel(ctx)
			if derr := client.DropTable(dctx, target.Database, target.Table); derr != nil {
				fmt.Fprintf(stdout, "note: %v\n", derr)
			} else if createdDB {
				if derr := client.DropEmptyDatabase(dctx, target.Database); derr != nil {
					fmt.Fprintf(stdout, "note: database %s left: %v\n", target.Database, derr)
				}
			}
		}()
	}
	info, err := client.CreateTable(ctx, target.Database, target.Table, g.Schema(), cfg.replication)
	if err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	if err := benchutil.WaitServing(ctx, client, target, info); err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	keyLen, valLen, err := g.EncodedSizes(info.KV)
	if err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	logical := cfg.rows * int64(keyLen+valLen)
	fmt.Fprintf(stdout, "thaw bench write: rows=%d buckets=%d batch=%d batch-bytes=%d inflight=%d inflight-per-bucket=%d key-bytes=%d value-bytes=%d protocol=%s replication=%d GOMAXPROCS=%d\n",
		cfg.rows, cfg.buckets, cfg.batchRows, cfg.batchBytes, cfg.inflight, cfg.perBucket, cfg.keyBytes, cfg.valueBytes, cfg.protocol, info.ReplicationFactor, runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "tier: %s\n", where)
	fmt.Fprintf(stdout, "table %v: %s; encoded row: key %d B, value %d B; %s logical key+value bytes\n",
		target, g.Describe(), keyLen, valLen, benchutil.FmtBytes(logical))
	fmt.Fprintf(stdout, "loadavg before: %s\n", benchutil.LoadAvg())

	// The measured part: every row written through one Writer, then Flush
	// (every row acknowledged: durable in its bucket's changelog and applied
	// by the leader).
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench write: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench write: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := benchutil.CPUTime()
	start := time.Now()
	w, err := client.NewWriter(ctx, target)
	if err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	row := make(kv.Row, 2)
	for i := range cfg.rows {
		g.Row(row, i)
		if err := w.Write(ctx, row); err != nil {
			_ = w.Close(ctx)
			return fmt.Errorf("bench write: row %d: %w", i, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		return fmt.Errorf("bench write: %w", err)
	}
	elapsed := time.Since(start)
	cpu := benchutil.CPUTime() - cpu0
	pprof.StopCPUProfile()
	st := w.Stats()
	rss := benchutil.PeakRSS()
	load := benchutil.LoadAvg()
	if st.AckedRows != cfg.rows {
		return fmt.Errorf("bench write: %d rows acknowledged, want %d", st.AckedRows, cfg.rows)
	}

	// Readable: a sample read back and compared, and every row counted.
	vstart := time.Now()
	if err := benchutil.VerifySample(ctx, client, target, info, g, cfg.rows, cfg.sample); err != nil {
		return fmt.Errorf("bench write: verify: %w", err)
	}
	sampleTime := time.Since(vstart)
	countNote := "count skipped (--verify-count=false)"
	if cfg.fullCount {
		cstart := time.Now()
		var n int64
		if err := client.Scan(ctx, target, func(kv.Row) error { n++; return nil }); err != nil {
			return fmt.Errorf("bench write: verify: %w", err)
		}
		if n != cfg.rows {
			return fmt.Errorf("bench write: verify: a scan of every bucket counted %d rows, want %d", n, cfg.rows)
		}
		countNote = fmt.Sprintf("a Scan of every bucket counted %d rows in %.2fs", n, time.Since(cstart).Seconds())
	}

	secs := elapsed.Seconds()
	p50, p99, pmax := lat.percentiles()
	fmt.Fprintf(stdout, "\nwrote %d rows in %.2fs: %.0f rows/s, %.1f MB/s (logical key+value)\n", cfg.rows, secs, float64(cfg.rows)/secs, float64(logical)/secs/1e6)
	fmt.Fprintf(stdout, "batches: %d acknowledged, %.0f rows/batch on average, %d retries\n", st.Batches, float64(st.AckedRows)/float64(max(st.Batches, 1)), st.Retries)
	fmt.Fprintf(stdout, "CPU (user+sys, whole process): %.2fs, %.2f µs/row, %.2f of %d cores busy on average\n",
		cpu.Seconds(), float64(cpu.Microseconds())/float64(cfg.rows), cpu.Seconds()/secs, runtime.NumCPU())
	fmt.Fprintf(stdout, "batch latency (first attempt to acknowledgement): p50 %s, p99 %s, max %s\n", fmtDur(p50), fmtDur(p99), fmtDur(pmax))
	fmt.Fprintf(stdout, "peak RSS (VmHWM, whole process%s): %s\n", map[bool]string{true: "", false: ": client, etcd, coordinator and tablet servers"}[cfg.server != ""], benchutil.FmtRSS(rss))
	fmt.Fprintf(stdout, "verified: %d sampled rows read back equal (%.2fs); %s\n", min(int64(cfg.sample), cfg.rows), sampleTime.Seconds(), countNote)
	fmt.Fprintf(stdout, "loadavg after: %s\n", load)
	fmt.Fprintf(stdout, "ordinary write: %.0f rows/s\n", float64(cfg.rows)/secs)
	return nil
}

// latencies collects batch latencies.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(b tierclient.BatchInfo) {
	if b.Err != nil {
		return
	}
	l.mu.Lock()
	l.d = append(l.d, b.Latency)
	l.mu.Unlock()
}

func (l *latencies) percentiles() (p50, p99, pmax time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l.d)
	// Nearest rank: the smallest value with at least q of them at or below it.
	at := func(q float64) time.Duration {
		return l.d[max(0, int(math.Ceil(q*float64(len(l.d))))-1)]
	}
	return at(0.50), at(0.99), l.d[len(l.d)-1]
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// rowGen is the row generator's part of the configuration.
func (c config) rowGen() benchutil.RowGenConfig {
	return benchutil.RowGenConfig{Buckets: c.buckets, KeyBytes: c.keyBytes, ValueBytes: c.valueBytes, Seed: c.seed}
}
