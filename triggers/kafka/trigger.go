package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/thawdb/thaw/internal/promreg"
)

// ErrConfig reports a Config that cannot run.
var ErrConfig = errors.New("kafka: invalid configuration")

// ErrRejected marks a handler error that retrying cannot cure (an unknown
// policy, a policy without the trigger, a partition the lake does not
// have): the event is logged, counted and skipped. Any other handler error
// is retried.
var ErrRejected = errors.New("kafka: event rejected")

// Start positions of a group that has no committed offset yet.
const (
	StartEarliest = "earliest" // the topic's oldest retained event (default)
	StartLatest   = "latest"   // events produced after the group first had the partition
)

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASL authenticates the trigger's Kafka client.
type SASL struct {
	Mechanism string // SASLPlain, SASLScramSHA256 or SASLScramSHA512
	User      string
	Password  string
}

// Handler acts on one event. It is called from Run's goroutine, one event
// at a time, in each partition's order, and should only enqueue work. An
// error wrapping ErrRejected skips the event; any other error is retried
// with backoff until it succeeds or Run's context ends (then the event is
// delivered again to the next consumer of the group).
type Handler func(ctx context.Context, e Event) error

// Config configures a Trigger.
type Config struct {
	Brokers []string // seed brokers, HOST:PORT (required)
	Topic   string   // the control topic (required)
	Group   string   // the consumer group (required)
	// ClientID names the client to the brokers (default "thaw-promoter").
	ClientID string
	// Start is where a group without committed offsets begins:
	// StartEarliest (default) or StartLatest.
	Start string
	TLS   *tls.Config // nil: plaintext
	// Dial, when set, opens the connections to the brokers in place of
	// the default dialer (10 s timeout, TLS as TLS says): a dialer that
	// does the TLS handshake itself, with TLS nil.
	Dial Dialer
	SASL *SASL // nil: no authentication
	// Handle acts on each event (required).
	Handle Handler
	Logger *slog.Logger
	// Registerer receives the trigger's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// MaxBackoff caps the wait between retries of a failing event or poll
	// (default 30s).
	MaxBackoff time.Duration
	// CheckInterval is the period of the brokers' reachability check
	// (default 30s): franz-go retries a broker that refuses the client
	// (wrong password, TLS) without reporting it, so Run asks.
	CheckInterval time.Duration
}

// Trigger consumes control events and hands them to its Handler.
type Trigger struct {
	cfg       Config
	log       *slog.Logger
	events    *prometheus.CounterVec
	reachable prometheus.Gauge
	opts      []kgo.Opt
}

// New checks cfg and returns a Trigger; nothing connects before Run.
func New(cfg Config) (*Trigger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "thaw-promoter"
	}
	if cfg.Start == "" {
		cfg.Start = StartEarliest
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Trigger{cfg: cfg, log: log}
	// Triggers of later leadership terms in the process share the metrics
	// of the first.
	var err error
	t.events, err = promreg.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "thaw_promoter_control_events_total",
		Help: "Kafka control events by type (invalid: not an event) and outcome (handled, rejected).",
	}, []string{"type", "outcome"}))
	if err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	t.reachable, err = promreg.Register(cfg.Registerer, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "thaw_promoter_control_brokers_reachable",
		Help: "1 if the last check reached a Kafka broker of the control topic (as configured: TLS, SASL), 0 if not.",
	}))
	if err != nil {
		return nil, fmt.Errorf("kafka: metrics: %w", err)
	}
	start := kgo.NewOffset().AtStart()
	if cfg.Start == StartLatest {
		start = kgo.NewOffset().AtEnd()
	}
	t.opts = append(ConnOptions(cfg.Brokers, cfg.ClientID, cfg.TLS, cfg.Dial, cfg.SASL, log),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(start),
		kgo.DisableAutoCommit(),
		// Events a producer wrote in a transaction count once it commits:
		// an aborted one's never happened (franz-go reads uncommitted
		// records by default).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			log.Info("control topic partitions assigned", "topic", cfg.Topic, "partitions", m[cfg.Topic])
			if cfg.Start != StartLatest || len(m[cfg.Topic]) == 0 {
				return
			}
			// franz-go fetches the committed offsets once this returns.
			pctx, cancel := context.WithTimeout(ctx, commitTimeout)
			defer cancel()
			if err := pinLatest(pctx, cl, cfg.Group, cfg.Topic, m[cfg.Topic]); err != nil {
				log.Warn("control events: could not commit where the group starts on partitions it has no offset for: "+
					"events produced there before a member commits one may be skipped", "topic", cfg.Topic, "err", err)
			}
		}),
	)
	return t, nil
}

