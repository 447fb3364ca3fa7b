package snapshotbuild

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// rawCheckpoint builds what makeCheckpoint starts from: SSTs written by the
// sink, ingested into a fresh DB, checkpointed. It returns the checkpoint's
// MANIFEST as Pebble wrote it.
func rawCheckpoint(t *testing.T, n int) (dir string, manifest []byte) {
	t.Helper()
	dir = t.TempDir()
	sink := newSSTSink(dir, WriterOptions(CompressionSnappy, DefaultBlockSize), 8<<10)
	for i := range n {
		if err := sink.add(fmt.Appendf(nil, "key%06d", i), bytes.Repeat([]byte{byte(i)}, 50)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.finish(); err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(filepath.Join(dir, "db"), PebbleOptions(CompressionSnappy, nil))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range sink.files {
		paths = append(paths, f.path)
	}
	if err := db.Ingest(t.Context(), paths); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ckpt")
	if err := db.Checkpoint(ck, pebble.WithFlushedWAL()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(ck)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			b, err := os.ReadFile(filepath.Join(ck, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			return ck, b
		}
	}
	t.Fatal("no MANIFEST in checkpoint")
	return "", nil
}

// TestNormalizeManifest: Pebble stamps ingested tables with the wall clock
// (so the raw MANIFEST is not reproducible); the normalizer zeroes exactly
// that, is idempotent, and Pebble opens the result and reads every key.
func TestNormalizeManifest(t *testing.T) {
	ck, raw := rawCheckpoint(t, 2000)
	norm, changed, err := normalizeManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatal("raw MANIFEST had no creation time to normalize: the normalizer is not needed, or broken")
	}
	if len(norm) >= len(raw) {
		t.Fatalf("normalized MANIFEST %d bytes, raw %d: a 4-5 byte time per table should have shrunk to 1", len(norm), len(raw))
	}
	again, changed, err := normalizeManifest(norm)
	if err != nil || changed || !bytes.Equal(again, norm) {
		t.Fatalf("not idempotent: changed=%v err=%v", changed, err)
	}
	var name string
	ents, _ := os.ReadDir(ck)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			name = e.Name()
		}
	}
	if err := os.WriteFile(filepath.Join(ck, name), norm, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := PebbleOptions(CompressionSnappy, nil)
	opts.ReadOnly = true
	db, err := pebble.Open(ck, opts)
	if err != nil {
		t.Fatalf("open normalized checkpoint: %v", err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if want := fmt.Sprintf("key%06d", n); string(it.Key()) != want {
			t.Fatalf("key %d = %q, want %q", n, it.Key(), want)
		}
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 2000 {
		t.Fatalf("%d keys, want 2000", n)
	}
	tables, err := db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables[6]) < 2 {
		t.Fatalf("want several L6 tables, got %d", len(tables[6]))
	}
}

func TestNormalizeManifestRejectsUnknown(t *testing.T) {
	// A version edit with an unknown tag (200, column family) is refused,
	// not guessed at.
	_, _, err := normalizeVersionEdit([]byte{0xc8, 0x01, 0x00})
	if !errors.Is(err, errManifestUnknown) {
		t.Fatalf("err = %v, want errManifestUnknown", err)
	}
	// Truncated fields are refused too.
	if _, _, err := normalizeVersionEdit([]byte{1, 10, 'a'}); !errors.Is(err, errManifestUnknown) {
		t.Fatalf("err = %v, want errManifestUnknown", err)
	}
}
