package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWriteOutputWhole: --out replaces the file whole (written beside it,
// synced and renamed, keeping its mode), leaves nothing else, and on a
// failure leaves the file it would replace as it was.
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
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v (want the replaced file's 0600)", st.Mode(), err)
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

// TestWriteOutputThroughLinksAndPipes: a symlink stays a link and its
// target gets the output; a named pipe's reader gets it (the rename of
// 357c837 replaced both by a regular file: the target kept its old
// content, the reader got nothing); a new file gets the mode os.WriteFile
// gives; a dangling symlink is written through.
func TestWriteOutputThroughLinksAndPipes(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(real, "ctx.json")
	if err := os.WriteFile(target, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "ctx.json")
	if err := os.Symlink(filepath.Join("real", "ctx.json"), link); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(link); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(io.Discard, link, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(target)
	lst, _ := os.Lstat(link)
	st, _ := os.Stat(target)
	if string(b) != "new\n" || lst.Mode()&os.ModeSymlink == 0 || st.Mode().Perm() != 0o640 {
		t.Fatalf("target holds %q (mode %v), the link is %v", b, st.Mode(), lst.Mode())
	}
	if ents, _ := os.ReadDir(real); len(ents) != 1 {
		t.Fatalf("left %v", ents)
	}

	fifo := filepath.Join(dir, "ctx.pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(fifo); err != nil { // without opening it
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- []byte(err.Error())
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	if err := writeOutput(io.Discard, fifo, []byte("ctx\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if string(b) != "ctx\n" {
			t.Fatalf("the pipe's reader got %q", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe's reader got nothing")
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the pipe is now %v, %v", st.Mode(), err)
	}

	fresh, ref := filepath.Join(dir, "new.json"), filepath.Join(dir, "ref")
	if err := os.WriteFile(ref, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(io.Discard, fresh, []byte("x")); err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(fresh)
	st2, _ := os.Stat(ref)
	if st1.Mode() != st2.Mode() {
		t.Fatalf("a new file's mode %v, os.WriteFile's %v", st1.Mode(), st2.Mode())
	}

	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(real, "later.json"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(io.Discard, dangling, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(real, "later.json")); err != nil || string(b) != "y" {
		t.Fatalf("through a dangling link: %q, %v", b, err)
	}
	// A dangling link into a directory that does not exist is refused by
	// the check before the work, not by the write after it.
	typo := filepath.Join(dir, "typo")
	if err := os.Symlink(filepath.Join(dir, "no-such-dir", "ctx.json"), typo); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(typo); err == nil {
		t.Fatal("checkOutFile of a link into a missing directory passed")
	}
	// ... also through a chain of links, while a link to a device or a
	// pipe is written in place, unchecked (/dev/stdout is a link).
	chain := filepath.Join(dir, "chain")
	if err := os.Symlink(typo, chain); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(chain); err == nil {
		t.Fatal("checkOutFile of a chain of links into a missing directory passed")
	}
	// A link's ".." applies to its real directory (through a linked one),
	// as the kernel does: the check looked where the path's text pointed.
	if err := os.MkdirAll(filepath.Join(dir, "deep", "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("deep", "real"), filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "nodir"), 0o755); err != nil { // where the text points, not the kernel
		t.Fatal(err)
	}
	up := filepath.Join(dir, "d", "up")
	if err := os.Symlink(filepath.Join("..", "nodir", "x.json"), up); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(up); err == nil {
		t.Fatal("checkOutFile of a link whose '..' leads (from its real directory) into a missing one passed")
	}
	if err := os.Mkdir(filepath.Join(dir, "deep", "nodir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(up); err != nil {
		t.Fatalf("checkOutFile of a link whose '..' leads into an existing directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "deep", "nodir", "x.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the check left its file: %v", err)
	}
	for _, dev := range []string{"/dev/stdout", "/dev/null"} {
		if err := checkOutFile(dev); err != nil {
			t.Fatalf("checkOutFile(%s): %v", dev, err)
		}
	}
	toPipe := filepath.Join(dir, "to-pipe")
	if err := os.Symlink(fifo, toPipe); err != nil {
		t.Fatal(err)
	}
	if err := checkOutFile(toPipe); err != nil {
		t.Fatalf("checkOutFile of a link to a pipe: %v", err)
	}

	// A file of mode 0 keeps it (it was given 0644, as a new file).
	locked := filepath.Join(dir, "locked.json")
	if err := os.WriteFile(locked, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	if err := writeOutput(io.Discard, locked, []byte("z")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(locked); err != nil || st.Mode().Perm() != 0 {
		t.Fatalf("mode %v, %v (want the replaced file's 0000)", st.Mode(), err)
	}
}

// TestCheckOutFileLeavesAFileItDidNotCreate: a file that appears at a
// dangling --out link's target while checkOutFile runs (another process
// creating it) was opened by the check (no O_EXCL through a link) and
// removed with what was written to it.
func TestCheckOutFileLeavesAFileItDidNotCreate(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.json")
	link := filepath.Join(dir, "out.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for i := range 5000 {
		os.Remove(target)
		var wg sync.WaitGroup
		created := false
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return
			}
			created = true
			f.Write([]byte("precious"))
			f.Close()
		})
		close(start)
		_ = checkOutFile(link)
		wg.Wait()
		if created {
			if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
				lost++
				if lost == 1 {
					t.Logf("iteration %d: a file another writer created at the link's target was removed by checkOutFile", i)
				}
			}
		}
	}
	if lost > 0 {
		t.Fatalf("checkOutFile removed a file it did not create %d times", lost)
	}
}
