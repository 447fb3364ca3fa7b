package snapshotbuild

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestFileWritable: what NewFileWritable is handed reaches the file in
// order, across its buffer's boundary and around it (writes larger than
// the buffer), and Finish leaves the file closed and complete.
func TestFileWritable(t *testing.T) {
	path, f, w := newTestWritable(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	for _, n := range []int{0, 1, 4096, fileWriteBuf - 4097, 1, 2, fileWriteBuf, 3, 2*fileWriteBuf + 5, 4096} {
		want = writeRandom(t, w, rng, n, want)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file has %d bytes, want %d (or differs)", len(got), len(want))
	}
	if err := f.Close(); err == nil {
		t.Error("file still open after Finish")
	}
}

// TestFileWritableWriteback: the writable starts the writeback of what it
// wrote in contiguous ranges from the file's start, each of at least
// writebackStep bytes, as it goes; the bytes reach the file unchanged.
func TestFileWritableWriteback(t *testing.T) {
	type call struct{ off, n int64 }
	var calls []call
	real := startWriteback
	startWriteback = func(fd uintptr, off, n int64) bool {
		calls = append(calls, call{off, n})
		return real(fd, off, n)
	}
	defer func() { startWriteback = real }()

	path, _, w := newTestWritable(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var want []byte
	for len(want) < 5*writebackStep {
		want = writeRandom(t, w, rng, rng.IntN(fileWriteBuf/3), want)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file has %d bytes (%v), want %d (or differs)", len(got), err, len(want))
	}
	t.Logf("%d bytes, writeback started %d times: %v", len(want), len(calls), calls)
	if len(calls) < 4 {
		t.Fatalf("writeback started %d times for %d bytes, want at least 4", len(calls), len(want))
	}
	var next int64
	for _, c := range calls {
		if c.off != next || c.n < writebackStep {
			t.Fatalf("writeback of [%d, +%d) after %d: want contiguous ranges of at least %d bytes", c.off, c.n, next, writebackStep)
		}
		next = c.off + c.n
	}
	if uncovered := int64(len(want)) - next; uncovered >= writebackStep+fileWriteBuf {
		t.Fatalf("%d bytes at the end without writeback", uncovered)
	}
	if runtime.GOOS == "linux" && !w.(*fileWritable).writeback {
		t.Fatal("sync_file_range failed: writeback was given up")
	}
}

// writeRandom writes n random bytes to w and returns them appended to
// written.
func writeRandom(t *testing.T, w objstorage.Writable, rng *rand.Rand, n int, written []byte) []byte {
	t.Helper()
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	written = append(written, p...) // before Write, which may modify p
	if err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	return written
}

// newTestWritable returns a new file under t's temporary directory, as the
// builder creates its SSTs, and NewFileWritable over it.
func newTestWritable(t *testing.T) (string, vfs.File, objstorage.Writable) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.sst")
	f, err := LocalFS().Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	return path, f, NewFileWritable(f)
}
