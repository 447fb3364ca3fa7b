package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/thawdb/thaw/internal/testlog"
)

const statusTopic = "thaw-status"

// consume reads n records of statusTopic from the start.
func consume(t *testing.T, brokers []string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(statusTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func publisherConfig(brokers []string, log *slog.Logger, reg prometheus.Registerer) PublisherConfig {
	return PublisherConfig{Brokers: brokers, Topic: statusTopic, Logger: log, Registerer: reg, CheckInterval: 50 * time.Millisecond}
}

// TestPublisher: records reach the topic, each key's in publication order
// and in one partition; Close flushes; the metrics count them.
func TestPublisher(t *testing.T) {
	brokers := cluster(t, kfake.SeedTopics(3, statusTopic))
	reg := prometheus.NewRegistry()
	p, err := NewPublisher(publisherConfig(brokers, nil, reg))
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		p.Publish("p-"+strconv.Itoa(i%4), []byte(strconv.Itoa(i)))
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "published"}); got != n {
		t.Fatalf("published %v, want %d", got, n)
	}
	if got := metric(t, reg, "thaw_promoter_status_events_buffered", nil); got != 0 {
		t.Fatalf("buffered %v after Close", got)
	}
	last := map[string]int{}
	part := map[string]int32{}
	for _, r := range consume(t, brokers, n) {
		k := string(r.Key)
		v, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[k]; ok && v <= prev {
			t.Fatalf("key %s: %d after %d", k, v, prev)
		}
		if p, ok := part[k]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", k, p, r.Partition)
		}
		last[k], part[k] = v, r.Partition
	}
	if len(last) != 4 {
		t.Fatalf("keys %v", last)
	}
}

// freeAddr returns an address where nothing listens (yet).
func freeAddr(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr.String(), addr.Port
}

// TestPublisherWaitsForBrokers: while no broker answers, Publish returns at
// once, records wait up to MaxBuffered, and more are dropped with one
// warning; when a broker starts, the buffered ones are delivered in order
// and the recovery is logged with the count dropped.
func TestPublisherWaitsForBrokers(t *testing.T) {
	addr, port := freeAddr(t)
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	cfg := publisherConfig([]string{addr}, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	cfg.MaxBuffered = 2
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	start := time.Now()
	for i := range 4 {
		p.Publish("p-1", []byte(strconv.Itoa(i)))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish blocked for %v", d)
	}
	const full = "status events: buffer full, dropping events until the brokers take them"
	waitLog(&logs, full)
	if c := strings.Count(logs.String(), full); c != 1 {
		t.Fatalf("%d buffer-full warnings, want 1:\n%s", c, logs.String())
	}
	if got := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "dropped"}); got != 2 {
		t.Fatalf("dropped %v, want 2", got)
	}
	if got := metric(t, reg, "thaw_promoter_status_events_buffered", nil); got != 2 {
		t.Fatalf("buffered %v, want 2", got)
	}
	waitLog(&logs, "status events: no Kafka broker answers")
	waitMetric(t, reg, "thaw_promoter_status_brokers_reachable", 0)

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, statusTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := consume(t, []string{addr}, 2)
	if string(got[0].Value) != "0" || string(got[1].Value) != "1" {
		t.Fatalf("delivered %q, %q; want the first two records", got[0].Value, got[1].Value)
	}
	waitLog(&logs, "status events: publishing again")
	if !strings.Contains(logs.String(), "dropped=2") {
		t.Fatalf("recovery without the count dropped:\n%s", logs.String())
	}
	waitMetric(t, reg, "thaw_promoter_status_brokers_reachable", 1)
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestPublisherCloseReportsUndelivered: Close waits FlushTimeout at most,
// then says how many records it could not deliver and counts them failed.
func TestPublisherCloseReportsUndelivered(t *testing.T) {
	addr, _ := freeAddr(t)
	reg := prometheus.NewRegistry()
	cfg := publisherConfig([]string{addr}, nil, reg)
	cfg.FlushTimeout = 200 * time.Millisecond
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p.Publish("p-1", []byte(strconv.Itoa(i)))
	}
	start := time.Now()
	err = p.Close(t.Context())
	if err == nil || !strings.Contains(err.Error(), "kafka: status events: 3 not delivered before close") {
		t.Fatalf("close: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if got := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "failed"}); got != 3 {
		t.Fatalf("failed %v, want 3", got)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("second close: %v", err)
	}
	p.Publish("p-1", []byte("late")) // a promotion still writing after Close
	if got := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "failed"}); got != 4 {
		t.Fatalf("failed %v after a publish after Close, want 4", got)
	}
}

