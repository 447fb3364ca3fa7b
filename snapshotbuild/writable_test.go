package snapshotbuild

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestFileWritable: what NewFileWritable is handed reaches the file in
// order, across its buffer's boundary and around it (writes larger than
// the buffer), and Finish leaves the file closed and complete.
func TestFileWritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.sst")
	f, err := LocalFS().Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := NewFileWritable(f)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	for _, n := range []int{0, 1, 4096, fileWriteBuf - 4097, 1, 2, fileWriteBuf, 3, 2*fileWriteBuf + 5, 4096} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		want = append(want, p...)
		if err := w.Write(p); err != nil {
			t.Fatal(err)
		}
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
