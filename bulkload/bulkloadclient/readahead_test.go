package bulkloadclient

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// numbered yields batches of one int64 column holding i, from a checked
// allocator, until n (n < 0: forever) or an error at failAt.
func numbered(mem memory.Allocator, n, failAt int, produced chan<- int, finished *bool) iter.Seq2[arrow.RecordBatch, error] {
	schema := arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64}}, nil)
	return func(yield func(arrow.RecordBatch, error) bool) {
		defer func() {
			if finished != nil {
				*finished = true
			}
		}()
		for i := 0; n < 0 || i < n; i++ {
			if i == failAt {
				yield(nil, errors.New("decode failed"))
				return
			}
			b := array.NewRecordBuilder(mem, schema)
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			rec := b.NewRecordBatch()
			b.Release()
			if produced != nil {
				select {
				case produced <- i:
				default:
				}
			}
			if !yield(rec, nil) {
				return
			}
		}
	}
}

func valueOf(rec arrow.RecordBatch) int64 { return rec.Column(0).(*array.Int64).Value(0) }

func TestReadAheadOrderAndOverlap(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	produced := make(chan int, 100)
	want := int64(0)
	for rec, err := range ReadAhead(t.Context(), 1, numbered(mem, 50, -1, produced, nil)) {
		if err != nil {
			t.Fatal(err)
		}
		if got := valueOf(rec); got != want {
			t.Fatalf("batch %d, want %d", got, want)
		}
		if want == 0 {
			// While the consumer holds batch 0, the producer makes batch 1.
			deadline := time.After(10 * time.Second)
			for seen := false; !seen; {
				select {
				case i := <-produced:
					seen = i >= 1
				case <-deadline:
					t.Fatal("the producer did not run ahead of the consumer")
				}
			}
		}
		rec.Release()
		want++
	}
	if want != 50 {
		t.Fatalf("%d batches, want 50", want)
	}
}

func TestReadAheadEarlyStop(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	var finished bool
	n := 0
	for rec, err := range ReadAhead(t.Context(), 4, numbered(mem, -1, -1, nil, &finished)) {
		if err != nil {
			t.Fatal(err)
		}
		rec.Release()
		if n++; n == 3 {
			break
		}
	}
	// ReadAhead returned: the producer has stopped and released what it
	// read ahead.
	if !finished {
		t.Fatal("the producing sequence is still running after the consumer stopped")
	}
	mem.AssertSize(t, 0)
}

func TestReadAheadError(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var got []int64
	var gotErr error
	for rec, err := range ReadAhead(t.Context(), 3, numbered(mem, 100, 5, nil, nil)) {
		if err != nil {
			gotErr = err
			continue
		}
		if gotErr != nil {
			t.Fatal("a batch after the error")
		}
		got = append(got, valueOf(rec))
		rec.Release()
	}
	if len(got) != 5 || got[4] != 4 || gotErr == nil || gotErr.Error() != "decode failed" {
		t.Fatalf("batches %v, error %v: want 0..4 then the producer's error", got, gotErr)
	}
}

func TestReadAheadContext(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var finished bool
	n := 0
	var last error
	for rec, err := range ReadAhead(ctx, 2, numbered(mem, -1, -1, nil, &finished)) {
		if err != nil {
			last = err
			break
		}
		rec.Release()
		if n++; n == 2 {
			cancel()
		}
		if n > 10000 {
			t.Fatal("the sequence did not end after ctx was cancelled")
		}
	}
	if !errors.Is(last, context.Canceled) || !finished {
		t.Fatalf("last error %v, producer finished %v: want context.Canceled and finished", last, finished)
	}
	mem.AssertSize(t, 0)
}

func TestReadAheadPanic(t *testing.T) {
	seq := func(yield func(arrow.RecordBatch, error) bool) { panic("decoder bug") }
	defer func() {
		if p := recover(); p != "decoder bug" {
			t.Fatalf("recovered %v, want the producer's panic", p)
		}
	}()
	for range ReadAhead(t.Context(), 1, seq) {
		t.Fatal("a batch from a panicking sequence")
	}
	t.Fatal("no panic reached the consumer")
}