// pinLatest makes StartLatest mean where the group first had each
// partition: a partition of parts without a committed offset gets its
// current end (the last stable offset: events of open transactions are
// still to come) committed. Without it, a partition that never had an
// event handled kept no offset, and every new member (a restart, the next
// leader) started at its end again, skipping the events produced while no
// member ran. Called from OnPartitionsAssigned, before franz-go fetches
// the committed offsets.
func pinLatest(ctx context.Context, cl *kgo.Client, group, topic string, parts []int32) error {
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Group = group
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = topic, parts
	of.Topics = append(of.Topics, ft)
	ofr, err := of.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ofr.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("fetch committed offsets: %w", err)
	}
	have := map[int32]bool{}
	for _, t := range ofr.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("fetch committed offset of partition %d: %w", p.Partition, err)
			}
			if t.Topic == topic && p.Offset >= 0 {
				have[p.Partition] = true
			}
		}
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID, lo.IsolationLevel = -1, 1 // read committed
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range parts {
		if !have[p] {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = p, -1, -1
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	if len(lt.Partitions) == 0 {
		return nil
	}
	lo.Topics = append(lo.Topics, lt)
	lor, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	ends := map[int32]kgo.EpochOffset{}
	for _, t := range lor.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("list end offset of partition %d: %w", p.Partition, err)
			}
			if t.Topic == topic {
				ends[p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: p.Offset}
			}
		}
	}
	if len(ends) != len(lt.Partitions) {
		return fmt.Errorf("list end offsets: %d partitions answered, %d asked", len(ends), len(lt.Partitions))
	}
	var cerr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: ends}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("partition %d: %w", p.Partition, err)
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("commit start offsets: %w", cerr)
	}
	return nil
}

// Dialer opens a connection to a broker at host ("HOST:PORT"), doing the
// TLS handshake itself if the brokers speak TLS; its signature is
// net.Dialer's and tls.Dialer's DialContext.
type Dialer func(ctx context.Context, network, host string) (net.Conn, error)

// ConnOptions are the franz-go client options of a connection as this
// package configures them (brokers, client id, TLS or a dialer, SASL,
// logging): the trigger's and the publisher's, and the daemon's for the
// tier's Kafka changelog, which is configured the same way. Give tc or
// dial, not both (Validate says so).
func ConnOptions(brokers []string, clientID string, tc *tls.Config, dial Dialer, s *SASL, log *slog.Logger) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(clientID), kgo.WithLogger(kgoLogger{log})}
	switch {
	case dial != nil:
		opts = append(opts, kgo.Dialer(dial))
	case tc != nil:
		opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
	}
	if s != nil {
		opts = append(opts, kgo.SASL(mechanism(*s)))
	}
	return opts
}

func mechanism(s SASL) sasl.Mechanism {
	switch s.Mechanism {
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	default:
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	}
}

// Validate checks the form of every setting except Handle and the SASL
// password (New checks those too): what a configuration file gives.
func (c Config) Validate() error {
	errs := append(checkConn(c.Brokers, c.SASL), checkDial(c.TLS, c.Dial)...)
	if err := CheckTopic(c.Topic); err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(c.Group) == "" {
		errs = append(errs, errors.New("group: required"))
	}
	if c.Start != "" && c.Start != StartEarliest && c.Start != StartLatest {
		errs = append(errs, fmt.Errorf("start %q: want %s or %s", c.Start, StartEarliest, StartLatest))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// CheckConnection checks connection settings as Validate does: brokers
// and SASL (but its password).
func CheckConnection(brokers []string, s *SASL) error { return errors.Join(checkConn(brokers, s)...) }

// checkConn checks the connection settings the trigger and the publisher
// share: brokers and SASL (but its password).
func checkConn(brokers []string, s *SASL) []error {
	var errs []error
	if len(brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one HOST:PORT is required"))
	}
	for _, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		if err == nil && host == "" {
			err = errors.New("no host")
		}
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n <= 0 || n > 65535 {
				err = fmt.Errorf("port %q", port)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("brokers: %q: want HOST:PORT: %v", b, err))
		}
	}
	if s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		default:
			errs = append(errs, fmt.Errorf("sasl.mechanism %q: want %s, %s or %s", s.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512))
		}
		if s.User == "" {
			errs = append(errs, errors.New("sasl.user: required with a mechanism"))
		}
	}
	return errs
}

