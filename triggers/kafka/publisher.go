package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/thawdb/thaw/internal/promreg"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Brokers []string // seed brokers, HOST:PORT (required)
	Topic   string   // the status topic (required)
	// ClientID names the client to the brokers (default "thaw-promoter").
	ClientID string
	TLS      *tls.Config // nil: plaintext
	Dial     Dialer      // see Config.Dial
	SASL     *SASL       // nil: no authentication
	// MaxBuffered bounds the events waiting for the brokers (default
	// 10,000): while none answers, events wait in memory; beyond this,
	// new events are dropped and counted.
	MaxBuffered int
	// FlushTimeout bounds how long Close waits for buffered events
	// (default 10s).
	FlushTimeout time.Duration
	Logger       *slog.Logger
	// Registerer receives the publisher's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// CheckInterval is the period of the brokers' reachability check
	// (default 30s).
	CheckInterval time.Duration
}

// Validate checks the form of every setting but the SASL password
// (NewPublisher checks that too): what a configuration file gives.
func (c PublisherConfig) Validate() error {
	errs := append(checkConn(c.Brokers, c.SASL), checkDial(c.TLS, c.Dial)...)
	if err := CheckTopic(c.Topic); err != nil {
		errs = append(errs, err)
	}
	if c.MaxBuffered < 0 {
		errs = append(errs, fmt.Errorf("max buffered %d: negative", c.MaxBuffered))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Publisher produces records to one topic without ever blocking its
// caller: records are buffered and sent by franz-go (acks from all
// in-sync replicas, idempotent, retried while the brokers are away), in
// order per key. It is what the promoter's status events go out through.
type Publisher struct {
	cfg       PublisherConfig
	cl        *kgo.Client
	log       *slog.Logger
	events    *prometheus.CounterVec
	buffered  prometheus.Gauge
	reachable prometheus.Gauge
	dropping  atomic.Bool
	dropped   atomic.Int64   // since dropping started
	pending   sync.WaitGroup // records whose promise has not run
	// closing guards closed: Publish holds it shared from its check to
	// its pending.Add, Close exclusively to set it, so that no Add comes
	// after Close's Wait may have begun (a WaitGroup misuse).
	closing   sync.RWMutex
	closed    bool
	stop      context.CancelFunc
	watched   chan struct{}
	closeOnce sync.Once
}

// NewPublisher checks cfg and returns a Publisher; the client connects in
// the background (the first record, or the reachability check, opens the
// connection).
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SASL != nil && cfg.SASL.Password == "" {
		return nil, fmt.Errorf("%w: sasl: the password is empty", ErrConfig)
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "thaw-promoter"
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = 10000
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 10 * time.Second
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{cfg: cfg, log: log, watched: make(chan struct{})}
	var err error
	if p.events, err = promreg.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "thaw_promoter_status_events_total",
		Help: "Status events by outcome: published (acknowledged by the brokers), failed (not encoded, refused or undeliverable), dropped (the buffer was full).",
	}, []string{"outcome"})); err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	if p.buffered, err = promreg.Register(cfg.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "thaw_promoter_status_events_buffered",
		Help: "Status events waiting for the brokers.",
	})); err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	if p.reachable, err = promreg.Register(cfg.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "thaw_promoter_status_brokers_reachable",
		Help: "1 if the last check reached a Kafka broker of the status topic (as configured: TLS, SASL), 0 if not.",
	})); err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	opts := append(ConnOptions(cfg.Brokers, cfg.ClientID, cfg.TLS, cfg.Dial, cfg.SASL, log),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.MaxBufferedRecords(cfg.MaxBuffered),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if p.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	var wctx context.Context
	wctx, p.stop = context.WithCancel(context.Background())
	go func() {
		defer close(p.watched)
		watch(wctx, p.cl, log, "status events", cfg.Brokers, cfg.CheckInterval, p.reachable)
	}()
	log.Info("publishing status events", "topic", cfg.Topic, "brokers", cfg.Brokers)
	return p, nil
}

// Publish buffers one record and returns at once. Its outcome is counted
// and, if it is not delivered, logged; a full buffer drops the record, and
// after Close every record fails.
func (p *Publisher) Publish(key string, value []byte) {
	p.closing.RLock()
	if p.closed {
		p.closing.RUnlock()
		p.events.WithLabelValues("failed").Inc()
		return
	}
	r := &kgo.Record{Key: []byte(key), Value: value}
	p.pending.Add(1)
	p.closing.RUnlock()
	p.cl.TryProduce(context.Background(), r, p.delivered)
	p.buffered.Set(float64(p.cl.BufferedProduceRecords()))
}

// Failed counts an event its caller could not publish (it did not encode)
// as failed; the caller logs why.
func (p *Publisher) Failed() { p.events.WithLabelValues("failed").Inc() }

// delivered is the records' promise: franz-go calls it once per record,
// serially.
func (p *Publisher) delivered(r *kgo.Record, err error) {
	defer p.pending.Done()
	p.buffered.Set(float64(p.cl.BufferedProduceRecords()))
	switch {
	case err == nil:
		p.events.WithLabelValues("published").Inc()
		if p.dropping.CompareAndSwap(true, false) {
			p.log.Info("status events: publishing again", "topic", p.cfg.Topic, "dropped", p.dropped.Swap(0))
		}
	case errors.Is(err, kgo.ErrMaxBuffered):
		p.events.WithLabelValues("dropped").Inc()
		p.dropped.Add(1)
		if p.dropping.CompareAndSwap(false, true) {
			p.log.Warn("status events: buffer full, dropping events until the brokers take them",
				"topic", p.cfg.Topic, "max_buffered", p.cfg.MaxBuffered)
		}
	case errors.Is(err, kgo.ErrClientClosed):
		p.events.WithLabelValues("failed").Inc() // Close reports the count
	default:
		p.events.WithLabelValues("failed").Inc()
		p.log.Warn("status event not delivered", "topic", p.cfg.Topic, "key", string(r.Key), "err", err)
	}
}

// Close waits up to FlushTimeout (or until ctx ends) for the buffered
// records, then closes the client: what is still buffered then is counted
// as failed, as is every record published after Close.
func (p *Publisher) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		p.closing.Lock()
		p.closed = true
		p.closing.Unlock()
		fctx, cancel := context.WithTimeout(ctx, p.cfg.FlushTimeout)
		defer cancel()
		if ferr := p.cl.Flush(fctx); ferr != nil {
			err = fmt.Errorf("kafka: status events: %d not delivered before close: %w", p.cl.BufferedProduceRecords(), ferr)
		}
		p.stop()
		<-p.watched
		p.cl.Close() // fails what is still buffered
		p.pending.Wait()
		p.buffered.Set(0)
	})
	return err
}
