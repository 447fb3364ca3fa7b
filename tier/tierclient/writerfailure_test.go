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
	"github.com/thawdb/thaw/tier/tierpb"
)

// failOneTablet: bucket 0's writes fail at once (INVALID_ARGUMENT, not
// retried); bucket 1's are held until release, and record whether their
// client went away meanwhile.
type failOneTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	release   chan struct{}
	b1Started chan struct{}
	cancelled atomic.Bool
}

func (f *failOneTablet) Write(ctx context.Context, req *connect.Request[tierv1.WriteRequest]) (*connect.Response[tierv1.WriteResponse], error) {
	if req.Msg.GetBucket() == 0 {
		return nil, tierpb.NewError(tierpb.ReasonInvalidArgument, "fake: bad batch", nil)
	}
	close(f.b1Started)
	select {
	case <-f.release:
	case <-ctx.Done():
		f.cancelled.Store(true)
		return nil, ctx.Err()
	}
	return connect.NewResponse(&tierv1.WriteResponse{Count: int32(len(req.Msg.GetMutations()))}), nil
}

// failOneWriter serves tab behind a two-bucket closeCoord and returns a
// Writer to db.x that tries each request once, and a row of each bucket.
// The servers and the client close with the test; tab.release does not.
func failOneWriter(t *testing.T, tab *failOneTablet) (w *Writer, rows [2]kv.Row) {
	t.Helper()
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	tsrv := httptest.NewServer(th)
	t.Cleanup(tsrv.Close)
	coord := &closeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://"), buckets: 2}
	_, ch := tierv1connect.NewCoordinatorServiceHandler(coord)
	csrv := httptest.NewServer(ch)
	t.Cleanup(csrv.Close)
	c, err := New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if w, err = c.NewWriter(t.Context(), Target{Database: "db", Table: "x"}); err != nil {
		t.Fatal(err)
	}
	tbl, err := kv.NewTable(coord.schema())
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(0); rows[0] == nil || rows[1] == nil; id++ {
		r := kv.Row{id, "v"}
		if b, _ := tbl.Bucket(r); rows[b] == nil {
			rows[b] = r
		}
	}
	return w, rows
}

// TestCloseAfterFailureWaitsForOtherBuckets: bucket 0 fails while bucket
// 1 has a request in flight. Close, its ctx not done, waits for bucket 1's
// request instead of cancelling it (Close returned at once and cancelled
// it, its rows then maybe written, maybe not); when its ctx ends first,
// the request is abandoned and the error names bucket 1 as well as bucket
// 0 (it named only bucket 0, though bucket 1's row was given up too).
func TestCloseAfterFailureWaitsForOtherBuckets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release bool // the server answers bucket 1 while Close waits
	}{{"answered", true}, {"ctx-ends", false}} {
		t.Run(tc.name, func(t *testing.T) {
			tab := &failOneTablet{release: make(chan struct{}), b1Started: make(chan struct{})}
			released := false
			defer func() {
				if !released {
					close(tab.release)
				}
			}()
			w, rows := failOneWriter(t, tab)
			b0, b1 := rows[0], rows[1]
			if err := w.Write(t.Context(), b1); err != nil {
				t.Fatal(err)
			}
			<-tab.b1Started // bucket 1's request is in flight, held by the server
			if err := w.Write(t.Context(), b0); err != nil {
				t.Fatal(err)
			}
			for w.Stats().FailedRows == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			timeout := 5 * time.Second
			if tc.release {
				released = true
				time.AfterFunc(200*time.Millisecond, func() { close(tab.release) })
			} else {
				timeout = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			cerr := w.Close(ctx)
			st := w.Stats()
			t.Logf("Close: %v; stats %+v", cerr, st)
			named := map[int]bool{}
			var walk func(error)
			walk = func(err error) {
				if be, ok := err.(*BucketError); ok {
					named[be.Bucket] = true
				}
				switch u := err.(type) {
				case interface{ Unwrap() []error }:
					for _, e := range u.Unwrap() {
						walk(e)
					}
				case interface{ Unwrap() error }:
					walk(u.Unwrap())
				}
			}
			walk(cerr)
			if !named[0] {
				t.Errorf("Close's error does not name bucket 0: %v", cerr)
			}
			if tc.release {
				if tab.cancelled.Load() || named[1] || st.AckedRows != 1 || st.FailedRows != 1 {
					t.Errorf("Close did not wait for bucket 1's request: cancelled %v, bucket 1 named %v, stats %+v",
						tab.cancelled.Load(), named[1], st)
				}
				return
			}
			if !named[1] || st.FailedRows != 2 {
				t.Errorf("Close abandoned bucket 1's request; its error names bucket 1: %v, want true (stats %+v)", named[1], st)
			}
		})
	}
}

// TestOnBatchWriteBehindQueuedRows: WithOnBatch's fn writes to a full
// Writer whose rows queued behind the acknowledged batch fill the buffer.
// The Write waited for space only the bucket's one sending goroutine could
// free, and that goroutine was the one running fn: the bucket made no
// progress until fn's ctx ended. The sending is handed over before fn.
func TestOnBatchWriteBehindQueuedRows(t *testing.T) {
	tab := &closeTablet{release: make(chan struct{})}
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	tsrv := httptest.NewServer(th)
	defer tsrv.Close()
	_, ch := tierv1connect.NewCoordinatorServiceHandler(&closeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://")})
	csrv := httptest.NewServer(ch)
	defer csrv.Close()
	var w *Writer
	var once atomic.Bool
	werr := make(chan error, 1)
	c, err := New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"), WithMaxBatchRows(1), WithMaxBatchBytes(64), WithMaxBufferedBytes(80),
		WithOnBatch(func(BatchInfo) {
			if once.CompareAndSwap(false, true) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				werr <- w.Write(ctx, kv.Row{int64(4), "x"})
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if w, err = c.NewWriter(t.Context(), Target{Database: "db", Table: "x"}); err != nil {
		t.Fatal(err)
	}
	// Row 1 is small and held in flight; rows 2 and 3 queue behind it
	// (each Write finds the buffer below its maximum).
	for _, r := range []kv.Row{{int64(1), "a"}, {int64(2), strings.Repeat("v", 40)}, {int64(3), strings.Repeat("v", 40)}} {
		if err := w.Write(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	close(tab.release)
	if err := <-werr; err != nil {
		t.Errorf("Write from the OnBatch fn of a full Writer: %v (stats %+v)", err, w.Stats())
	}
	if err := w.Close(t.Context()); err != nil {
		t.Log(err)
	}
}

// TestFlushDuringCloseFailsWithErrClosed: a Flush waiting while Close's
// ctx ends fails with ErrClosed, as Close's doc says, although the request
// Close abandons fails meanwhile (its bucket's error replaced the Writer's
// ErrClosed, and the Flush, waiting for the requests in flight of a failed
// Writer, returned that).
func TestFlushDuringCloseFailsWithErrClosed(t *testing.T) {
	tab := &failOneTablet{release: make(chan struct{}), b1Started: make(chan struct{})}
	defer close(tab.release)
	w, rows := failOneWriter(t, tab)
	if err := w.Write(t.Context(), rows[1]); err != nil {
		t.Fatal(err)
	}
	<-tab.b1Started
	ferr := make(chan error, 1)
	go func() { ferr <- w.Flush(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // the Flush waits
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	cerr := w.Close(ctx)
	t.Logf("Close: %v", cerr)
	select {
	case err := <-ferr:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the Flush waiting while Close's ctx ended returned %v; want ErrClosed (as Close's doc says)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Flush waiting while Close's ctx ended did not return")
	}
}
