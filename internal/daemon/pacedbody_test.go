package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// TestStalledBodyEndsItsConnection: a client that sends a request's header
// and one byte of its body, then stalls, held a connection and a
// goroutine of the tier's listener for ever, before any authentication
// (the tier's listeners have no read timeout: uploads may be long).
// Bodies are paced: the connection ends after the grace.
func TestStalledBodyEndsItsConnection(t *testing.T) {
	defer func(g time.Duration) { paceGrace = g }(paceGrace)
	paceGrace = time.Second
	e := startTest(t, EmbeddedConfig{TabletServers: 1})
	host := strings.TrimPrefix(strings.TrimPrefix(e.Address(), "http://"), "https://")
	for _, path := range []string{"/thaw.tier.v1.CoordinatorService/GetLeader", "/t/ts-1/thaw.tier.v1.TabletService/Lookup", "/no/such/path"} {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\nContent-Length: 1000\r\n\r\n\x0a", path)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err = io.ReadAll(c) // the server's answer, if any, then its close
		if errors.Is(err, net.ErrClosed) || isTimeout(err) {
			t.Fatalf("%s: the connection with a stalled body is still open: %v", path, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestPacedBodyLeavesTheHandlerAlone: the pace bounds reading the body
// only; a handler that runs past the grace after reading it keeps its
// context (a read deadline left on the connection after the body ended
// would cancel it), over HTTP/1.1 and h2c; a body that arrives slowly but
// steadily is read whole.
func TestPacedBodyLeavesTheHandlerAlone(t *testing.T) {
	defer func(g time.Duration, r int64) { paceGrace, paceMinRate = g, r }(paceGrace, paceMinRate)
	paceGrace, paceMinRate = 500*time.Millisecond, 1<<20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(1500 * time.Millisecond)
		if err := r.Context().Err(); err != nil {
			http.Error(w, "handler context: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%d", len(b))
	})
	srv := newHTTPServer(ln, h, tierHTTPLimits, time.Second, slog.New(slog.DiscardHandler), nil)
	go func() { _ = srv.srv.Serve(ln) }()
	defer srv.srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	for _, c := range []struct {
		name string
		cl   *http.Client
	}{
		{"http1", &http.Client{}},
		{"h2c", func() *http.Client {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			return &http.Client{Transport: &http.Transport{Protocols: &p}}
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), &slowReader{chunks: 3, pause: 300 * time.Millisecond})
			resp, err := c.cl.Post(url, "application/octet-stream", body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(1<<20+3) {
				t.Fatalf("%s: %s", resp.Status, got)
			}
		})
	}
}

// slowReader yields chunks one-byte chunks, pause apart.
type slowReader struct {
	chunks int
	pause  time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.chunks == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	s.chunks--
	p[0] = 'x'
	return 1, nil
}

// TestStalledStreamLeavesItsH2Connection: on HTTP/2 a stalled body fails
// its stream alone; a "Connection: close" answer (HTTP/1's way to drop
// what remains on the wire) made the server end the whole connection, and
// with it every other stream of the client's.
func TestStalledStreamLeavesItsH2Connection(t *testing.T) {
	defer func(g time.Duration) { paceGrace = g }(paceGrace)
	paceGrace = 500 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv := newHTTPServer(ln, h, tierHTTPLimits, time.Second, slog.New(slog.DiscardHandler), nil)
	go func() { _ = srv.srv.Serve(ln) }()
	defer srv.srv.Close()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	cl := &http.Client{Transport: &http.Transport{Protocols: &p}}
	url := "http://" + ln.Addr().String() + "/"
	var conns []net.Conn
	post := func(body io.Reader) int {
		t.Helper()
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) },
		}), http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(strings.NewReader("x")); code != http.StatusOK {
		t.Fatalf("first: %d", code)
	}
	pr, pw := io.Pipe() // a body that stalls
	defer pw.Close()
	if code := post(pr); code != http.StatusRequestTimeout {
		t.Fatalf("stalled: %d", code)
	}
	time.Sleep(100 * time.Millisecond) // (a GOAWAY would have arrived)
	if code := post(strings.NewReader("y")); code != http.StatusOK {
		t.Fatalf("after: %d", code)
	}
	if len(conns) != 3 || conns[0] != conns[1] || conns[1] != conns[2] {
		t.Fatalf("the three requests went over %v: the stalled stream ended its connection", conns)
	}
}
