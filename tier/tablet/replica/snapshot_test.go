package replica

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/thawdb/thaw/objstore"
	"github.com/thawdb/thaw/snapshot"
)

// putRecorder records the key of every Put the store sees.
type putRecorder struct {
	mu   sync.Mutex
	keys []string
}

func recordPuts(e *env) *putRecorder {
	p := &putRecorder{}
	e.faults.FailKey(objstore.OpPut, func(k string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.keys = append(p.keys, k)
		return false
	}, errors.New("never"))
	return p
}

func (p *putRecorder) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.keys
	p.keys = nil
	slices.Sort(k)
	return k
}

func sumSizes(fs []snapshot.KvFileHandle) (n int64) {
	for _, f := range fs {
		n += f.Handle.Size
	}
	return n
}

// A snapshot restored on another host holds exactly the source's
// contents; its _METADATA decodes to what Snapshot returned.
func TestSnapshotRestoreIdentical(t *testing.T) {
	e := newEnv(t)
	e.target.Partition, e.target.PartitionID = "2026-11-29", 12
	h1, _ := e.host(t)
	r := open(t, h1, e.id(5), nil)
	want := map[string]string{}
	for i := range 4 {
		b := upserts(i*100, 150, "x")
		b = append(b, Mutation{Op: OpDelete, Key: key(i*100 + 7)})
		write(t, r, b)
		model(want, b)
	}
	md, path, err := r.Snapshot(t.Context(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if path != e.target.MetadataPath(5, 3) || md.LogOffset != r.AppliedOffset()+1 || *md.RowCount != int64(len(want)) {
		t.Fatalf("snapshot at %s, log_offset %d, rows %d", path, md.LogOffset, *md.RowCount)
	}
	if md.PartitionID == nil || *md.PartitionID != 12 || md.BucketID != 5 || md.TableID != 7 {
		t.Fatalf("snapshot ids: %+v", md)
	}
	if len(md.SharedFiles) == 0 || md.IncrementalSize != sumSizes(md.SharedFiles)+sumSizes(md.PrivateFiles) {
		t.Fatalf("first snapshot: %d shared files, incremental size %d", len(md.SharedFiles), md.IncrementalSize)
	}
	for _, f := range md.SharedFiles {
		if !strings.HasPrefix(f.Handle.Path, e.target.SharedDir(5)+"/shared-") || !strings.HasSuffix(f.LocalPath, ".sst") {
			t.Fatalf("shared file %+v", f)
		}
	}
	for _, f := range md.PrivateFiles {
		if f.Handle.Path != md.SnapshotLocation+"/"+snapshot.PrivateFileName(f.Handle.SHA256, f.LocalPath) || strings.HasSuffix(f.LocalPath, ".sst") {
			t.Fatalf("private file %+v", f)
		}
	}
	key, _ := e.store.Key(path)
	body, err := e.store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := snapshot.DecodeMetadata(body)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := snapshot.EncodeMetadata(md); string(again) != string(body) {
		t.Fatalf("stored _METADATA differs from the returned metadata")
	}

	h2, _ := e.host(t)
	r2 := open(t, h2, e.id(5), stored)
	sameContents(t, r2, want)
	if r2.AppliedOffset() != r.AppliedOffset() {
		t.Fatalf("restored at %d, source at %d", r2.AppliedOffset(), r.AppliedOffset())
	}
	if _, err := h2.Open(t.Context(), e.id(6), stored); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restore of another bucket's snapshot: %v", err)
	}
	// Local paths that no directory can hold together (a file, and another
	// file under it as a directory) are refused before any download.
	clash := *stored
	clash.PrivateFiles = slices.Clone(stored.PrivateFiles)
	extra := clash.PrivateFiles[0]
	extra.LocalPath += "/extra"
	clash.PrivateFiles = append(clash.PrivateFiles, extra)
	hc, _ := e.host(t)
	if _, err := hc.Open(t.Context(), e.id(5), &clash); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "a directory holding") {
		t.Fatalf("restore of a file and a directory at one local path: %v", err)
	}
	// The database's own state record must agree with the metadata.
	h3, _ := e.host(t)
	for name, edit := range map[string]func(m *snapshot.Metadata){
		"log_offset": func(m *snapshot.Metadata) { m.LogOffset-- },
		"row_count":  func(m *snapshot.Metadata) { *m.RowCount++ },
	} {
		bad := *stored
		bad.RowCount = new(*stored.RowCount)
		edit(&bad)
		if _, err := h3.Open(t.Context(), e.id(5), &bad); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("restore with a wrong %s: %v", name, err)
		}
	}
}

