package changelog

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// blockRemove makes the unlink of the segment file at path fail (as an
// EIO, or an unlink a crash undid, would): the file moves aside and a
// non-empty directory takes its name. restore puts the disk back as the
// failed unlink left it.
func blockRemove(t *testing.T, path string) (restore func()) {
	t.Helper()
	aside := filepath.Join(t.TempDir(), "aside")
	if err := os.Rename(path, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, path); err != nil {
			t.Fatal(err)
		}
	}
}

// reopenRestored closes l, puts the disk back as the failed unlink left it
// (restore) and opens the log in dir again.
func reopenRestored(t *testing.T, l *SegmentLog, restore func(), dir string) *SegmentLog {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	restore()
	l2, err := OpenSegmentLog(dir, small...)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	return l2
}

// TestResetToFailedRemove: a ResetTo whose removal of the old, empty
// segment fails takes no more writes until the log is opened again. It
// used to stay reset and writable: the callers' retry saw start == end ==
// offset, appends were acknowledged, and at the next open the old segment
// (still there) hijacked the log: records lost (a reset down) or a log
// that would not open (a reset up). Opened again, the log holds empty
// segments only, and the caller's ResetTo, run again, works.
func TestResetToFailedRemove(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, off int64
	}{{"down", 50, 7}, {"up", 50, 90}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := OpenSegmentLog(dir, small...)
			if err != nil {
				t.Fatal(err)
			}
			appendBatches(t, l, []int{int(tc.old)}, 10)
			if err := l.TruncateBefore(t.Context(), tc.old); err != nil {
				t.Fatal(err)
			}
			restore := blockRemove(t, filepath.Join(dir, segmentName(tc.old)))
			if err := l.ResetTo(t.Context(), tc.off); err == nil {
				t.Fatal("ResetTo: want the remove error")
			}
			if _, err := l.Append(t.Context(), [][]byte{[]byte("x")}); err == nil {
				t.Fatal("an append after the failed ResetTo was acknowledged")
			}
			l2 := reopenRestored(t, l, restore, dir)
			if err := l2.ResetTo(t.Context(), tc.off); err != nil {
				t.Fatalf("ResetTo again: %v", err)
			}
			all := appendBatches(t, l2, []int{3, 3}, 10)
			if err := l2.Close(); err != nil {
				t.Fatal(err)
			}
			l3, err := OpenSegmentLog(dir, small...)
			if err != nil {
				t.Fatalf("reopen after the appends: %v", err)
			}
			defer l3.Close()
			checkOffsets(t, l3, tc.off, tc.off+6)
			checkRecords(t, readAll(t, l3, tc.off, 1<<20), tc.off, all)
		})
	}
}

// TestTruncateFailedRemove: a TruncateBefore whose removal of an old
// segment fails takes no more writes until the log is opened again, so no
// ResetTo can put new records behind a segment that comes back.
func TestTruncateFailedRemove(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenSegmentLog(dir, small...)
	if err != nil {
		t.Fatal(err)
	}
	want := appendBatches(t, l, []int{30}, 10)
	restore := blockRemove(t, filepath.Join(dir, segmentName(0)))
	if err := l.TruncateBefore(t.Context(), 30); err == nil {
		t.Fatal("TruncateBefore: want the remove error")
	}
	if err := l.ResetTo(t.Context(), 7); err == nil {
		t.Fatal("ResetTo after the failed truncation succeeded")
	}
	l2 := reopenRestored(t, l, restore, dir)
	defer l2.Close()
	checkOffsets(t, l2, 0, 30) // more kept, never less
	checkRecords(t, readAll(t, l2, 0, 1<<20), 0, want)
}

// TestReadStopsAtNextSegmentBase: a segment that holds batches at or past
// the next segment's base (a stale segment that came back) is corruption
// to a reader, never records served as the next segment's.
func TestReadStopsAtNextSegmentBase(t *testing.T) {
	stale := t.TempDir()
	l, err := OpenSegmentLog(stale, small...)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, []int{30}, 10) // offsets 0..29 in segment 0
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err = OpenSegmentLog(dir, small...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ResetTo(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), [][]byte{[]byte("NEW-7"), []byte("NEW-8"), []byte("NEW-9")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(stale, segmentName(0)), filepath.Join(dir, segmentName(0)))
	l2, err := OpenSegmentLog(dir, small...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer l2.Close()
	recs, err := l2.Read(t.Context(), 5, 25)
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("read across the stale segment: %d records (%v), want a CorruptError", len(recs), err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAppendOffsetOverflow: a batch whose offsets would run past
// math.MaxInt64 is refused and changes nothing; it was acknowledged with
// an end offset that had wrapped negative, and could not be read.
func TestAppendOffsetOverflow(t *testing.T) {
	l, err := OpenSegmentLog(t.TempDir(), small...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.ResetTo(t.Context(), math.MaxInt64-1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), [][]byte{[]byte("a"), []byte("b"), []byte("c")}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("append past MaxInt64: %v, want ErrTooLarge", err)
	}
	checkOffsets(t, l, math.MaxInt64-1, math.MaxInt64-1)
	if _, err := l.Append(t.Context(), [][]byte{[]byte("a")}); err != nil {
		t.Fatalf("the last offset: %v", err)
	}
}
