package kafkalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// Defaults.
const (
	DefaultTopicPrefix  = "thaw.changelog"
	DefaultPollInterval = 200 * time.Millisecond
	// frameOverhead is what a batch's encoding may add to its payload
	// beyond MaxBatchBytes (lengths, count, version): the topics' and the
	// producer's message limit is MaxBatchBytes + frameOverhead.
	frameOverhead = 1 << 20
)

// Config configures a Provider.
type Config struct {
	// Brokers are the seed brokers (host:port). Required.
	Brokers []string
	// TopicPrefix prefixes every bucket log's topic (DefaultTopicPrefix):
	// {prefix}.t{table}[.p{partition}].b{bucket}, one partition each. Tier
	// clusters sharing a Kafka cluster need different prefixes.
	TopicPrefix string
	// ReplicationFactor of the topics the provider creates; 0 or -1: the
	// brokers' default.
	ReplicationFactor int16
	// MaxBatchBytes bounds the payload of one Append
	// (changelog.DefaultMaxBatchBytes).
	MaxBatchBytes int64
	// PollInterval is the longest pause between two rounds of the
	// provider's poll of the logs that Waits block on (DefaultPollInterval):
	// a follower of an idle log sees a new record at most about this long
	// after it is appended.
	PollInterval time.Duration
	// ClientOptions are added to the franz-go client's options (TLS, SASL,
	// logging, timeouts). The provider's own settings win over them: its
	// seed brokers, partitioner, acknowledgements (all in-sync replicas),
	// batching and compression; kgo.DisableIdempotentWrite is refused.
	ClientOptions []kgo.Opt
	// Logger (slog.Default()).
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// maxTopicPrefix is the longest topic prefix: with the longest log name
// after it Kafka's limit of 249 characters on a topic name holds.
const maxTopicPrefix = 249 - len(".t9223372036854775807.p9223372036854775807.b2147483647")

// Validate checks c as New would, defaults applied.
func (c Config) Validate() error { return c.defaults() }

func (c *Config) defaults() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("kafkalog: no brokers"))
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = DefaultTopicPrefix
	}
	if !prefixRE.MatchString(c.TopicPrefix) || len(c.TopicPrefix) > maxTopicPrefix {
		errs = append(errs, fmt.Errorf("kafkalog: topic prefix %q: want 1 to %d of [a-zA-Z0-9._-] (a topic name has at most 249 characters)", c.TopicPrefix, maxTopicPrefix))
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.ReplicationFactor < -1 {
		errs = append(errs, fmt.Errorf("kafkalog: replication factor %d", c.ReplicationFactor))
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = changelog.DefaultMaxBatchBytes
	}
	if c.MaxBatchBytes < 1<<10 || c.MaxBatchBytes > 256<<20 {
		errs = append(errs, fmt.Errorf("kafkalog: max batch bytes %d: want 1 KiB to 256 MiB", c.MaxBatchBytes))
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.PollInterval < 5*time.Millisecond || c.PollInterval > 10*time.Second {
		errs = append(errs, fmt.Errorf("kafkalog: poll interval %v: want 5ms to 10s", c.PollInterval))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return errors.Join(errs...)
}

// Provider opens bucket logs kept in Kafka, one single-partition topic per
// bucket log. Unlike changelog.LocalProvider it is not limited to one
// host: every tablet server of a cluster opens the same logs.
type Provider struct {
	cfg        Config
	cl         *kgo.Client
	maxMessage int32
	poll       *poller
	stopPoll   context.CancelFunc

	mu struct {
		sync.Mutex
		closed bool
		open   map[changelog.BucketLogID]int // handles open in this process
	}
}

var _ changelog.Provider = (*Provider)(nil)

// New connects a Provider. It does not contact the brokers until a log is
// opened.
func New(cfg Config) (*Provider, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	maxMessage := int32(cfg.MaxBatchBytes + frameOverhead)
	// The caller's options first: the provider's own come later and win.
	opts := append(slices.Clone(cfg.ClientOptions),
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(maxMessage+4<<10),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedBytes(int(4*int64(maxMessage))),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: client: %w", err)
	}
	if off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		// A produce the client retries after the broker appended it would
		// land twice, and the append's verdict (ErrConflict: nothing
		// written) would be wrong about the first copy.
		cl.Close()
		return nil, errors.New("kafkalog: client options: the producer must be idempotent (kgo.DisableIdempotentWrite is refused)")
	}
	p := &Provider{cfg: cfg, cl: cl, maxMessage: maxMessage}
	p.mu.open = make(map[changelog.BucketLogID]int)
	p.poll = newPoller(p)
	ctx, stop := context.WithCancel(context.Background())
	p.stopPoll = stop
	go p.poll.run(ctx)
	return p, nil
}

// Ping checks that a broker answers the provider's client (its TLS and
// SASL included).
func (p *Provider) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafkalog: no broker answers (check brokers, TLS and SASL): %w", err)
	}
	return nil
}

