package changelog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// openLog opens a SegmentLog in dir and closes it at the end of the test.
func openLog(t *testing.T, dir string, opts ...Option) *SegmentLog {
	t.Helper()
	l, err := OpenSegmentLog(dir, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

// payload is the deterministic content of the record at offset off.
func payload(off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int64(i)*31 + off*7 + 1)
	}
	copy(b, fmt.Sprintf("rec-%d;", off))
	return b
}

// appendBatches appends batches of the given sizes (records of recLen
// bytes) and returns every appended payload, indexed by offset - base.
func appendBatches(t *testing.T, l *SegmentLog, sizes []int, recLen int) [][]byte {
	t.Helper()
	_, next, err := l.Offsets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var all [][]byte
	for _, n := range sizes {
		batch := make([][]byte, n)
		for i := range batch {
			batch[i] = payload(next+int64(i), recLen)
		}
		first, err := l.Append(t.Context(), batch)
		if err != nil {
			t.Fatalf("append %d records at %d: %v", n, next, err)
		}
		if first != next {
			t.Fatalf("append returned first offset %d, want %d", first, next)
		}
		next += int64(n)
		all = append(all, batch...)
	}
	return all
}

// readAll reads [from, end) in reads of maxBytes and checks that offsets
// are dense.
func readAll(t *testing.T, l Log, from int64, maxBytes int) []Record {
	t.Helper()
	_, end, err := l.Offsets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for from < end {
		recs, err := l.Read(t.Context(), from, maxBytes)
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if len(recs) == 0 {
			t.Fatalf("read from %d < end %d returned nothing", from, end)
		}
		for _, r := range recs {
			if r.Offset != from {
				t.Fatalf("got offset %d, want %d", r.Offset, from)
			}
			from++
		}
		out = append(out, recs...)
	}
	return out
}

// checkRecords checks that recs are exactly want, starting at base.
func checkRecords(t *testing.T, recs []Record, base int64, want [][]byte) {
	t.Helper()
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if r.Offset != base+int64(i) {
			t.Fatalf("record %d: offset %d, want %d", i, r.Offset, base+int64(i))
		}
		if !bytes.Equal(r.Data, want[i]) {
			t.Fatalf("record at offset %d: data differs", r.Offset)
		}
	}
}

func checkOffsets(t *testing.T, l Log, start, end int64) {
	t.Helper()
	s, e, err := l.Offsets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s != start || e != end {
		t.Fatalf("offsets [%d, %d), want [%d, %d)", s, e, start, end)
	}
}

// segmentFiles lists the segment files of dir in order.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, ok := parseSegmentName(e.Name()); ok {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// mutateFile applies fn to the bytes of path.
func mutateFile(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}