func (c Config) validate() error {
	if err := c.Validate(); err != nil {
		return err
	}
	switch {
	case c.SASL != nil && c.SASL.Password == "":
		return fmt.Errorf("%w: sasl: the password is empty", ErrConfig)
	case c.Handle == nil:
		return fmt.Errorf("%w: no handler", ErrConfig)
	}
	return nil
}

// checkDial refuses TLS and a dialer together: the dialer does the
// handshake.
func checkDial(tc *tls.Config, dial Dialer) []error {
	if tc != nil && dial != nil {
		return []error{errors.New("tls and dial: set one (a dialer does the TLS handshake itself)")}
	}
	return nil
}

// CheckTopic applies Kafka's topic name rules: 1 to 249 characters of
// [a-zA-Z0-9._-], not "." or "..".
func CheckTopic(t string) error {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return fmt.Errorf("topic %q: want 1 to 249 characters, not . or ..", t)
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic %q: only letters, digits, '.', '_' and '-'", t)
		}
	}
	return nil
}

// pollMax is how many records one poll returns at most.
const pollMax = 64

// commitTimeout bounds the commit of a handled event's offset, which is
// attempted even when Run's context has just ended.
const commitTimeout = 5 * time.Second

// Run consumes the topic as a member of the group until ctx ends, then
// leaves the group and returns nil. Events are handled one at a time; the
// offset of each is committed once it is handled or rejected, so an event
// is handled at least once (again after a crash between the two). A record
// that is not a valid event is logged with its partition and offset,
// counted and skipped. An event whose handling fails for a reason that
// may pass holds back its own partition only: the partition is paused
// and rewound to the event, and fetched again (the event first) after a
// doubling backoff, while the other partitions' events go on. Connection
// and group errors are logged and retried. Run is meant to run on the
// leading promoter only.
func (t *Trigger) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(t.opts...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	defer cl.CloseAllowingRebalance()
	t.log.Info("consuming control events", "topic", t.cfg.Topic, "group", t.cfg.Group, "brokers", t.cfg.Brokers)
	wctx, wstop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch(wctx, cl, t.log, "control events", t.cfg.Brokers, t.cfg.CheckInterval, t.reachable)
	}()
	defer func() { wstop(); <-watched }()
	s := &stalls{until: map[int32]time.Time{}, backoff: map[int32]time.Duration{}}
	var backoff time.Duration
	for ctx.Err() == nil {
		s.resumeDue(cl, t.cfg.Topic, time.Now())
		// A poll ends when the next stalled partition is due, so that its
		// event is retried on time even while nothing else comes.
		pctx, cancel := context.WithCancel(ctx)
		if at, ok := s.next(); ok {
			pctx, cancel = context.WithDeadline(ctx, at)
		}
		fs := cl.PollRecords(pctx, pollMax)
		cancel()
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		failed := false
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				failed = true
				t.log.Warn("control events: fetch", "topic", topic, "partition", partition, "err", err)
			}
		})
		stopped := false
		fs.EachRecord(func(r *kgo.Record) {
			if stopped || s.stalled(r.Partition) {
				return // fetched again from the stalled event when it is due
			}
			switch t.handle(ctx, r, s.backoff[r.Partition]) {
			case outcomeDone:
				delete(s.backoff, r.Partition)
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
				if err := cl.CommitRecords(cctx, r); err != nil {
					t.log.Warn("control events: commit (the event may be handled again)", "partition", r.Partition, "offset", r.Offset, "err", err)
				}
				cancel()
			case outcomeRetry:
				// Before AllowRebalance, as franz-go asks of SetOffsets.
				s.stall(cl, r, t.next(s.backoff[r.Partition]), time.Now())
			case outcomeStopped:
				stopped = true
			}
		})
		cl.AllowRebalance()
		if stopped {
			break
		}
		if failed && len(fs.Records()) == 0 {
			backoff = t.next(backoff)
			if !sleep(ctx, backoff) {
				break
			}
		} else {
			backoff = 0
		}
	}
	t.log.Info("control events stopped", "topic", t.cfg.Topic)
	return nil
}

