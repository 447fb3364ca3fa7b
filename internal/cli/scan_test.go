package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"text/tabwriter"
	"time"

	"github.com/thawdb/thaw/kv"
)

// TestProgressDeadline: a context that keeps progressing lives past its
// timeout; one that stops is cancelled with errNoProgress d to d+d/4 after
// the last progress (checked every d/4); stop cancels it with no such
// cause. In a synctest bubble: time is virtual, so the bounds are exact
// and a loaded machine cannot break them.
func TestProgressDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 500 * time.Millisecond
		ctx, progress, stop := progressDeadline(t.Context(), d)
		defer stop()
		start := time.Now()
		for time.Since(start) < 3*d {
			progress.Add(1)
			time.Sleep(d / 20)
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("cancelled while progressing: %v (%v)", err, context.Cause(ctx))
		}
		stalled := time.Now()
		<-ctx.Done()
		if took := time.Since(stalled); took < d || took > d+d/4 {
			t.Errorf("cancelled %v after progress stopped, want %v to %v", took, d, d+d/4)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, errNoProgress) || !strings.Contains(cause.Error(), "500ms (--timeout)") {
			t.Errorf("cause %v, want errNoProgress naming the timeout", cause)
		}
	})

	ctx, _, stop := progressDeadline(t.Context(), time.Hour)
	stop()
	stop()
	if err := ctx.Err(); !errors.Is(err, context.Canceled) || errors.Is(context.Cause(ctx), errNoProgress) {
		t.Errorf("after stop: %v, cause %v", err, context.Cause(ctx))
	}
}

// TestScanGivesUpWhenNothingArrives: a scan against a server that accepts
// connections and never answers fails after --timeout, naming it.
func TestScanGivesUpWhenNothingArrives(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start := time.Now()
	code, _, errOut := run(t, "scan", "shop.orders", "--server", ln.Addr().String(), "--timeout", "200ms")
	if code != 1 || !strings.Contains(errOut, "nothing arrived for 200ms (--timeout)") {
		t.Fatalf("code %d, stderr %q; want 1 and the timeout named", code, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %v", took)
	}
}

// TestRowTable: up to rowTableBlock rows the table is exactly what a
// tabwriter prints (multi-byte text, tabs and newlines in cells included);
// beyond, the widths stay those of the header and the first rows, every
// row is printed as it comes, and a longer cell only pushes its own line.
func TestRowTable(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "name", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
			{Name: "n", Type: kv.Type{Kind: kv.KindInt}, Nullable: true},
		},
		PrimaryKey: []string{"id"}, Buckets: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"", "a", "grüße", "日本語日本語", "tab\there", "new\nline", "longer value"}
	rowAt := func(i int) kv.Row {
		r := kv.Row{int64(i * 7919), words[rng.IntN(len(words))], nil}
		if rng.IntN(3) > 0 {
			r[2] = int32(rng.IntN(100000))
		}
		return r
	}
	for _, n := range []int{0, 1, 17, rowTableBlock} {
		var got, want bytes.Buffer
		rt := newRowTable(&got, tbl)
		tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "id\tname\tn")
		for i := range n {
			r := rowAt(i)
			if err := rt.row(r); err != nil {
				t.Fatal(err)
			}
			var cells []string
			for j, v := range r {
				cells = append(cells, cellEscaper.Replace(cellText(tbl.Column(j).Type, v)))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if err := rt.flush(); err != nil {
			t.Fatal(err)
		}
		if err := tw.Flush(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("%d rows:\n%s\nwant (tabwriter):\n%s", n, got.String(), want.String())
		}
	}

	// Beyond the block: rows stream out with the block's widths.
	var got bytes.Buffer
	rt := newRowTable(&got, tbl)
	for i := range rowTableBlock {
		if err := rt.row(kv.Row{int64(i), "ab", int32(1)}); err != nil {
			t.Fatal(err)
		}
	}
	if got.Len() != 0 {
		t.Fatalf("printed %d bytes before the widths were known", got.Len())
	}
	if err := rt.row(kv.Row{int64(1000), "abc", int32(2)}); err != nil {
		t.Fatal(err)
	}
	held := got.Len()
	if held == 0 || strings.Count(got.String(), "\n") != rowTableBlock+2 {
		t.Fatalf("after %d rows: %d lines printed, want %d", rowTableBlock+1, strings.Count(got.String(), "\n"), rowTableBlock+2)
	}
	if err := errors.Join(rt.row(kv.Row{int64(5), "a much longer name", int32(3)}), rt.row(kv.Row{int64(6), "x", nil})); err != nil {
		t.Fatal(err)
	}
	if got.Len() == held {
		t.Fatal("a row after the block was held")
	}
	if err := rt.flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	if want := []string{
		"id    name  n",
		"0     ab    1",
		"1000  abc   2",
		"5     a much longer name  3",
		"6     x     null",
	}; lines[0] != want[0] || lines[1] != want[1] || !slices.Equal(lines[len(lines)-3:], want[2:]) {
		t.Fatalf("lines %q ... %q, want %q", lines[:2], lines[len(lines)-3:], want)
	}
}

// brokenPipe fails every write, as a closed pipe does.
type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestRowTableStopsOnWriteError: once the table prints, a failed write is
// returned by the row that hit it (a scan then stops) and by flush.
func TestRowTableStopsOnWriteError(t *testing.T) {
	tbl, err := kv.NewTable(kv.TableSchema{
		Columns:    []kv.Column{{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}}},
		PrimaryKey: []string{"id"}, Buckets: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	rt := newRowTable(brokenPipe{}, tbl)
	for i := range rowTableBlock {
		if err := rt.row(kv.Row{int64(i)}); err != nil {
			t.Fatalf("row %d, before anything was printed: %v", i, err)
		}
	}
	if err := rt.row(kv.Row{int64(rowTableBlock)}); err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("the row that printed the table: %v, want the write error", err)
	}
	if err := rt.flush(); err == nil {
		t.Fatal("flush after a failed write: no error")
	}
}
