package tierclient

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
)

func closeSchema() kv.TableSchema {
	return kv.TableSchema{
		Columns: []kv.Column{
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}, Nullable: true},
		},
		PrimaryKey: []string{"id"},
		Buckets:    1,
	}
}

// closeCoord serves db.x (closeSchema with buckets buckets, 1 when 0), every
// bucket led at tablet.
type closeCoord struct {
	tierv1connect.UnimplementedCoordinatorServiceHandler
	tablet  string
	buckets int
}

func (f *closeCoord) schema() kv.TableSchema {
	s := closeSchema()
	s.Buckets = max(1, f.buckets)
	return s
}

func (f *closeCoord) GetLeader(context.Context, *connect.Request[tierv1.GetLeaderRequest]) (*connect.Response[tierv1.GetLeaderResponse], error) {
	return connect.NewResponse(&tierv1.GetLeaderResponse{CoordinatorId: "fake", Epoch: 1}), nil
}

func (f *closeCoord) GetTable(context.Context, *connect.Request[tierv1.GetTableRequest]) (*connect.Response[tierv1.GetTableResponse], error) {
	return connect.NewResponse(&tierv1.GetTableResponse{Table: &tierv1.TableInfo{TableId: 7,
		Path: &tierv1.TablePath{Database: "db", Table: "x"}, Schema: SchemaToProto(f.schema()),
		DataState: tierv1.DataState_DATA_STATE_ACTIVE}}), nil
}

func (f *closeCoord) GetTargetLocations(context.Context, *connect.Request[tierv1.GetTargetLocationsRequest]) (*connect.Response[tierv1.GetTargetLocationsResponse], error) {
	s := f.schema()
	locs := make([]*tierv1.BucketLocation, s.Buckets)
	for b := range locs {
		locs[b] = &tierv1.BucketLocation{Bucket: int32(b), LeaderId: "ts", LeaderAddress: f.tablet, LeaderEpoch: 1}
	}
	return connect.NewResponse(&tierv1.GetTargetLocationsResponse{TargetId: &tierv1.TargetId{TableId: 7},
		Schema: SchemaToProto(s), DataState: tierv1.DataState_DATA_STATE_ACTIVE, Buckets: locs}), nil
}

type closeTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	release chan struct{}
	n       atomic.Int64
}

func (f *closeTablet) Write(ctx context.Context, req *connect.Request[tierv1.WriteRequest]) (*connect.Response[tierv1.WriteResponse], error) {
	if f.n.Load() == 0 {
		<-f.release
	}
	f.n.Add(int64(len(req.Msg.GetMutations())))
	return connect.NewResponse(&tierv1.WriteResponse{Count: int32(len(req.Msg.GetMutations()))}), nil
}

