package changelog

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAppend appends batches of 128-byte records; each Append is one
// write and one fsync. MB/s counts payload bytes.
func BenchmarkAppend(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			l, err := OpenSegmentLog(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := l.Close(); err != nil {
					b.Error(err)
				}
			}()
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = payload(int64(i), 128)
			}
			b.SetBytes(int64(n * 128))
			b.ResetTimer()
			for b.Loop() {
				if _, err := l.Append(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/append")
		})
	}
}

// BenchmarkRead measures how a read finds its offset in a full 64 MiB
// segment of one-record batches (128-byte records): "random" seeks
// anywhere, which scans at most one index interval of headers;
// "sequential" reads one batch per Read, as a follower does, and finds its
// offset where the previous Read stopped.
func BenchmarkRead(b *testing.B) {
	for _, interval := range []int64{16 << 10, DefaultIndexIntervalBytes, 4 << 20} {
		l, err := OpenSegmentLog(b.TempDir(), WithIndexIntervalBytes(interval))
		if err != nil {
			b.Fatal(err)
		}
		// Fill without an fsync per record: write the segment directly.
		const records = (64<<20 - segHeaderLen) / (frameHeaderLen + recordHeaderLen + 128)
		fillSegment(b, l, records)
		b.Run(fmt.Sprintf("random/interval=%dKiB", interval>>10), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				if _, err := l.Read(b.Context(), rng.Int64N(records), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		l, err := OpenSegmentLog(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := l.Close(); err != nil {
				b.Error(err)
			}
		}()
		const records = 400_000
		fillSegment(b, l, records)
		var from int64
		for b.Loop() {
			recs, err := l.Read(b.Context(), from, 0)
			if err != nil {
				b.Fatal(err)
			}
			from = (from + int64(len(recs))) % records
		}
	})
}

// fillSegment writes n one-record batches into the active segment with one
// fsync, as if appended, and indexes them the way Append does.
func fillSegment(b *testing.B, l *SegmentLog, n int) {
	b.Helper()
	rec := [][]byte{payload(0, 128)}
	var buf []byte
	l.mu.Lock()
	seg := l.w.seg
	pos, base := seg.size, l.mu.end
	for i := range int64(n) {
		start := len(buf)
		buf = appendBatchFrame(buf, base+i, rec)
		if last := seg.index[len(seg.index)-1]; pos+int64(start)-last.pos >= l.opts.indexIntervalBytes {
			seg.index = append(seg.index, indexEntry{off: base + i, pos: pos + int64(start)})
		}
	}
	l.mu.Unlock()
	if _, err := l.w.f.WriteAt(buf, pos); err != nil {
		b.Fatal(err)
	}
	if err := l.w.f.Sync(); err != nil {
		b.Fatal(err)
	}
	l.mu.Lock()
	seg.size = pos + int64(len(buf))
	seg.scanned, seg.scannedOff = seg.size, base+int64(n)
	l.mu.end = base + int64(n)
	l.mu.Unlock()
}