// Identity names the logs this provider opens for the tier's placement,
// which keeps a bucket's replicas on tablet servers that share one
// changelog: "kafka:{cluster id}/{topic prefix}", the cluster id asked of a
// broker (so tablet servers given different broker addresses of one
// cluster agree, and two clusters never do). A cluster that reports no id
// is named by its seed brokers instead (see identity).
func (p *Provider) Identity(ctx context.Context) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none (nil would be all)
	var resp *kmsg.MetadataResponse
	err := withRetries(ctx, nil, func() (err error) {
		resp, err = req.RequestWith(ctx, p.cl)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("kafkalog: ask for the cluster id: %w", err)
	}
	cluster := ""
	if resp.ClusterID != nil {
		cluster = *resp.ClusterID
	}
	return identity(cluster, p.cfg.Brokers, p.cfg.TopicPrefix), nil
}

// maxIdentityName bounds the cluster part of an identity, so that with
// "kafka:", "/" and a topic prefix (at most 195 bytes) it stays well inside
// the registry's limit on changelog identities (512 bytes).
const maxIdentityName = 256

// identity builds Identity's answer from what the broker reported. A
// cluster without an id is named by its seed brokers, sorted and without
// repeats ("brokers=a:9092,b:9092"). A name that is too long or not
// printable ASCII (many seeds, a broker's odd cluster id), and a cluster id
// with "=" (Kafka's are base64url, without it), is replaced by the SHA-256
// of its kind and value ("sha256=" and hex), so every cluster gets an
// identity the registry accepts and an id never reads as a seed list.
func identity(clusterID string, brokers []string, prefix string) string {
	name, full := clusterID, "id="+clusterID
	if clusterID == "" {
		seeds := slices.Clone(brokers)
		slices.Sort(seeds)
		name = "brokers=" + strings.Join(slices.Compact(seeds), ",")
		full = name
	} else if strings.Contains(clusterID, "=") {
		name = ""
	}
	if name == "" || len(name) > maxIdentityName || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }) {
		sum := sha256.Sum256([]byte(full))
		name = "sha256=" + hex.EncodeToString(sum[:])
	}
	return "kafka:" + name + "/" + prefix
}

// Topic returns the topic of id's log.
func (p *Provider) Topic(id changelog.BucketLogID) string {
	return p.cfg.TopicPrefix + "." + id.Name(".")
}

// List returns the logs whose topics exist: every topic named
// {prefix}.{log} (changelog.ParseName with "."), sorted. Other topics,
// and topics the brokers report with an error (one being deleted, say), are
// left out.
func (p *Provider) List(ctx context.Context) ([]changelog.BucketLogID, error) {
	if p.closed() {
		return nil, changelog.ErrClosed
	}
	var resp *kmsg.MetadataResponse
	err := withRetries(ctx, nil, func() (err error) {
		resp, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, p.cl) // no topics: all of them
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kafkalog: list topics: %w", err)
	}
	var ids []changelog.BucketLogID
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 || t.IsInternal {
			continue
		}
		name, ok := strings.CutPrefix(*t.Topic, p.cfg.TopicPrefix+".")
		if !ok {
			continue
		}
		if id, ok := changelog.ParseName(name, "."); ok {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, changelog.CompareIDs)
	return ids, nil
}