// A second snapshot after a small write uploads only the new SST, the
// private files and _METADATA; the unchanged SST is referenced.
func TestIncrementalSnapshot(t *testing.T) {
	e := newEnv(t)
	// Every flushed SST holds the state record, so all L0 files overlap and
	// Pebble may merge them at any time; keep the file set still.
	h, _ := e.host(t, func(o *options) {
		o.tune = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	})
	r := open(t, h, e.id(0), nil)
	want := map[string]string{}
	b := upserts(0, 500, "a")
	write(t, r, b)
	model(want, b)
	puts := recordPuts(e)

	md1 := snap(t, r, 1, nil)
	if got := puts.take(); len(got) != len(md1.SharedFiles)+len(md1.PrivateFiles)+1 {
		t.Fatalf("first snapshot: %d puts for %d files", len(got), len(md1.SharedFiles)+len(md1.PrivateFiles))
	}
	if len(md1.SharedFiles) != 1 {
		t.Fatalf("first snapshot has %d SSTs, want 1", len(md1.SharedFiles))
	}

	b = []Mutation{{Op: OpUpsert, Key: key(9000), Value: []byte("new")}}
	write(t, r, b)
	model(want, b)
	md2 := snap(t, r, 2, md1)
	if len(md2.SharedFiles) != 2 || !slices.Contains(md2.SharedFiles, md1.SharedFiles[0]) {
		t.Fatalf("second snapshot shared files %+v, want md1's plus one", md2.SharedFiles)
	}
	var fresh snapshot.KvFileHandle
	for _, f := range md2.SharedFiles {
		if f != md1.SharedFiles[0] {
			fresh = f
		}
	}
	var want2 []string
	for _, f := range append([]snapshot.KvFileHandle{fresh}, md2.PrivateFiles...) {
		k, _ := e.store.Key(f.Handle.Path)
		want2 = append(want2, k)
	}
	mk, _ := e.store.Key(e.target.MetadataPath(0, 2))
	want2 = append(want2, mk)
	slices.Sort(want2)
	if got := puts.take(); !slices.Equal(got, want2) {
		t.Fatalf("second snapshot put\n%q\nwant\n%q", got, want2)
	}
	if md2.IncrementalSize != fresh.Handle.Size+sumSizes(md2.PrivateFiles) {
		t.Fatalf("incremental size %d, want %d", md2.IncrementalSize, fresh.Handle.Size+sumSizes(md2.PrivateFiles))
	}
	if md2.LogOffset != 501 {
		t.Fatalf("log_offset %d, want 501", md2.LogOffset)
	}

	h2, _ := e.host(t)
	sameContents(t, open(t, h2, e.id(0), md2), want)
}

// A snapshot file that does not match its size and SHA-256 fails the
// restore with an integrity error and leaves nothing behind.
func TestRestoreCorruptFile(t *testing.T) {
	e := newEnv(t)
	h1, _ := e.host(t)
	r := open(t, h1, e.id(0), nil)
	write(t, r, upserts(0, 100, "a"))
	md := snap(t, r, 1, nil)

	h2, root := e.host(t)
	for _, match := range []string{".sst", "/private-"} {
		e.faults.CorruptRead(func(k string) bool { return strings.Contains(k, match) })
		_, err := h2.Open(t.Context(), e.id(0), md)
		if !errors.Is(err, objstore.ErrIntegrity) {
			t.Fatalf("restore with corrupt %s files: %v", match, err)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 0 {
			t.Fatalf("failed restore left %d entries in the host root", len(ents))
		}
		if n := h2.Replicas(); n != 0 {
			t.Fatalf("failed restore left %d replicas registered", n)
		}
		e.faults.Reset()
	}
	// A truncated size in the metadata is caught the same way.
	bad := *md
	bad.SharedFiles = slices.Clone(md.SharedFiles)
	bad.SharedFiles[0].Handle.Size--
	if _, err := h2.Open(t.Context(), e.id(0), &bad); !errors.Is(err, objstore.ErrIntegrity) {
		t.Fatalf("restore with a wrong size: %v", err)
	}
	bad.SharedFiles[0].Handle.Size++
	bad.SharedFiles[0].Handle.SHA256 = ""
	if _, err := h2.Open(t.Context(), e.id(0), &bad); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restore without a digest: %v", err)
	}
	r2 := open(t, h2, e.id(0), md)
	if r2.RowCount() != 100 {
		t.Fatalf("restore after the faults: %d rows", r2.RowCount())
	}
}

// A bulk-load snapshot built offline by snapshotbuild (only private
// files, no replica state record) restores through the same path, and the
// replica continues from its log_offset.
func TestRestoreBulkSnapshot(t *testing.T) {
	e := newEnv(t)
	bulk, want := bulkSnapshot(t, e, 300, 2) // odd keys stay free for online writes
	if len(bulk.SharedFiles) != 0 {
		t.Fatalf("bulk snapshot with shared files")
	}

	h, _ := e.host(t)
	r := open(t, h, e.id(0), bulk)
	sameContents(t, r, want)
	if r.AppliedOffset() != bulk.LogOffset-1 {
		t.Fatalf("AppliedOffset %d, want log_offset-1 = %d", r.AppliedOffset(), bulk.LogOffset-1)
	}
	// The fresh changelog was moved up to the snapshot's log_offset.
	w := []Mutation{{Op: OpUpsert, Key: key(1), Value: []byte("online")}, {Op: OpDelete, Key: key(0)}}
	if first := write(t, r, w); first != bulk.LogOffset {
		t.Fatalf("first online offset %d, want %d", first, bulk.LogOffset)
	}
	model(want, w)

	// A snapshot that the changelog does not reach, or no longer covers.
	h3, _ := e.host(t)
	for _, off := range []int64{bulk.LogOffset + 10, bulk.LogOffset - 1} {
		bad := *bulk
		bad.LogOffset = off
		if _, err := h3.Open(t.Context(), e.id(0), &bad); !errors.Is(err, ErrLogGap) {
			t.Fatalf("restore at log_offset %d of a log holding [%d, %d): %v", off, bulk.LogOffset, bulk.LogOffset+2, err)
		}
	}

	// The replica's own snapshot on top of the bulk one: the bulk SSTs move
	// to shared/, and that snapshot restores too.
	md := snap(t, r, 101, bulk)
	h2, _ := e.host(t)
	sameContents(t, open(t, h2, e.id(0), md), want)
}

