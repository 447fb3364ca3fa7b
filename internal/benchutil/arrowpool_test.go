package benchutil

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// TestArrowPoolReuse: a freed buffer comes back for the next allocation of
// its class, zeroed; growth keeps the contents; foreign buffers and
// buffers beyond the limit are not kept.
func TestArrowPoolReuse(t *testing.T) {
	p := NewArrowPool(1 << 20)
	a := p.Allocate(1000)
	if len(a) != 1000 || cap(a) != 1024 {
		t.Fatalf("len %d cap %d, want 1000 1024", len(a), cap(a))
	}
	for i := range a {
		a[i] = 0xff
	}
	p.Free(a)
	b := p.Allocate(600)
	if &b[:1][0] != &a[:1][0] {
		t.Fatal("a freed buffer of the class was not reused")
	}
	if !bytes.Equal(b[:cap(b)], make([]byte, 1024)) {
		t.Fatal("a reused buffer is not zeroed")
	}
	copy(b, "abc")
	if g := p.Reallocate(900, b); &g[0] != &b[0] || len(g) != 900 || string(g[:3]) != "abc" {
		t.Fatal("growth within the capacity moved or lost the bytes")
	}
	g := p.Reallocate(5000, b)
	if len(g) != 5000 || string(g[:3]) != "abc" || !bytes.Equal(g[3:], make([]byte, 4997)) {
		t.Fatal("growth beyond the capacity lost the bytes or left garbage")
	}
	if c := p.Allocate(1024); &c[0] != &b[0] {
		t.Fatal("the buffer left by growth was not reused")
	}
	p.Free(make([]byte, 100)) // not a pool buffer: capacity 100
	if c := p.Allocate(100); cap(c) != 128 {
		t.Fatalf("cap %d, want 128", cap(c))
	}
	small := NewArrowPool(1024)
	x, y := small.Allocate(1024), small.Allocate(1024)
	small.Free(x)
	small.Free(y) // over the limit: dropped
	if small.kept != 1024 {
		t.Fatalf("kept %d bytes, want 1024", small.kept)
	}
}

// TestArrowPoolRecords: batches built from recycled buffers hold exactly
// what was appended, nulls included, after batches with other contents
// were released into the pool.
func TestArrowPoolRecords(t *testing.T) {
	p := NewArrowPool(64 << 20)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(p, schema)
	defer b.Release()
	for round := range 4 {
		ids, ss := b.Field(0).(*array.Int64Builder), b.Field(1).(*array.StringBuilder)
		for i := range 3000 {
			if (i+round)%3 == 0 {
				ids.AppendNull()
				ss.AppendNull()
				continue
			}
			ids.Append(int64(i * round))
			ss.Append(fmt.Sprint(i, round))
		}
		rec := b.NewRecordBatch()
		for i := range 3000 {
			id, s := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String)
			null := (i+round)%3 == 0
			if id.IsNull(i) != null || s.IsNull(i) != null {
				t.Fatalf("round %d row %d: null %v/%v, want %v", round, i, id.IsNull(i), s.IsNull(i), null)
			}
			if !null && (id.Value(i) != int64(i*round) || s.Value(i) != fmt.Sprint(i, round)) {
				t.Fatalf("round %d row %d: %d %q", round, i, id.Value(i), s.Value(i))
			}
		}
		rec.Release()
	}
	if p.kept == 0 {
		t.Fatal("released batches left nothing in the pool")
	}
}
