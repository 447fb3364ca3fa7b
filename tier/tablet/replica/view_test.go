package replica

import (
	"errors"
	"testing"
)

// ScanPage honours prefix, start and limit, and reports the log offset the
// page reflects; a View keeps reading the state it pinned.
func TestScanPageAndView(t *testing.T) {
	e := newEnv(t)
	h := e.hostOnly(t)
	r := open(t, h, e.id(0), nil)
	write(t, r, upserts(0, 30, "a")) // k00000..k00029, offsets 0..29

	p, err := r.ScanPage(t.Context(), ScanOptions{Prefix: []byte("k0001"), Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 4 || string(p.Rows[0].Key) != "k00010" || string(p.Next) != "k00013" || p.LogOffset != 30 {
		t.Fatalf("first prefix page: %d rows from %q, next %q, offset %d", len(p.Rows), p.Rows[0].Key, p.Next, p.LogOffset)
	}
	p, err = r.ScanPage(t.Context(), ScanOptions{Prefix: []byte("k0001"), StartAfter: []byte("k00017"), Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 2 || string(p.Rows[0].Key) != "k00018" || p.Next != nil {
		t.Fatalf("last prefix page: %d rows, next %q", len(p.Rows), p.Next)
	}
	// A start below the prefix starts at the prefix; one above it is empty.
	if p, _ = r.ScanPage(t.Context(), ScanOptions{Prefix: []byte("k0002"), StartAfter: []byte("k0000"), Limit: 20}); len(p.Rows) != 10 {
		t.Fatalf("start below the prefix: %d rows", len(p.Rows))
	}
	if p, _ = r.ScanPage(t.Context(), ScanOptions{Prefix: []byte("k0001"), StartAfter: []byte("k0002"), Limit: 20}); len(p.Rows) != 0 || p.Next != nil {
		t.Fatalf("start above the prefix: %d rows", len(p.Rows))
	}
	if _, err := r.ScanPage(t.Context(), ScanOptions{Limit: 0}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("limit 0: %v", err)
	}

	v, err := r.NewView()
	if err != nil {
		t.Fatal(err)
	}
	write(t, r, upserts(100, 5, "b"))
	write(t, r, []Mutation{{Op: OpDelete, Key: key(0)}})
	if v.LogOffset() != 30 {
		t.Fatalf("view at %d, want 30", v.LogOffset())
	}
	p, err = v.Scan(t.Context(), ScanOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 30 || string(p.Rows[0].Key) != "k00000" || p.LogOffset != 30 {
		t.Fatalf("view scan: %d rows from %q at %d", len(p.Rows), p.Rows[0].Key, p.LogOffset)
	}
	vals, err := v.Lookup(t.Context(), [][]byte{key(0), key(100)})
	if err != nil || vals[0] == nil || vals[1] != nil {
		t.Fatalf("view lookup: %q %v", vals, err)
	}
	if p, _ = r.ScanPage(t.Context(), ScanOptions{Limit: 100}); len(p.Rows) != 34 || p.LogOffset != 36 {
		t.Fatalf("current state: %d rows at %d", len(p.Rows), p.LogOffset)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := v.Scan(t.Context(), ScanOptions{Limit: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("scan of a closed view: %v", err)
	}

	// Closing the replica closes its open views (Pebble refuses to close
	// with snapshots open).
	v2, err := r.NewView()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v2.Scan(t.Context(), ScanOptions{Limit: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("scan of a view of a closed replica: %v", err)
	}
	if _, err := r.NewView(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewView of a closed replica: %v", err)
	}
}

// CatchUp applies what another writer appended; LogOffsets reports the
// log; TruncateLog never drops a record the replica has not applied.
func TestCatchUpAndTruncate(t *testing.T) {
	e := newEnv(t)
	h1, h2 := e.hostOnly(t), e.hostOnly(t)
	leader := open(t, h1, e.id(3), nil)
	follower := open(t, h2, e.id(3), nil)
	write(t, leader, upserts(0, 10, "a"))
	if follower.AppliedOffset() != -1 {
		t.Fatalf("follower applied %d before catching up", follower.AppliedOffset())
	}
	if err := follower.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	if follower.AppliedOffset() != 9 || follower.RowCount() != 10 {
		t.Fatalf("after CatchUp: applied %d, %d rows", follower.AppliedOffset(), follower.RowCount())
	}
	write(t, leader, upserts(10, 10, "b"))
	// The follower has applied up to 9: truncating below 15 keeps 10.. for it.
	if err := follower.TruncateLog(t.Context(), 15); err != nil {
		t.Fatal(err)
	}
	start, end, err := follower.LogOffsets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if start > 10 || end != 20 {
		t.Fatalf("log [%d, %d) after truncation", start, end)
	}
	if err := follower.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := leader.TruncateLog(t.Context(), 20); err != nil {
		t.Fatal(err)
	}
	if start, end, _ = leader.LogOffsets(t.Context()); start != 20 || end != 20 {
		t.Fatalf("log [%d, %d) after truncating everything", start, end)
	}
	if err := follower.Close(); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{follower.CatchUp(t.Context()), follower.TruncateLog(t.Context(), 1)} {
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	}
}
