package daemon

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestHTTPServerLimits: a client that sends a request's header and then
// stalls its body, or keeps a connection open without a next request, is
// cut off at the listener's limits (the promoter's listener bounds reads);
// without them it held a connection and a handler for ever.
func TestHTTPServerLimits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	limits := httpLimits{read: 300 * time.Millisecond, idle: 300 * time.Millisecond}
	srv := newHTTPServer(ln, h, limits, time.Second, slog.New(slog.DiscardHandler), nil)
	done := make(chan error, 1)
	go func() { done <- srv.Start(t.Context()) }()

	// cutOff reads until the server closes the connection, failing if it
	// does not within 5 s.
	cutOff := func(what string, c net.Conn, r *bufio.Reader) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, r); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the connection is still held 5s later (limits %+v)", what, limits)
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	c, r := dial()
	if _, err := io.WriteString(c, "POST /v1/promotions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	cutOff("a stalled request body", c, r)

	c, r = dial()
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}
	cutOff("an idle kept-alive connection", c, r)
}
