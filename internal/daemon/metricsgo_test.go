package daemon

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/metricvalue"
)

// TestStoppedCoordinatorMetricsGo: a stopped embedded coordinator kept its
// registry in /metrics (tablet servers' are dropped), so its last gauges
// were exported for ever.
func TestStoppedCoordinatorMetricsGo(t *testing.T) {
	e := startTest(t, EmbeddedConfig{TabletServers: 1, Coordinators: 2})
	ctx := t.Context()
	coord := createTable4x3(t, e)
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	val := func(id string) (float64, bool) {
		v, ok, err := metricvalue.Value(e.Gatherer(), "thaw_coordinator_under_replicated_buckets", map[string]string{"coordinator": id})
		if err != nil {
			t.Fatal(err)
		}
		return v, ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for v, _ := val(l.ID); v != 4; v, _ = val(l.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("under-replicated %v", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.StopCoordinator(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	retry(t, "standby takes over and drops the table", func() error {
		_, err := coord.DropTable(ctx, connect.NewRequest(&tierv1.DropTableRequest{Path: &tierv1.TablePath{Database: "d", Table: "t"}}))
		return err
	})
	time.Sleep(time.Second)
	if v, ok := val(l.ID); ok {
		t.Errorf("stopped coordinator %s still exported: thaw_coordinator_under_replicated_buckets=%v", l.ID, v)
	}
	if v, ok, _ := metricvalue.Value(e.Gatherer(), "thaw_coordinator_live_tablet_servers", map[string]string{"coordinator": l.ID}); ok {
		t.Errorf("stopped coordinator %s still exported: thaw_coordinator_live_tablet_servers=%v", l.ID, v)
	}
}

// TestHandshakeErrorsNotWarned: every TCP connection that closed before
// finishing a TLS handshake (a load balancer's TCP health check, a port
// scan) logged one WARN line: anyone who could reach the port could flood
// the log. They go to DEBUG; other server errors stay WARN.
func TestHandshakeErrorsNotWarned(t *testing.T) {
	lt := testCert(t)
	server, _, err := lt.load(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var lines atomic.Int64
	log := slog.New(countHandler{&lines})
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() {
		done <- newHTTPServer(ln, lt.wrap(http.NotFoundHandler()), tierHTTPLimits, time.Second, log, server).Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(100 * time.Millisecond)
	base := lines.Load()
	for range 200 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5}) // garbage handshake
		_ = c.Close()
	}
	time.Sleep(500 * time.Millisecond)
	if n := lines.Load() - base; n > 10 {
		t.Errorf("200 aborted connections logged %d WARN lines", n)
	}
}

type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }
