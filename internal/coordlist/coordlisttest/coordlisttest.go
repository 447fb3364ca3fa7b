// Package coordlisttest has a stand-in coordinator for tests of the
// coordinator lists (tierclient, bulkloadclient, the CLI).
package coordlisttest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/thawdb/thaw/tier/tierpb"
)

// NotLeaderServer answers every call NOT_LEADER naming the address To
// holds (set after the servers a test needs exist): a coordinator with a
// stale view of the election. Real coordinators take their hint from etcd,
// so they cannot be made to name each other in a loop or to name an
// address nobody serves.
type NotLeaderServer struct {
	Srv   *httptest.Server
	To    atomic.Pointer[string]
	Calls atomic.Int32
}

// NewNotLeaderServer starts one, closed when the test ends; id names it in
// its error messages.
func NewNotLeaderServer(tb testing.TB, id string) *NotLeaderServer {
	tb.Helper()
	s := &NotLeaderServer{}
	s.Srv = answerAll(tb, &s.Calls, func() error {
		return tierpb.NewNotLeaderError("coordinator: "+id+" is not the active coordinator",
			tierpb.LeaderHint{ID: "elsewhere", Address: *s.To.Load(), Epoch: 7})
	})
	return s
}

// HostPort is the server's address without its scheme.
func (s *NotLeaderServer) HostPort() string { return strings.TrimPrefix(s.Srv.URL, "http://") }

// UnavailableServer answers every call UNAVAILABLE, as a coordinator's own
// answer (it carries the reason): a coordinator that serves HTTP but cannot
// act, cut off from etcd for instance.
type UnavailableServer struct {
	Srv   *httptest.Server
	Calls atomic.Int32
}

// NewUnavailableServer starts one, closed when the test ends; id names it
// in its error messages.
func NewUnavailableServer(tb testing.TB, id string) *UnavailableServer {
	tb.Helper()
	s := &UnavailableServer{}
	s.Srv = answerAll(tb, &s.Calls, func() error {
		return tierpb.NewError(tierpb.ReasonUnavailable, "coordinator: "+id+" cannot reach etcd", nil)
	})
	return s
}

// HostPort is the server's address without its scheme.
func (s *UnavailableServer) HostPort() string { return strings.TrimPrefix(s.Srv.URL, "http://") }

// answerAll serves every request with the error answer returns, counting
// them in calls; the server closes when the test ends.
func answerAll(tb testing.TB, calls *atomic.Int32, answer func() error) *httptest.Server {
	ew := connect.NewErrorWriter()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_ = ew.Write(w, r, answer())
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// ClosedAddress returns a host:port nothing listens at.
func ClosedAddress(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}
