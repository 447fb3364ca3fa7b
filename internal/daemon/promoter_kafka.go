package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/triggers/kafka"
)

// EnvKafkaPassword names the environment variable that holds the SASL
// password of the promoter's Kafka client.
const EnvKafkaPassword = "THAW_KAFKA_PASSWORD"

// DefaultKafkaGroup is the consumer group of the promoter's control
// events.
const DefaultKafkaGroup = "thaw-promoter"

// KafkaConfig makes the leading promoter consume control events
// (triggers/kafka: promote, reconcile, lake_commit) from a Kafka topic,
// and the promoter publish status events (promoter.StatusEvent) to
// another; at least one of the two topics is required. The SASL password
// comes from THAW_KAFKA_PASSWORD, never from the file.
type KafkaConfig struct {
	// Brokers are seed brokers, HOST:PORT (required).
	Brokers []string `yaml:"brokers"`
	// Topic is the control topic (empty: no control events).
	Topic string `yaml:"topic"`
	// StatusTopic receives a status event after every write of a
	// promotion's ledger record (empty: none).
	StatusTopic string `yaml:"status_topic"`
	// Group is the consumer group (default thaw-promoter).
	Group string `yaml:"group"`
	// Start is where a group without committed offsets begins: earliest
	// (default) or latest.
	Start string `yaml:"start"`
	// TLS, when present (even empty: `tls: {}`), connects with TLS; without
	// ca_file the system's roots are trusted.
	TLS *KafkaTLSConfig `yaml:"tls"`
	// SASL authenticates the client.
	SASL *KafkaSASLConfig `yaml:"sasl"`
}

// KafkaTLSConfig configures TLS to the brokers. In a promoter config
// (kafka.tls) relative paths are relative to the config file's directory;
// in a tier config (changelog.kafka.tls), like the tier configs' other
// paths, to the working directory.
type KafkaTLSConfig struct {
	CAFile     string `yaml:"ca_file"`     // PEM CA bundle (default: system roots)
	CertFile   string `yaml:"cert_file"`   // client certificate (PEM), with key_file
	KeyFile    string `yaml:"key_file"`    // client key (PEM), with cert_file
	ServerName string `yaml:"server_name"` // default: the broker's host
}

// KafkaSASLConfig selects the SASL mechanism and user; the password is
// THAW_KAFKA_PASSWORD.
type KafkaSASLConfig struct {
	Mechanism string `yaml:"mechanism"` // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User      string `yaml:"user"`
}

// trigger returns the trigger configuration of c without TLS material,
// password or handler.
func (c KafkaConfig) trigger() kafka.Config {
	k := kafka.Config{Brokers: c.Brokers, Topic: c.Topic, Group: c.Group, Start: c.Start}
	if k.Group == "" {
		k.Group = DefaultKafkaGroup
	}
	if c.SASL != nil {
		k.SASL = &kafka.SASL{Mechanism: c.SASL.Mechanism, User: c.SASL.User}
	}
	return k
}

// publisher returns the status-event publisher's configuration without
// TLS material or password.
func (c KafkaConfig) publisher() kafka.PublisherConfig {
	k := kafka.PublisherConfig{Brokers: c.Brokers, Topic: c.StatusTopic}
	if c.SASL != nil {
		k.SASL = &kafka.SASL{Mechanism: c.SASL.Mechanism, User: c.SASL.User}
	}
	return k
}

// validate checks the section's form; the trigger's and the publisher's
// errors read "kafka: invalid configuration: KEY: ...".
func (c KafkaConfig) validate() error {
	var errs []error
	switch {
	case c.Topic == "" && c.StatusTopic == "":
		errs = append(errs, errors.New("kafka: topic (control events) or status_topic (status events): at least one is required"))
	case c.Topic != "":
		errs = append(errs, c.trigger().Validate())
		if c.StatusTopic != "" {
			if err := kafka.CheckTopic(c.StatusTopic); err != nil {
				errs = append(errs, fmt.Errorf("kafka: status_topic: %w", err))
			}
		}
	default:
		errs = append(errs, c.publisher().Validate())
	}
	if c.Topic != "" && c.Topic == c.StatusTopic {
		errs = append(errs, fmt.Errorf("kafka: topic and status_topic are both %q: status events are no control events", c.Topic))
	}
	if t := c.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, errors.New("kafka.tls: cert_file and key_file go together"))
	}
	return errors.Join(errs...)
}