// closeServers starts a closeTablet (released) and a closeCoord that
// leads to it, and returns the tablet and the coordinator's address.
func closeServers(t *testing.T) (*closeTablet, string) {
	tab := &closeTablet{release: make(chan struct{})}
	close(tab.release)
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	tsrv := httptest.NewServer(th)
	t.Cleanup(tsrv.Close)
	_, ch := tierv1connect.NewCoordinatorServiceHandler(&closeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://")})
	csrv := httptest.NewServer(ch)
	t.Cleanup(csrv.Close)
	return tab, strings.TrimPrefix(csrv.URL, "http://")
}

// closeWriter returns a Writer of db.x from c (New's result c, err),
// closing c at the end of the test.
func closeWriter(t *testing.T, c *Client, err error) *Writer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w, err := c.NewWriter(t.Context(), Target{Database: "db", Table: "x"})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestFlushAfterCloseDropped: a Flush waits; Close's ctx ends just as the
// batch in flight is acknowledged (the sending goroutine finishing it,
// before it takes the next: held there with the OnBatch hook). Close drops
// the queued row 2, written before the Flush: nothing woke the Flush (it
// waited for its own ctx, for ever without one), or it saw nothing
// buffered and returned nil. It now fails with ErrClosed at once.
func TestFlushAfterCloseDropped(t *testing.T) {
	tab, coord := closeServers(t)
	cctx, ccancel := context.WithCancel(context.Background())
	var once atomic.Bool
	ready := make(chan struct{})
	c, err := New(t.Context(), coord, WithMaxBatchRows(1),
		WithOnBatch(func(BatchInfo) {
			if once.CompareAndSwap(false, true) {
				<-ready
				ccancel() // Close's deadline passes now
				time.Sleep(200 * time.Millisecond)
			}
		}))
	w := closeWriter(t, c, err)
	if err := w.Write(t.Context(), kv.Row{int64(1), "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), kv.Row{int64(2), "b"}); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer fcancel()
	flushed := make(chan error, 1)
	go func() { flushed <- w.Flush(fctx) }()
	closed := make(chan error, 1)
	go func() { closed <- w.Close(cctx) }()
	time.Sleep(50 * time.Millisecond)
	close(ready)
	ferr, cerr := <-flushed, <-closed
	switch {
	case ferr == nil && tab.n.Load() < 2:
		t.Errorf("Flush returned nil, but row 2 (written before the Flush) was dropped unsent (Close: %v)", cerr)
	case tab.n.Load() < 2 && !errors.Is(ferr, ErrClosed):
		t.Errorf("Flush: %v, want ErrClosed (Close: %v; the server got %d of 2 rows)", ferr, cerr, tab.n.Load())
	}
}

// TestOnBatchRunsBeforeFlushReturns: once Flush returned nil, WithOnBatch's
// fn has run for every batch it waited for (a caller counting the rows
// acknowledged through it saw too few: the batch counted as done, waking
// Flush, before fn ran).
func TestOnBatchRunsBeforeFlushReturns(t *testing.T) {
	tab, coord := closeServers(t)
	var reported atomic.Int64
	c, err := New(t.Context(), coord,
		WithOnBatch(func(bi BatchInfo) {
			time.Sleep(50 * time.Millisecond) // a hook that does a little work (a metrics push)
			reported.Add(int64(bi.Rows))
		}))
	w := closeWriter(t, c, err)
	defer w.Close(t.Context())
	if err := w.Write(t.Context(), kv.Row{int64(1), "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := reported.Load(); got != 1 {
		t.Errorf("Flush returned nil with the row acknowledged (the server has %d rows), but OnBatch reported %d rows", tab.n.Load(), got)
	}
}

// TestOnBatchMayWrite: WithOnBatch's fn may write to the Writer while it
// holds its maximum of buffered rows: the batch fn is told of no longer
// counts as buffered (fn ran before it was accounted for, and the Write
// waited for the buffer fn's own batch held: for ever).
func TestOnBatchMayWrite(t *testing.T) {
	_, coord := closeServers(t)
	var w *Writer
	second := make(chan struct{})
	var once atomic.Bool
	werr := make(chan error, 1)
	row := func(id int64) kv.Row { return kv.Row{id, strings.Repeat("v", 40)} }
	c, err := New(t.Context(), coord, WithMaxBatchRows(1), WithMaxBatchBytes(64), WithMaxBufferedBytes(80),
		WithOnBatch(func(BatchInfo) {
			if once.CompareAndSwap(false, true) {
				<-second // the second row is buffered: the Writer is full
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				werr <- w.Write(ctx, row(3))
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if w, err = c.NewWriter(t.Context(), Target{Database: "db", Table: "x"}); err != nil {
		t.Fatal(err)
	}
	for id := range int64(2) {
		if err := w.Write(t.Context(), row(id+1)); err != nil {
			t.Fatal(err)
		}
	}
	close(second)
	if err := <-werr; err != nil {
		t.Fatalf("Write from the OnBatch fn of a full Writer: %v", err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.AckedRows != 3 {
		t.Fatalf("stats %+v, want 3 rows acknowledged", st)
	}
}
