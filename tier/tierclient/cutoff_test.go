package tierclient_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// logTablet records the values it is asked to write, in arrival order.
type logTablet struct {
	tierv1connect.UnimplementedTabletServiceHandler
	mu  sync.Mutex
	log []string
}

func (f *logTablet) Write(_ context.Context, req *connect.Request[tierv1.WriteRequest]) (*connect.Response[tierv1.WriteResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range req.Msg.GetMutations() {
		f.log = append(f.log, string(m.GetValue()))
	}
	return connect.NewResponse(&tierv1.WriteResponse{Count: int32(len(req.Msg.GetMutations()))}), nil
}

// TestWriteResponseCutOff: the first Write is applied, and its response
// cut off after the headers (a tablet crashing mid-transfer): connect
// reports UNKNOWN "read message: unexpected EOF", which the Writer gave up
// on (the rest of its buffer dropped), though the outcome is only unknown.
// It is sent again now, and every row arrives, in order.
func TestWriteResponseCutOff(t *testing.T) {
	tab := &logTablet{}
	_, th := tierv1connect.NewTabletServiceHandler(tab)
	var writes atomic.Int64
	cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/Write") || writes.Add(1) != 1 {
			th.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		th.ServeHTTP(rec, r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		bw := bufio.NewWriter(conn)
		bw.WriteString("HTTP/1.1 200 OK\r\n")
		for k, vs := range rec.Header() {
			for _, v := range vs {
				bw.WriteString(k + ": " + v + "\r\n")
			}
		}
		body := rec.Body.Bytes()
		bw.WriteString("Content-Length: " + strconv.Itoa(len(body)+10) + "\r\n\r\n")
		bw.Write(body)
		bw.Flush()
	})
	tsrv := httptest.NewServer(cut)
	defer tsrv.Close()
	co := &fakeCoord{tablet: strings.TrimPrefix(tsrv.URL, "http://"), failFrom: time.Now().Add(time.Hour)}
	_, ch := tierv1connect.NewCoordinatorServiceHandler(co)
	csrv := httptest.NewServer(ch)
	defer csrv.Close()
	c, err := tierclient.New(t.Context(), strings.TrimPrefix(csrv.URL, "http://"), tierclient.WithMaxBatchRows(1),
		tierclient.WithRetryPolicy(tierclient.RetryPolicy{Timeout: 5 * time.Second, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.NewWriter(t.Context(), tierclient.Target{Database: "db", Table: "x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := w.Write(t.Context(), kv.Row{int64(1), v}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("close after a cut-off response: %v", err)
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if n := len(tab.log); n != 4 || !strings.HasSuffix(tab.log[3], "c") {
		t.Fatalf("the tablet got %d writes (%q), want the first twice, then the other two", n, tab.log)
	}
}
