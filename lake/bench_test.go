package lake

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"golang.org/x/sync/errgroup"
)

// The benchmark table: an append-only sample (no deletes, so both readers
// produce the same rows), THAW_LAKE_BENCH_ROWS rows (default 1,000,000) over
// 20 day partitions.
var (
	benchOnce  sync.Once
	benchDir   string
	benchInfo  SampleInfo
	benchFiles []string
	benchBytes int64
	benchErr   error
)

const benchBatch = 1 << 16

func benchLake(b *testing.B) (*Lake, SampleInfo) {
	b.Helper()
	benchOnce.Do(func() {
		rows := 1_000_000
		if s := os.Getenv("THAW_LAKE_BENCH_ROWS"); s != "" {
			if rows, benchErr = strconv.Atoi(s); benchErr != nil {
				return
			}
		}
		if benchDir, benchErr = os.MkdirTemp("", "lake-bench-"); benchErr != nil {
			return
		}
		ctx := context.Background()
		if benchInfo, benchErr = Sample(ctx, SampleOptions{Dir: benchDir, Rows: rows, Days: 20, Seed: 3, AppendOnly: true}); benchErr != nil {
			return
		}
		var l *Lake
		if l, benchErr = Open(ctx, benchInfo.Config); benchErr != nil {
			return
		}
		defer l.Close()
		tbl, err := l.loadTable(ctx, benchInfo.Table)
		if err != nil {
			benchErr = err
			return
		}
		tasks, err := tbl.Scan().PlanFiles(ctx)
		if err != nil {
			benchErr = err
			return
		}
		for _, t := range tasks {
			benchFiles = append(benchFiles, strings.TrimPrefix(t.File.FilePath(), "file://"))
			benchBytes += t.File.FileSizeBytes()
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	l, err := Open(b.Context(), benchInfo.Config)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l, benchInfo
}

// readParquet reads one file with pqarrow and returns its row count.
func readParquet(ctx context.Context, path string, parallel bool) (int64, error) {
	pf, err := file.OpenParquetFile(path, true)
	if err != nil {
		return 0, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: benchBatch, Parallel: parallel}, memory.DefaultAllocator)
	if err != nil {
		return 0, err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return 0, err
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		n += rr.RecordBatch().NumRows()
	}
	return n, rr.Err()
}

// BenchmarkScanVsParquet compares Lake.Scan of the whole table with reading
// the same Parquet files with arrow-go's pqarrow directly. Every variant
// reads all columns in batches of 65,536 rows and releases each batch; bytes
// are the Parquet bytes on disk.
//
//	go test -run '^$' -bench ScanVsParquet -benchtime 5x ./lake
func BenchmarkScanVsParquet(b *testing.B) {
	l, info := benchLake(b)
	ctx := b.Context()
	want := int64(info.Rows)
	lakeScan := func(b *testing.B, opts ScanOptions) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			schema, seq, err := l.Scan(ctx, info.Table, opts)
			if err != nil || schema == nil {
				b.Fatal(err)
			}
			var n int64
			for rec, err := range seq {
				if err != nil {
					b.Fatal(err)
				}
				n += rec.NumRows()
				rec.Release()
			}
			if n != want {
				b.Fatalf("scanned %d rows, want %d", n, want)
			}
		}
		b.ReportMetric(float64(want)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	rawScan := func(b *testing.B, workers int) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			var mu sync.Mutex
			var n int64
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(workers)
			for _, f := range benchFiles {
				g.Go(func() error {
					c, err := readParquet(gctx, f, false)
					mu.Lock()
					n += c
					mu.Unlock()
					return err
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			if n != want {
				b.Fatalf("read %d rows, want %d", n, want)
			}
		}
		b.ReportMetric(float64(want)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("raw-pqarrow/files=1", func(b *testing.B) { rawScan(b, 1) })
	b.Run("lake/concurrency=1", func(b *testing.B) { lakeScan(b, ScanOptions{Concurrency: 1, BatchSize: benchBatch}) })
	b.Run("raw-pqarrow/files=2", func(b *testing.B) { rawScan(b, 2) })
	b.Run("lake/concurrency=2", func(b *testing.B) { lakeScan(b, ScanOptions{Concurrency: 2, BatchSize: benchBatch}) })
	tinfo, err := l.Describe(ctx, info.Table)
	if err != nil {
		b.Fatal(err)
	}
	_, pm, err := MapSchema(tinfo, MappingOptions{Buckets: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("lake+derived-day/concurrency=2", func(b *testing.B) {
		lakeScan(b, ScanOptions{Concurrency: 2, BatchSize: benchBatch, Mapping: &pm})
	})
	// Paired: each iteration times both readers back to back (alternating
	// which goes first), so background load on a shared machine hits both
	// alike; lake/raw is the median of the per-iteration ratios.
	for _, conc := range []int{1, 2} {
		for _, derived := range []bool{false, true} {
			name := "paired/concurrency=" + strconv.Itoa(conc)
			opts := ScanOptions{Concurrency: conc, BatchSize: benchBatch}
			if derived {
				name += "/derived-day"
				opts.Mapping = &pm
			}
			b.Run(name, func(b *testing.B) {
				var ratios, lakeNs, rawNs []float64
				for i := 0; b.Loop(); i++ {
					var tl, tr time.Duration
					for k := range 2 {
						start := time.Now()
						if (i+k)%2 == 0 {
							scanOnce(b, l, info.Table, opts, want)
							tl = time.Since(start)
						} else {
							rawOnce(b, ctx, conc, want)
							tr = time.Since(start)
						}
					}
					ratios = append(ratios, float64(tl)/float64(tr))
					lakeNs, rawNs = append(lakeNs, float64(tl)), append(rawNs, float64(tr))
				}
				b.ReportMetric(median(ratios), "lake/raw")
				b.ReportMetric(float64(want)/median(lakeNs)*1e9, "lake-rows/s")
				b.ReportMetric(float64(want)/median(rawNs)*1e9, "raw-rows/s")
			})
		}
	}
}

// median is the middle value, the mean of the two middle ones for an even
// count (as benchutil.Median; -benchtime 20x gives 20 values).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func scanOnce(b *testing.B, l *Lake, name string, opts ScanOptions, want int64) {
	_, seq, err := l.Scan(b.Context(), name, opts)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for rec, err := range seq {
		if err != nil {
			b.Fatal(err)
		}
		n += rec.NumRows()
		rec.Release()
	}
	if n != want {
		b.Fatalf("scanned %d rows, want %d", n, want)
	}
}

func rawOnce(b *testing.B, ctx context.Context, workers int, want int64) {
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, f := range benchFiles {
		g.Go(func() error {
			c, err := readParquet(gctx, f, false)
			n.Add(c)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	if n.Load() != want {
		b.Fatalf("read %d rows, want %d", n.Load(), want)
	}
}
