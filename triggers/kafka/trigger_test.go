package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
)

const topic = "thaw-control"

// cluster starts a one-broker kfake (a Kafka that speaks the real
// protocol) with the control topic in two partitions.
func cluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(2, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes each value to the given partition, in order.
func produce(t *testing.T, brokers []string, partition int32, values ...string) {
	t.Helper()
	produceWith(t, brokers, nil, partition, values...)
}

// produceWith is produce through a client with the extra options (TLS,
// SASL).
func produceWith(t *testing.T, brokers []string, opts []kgo.Opt, partition int32, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is a Handler that records what it is handed; fail decides the
// error of each call (nil: success).
type recorder struct {
	mu   sync.Mutex
	seen []Event
	fail func(e Event, calls int) error
	cond chan struct{} // signalled after every call
}

func newRecorder(fail func(Event, int) error) *recorder {
	return &recorder{fail: fail, cond: make(chan struct{}, 1)}
}

func (r *recorder) handle(_ context.Context, e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, e)
	calls := 0
	for _, s := range r.seen {
		if s.Policy == e.Policy && s.Type == e.Type && s.Table == e.Table {
			calls++
		}
	}
	select {
	case r.cond <- struct{}{}:
	default:
	}
	if r.fail != nil {
		return r.fail(e, calls)
	}
	return nil
}

func (r *recorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.seen...)
}

// waitFor waits until the recorder has seen n calls.
func (r *recorder) waitFor(t *testing.T, n int) []Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		select {
		case <-r.cond:
		case <-deadline:
			t.Fatalf("handler saw %d calls, want %d: %+v", len(r.events()), n, r.events())
		}
	}
}

// start runs a trigger until the test's end (or the returned stop).
func start(t *testing.T, cfg Config) (stop func()) {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func testConfig(brokers []string, h Handler, log *slog.Logger, reg prometheus.Registerer) Config {
	return Config{Brokers: brokers, Topic: topic, Group: "thaw-promoter", Handle: h, Logger: log,
		Registerer: reg, MaxBackoff: 50 * time.Millisecond, CheckInterval: 100 * time.Millisecond}
}

func promote(policy string) string {
	return fmt.Sprintf(`{"version":1,"type":"promote","policy":%q}`, policy)
}

// TestRunHandlesEvents: every event of a partition reaches the handler
// once, in order; a record that is no event and an event the handler
// rejects are skipped; a failing event is retried until it succeeds, and
// holds back the events behind it meanwhile. A second consumer of the
// group after the first stopped sees only what came later: every handled
// or skipped event's offset was committed.
func TestRunHandlesEvents(t *testing.T) {
	brokers := cluster(t)
	produce(t, brokers, 0,
		promote("a"),
		`{"version":1,"type":"promote","policy":"a"`, // cut short
		promote("rejected"),
		promote("flaky"),
		`{"version":1,"type":"reconcile"}`,
		`{"version":1,"type":"lake_commit","catalog":"default","table":"sample.events","snapshot_id":7}`,
	)
	produce(t, brokers, 1, promote("b"))
	rec := newRecorder(func(e Event, calls int) error {
		switch {
		case e.Policy == "rejected":
			return fmt.Errorf("%w: unknown policy", ErrRejected)
		case e.Policy == "flaky" && calls < 3:
			return errors.New("lake unreachable")
		}
		return nil
	})
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	stop := start(t, testConfig(brokers, rec.handle, slog.New(slog.NewTextHandler(&logs, nil)), reg))
	got := rec.waitFor(t, 8)
	var p0 []string
	for _, e := range got {
		if e.Policy != "b" {
			p0 = append(p0, e.Type+":"+e.Policy+e.Table)
		}
	}
	want := []string{"promote:a", "promote:rejected", "promote:flaky", "promote:flaky", "promote:flaky", "reconcile:", "lake_commit:sample.events"}
	if strings.Join(p0, " ") != strings.Join(want, " ") {
		t.Fatalf("partition 0 handled %v, want %v", p0, want)
	}
	if n := len(got); n != 8 {
		t.Fatalf("%d calls, want 8: %+v", n, got)
	}
	for _, e := range got {
		if e.Type == TypeLakeCommit && (e.SnapshotID == nil || *e.SnapshotID != 7 || e.Catalog != "default") {
			t.Fatalf("lake commit event %+v", e)
		}
	}
	stop()
	for _, c := range []struct {
		typ, outcome string
		want         float64
	}{
		{"promote", "handled", 3}, {"promote", "rejected", 1}, {"invalid", "rejected", 1},
		{"reconcile", "handled", 1}, {"lake_commit", "handled", 1},
	} {
		if v := counter(t, reg, c.typ, c.outcome); v != c.want {
			t.Errorf("events{type=%s,outcome=%s} = %v, want %v", c.typ, c.outcome, v, c.want)
		}
	}
	for _, line := range []string{"control event skipped", "offset=1", "control event rejected", "control event failed; retrying"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs.String())
		}
	}

	// A new member of the group resumes after the committed offsets.
	produce(t, brokers, 0, promote("later"))
	rec2 := newRecorder(nil)
	start(t, testConfig(brokers, rec2.handle, nil, nil))
	if got := rec2.waitFor(t, 1); len(got) != 1 || got[0].Policy != "later" {
		t.Fatalf("second consumer got %+v, want only the event produced after the first stopped", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, typ, outcome string) float64 {
	t.Helper()
	return metric(t, reg, "thaw_promoter_control_events_total", map[string]string{"type": typ, "outcome": outcome})
}

// metric returns the value of the counter or gauge name whose labels
// include the given ones; -1 if there is none.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	v, ok, err := metricvalue.Value(reg, name, want)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return v
}

