package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteOutputWhole: --out replaces the file whole (written beside it,
// synced and renamed, mode 0644), leaves nothing else, and on a failure
// leaves the file it would replace as it was.
func TestWriteOutputWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctx.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(nil, path, []byte(`{"new":true}`)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(b, []byte(`{"new":true}`)) {
		t.Fatalf("%q, %v", b, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left %v", ents)
	}
	// A directory where the file should go: the rename fails, nothing
	// else is left.
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "x.json", "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(nil, filepath.Join(sub, "x.json"), []byte("y")); err == nil {
		t.Fatal("writing over a non-empty directory succeeded")
	}
	if ents, _ := os.ReadDir(sub); len(ents) != 1 {
		t.Fatalf("left %v", ents)
	}
}
