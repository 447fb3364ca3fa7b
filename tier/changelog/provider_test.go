package changelog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

func newProvider(t *testing.T, root string, opts ...Option) *LocalProvider {
	t.Helper()
	p, err := NewLocalProvider(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close provider: %v", err)
		}
	})
	return p
}

// closeAtEnd closes l when the test ends unless the test closed it.
func closeAtEnd(t *testing.T, l Log) {
	t.Cleanup(func() {
		if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
}

func openID(t *testing.T, p *LocalProvider, id BucketLogID) Log {
	t.Helper()
	l, err := p.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBucketLogID(t *testing.T) {
	for _, tc := range []struct {
		id   BucketLogID
		dir  string
		str  string
		okay bool
	}{
		{BucketLogID{TableID: 7, Bucket: 3}, "t7-b3", "table 7 bucket 3", true},
		{BucketLogID{TableID: 7, Partitioned: true, PartitionID: 0, Bucket: 3}, "t7-p0-b3", "table 7 partition 0 bucket 3", true},
		{BucketLogID{TableID: 7, Partitioned: true, PartitionID: 12, Bucket: 0}, "t7-p12-b0", "table 7 partition 12 bucket 0", true},
		{BucketLogID{TableID: -1}, "", "", false},
		{BucketLogID{TableID: 1, Bucket: -1}, "", "", false},
		{BucketLogID{TableID: 1, Partitioned: true, PartitionID: -2}, "", "", false},
		{BucketLogID{TableID: 1, PartitionID: 5}, "", "", false}, // partition id without Partitioned
	} {
		err := tc.id.Validate()
		if (err == nil) != tc.okay {
			t.Fatalf("%#v: validate: %v", tc.id, err)
		}
		if !tc.okay {
			continue
		}
		if got := tc.id.dirName(); got != tc.dir {
			t.Fatalf("%#v: dir %q, want %q", tc.id, got, tc.dir)
		}
		if got := tc.id.String(); got != tc.str {
			t.Fatalf("%#v: string %q, want %q", tc.id, got, tc.str)
		}
		for _, sep := range []string{"-", "."} {
			if got, ok := ParseName(tc.id.Name(sep), sep); !ok || got != tc.id {
				t.Fatalf("%#v: ParseName(%q) = %#v, %v", tc.id, tc.id.Name(sep), got, ok)
			}
		}
	}
}

// TestParseNameRejects: only canonical names parse, so that no two names
// stand for one log.
func TestParseNameRejects(t *testing.T) {
	for _, name := range []string{
		"", "t", "t7", "b3", "t7-", "-b3", "t7-b", "tt7-b3", "t7-b3-", "t7--b3",
		"t07-b3", "t7-b03", "t7-p012-b3", "t+7-b3", "t-7-b3", "t7-b-3", "t7-p-1-b3",
		"t7-p1-p2-b3", "t7-x1-b3", "x7-b3", "t7-b3x", "t 7-b3", "t7-b2147483648",
		"t9223372036854775808-b0", "t7.b3", "T7-B3", "t7-b3-p1", "LOCK", ".deleted-t7-b3-1",
	} {
		if id, ok := ParseName(name, "-"); ok {
			t.Errorf("ParseName(%q) = %#v, want rejected", name, id)
		}
	}
	if _, ok := ParseName("t7.b3", "-"); ok {
		t.Error("a name with another separator parsed")
	}
}

// TestProviderList: List names every log directory, open or closed, and
// nothing else in the root.
func TestProviderList(t *testing.T) {
	root := t.TempDir()
	p := newProvider(t, root)
	ids := []BucketLogID{
		{TableID: 12, Bucket: 0},
		{TableID: 3, Partitioned: true, PartitionID: 0, Bucket: 1},
		{TableID: 3, Bucket: 2},
		{TableID: 3, Partitioned: true, PartitionID: 0, Bucket: 0},
	}
	for i, id := range ids {
		l := openID(t, p, id)
		if i%2 == 0 {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			closeAtEnd(t, l)
		}
	}
	for _, junk := range []string{"t07-b1", "notalog", tombstonePrefix + "t5-b0-1"} {
		if err := os.MkdirAll(filepath.Join(root, junk), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "t6-b0"), nil, 0o644); err != nil { // a file, not a log
		t.Fatal(err)
	}
	want := []BucketLogID{ids[2], ids[3], ids[1], ids[0]}
	got, err := p.List(t.Context())
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %v, %v; want %v", got, err, want)
	}
	if deleted, err := p.Delete(t.Context(), ids[0]); err != nil || !deleted {
		t.Fatalf("Delete = %v, %v; want true", deleted, err)
	}
	if got, err := p.List(t.Context()); err != nil || !slices.Equal(got, want[:3]) {
		t.Fatalf("after a delete: List = %v, %v; want %v", got, err, want[:3])
	}
	if err := p.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if _, err := p.List(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
}

// TestProviderSharesLog: two replicas of one bucket on this host get one
// log; the follower tails what the leader appends.
func TestProviderSharesLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		p := newProvider(t, root)
		id := BucketLogID{TableID: 1, Bucket: 2}
		leader, follower := openID(t, p, id), openID(t, p, id)
		if leader.(*handle).s.log != follower.(*handle).s.log {
			t.Fatal("two opens of one id got different logs")
		}
		woke := make(chan int64, 1)
		go func() {
			end, err := follower.Wait(t.Context(), 0)
			if err != nil {
				t.Error(err)
			}
			woke <- end
		}()
		synctest.Wait()
		first, err := leader.Append(t.Context(), [][]byte{[]byte("a"), []byte("b")})
		if err != nil || first != 0 {
			t.Fatalf("append: %d, %v", first, err)
		}
		if end := <-woke; end != 2 {
			t.Fatalf("follower woke with end %d", end)
		}
		recs, err := follower.Read(t.Context(), 0, 100)
		if err != nil || len(recs) != 2 || string(recs[1].Data) != "b" {
			t.Fatalf("follower read %v, %v", recs, err)
		}

		// Closing one handle leaves the other working.
		if err := leader.Close(); err != nil {
			t.Fatal(err)
		}
		if err := leader.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("second close: %v", err)
		}
		if _, err := leader.Append(t.Context(), [][]byte{{1}}); !errors.Is(err, ErrClosed) {
			t.Fatalf("append on a closed handle: %v", err)
		}
		if _, err := follower.Append(t.Context(), [][]byte{[]byte("c")}); err != nil {
			t.Fatal(err)
		}
		// The last close closes the log; the next open recovers it.
		if err := follower.Close(); err != nil {
			t.Fatal(err)
		}
		again := openID(t, p, id)
		closeAtEnd(t, again)
		checkOffsets(t, again, 0, 3)
		if again.(*handle).s.log == leader.(*handle).s.log {
			t.Fatal("a log closed by its last handle was handed out again")
		}
	})
}

func TestHandleCloseEndsItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, t.TempDir())
		id := BucketLogID{TableID: 1}
		a, b := openID(t, p, id), openID(t, p, id)
		closeAtEnd(t, b)
		got := make(chan error, 1)
		go func() {
			_, err := a.Wait(t.Context(), 0)
			got <- err
		}()
		synctest.Wait()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, ErrClosed) {
			t.Fatalf("wait on a closed handle: %v", err)
		}
	})
}

func TestProviderLayout(t *testing.T) {
	root := t.TempDir()
	p := newProvider(t, root)
	ids := []BucketLogID{
		{TableID: 1, Bucket: 0},
		{TableID: 1, Bucket: 1},
		{TableID: 1, Partitioned: true, PartitionID: 0, Bucket: 0},
		{TableID: 2, Partitioned: true, PartitionID: 9, Bucket: 0},
	}
	for i, id := range ids {
		l := openID(t, p, id)
		if _, err := l.Append(t.Context(), make([][]byte, i+1)); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		l := openID(t, p, id)
		checkOffsets(t, l, 0, int64(i+1))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, id.dirName(), segmentName(0))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProviderDelete(t *testing.T) {
	root := t.TempDir()
	p := newProvider(t, root)
	id := BucketLogID{TableID: 4, Partitioned: true, PartitionID: 1, Bucket: 2}
	l := openID(t, p, id)
	if _, err := l.Append(t.Context(), [][]byte{{1}, {2}}); err != nil {
		t.Fatal(err)
	}
	if deleted, err := p.Delete(t.Context(), id); !errors.Is(err, ErrInUse) || deleted {
		t.Fatalf("delete of an open log: %v, %v; want false, ErrInUse", deleted, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if deleted, err := p.Delete(t.Context(), id); err != nil || !deleted {
		t.Fatalf("delete of a closed log: %v, %v; want true", deleted, err)
	}
	if _, err := os.Stat(filepath.Join(root, id.dirName())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("log directory still there: %v", err)
	}
	if deleted, err := p.Delete(t.Context(), id); err != nil || deleted {
		t.Fatalf("delete of a missing log: %v, %v; want false (nothing deleted), no error", deleted, err)
	}
	l = openID(t, p, id)
	checkOffsets(t, l, 0, 0)

	// A tombstone left by a crash goes away with the next provider.
	tomb := filepath.Join(root, tombstonePrefix+"t9-b0-1-1")
	if err := os.MkdirAll(tomb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	newProvider(t, root)
	if _, err := os.Stat(tomb); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tombstone still there: %v", err)
	}
}

func TestProviderLock(t *testing.T) {
	root := t.TempDir()
	p := newProvider(t, root)
	if _, err := NewLocalProvider(root); err == nil {
		t.Fatal("a second provider on the same root opened")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	newProvider(t, root) // the lock is released
}

func TestProviderClose(t *testing.T) {
	p, err := NewLocalProvider(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := openID(t, p, BucketLogID{TableID: 1})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(t.Context(), [][]byte{{1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after provider close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("handle close after provider close: %v", err)
	}
	if _, err := p.Open(t.Context(), BucketLogID{TableID: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("open after close: %v", err)
	}
	if _, err := p.Delete(t.Context(), BucketLogID{TableID: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("delete after close: %v", err)
	}
}

// TestProviderConcurrentOpen opens one id from many goroutines at once:
// one recovery, one log, and the log closes with the last handle.
func TestProviderConcurrentOpen(t *testing.T) {
	p := newProvider(t, t.TempDir())
	id := BucketLogID{TableID: 3, Bucket: 1}
	const n = 8
	handles := make([]Log, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := p.Open(t.Context(), id)
			if err != nil {
				t.Error(err)
				return
			}
			handles[i] = l
			if _, err := l.Append(t.Context(), [][]byte{{byte(i)}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, h := range handles[1:] {
		if h.(*handle).s.log != handles[0].(*handle).s.log {
			t.Fatal("concurrent opens got different logs")
		}
	}
	checkOffsets(t, handles[0], 0, n)
	for _, h := range handles {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	open := len(p.mu.logs)
	p.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d logs still open after every handle closed", open)
	}
}

func TestProviderOpenCancelledWhileWaiting(t *testing.T) {
	p := newProvider(t, t.TempDir())
	id := BucketLogID{TableID: 5}
	// Stand in for an open in progress.
	s := &sharedLog{ready: make(chan struct{}), refs: 1}
	p.mu.Lock()
	p.mu.logs[id] = s
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Open(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("open: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := p.Open(ctx, id)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting open: %v, want context.Canceled", err)
	}
	p.mu.Lock()
	refs := s.refs
	delete(p.mu.logs, id)
	p.mu.Unlock()
	close(s.ready)
	if refs != 1 {
		t.Fatalf("cancelled opens left %d references, want 1", refs)
	}
}

// Every implementation of Log in this package passes the same basic
// contract checks.
func TestLogConformance(t *testing.T) {
	impls := map[string]func(t *testing.T) Log{
		"SegmentLog": func(t *testing.T) Log { return openLog(t, t.TempDir(), small...) },
		"provider handle": func(t *testing.T) Log {
			return openID(t, newProvider(t, t.TempDir(), small...), BucketLogID{TableID: 1})
		},
	}
	for name, open := range impls {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			l := open(t)
			checkOffsets(t, l, 0, 0)
			var want [][]byte
			for i := range 20 {
				batch := [][]byte{payload(int64(len(want)), 100), payload(int64(len(want)+1), 100)}
				first, err := l.Append(ctx, batch)
				if err != nil || first != int64(2*i) {
					t.Fatalf("append %d: %d, %v", i, first, err)
				}
				want = append(want, batch...)
			}
			checkRecords(t, readAll(t, l, 0, 500), 0, want)
			if end, err := l.Wait(ctx, 39); err != nil || end != 40 {
				t.Fatalf("wait: %d, %v", end, err)
			}
			if _, err := l.Read(ctx, 41, 10); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("read past end: %v", err)
			}
			if err := l.TruncateBefore(ctx, 40); err != nil {
				t.Fatal(err)
			}
			checkOffsets(t, l, 40, 40)
			if err := l.ResetTo(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if first, err := l.Append(ctx, [][]byte{{1}}); err != nil || first != 100 {
				t.Fatalf("append after reset: %d, %v", first, err)
			}
			if err := l.ResetTo(ctx, 200); !errors.Is(err, ErrNotEmpty) {
				t.Fatalf("reset of a non-empty log: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := l.Offsets(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("offsets after close: %v", err)
			}
		})
	}
}

// TestProviderOpenWaitsForClosingLog: while the last handle's Close is still
// closing the log, a new Open of the id waits for it rather than recovering
// the directory under it; Delete waits too.
func TestProviderOpenWaitsForClosingLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProvider(t, t.TempDir())
		id := BucketLogID{TableID: 6}
		closing := &sharedLog{ready: make(chan struct{}), gone: make(chan struct{}), closing: true}
		close(closing.ready)
		p.mu.Lock()
		p.mu.logs[id] = closing
		p.mu.Unlock()

		opened := make(chan Log, 1)
		go func() {
			l, err := p.Open(t.Context(), id)
			if err != nil {
				t.Error(err)
			}
			opened <- l
		}()
		deleted := make(chan error, 1)
		go func() {
			_, err := p.Delete(t.Context(), BucketLogID{TableID: 6})
			deleted <- err
		}()
		synctest.Wait()
		select {
		case <-opened:
			t.Fatal("open did not wait for the closing log")
		case err := <-deleted:
			t.Fatalf("delete did not wait for the closing log: %v", err)
		default:
		}
		p.mu.Lock()
		delete(p.mu.logs, id)
		close(closing.gone)
		p.mu.Unlock()
		l := <-opened
		if err := <-deleted; err != nil && !errors.Is(err, ErrInUse) {
			t.Fatalf("delete: %v", err)
		}
		if l != nil {
			closeAtEnd(t, l)
		}
	})
}

// TestProviderIdentity: a root keeps its identity across opens, two roots
// have different ones, and a damaged IDENTITY file is an error, not a new
// identity (which would let the coordinator move the root's buckets away).
func TestProviderIdentity(t *testing.T) {
	root, other := t.TempDir(), t.TempDir()
	p := newProvider(t, root)
	id := p.Identity()
	if len(id) != len("local:")+32 || id[:6] != "local:" {
		t.Fatalf("identity %q", id)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if again := newProvider(t, root).Identity(); again != id {
		t.Fatalf("identity after reopening: %q, was %q", again, id)
	}
	if o := newProvider(t, other).Identity(); o == id {
		t.Fatalf("two roots share identity %q", id)
	}
	if ents, err := os.ReadDir(root); err != nil || slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == identityFileName+".tmp" }) {
		t.Fatalf("root entries %v, %v", ents, err)
	}
	for _, bad := range []string{"", "xyz\n", id[6:] + "0\n", "0123456789ABCDEF0123456789ABCDEF\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, identityFileName), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if p, err := NewLocalProvider(dir); err == nil {
			p.Close()
			t.Fatalf("IDENTITY %q opened as %q", bad, p.Identity())
		}
	}
}