// waitMetric waits until the metric has the value v.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, v float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, reg, name, nil) != v {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, metric(t, reg, name, nil), v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunStopsWithoutCommittingUnhandled: an event that keeps failing is
// not committed when Run stops; the next member of the group gets it.
func TestRunStopsWithoutCommittingUnhandled(t *testing.T) {
	brokers := cluster(t)
	produce(t, brokers, 0, promote("ok"), promote("down"))
	rec := newRecorder(func(e Event, _ int) error {
		if e.Policy == "down" {
			return errors.New("promoter busy")
		}
		return nil
	})
	stop := start(t, testConfig(brokers, rec.handle, nil, nil))
	rec.waitFor(t, 3) // ok, down, down again
	stop()
	rec2 := newRecorder(nil)
	start(t, testConfig(brokers, rec2.handle, nil, nil))
	if got := rec2.waitFor(t, 1); got[0].Policy != "down" {
		t.Fatalf("next member got %+v first, want the unhandled event", got)
	}
	if got := rec2.events(); len(got) != 1 {
		t.Fatalf("next member got %+v, want the unhandled event only", got)
	}
}

// TestFailingEventHoldsBackItsPartitionOnly: an event that keeps failing
// holds back the events behind it in its partition, and only those: the
// other partition's events are handled meanwhile. Once it succeeds, the
// held-back events follow it in order.
func TestFailingEventHoldsBackItsPartitionOnly(t *testing.T) {
	brokers := cluster(t)
	produce(t, brokers, 0, promote("down"), promote("behind"))
	var up atomic.Bool
	rec := newRecorder(func(e Event, _ int) error {
		if e.Policy == "down" && !up.Load() {
			return errors.New("lake unreachable")
		}
		return nil
	})
	start(t, testConfig(brokers, rec.handle, nil, nil))
	rec.waitFor(t, 2) // down, down again
	produce(t, brokers, 1, promote("other"))
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for !slices.ContainsFunc(rec.events(), func(e Event) bool { return e.Policy == "other" }) {
		if time.Now().After(deadline) {
			t.Fatalf("the other partition's event was not handled while partition 0's failed (%d calls)", len(rec.events()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("other handled after %d calls", len(rec.events()))
	up.Store(true)
	for {
		var order []string
		for _, e := range rec.events() {
			if e.Policy != "other" && (len(order) == 0 || order[len(order)-1] != e.Policy) {
				order = append(order, e.Policy)
			}
		}
		if len(order) > 0 && order[len(order)-1] == "behind" {
			if strings.Join(order, " ") != "down behind" {
				t.Fatalf("partition 0 handled in the order %v", order)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition 0 after its event succeeded: %d calls, the last %+v", len(rec.events()), rec.events()[len(rec.events())-1])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunSASL: with SCRAM-SHA-256 the trigger consumes with the right
// password; with a wrong one it reports the failure and hands nothing to
// the handler.
func TestRunSASL(t *testing.T) {
	brokers := cluster(t, kfake.EnableSASL(), kfake.Superuser(SASLScramSHA256, "admin", "admin-secret"),
		kfake.User(SASLScramSHA256, "thaw", "s3cret-pw"))
	// The producer authenticates as the superuser.
	produceWith(t, brokers, []kgo.Opt{kgo.SASL(scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha256Mechanism())}, 0, promote("p"))

	var logs testlog.Buffer
	bad := newRecorder(nil)
	reg := prometheus.NewRegistry()
	cfg := testConfig(brokers, bad.handle, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	cfg.SASL = &SASL{Mechanism: SASLScramSHA256, User: "thaw", Password: "wrong-pw"}
	stopBad := start(t, cfg)
	const warning = "no Kafka broker answers (check brokers, TLS and SASL settings)"
	waitLog(&logs, warning)
	waitMetric(t, reg, "thaw_promoter_control_brokers_reachable", 0)
	stopBad()
	if !strings.Contains(logs.String(), warning) {
		t.Fatalf("the refused client was not reported:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "wrong-pw") {
		t.Fatal("the password is in the log")
	}
	if got := bad.events(); len(got) != 0 {
		t.Fatalf("handled %+v with a wrong password", got)
	}

	good := newRecorder(nil)
	logs = testlog.Buffer{}
	cfg = testConfig(brokers, good.handle, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	cfg.SASL = &SASL{Mechanism: SASLScramSHA256, User: "thaw", Password: "s3cret-pw"}
	// Each check may take its interval: 100 ms was too short for a SCRAM
	// handshake on a loaded machine (a warning, the test failed).
	cfg.CheckInterval = 5 * time.Second
	start(t, cfg)
	if got := good.waitFor(t, 1); got[0].Policy != "p" {
		t.Fatalf("got %+v", got)
	}
	waitMetric(t, reg, "thaw_promoter_control_brokers_reachable", 1)
	if strings.Contains(logs.String(), warning) {
		t.Fatalf("reachable brokers reported as not answering:\n%s", logs.String())
	}
}

// TestRunTLS: over TLS the trigger consumes when it trusts the brokers'
// certificate, and reports brokers that do not answer when it does not.
func TestRunTLS(t *testing.T) {
	// httptest's certificate is valid for 127.0.0.1, where kfake listens.
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	defer srv.Close()
	brokers := cluster(t, kfake.TLS(srv.TLS.Clone()))
	trusting := &tls.Config{RootCAs: x509.NewCertPool()}
	trusting.RootCAs.AddCert(srv.Certificate())
	produceWith(t, brokers, []kgo.Opt{kgo.DialTLSConfig(trusting.Clone())}, 0, promote("p"))

	var logs testlog.Buffer
	untrusting := newRecorder(nil)
	cfg := testConfig(brokers, untrusting.handle, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	cfg.TLS = &tls.Config{RootCAs: x509.NewCertPool()} // trusts nothing
	stop := start(t, cfg)
	waitLog(&logs, "no Kafka broker answers")
	stop()
	if !strings.Contains(logs.String(), "certificate") {
		t.Fatalf("an untrusted certificate was not reported:\n%s", logs.String())
	}
	if got := untrusting.events(); len(got) != 0 {
		t.Fatalf("handled %+v from an untrusted broker", got)
	}

	rec := newRecorder(nil)
	cfg = testConfig(brokers, rec.handle, nil, nil)
	cfg.TLS = trusting
	stop = start(t, cfg)
	if got := rec.waitFor(t, 1); got[0].Policy != "p" {
		t.Fatalf("got %+v", got)
	}
	stop()

	// A dialer doing the handshake itself, in another group: the event
	// again.
	dialed := newRecorder(nil)
	cfg = testConfig(brokers, dialed.handle, nil, nil)
	cfg.Group, cfg.Dial = "dialer", (&tls.Dialer{Config: trusting}).DialContext
	start(t, cfg)
	if got := dialed.waitFor(t, 1); got[0].Policy != "p" {
		t.Fatalf("through the dialer: got %+v", got)
	}
}

// waitLog waits up to 30 s for logs to hold s (the caller checks).
func waitLog(logs *testlog.Buffer, s string) {
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), s) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewRejects(t *testing.T) {
	ok := Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", Group: "g", Handle: func(context.Context, Event) error { return nil }}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Brokers = nil }, "at least one HOST:PORT"},
		{func(c *Config) { c.Brokers = []string{"localhost"} }, `"localhost": want HOST:PORT`},
		{func(c *Config) { c.Brokers = []string{":9092"} }, "no host"},
		{func(c *Config) { c.Brokers = []string{"h:0"} }, `port "0"`},
		{func(c *Config) { c.Brokers = []string{"h:x"} }, `port "x"`},
		{func(c *Config) { c.Topic = "" }, "topic"},
		{func(c *Config) { c.Topic = ".." }, "not . or .."},
		{func(c *Config) { c.Topic = "a/b" }, "only letters"},
		{func(c *Config) { c.Topic = strings.Repeat("t", 250) }, "1 to 249"},
		{func(c *Config) { c.Group = " " }, "group: required"},
		{func(c *Config) { c.Start = "beginning" }, `start "beginning"`},
		{func(c *Config) { c.SASL = &SASL{Mechanism: "GSSAPI", User: "u", Password: "p"} }, `mechanism "GSSAPI"`},
		{func(c *Config) { c.SASL = &SASL{Mechanism: SASLPlain, Password: "p"} }, "sasl.user: required"},
		{func(c *Config) { c.SASL = &SASL{Mechanism: SASLPlain, User: "u"} }, "password is empty"},
		{func(c *Config) { c.Handle = nil }, "no handler"},
		{func(c *Config) { c.TLS, c.Dial = &tls.Config{}, (&tls.Dialer{}).DialContext }, "tls and dial: set one"},
	} {
		c := ok
		tc.edit(&c)
		_, err := New(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want ErrConfig and %q", err, tc.want)
		}
	}
	// Triggers of later leadership terms share the first one's counters.
	reg := prometheus.NewRegistry()
	ok.Registerer = reg
	first, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	second, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if first.events != second.events {
		t.Error("a second trigger on the registry has counters of its own")
	}
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "thaw_promoter_control_events_total", Help: "x"}))
	ok.Registerer = clash
	if _, err := New(ok); err == nil || !strings.Contains(err.Error(), "kafka: metrics") {
		t.Errorf("New on a registry with a clashing metric: %v", err)
	}
}
