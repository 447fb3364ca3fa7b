package bulkloadclient

import (
	"context"
	"iter"

	"github.com/apache/arrow-go/v18/arrow"
)

// ReadAhead returns the batches of seq, produced on another goroutine up to
// depth batches ahead of its consumer, so that producing the input
// (decoding Parquet, scanning a lake table, generating rows) overlaps with
// Session.Add instead of alternating with it:
//
//	for rec, err := range bulkloadclient.ReadAhead(ctx, 2, scan) {
//		if err != nil {
//			return err
//		}
//		err = s.Add(ctx, rec)
//		rec.Release()
//		...
//	}
//
// Ownership: seq must yield batches its consumer owns (the consumer
// releases them), and ReadAhead passes each on the same way; a producer
// whose batches are only valid until its next step (a pqarrow
// RecordReader) must Retain them before yielding. Batches read ahead but
// never handed on — the consumer stopped early, or ctx ended — are released
// by ReadAhead.
//
// Order is kept, and the first error ends the sequence: an error seq
// yields is handed on in its place (after every batch before it), and
// when ctx ends before seq does, the last pair carries ctx's error. When
// the consumer stops early, seq is stopped and ReadAhead returns only after
// the producing goroutine has finished, so nothing runs on after it. A
// panic in seq is re-raised on the consumer's goroutine. depth < 1 means 1.
// The sequence may be ranged over once.
func ReadAhead(ctx context.Context, depth int, seq iter.Seq2[arrow.RecordBatch, error]) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		type item struct {
			rec arrow.RecordBatch
			err error
		}
		ctx, cancel := context.WithCancel(ctx)
		ch := make(chan item, max(depth, 1))
		// Written by the producer before it closes ch.
		var (
			stopped  error // ctx ended while the producer waited
			panicked any
			didPanic bool
		)
		go func() {
			defer close(ch)
			defer func() {
				if p := recover(); p != nil {
					panicked, didPanic = p, true
				}
			}()
			for rec, err := range seq {
				if ctx.Err() != nil { // stopped: do not race the send below
					if rec != nil {
						rec.Release()
					}
					stopped = ctx.Err()
					return
				}
				select {
				case ch <- item{rec, err}:
				case <-ctx.Done():
					if rec != nil {
						rec.Release()
					}
					stopped = ctx.Err()
					return
				}
				if err != nil {
					return
				}
			}
		}()
		defer func() {
			cancel()
			for it := range ch { // until the producer has finished
				if it.rec != nil {
					it.rec.Release()
				}
			}
		}()
		for it := range ch {
			if !yield(it.rec, it.err) || it.err != nil {
				return
			}
		}
		// ch is closed: the producer's variables are settled.
		if didPanic {
			panic(panicked)
		}
		if stopped != nil {
			yield(nil, stopped)
		}
	}
}
