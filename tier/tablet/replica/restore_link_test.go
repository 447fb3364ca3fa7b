package replica

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/snapshot"
	"github.com/thawdb/thaw/snapshotbuild"
)

// objectFile is the local path of a file:// object URI.
func objectFile(t *testing.T, uri string) string {
	t.Helper()
	p, ok := strings.CutPrefix(uri, "file://")
	if !ok {
		t.Fatalf("%s is not a file:// uri", uri)
	}
	return filepath.FromSlash(p)
}

// verifyObjects reads every file of m from the store and checks its size
// and SHA-256.
func verifyObjects(t *testing.T, e *env, m *snapshot.Metadata) {
	t.Helper()
	for _, f := range snapshot.Files(m) {
		k, err := e.store.Key(f.Handle.Path)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := e.store.OpenVerified(t.Context(), k, f.Handle.Size, f.Handle.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, rc)
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("object %s of %s changed: %v", k, f.LocalPath, err)
		}
	}
}

// bulkSnapshot builds a one-bucket snapshot offline with rows keys,
// key(0), key(step), key(2*step), ..., each with the value "bulk".
func bulkSnapshot(t *testing.T, e *env, rows, step int) (*snapshot.Metadata, map[string]string) {
	t.Helper()
	b, err := snapshotbuild.New(e.store, snapshotbuild.Target{
		NumBuckets: 1, Snapshot: e.target, SnapshotIDs: []int64{100},
	}, snapshotbuild.Options{TempDir: t.TempDir(), Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range rows {
		k, v := key(i*step), []byte("bulk")
		want[string(k)] = string(v)
		if err := b.AddPair(t.Context(), 0, k, v); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	mk, _ := e.store.Key(res[0].MetadataPath)
	body, err := e.store.Get(t.Context(), mk)
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.DecodeMetadata(body)
	if err != nil {
		t.Fatal(err)
	}
	return m, want
}

// On a file:// store on the host's file system a restore hard-links the
// snapshot's SSTs (same inode as the object) and copies everything else;
// when the replica then writes, compacts the restored SSTs away and is
// destroyed, every object of the snapshot still has its size and SHA-256.
func TestRestoreLinksSSTs(t *testing.T) {
	for _, source := range []string{"bulk", "replica"} {
		t.Run(source, func(t *testing.T) {
			e := newEnv(t)
			var md *snapshot.Metadata
			want := map[string]string{}
			if source == "bulk" {
				md, want = bulkSnapshot(t, e, 2000, 1)
			} else {
				h1, _ := e.host(t)
				r := open(t, h1, e.id(0), nil)
				for i := range 3 {
					b := upserts(i*500, 700, "r")
					write(t, r, b)
					model(want, b)
				}
				md = snap(t, r, 1, nil)
			}

			h2, _ := e.host(t)
			r2 := open(t, h2, e.id(0), md)
			sameContents(t, r2, want)
			dbDir := filepath.Join(r2.dir, dbDirName)
			var linked []string
			for _, f := range snapshot.Files(md) {
				// Independent of isImmutable: what Pebble never writes again.
				immutable := strings.HasSuffix(f.LocalPath, ".sst") || strings.HasSuffix(f.LocalPath, ".blob")
				li, err := os.Stat(filepath.Join(dbDir, filepath.FromSlash(f.LocalPath)))
				if errors.Is(err, fs.ErrNotExist) && !immutable {
					continue // an obsolete WAL or MANIFEST that Pebble removed on open
				}
				if err != nil {
					t.Fatal(err)
				}
				oi, err := os.Stat(objectFile(t, f.Handle.Path))
				if err != nil {
					t.Fatal(err)
				}
				switch same := os.SameFile(li, oi); {
				case immutable && !same:
					t.Fatalf("%s is a copy, want a hard link to %s", f.LocalPath, f.Handle.Path)
				case !immutable && same:
					t.Fatalf("%s is linked to its object; Pebble may change it", f.LocalPath)
				case same:
					linked = append(linked, filepath.Join(dbDir, filepath.FromSlash(f.LocalPath)))
				}
			}
			if len(linked) == 0 {
				t.Fatal("the snapshot has no SST")
			}

			// Overwrite every key, flush and compact the whole key space:
			// the restored SSTs become obsolete and Pebble unlinks them.
			b := upserts(0, 3000, "after")
			write(t, r2, b)
			model(want, b)
			compactAway(t, r2, linked)
			sameContents(t, r2, want)
			verifyObjects(t, e, md)

			// The compacted replica snapshots and restores; destroying it
			// leaves the first snapshot's objects whole and restorable.
			md2 := snap(t, r2, 2, md)
			if err := r2.Destroy(); err != nil {
				t.Fatal(err)
			}
			verifyObjects(t, e, md)
			h3, _ := e.host(t)
			sameContents(t, open(t, h3, e.id(0), md2), want)
			h4, _ := e.host(t)
			// From the first snapshot plus the changelog's later records.
			sameContents(t, open(t, h4, e.id(0), md), want)
		})
	}
}

// On a file:// store on the host's file system a replica's snapshot stores
// its SSTs as hard links to the database's files (same inode) and copies
// everything else; when the replica then compacts those SSTs away and is
// destroyed, every object still has its size and SHA-256 and the snapshot
// restores.
func TestSnapshotLinksSSTs(t *testing.T) {
	e := newEnv(t)
	h1, _ := e.host(t)
	r := open(t, h1, e.id(0), nil)
	want := map[string]string{}
	for i := range 3 {
		b := upserts(i*500, 700, "r")
		write(t, r, b)
		model(want, b)
	}
	md := snap(t, r, 1, nil)
	dbDir := filepath.Join(r.dir, dbDirName)
	var linked []string
	for _, f := range snapshot.Files(md) {
		local := filepath.Join(dbDir, filepath.FromSlash(f.LocalPath))
		sst := strings.HasSuffix(f.LocalPath, ".sst")
		li, err := os.Stat(local)
		if errors.Is(err, fs.ErrNotExist) && !sst {
			continue // a marker or WAL that Pebble replaced since the checkpoint
		}
		if err != nil {
			t.Fatal(err)
		}
		oi, err := os.Stat(objectFile(t, f.Handle.Path))
		if err != nil {
			t.Fatal(err)
		}
		switch same := os.SameFile(li, oi); {
		case sst && !same:
			t.Fatalf("object of %s is a copy, want a hard link to the replica's file", f.LocalPath)
		case !sst && same:
			t.Fatalf("object of %s is linked to the replica's file; Pebble may change it", f.LocalPath)
		case same:
			linked = append(linked, local)
		}
	}
	if len(linked) == 0 {
		t.Fatal("the snapshot has no SST")
	}

	// Overwrite every key and compact: Pebble unlinks the snapshotted
	// SSTs, which must leave the objects whole.
	b := upserts(0, 3000, "after")
	write(t, r, b)
	compactAway(t, r, linked)
	if err := r.Destroy(); err != nil {
		t.Fatal(err)
	}
	verifyObjects(t, e, md)
	model(want, b)
	h2, _ := e.host(t)
	sameContents(t, open(t, h2, e.id(0), md), want)
}

// compactAway flushes and compacts r's whole key space and waits until
// Pebble has unlinked every path of linked (SSTs that compaction made
// obsolete).
func compactAway(t *testing.T, r *Replica, linked []string) {
	t.Helper()
	if err := r.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := r.db.Compact(t.Context(), []byte{0}, bytes.Repeat([]byte{0xff}, 16), true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range linked {
		for {
			_, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still exists after the compaction: %v", p, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