func (c *KafkaConfig) resolvePaths(dir string) {
	if c.TLS == nil {
		return
	}
	for _, p := range []*string{&c.TLS.CAFile, &c.TLS.CertFile, &c.TLS.KeyFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// load returns the trigger's configuration (nil without a control topic)
// and the publisher's (nil without a status topic) with their TLS material
// read and the password taken from the environment: errors here stop the
// promoter at start, not at its first leadership term.
func (c KafkaConfig) load(getenv func(string) string, log *slog.Logger) (*kafka.Config, *kafka.PublisherConfig, error) {
	dial, s, err := c.connection(getenv, log)
	if err != nil {
		return nil, nil, err
	}
	var trig *kafka.Config
	var pub *kafka.PublisherConfig
	if c.Topic != "" {
		k := c.trigger()
		k.Dial, k.SASL = dial, s
		trig = &k
	}
	if c.StatusTopic != "" {
		k := c.publisher()
		k.Dial, k.SASL = dial, s
		pub = &k
	}
	return trig, pub, nil
}

// connection reads the TLS material and the SASL password.
func (c KafkaConfig) connection(getenv func(string) string, log *slog.Logger) (kafka.Dialer, *kafka.SASL, error) {
	return kafkaConnection("kafka", c.TLS, c.SASL, getenv, log)
}

// kafkaDialTimeout bounds a Kafka connection's dial and, apart, its TLS
// handshake (franz-go's default dial timeout).
const kafkaDialTimeout = 10 * time.Second

// kafkaConnection reads the TLS material of t and the SASL password of s
// (EnvKafkaPassword); section names the YAML section in errors. With t,
// the brokers are reached through the returned dialer: each new
// connection trusts the CA bundle and presents the client key pair as
// their files are then (reloader; log receives the reloads), so renewed
// files apply without a restart. Nil without t (plaintext).
func kafkaConnection(section string, t *KafkaTLSConfig, sc *KafkaSASLConfig, getenv func(string) string, log *slog.Logger) (kafka.Dialer, *kafka.SASL, error) {
	var s *kafka.SASL
	if sc != nil {
		s = &kafka.SASL{Mechanism: sc.Mechanism, User: sc.User, Password: getenv(EnvKafkaPassword)}
		if s.Password == "" {
			return nil, nil, fmt.Errorf("%s.sasl: %s is not set", section, EnvKafkaPassword)
		}
	}
	if t == nil {
		return nil, s, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	roots := func() *x509.CertPool { return nil } // the system's
	if t.CAFile != "" {
		r, err := newPoolReloader(t.CAFile, section+".tls.ca_file", log)
		if err != nil {
			return nil, nil, err
		}
		roots = r.get
	}
	if t.CertFile != "" {
		pair, err := newCertReloader(t.CertFile, t.KeyFile, log)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.tls: client certificate: %w", section, err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return dialTLS((&net.Dialer{Timeout: kafkaDialTimeout}).DialContext, tc, roots, nil, kafkaDialTimeout), s, nil
}

// statusSink publishes the promoter's status events through a
// kafka.Publisher.
type statusSink struct {
	pub *kafka.Publisher
	log *slog.Logger
}

func (s statusSink) Publish(e promoter.StatusEvent) {
	b, err := e.Marshal()
	if err != nil {
		s.log.Warn("status event not published", "promotion", e.Promotion, "err", err)
		s.pub.Failed()
		return
	}
	s.pub.Publish(e.Key(), b)
}

// controlHandler acts on control events through p: promote as an
// on-demand request (the policy needs onRequest), reconcile one policy or
// all, lake_commit as LakeCommitted. What retrying cannot change
// (promoter.IsRetriable false: unknown policy, trigger not allowed, a
// schema that does not map, ...; or no such table or partition in the
// lake) is rejected; other
// errors are retried by the trigger. A lake commit
// of a table no policy promotes on lake commits is handled: it does
// nothing (one topic may carry the commits of every lake table).
func controlHandler(p *promoter.Promoter, log *slog.Logger) kafka.Handler {
	return func(ctx context.Context, e kafka.Event) error {
		var err error
		switch e.Type {
		case kafka.TypePromote:
			_, err = p.Request(ctx, promoter.Request{Policy: e.Policy, Table: e.Table, Partition: e.Partition})
		case kafka.TypeReconcile:
			if e.Policy == "" {
				_, err = p.Reconcile(ctx)
			} else {
				_, err = p.ReconcilePolicy(ctx, e.Policy)
			}
		case kafka.TypeLakeCommit:
			var reps []promoter.ReconcileReport
			reps, err = p.LakeCommitted(ctx, e.Catalog, e.Table)
			if err == nil && len(reps) == 0 {
				log.Debug("lake commit event: no policy promotes this table on lake commits", "catalog", e.Catalog, "table", e.Table)
			}
		default:
			err = fmt.Errorf("%w: event type %q", promoter.ErrNotAllowed, e.Type)
		}
		// Terminal as the promoter classes promotion failures, or a
		// table or partition the lake does not have (retried, such an
		// event would hold up every later one of its Kafka partition
		// until the lake changes); not a context ended by a shutdown (the
		// next leader handles the event).
		if err != nil && ctx.Err() == nil && rejects(err) {
			return fmt.Errorf("%w: %w", kafka.ErrRejected, err)
		}
		return err
	}
}

// rejects reports whether retrying cannot change an event's failure. An
// event of several policies (reconcile all, a lake commit) fails with
// their errors joined: it is rejected only if every one is terminal, so
// that one policy broken for good does not drop another's failure that
// may pass.
func rejects(err error) bool {
	// Only the policies' joined errors are split: an error that wraps two
	// (a schema error naming its cause, say) is one policy's, and its
	// class is the whole error's.
	if pe, ok := errors.AsType[*promoter.PolicyErrors](err); ok {
		for _, part := range pe.Errs {
			if !rejects(part) {
				return false
			}
		}
		return len(pe.Errs) > 0
	}
	return !promoter.IsRetriable(err) || errors.Is(err, promoter.ErrNotFound) || errors.Is(err, lake.ErrNotFound)
}