// Open opens id's log, creating its topic if it does not exist.
func (p *Provider) Open(ctx context.Context, id changelog.BucketLogID) (changelog.Log, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if p.closed() {
		return nil, changelog.ErrClosed
	}
	topic := p.Topic(id)
	if err := p.createTopic(ctx, topic); err != nil {
		if p.closed() { // closed meanwhile: the client's error says only that
			return nil, changelog.ErrClosed
		}
		return nil, fmt.Errorf("kafkalog: open %v: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, changelog.ErrClosed
	}
	p.mu.open[id]++
	return newLog(p, id, topic), nil
}

func (p *Provider) release(id changelog.BucketLogID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.open[id]--; p.mu.open[id] <= 0 {
		delete(p.mu.open, id)
	}
}

// Delete deletes id's topic. Handles open in this process make it
// changelog.ErrInUse; handles of other processes see their log vanish. A
// topic the brokers do not know (UNKNOWN_TOPIC_OR_PARTITION) is false. An
// answer that is not for exactly that one topic, named, is an error, not
// taken for a deletion.
func (p *Provider) Delete(ctx context.Context, id changelog.BucketLogID) (bool, error) {
	if err := id.Validate(); err != nil {
		return false, err
	}
	p.mu.Lock()
	closed, n := p.mu.closed, p.mu.open[id]
	p.mu.Unlock()
	switch {
	case closed:
		return false, changelog.ErrClosed
	case n > 0:
		return false, fmt.Errorf("%w: %v has %d open handles", changelog.ErrInUse, id, n)
	}
	topic := p.Topic(id)
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return false, fmt.Errorf("kafkalog: delete %v: %w", id, err)
	}
	if len(resp.Topics) != 1 {
		return false, fmt.Errorf("kafkalog: delete %v: the broker answered for %d topics, want 1", id, len(resp.Topics))
	}
	// The request names the topic, so the answer names it too (a broker
	// leaves the name out, from version 6, only for a request by topic ID).
	switch name := resp.Topics[0].Topic; {
	case name == nil:
		return false, fmt.Errorf("kafkalog: delete %v: the broker answered without a topic name, want %q", id, topic)
	case *name != topic:
		return false, fmt.Errorf("kafkalog: delete %v: the broker answered for topic %q, want %q", id, *name, topic)
	}
	switch err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("kafkalog: delete %v: %w", id, err)
	}
	return true, nil
}

func (p *Provider) closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.closed
}

// Close closes the client. Open handles fail with changelog.ErrClosed.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	p.mu.Unlock()
	p.stopPoll()
	<-p.poll.done
	p.cl.Close()
	return nil
}

func (p *Provider) createTopic(ctx context.Context, topic string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = 1
	t.ReplicationFactor = p.cfg.ReplicationFactor
	for k, v := range map[string]string{
		"cleanup.policy":    "delete",
		"retention.ms":      "-1", // the tier truncates (TruncateBefore)
		"retention.bytes":   "-1",
		"max.message.bytes": strconv.Itoa(int(p.maxMessage) + 4<<10),
	} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].Topic != topic {
		return fmt.Errorf("create topic %s: %w", topic, errShape)
	}
	switch err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); {
	case errors.Is(err, kerr.TopicAlreadyExists):
		return p.checkTopic(ctx, topic)
	case err != nil:
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// ErrTopicSettings: a bucket log's topic exists with settings under which
// Kafka would delete its records or refuse its batches (created by someone
// else: a broker that auto-creates topics, an operator, another config).
// Fix the topic's settings (or delete it while its table holds no data).
var ErrTopicSettings = errors.New("kafkalog: topic settings unfit for a bucket log")

// checkTopic checks, at every Open that finds the topic existing, that it
// holds a log safely: Kafka must never delete a record the tier has not
// truncated (cleanup.policy delete, retention.ms and retention.bytes -1),
// and a batch must fit a message (max.message.bytes). Its one partition
// is checked where the log looks it up.
func (p *Provider) checkTopic(ctx context.Context, topic string) error {
	// Not remembered: a topic deleted and created again since (by a broker
	// that auto-creates topics, an operator) has the new settings.
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeTopic
	r.ResourceName = topic
	r.ConfigNames = []string{"cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes"}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("describe topic %s: %w", topic, errShape)
	}
	res := resp.Resources[0]
	if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	got := map[string]string{}
	for _, c := range res.Configs {
		if c.Value != nil {
			got[c.Name] = *c.Value
		}
	}
	var bad []string
	if v := got["cleanup.policy"]; v != "delete" {
		bad = append(bad, fmt.Sprintf("cleanup.policy %q (want delete)", v))
	}
	for _, k := range []string{"retention.ms", "retention.bytes"} {
		if v := got[k]; v != "-1" {
			bad = append(bad, fmt.Sprintf("%s %q (want -1: the tier truncates)", k, v))
		}
	}
	need := int64(p.maxMessage) + 4<<10
	if n, err := strconv.ParseInt(got["max.message.bytes"], 10, 64); err != nil || n < need {
		bad = append(bad, fmt.Sprintf("max.message.bytes %q (want at least %d)", got["max.message.bytes"], need))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s has %s", ErrTopicSettings, topic, strings.Join(bad, ", "))
	}
	return nil
}