// stalls are the partitions whose event failed for a reason that may
// pass: each is paused, rewound to the event, until its retry is due.
type stalls struct {
	until map[int32]time.Time
	// backoff is the last wait of a partition whose event failed, until
	// one of its events is handled.
	backoff map[int32]time.Duration
}

func (s *stalls) stalled(p int32) bool {
	_, ok := s.until[p]
	return ok
}

// stall pauses r's partition and rewinds it to r, to be fetched again
// after d.
func (s *stalls) stall(cl *kgo.Client, r *kgo.Record, d time.Duration, now time.Time) {
	s.until[r.Partition], s.backoff[r.Partition] = now.Add(d), d
	cl.PauseFetchPartitions(map[string][]int32{r.Topic: {r.Partition}})
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.Topic: {r.Partition: {Epoch: r.LeaderEpoch, Offset: r.Offset}}})
}

// resumeDue resumes the stalled partitions whose retry is due.
func (s *stalls) resumeDue(cl *kgo.Client, topic string, now time.Time) {
	var due []int32
	for p, at := range s.until {
		if !now.Before(at) {
			due = append(due, p)
			delete(s.until, p)
		}
	}
	if len(due) > 0 {
		cl.ResumeFetchPartitions(map[string][]int32{topic: due})
	}
}

// next returns when the next stalled partition is due.
func (s *stalls) next() (time.Time, bool) {
	var first time.Time
	for _, at := range s.until {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// Outcomes of handling a record.
const (
	outcomeDone    = iota // handled, rejected or not an event: commit it
	outcomeRetry          // failed for a reason that may pass
	outcomeStopped        // ctx ended
)

// handle decodes and hands one record to the handler once; prev is the
// last backoff of its partition's failures (for the log line).
func (t *Trigger) handle(ctx context.Context, r *kgo.Record, prev time.Duration) int {
	log := t.log.With("partition", r.Partition, "offset", r.Offset)
	e, err := ParseEvent(r.Value)
	if err != nil {
		t.events.WithLabelValues("invalid", "rejected").Inc()
		log.Warn("control event skipped", "err", err)
		return outcomeDone
	}
	err = t.cfg.Handle(ctx, e)
	switch {
	case err == nil:
		t.events.WithLabelValues(e.Type, "handled").Inc()
		log.Info("control event handled", "type", e.Type, "policy", e.Policy, "table", e.Table, "partition_name", e.Partition)
		return outcomeDone
	case errors.Is(err, ErrRejected):
		t.events.WithLabelValues(e.Type, "rejected").Inc()
		log.Warn("control event rejected", "type", e.Type, "err", err)
		return outcomeDone
	case ctx.Err() != nil:
		return outcomeStopped
	}
	log.Warn("control event failed; retrying (its partition waits)", "type", e.Type, "err", err, "retry_in", t.next(prev))
	return outcomeRetry
}

// watch checks every interval that a broker answers cl (Ping: a metadata
// request over a connection that passed TLS and SASL), sets reachable and
// logs when that stops or starts being so: franz-go itself retries a
// refused connection quietly. what names the client's use in the logs.
func watch(ctx context.Context, cl *kgo.Client, log *slog.Logger, what string, brokers []string, interval time.Duration, reachable prometheus.Gauge) {
	ok := true
	for {
		pctx, cancel := context.WithTimeout(ctx, interval)
		err := cl.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && ok:
			log.Warn(what+": no Kafka broker answers (check brokers, TLS and SASL settings)", "brokers", brokers, "err", err)
		case err == nil && !ok:
			log.Info(what+": Kafka brokers answer again", "brokers", brokers)
		}
		ok = err == nil
		if ok {
			reachable.Set(1)
		} else {
			reachable.Set(0)
		}
		if !sleep(ctx, interval) {
			return
		}
	}
}

// next doubles a backoff from 200ms up to MaxBackoff.
func (t *Trigger) next(d time.Duration) time.Duration {
	return min(max(2*d, 200*time.Millisecond), t.cfg.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// kgoLogger hands franz-go's log lines to slog; its info lines (requests,
// metadata updates) go to debug.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	if k.l.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	k.l.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}