// Retention on real snapshots: deleting what Retain lists leaves every
// retained snapshot restorable, and repeating the delete is harmless.
func TestRetainDeleteRestore(t *testing.T) {
	e := newEnv(t)
	h, _ := e.host(t)
	r := open(t, h, e.id(0), nil)
	var all []snapshot.Metadata
	var prev *snapshot.Metadata
	want := map[string]string{}
	for i := range 4 {
		b := upserts(i*50, 60, "r")
		write(t, r, b)
		model(want, b)
		prev = snap(t, r, int64(i+1), prev)
		all = append(all, *prev)
	}
	retained, deletable := snapshot.Retain(all, 2)
	if len(retained) != 2 || len(deletable) == 0 {
		t.Fatalf("retained %d, deletable %d", len(retained), len(deletable))
	}
	for range 2 {
		if err := DeleteFiles(t.Context(), e.store, deletable); err != nil {
			t.Fatal(err)
		}
	}
	for _, uri := range deletable {
		k, _ := e.store.Key(uri)
		if _, err := e.store.Stat(t.Context(), k); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s still there: %v", k, err)
		}
	}
	h2, _ := e.host(t)
	for i := range retained {
		r2 := open(t, h2, e.id(0), &retained[i])
		if err := r2.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	sameContents(t, open(t, h2, e.id(0), &retained[1]), want)
}

// hashFile keeps the file's stamp when the file did not change while it
// was read, so the snapshot's upload can link it without reading it again;
// a file written to since then no longer has that stamp.
func TestHashFileStamp(t *testing.T) {
	p := t.TempDir() + "/000007.sst"
	if err := os.WriteFile(p, []byte("an sst, say"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := hashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	now, err := objstore.StampFile(p)
	if err != nil || sum.stamp.IsZero() || sum.stamp != now || sum.size != 11 || sum.sha256 != sumOf([]byte("an sst, say")).sha256 {
		t.Fatalf("hashFile: %+v (stamp now %+v, %v)", sum, now, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(fi.ModTime().Add(20 * time.Millisecond))) // past a coarse clock tick
	if err := os.WriteFile(p, []byte("an sst, sat"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := objstore.StampFile(p); err != nil || again == sum.stamp {
		t.Fatalf("a rewritten file kept its stamp: %v", err)
	}
}

// TestSnapshotNeverAdoptsAnotherSnapshotsUpload: a snapshot that must
// upload an SST another snapshot uploaded already (its base lacks it, as
// after a failover) stores its own object instead of adopting the other's:
// that one may be garbage a retention is deleting (a deposed coordinator's,
// which nothing fences), and the snapshot registered meanwhile would lose
// the file. Deleting the first snapshot's files leaves the second whole.
func TestSnapshotNeverAdoptsAnotherSnapshotsUpload(t *testing.T) {
	e := newEnv(t)
	h, _ := e.host(t, func(o *options) {
		o.tune = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	})
	r := open(t, h, e.id(0), nil)
	want := map[string]string{}
	b := upserts(0, 300, "a")
	write(t, r, b)
	model(want, b)
	md1 := snap(t, r, 1, nil)
	md2 := snap(t, r, 2, nil) // no base: every SST goes up again
	if len(md1.SharedFiles) != 1 || len(md2.SharedFiles) != 1 || md1.SharedFiles[0].Handle.SHA256 != md2.SharedFiles[0].Handle.SHA256 {
		t.Fatalf("shared files %+v and %+v, want the same one SST", md1.SharedFiles, md2.SharedFiles)
	}
	if md1.SharedFiles[0].Handle.Path == md2.SharedFiles[0].Handle.Path {
		t.Fatalf("snapshot 2 adopted snapshot 1's object %s", md1.SharedFiles[0].Handle.Path)
	}
	// Retention of snapshot 1 deletes its files.
	for _, f := range slices.Concat(md1.SharedFiles, md1.PrivateFiles) {
		k, _ := e.store.Key(f.Handle.Path)
		if err := e.store.Delete(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	h2, _ := e.host(t)
	sameContents(t, open(t, h2, e.id(0), md2), want)
}
