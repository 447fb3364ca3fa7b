package benchparquet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/thawdb/thaw/internal/benchutil"
	"github.com/thawdb/thaw/kv"
)

// TestWritesTheGeneratorsRows: 1,000 rows in 3 files, in row order, each
// file's rows equal to the generator's; a non-empty directory and bad
// flags are refused and write nothing.
func TestWritesTheGeneratorsRows(t *testing.T) {
	for _, keyBytes := range []int{8, 16} {
		dir := filepath.Join(t.TempDir(), "pq")
		var out bytes.Buffer
		args := []string{"--rows", "1000", "--files", "3", "--row-group", "100", "--key-bytes", strconv.Itoa(keyBytes), dir}
		if keyBytes != 8 { // DIR before the flags, as thaw bench parquet DIR --rows N
			args = append([]string{dir}, args[:len(args)-1]...)
		}
		if err := Run(t.Context(), &out, args); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "wrote 1000 rows") || !strings.Contains(out.String(), "thaw table create DATABASE.TABLE") {
			t.Errorf("output: %q", out.String())
		}
		g := benchutil.NewRowGen(benchutil.RowGenConfig{Buckets: 8, KeyBytes: keyBytes, ValueBytes: 100, Seed: 1})
		want := make(kv.Row, 2)
		next := int64(0)
		for f, rows := range []int64{334, 333, 333} {
			path := filepath.Join(dir, fmt.Sprintf("part-%05d.parquet", f))
			got := readAll(t, path)
			if int64(len(got)) != rows {
				t.Fatalf("key %d, %s: %d rows, want %d", keyBytes, path, len(got), rows)
			}
			for _, r := range got {
				g.Row(want, next)
				next++
				if !equalRow(r, want) {
					t.Fatalf("key %d, row %d: %v, want %v", keyBytes, next-1, r, want)
				}
			}
		}
		if err := Run(t.Context(), &out, []string{"--rows", "10", dir}); err == nil || !strings.Contains(err.Error(), "is not empty") {
			t.Errorf("a second run into %s: %v, want 'is not empty'", dir, err)
		}
	}
	empty := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{
		{"--rows", "10", "--files", "11", empty},
		{"--rows", "10", "--files", "0", empty},
		{"--rows", "10", "--row-group", "0", empty},
		{"--rows", "10"},
		{"--rows", "10", empty, "extra"},
	} {
		var out bytes.Buffer
		if err := Run(t.Context(), &out, args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("bad flags made %s: %v", empty, err)
	}
}

func equalRow(a, b kv.Row) bool {
	switch x := a[0].(type) {
	case int64:
		if y, ok := b[0].(int64); !ok || x != y {
			return false
		}
	case []byte:
		if y, ok := b[0].([]byte); !ok || !bytes.Equal(x, y) {
			return false
		}
	default:
		return false
	}
	return a[1] == b[1]
}

// readAll reads a file's rows as (key, payload).
func readAll(t *testing.T, path string) []kv.Row {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := fr.GetRecordReader(t.Context(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var rows []kv.Row
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := range int(rec.NumRows()) {
			var key any
			switch k := rec.Column(0).(type) {
			case *array.Int64:
				key = k.Value(i)
			case *array.Binary:
				key = bytes.Clone(k.Value(i))
			}
			rows = append(rows, kv.Row{key, rec.Column(1).(*array.String).Value(i)})
		}
	}
	if err := rr.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}