func TestNewPublisherRejects(t *testing.T) {
	ok := PublisherConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "t"}
	for _, tc := range []struct {
		edit func(*PublisherConfig)
		want string
	}{
		{func(c *PublisherConfig) { c.Brokers = nil }, "at least one HOST:PORT"},
		{func(c *PublisherConfig) { c.Brokers = []string{"h:x"} }, `port "x"`},
		{func(c *PublisherConfig) { c.Topic = "" }, "topic"},
		{func(c *PublisherConfig) { c.Topic = "a b" }, "only letters"},
		{func(c *PublisherConfig) { c.MaxBuffered = -1 }, "max buffered -1"},
		{func(c *PublisherConfig) { c.SASL = &SASL{Mechanism: "GSSAPI", User: "u", Password: "p"} }, `mechanism "GSSAPI"`},
		{func(c *PublisherConfig) { c.SASL = &SASL{Mechanism: SASLPlain, User: "u"} }, "password is empty"},
		{func(c *PublisherConfig) { c.TLS, c.Dial = &tls.Config{}, (&tls.Dialer{}).DialContext }, "tls and dial: set one"},
	} {
		c := ok
		tc.edit(&c)
		p, err := NewPublisher(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want ErrConfig and %q", err, tc.want)
		}
		if p != nil {
			_ = p.Close(t.Context())
		}
	}
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "thaw_promoter_status_events_total", Help: "x"}))
	ok.Registerer = clash
	if _, err := NewPublisher(ok); err == nil || !strings.Contains(err.Error(), "kafka: metrics") {
		t.Errorf("NewPublisher on a registry with a clashing metric: %v", err)
	}
}

// TestPublisherUnknownTopic: a topic the brokers do not have fails each
// record (after franz-go's retries), logged with its key and counted.
func TestPublisherUnknownTopic(t *testing.T) {
	brokers := cluster(t) // the control topic only
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	p, err := NewPublisher(publisherConfig(brokers, slog.New(slog.NewTextHandler(&logs, nil)), reg))
	if err != nil {
		t.Fatal(err)
	}
	p.Publish("p-7", []byte("x"))
	if err := p.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "failed"}); got != 1 {
		t.Fatalf("failed %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "status event not delivered") || !strings.Contains(logs.String(), "key=p-7") ||
		!strings.Contains(logs.String(), "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// TestPublishRacingClose: Publish calls racing Close each end as
// published or failed (none lost, none counted twice), and Close waits for
// every one it let in; a Publish that added to the pending count while
// Close waited on it was a WaitGroup misuse.
func TestPublishRacingClose(t *testing.T) {
	brokers := cluster(t, kfake.SeedTopics(1, statusTopic))
	reg := prometheus.NewRegistry()
	p, err := NewPublisher(publisherConfig(brokers, nil, reg))
	if err != nil {
		t.Fatal(err)
	}
	const publishers, each = 8, 200
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				p.Publish("k"+strconv.Itoa(g), []byte(strconv.Itoa(i)))
			}
		})
	}
	_ = p.Close(t.Context())
	wg.Wait()
	var total float64
	for _, outcome := range []string{"published", "failed", "dropped"} {
		if v := metric(t, reg, "thaw_promoter_status_events_total", map[string]string{"outcome": outcome}); v > 0 {
			total += v
		}
	}
	if total != publishers*each {
		t.Fatalf("%v outcomes counted for %d Publish calls", total, publishers*each)
	}
}
