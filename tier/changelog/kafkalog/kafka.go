package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// leader finds and caches the broker that leads a log's partition, and
// sends it the requests that must reach the leader itself.
type leader struct {
	mu      sync.Mutex
	known   bool
	id      int32
	topicID [16]byte
}

type fetchResult struct {
	entries      []entry
	hw, logStart int64
}

// retriable reports errors after which the partition's leader is looked
// up again and the request repeated: leadership moved, the topic is still
// being created, or the connection failed (the network's errors, and
// franz-go's when it drops a connection, which it does when a request on
// it is cancelled mid-flight: every other request on it fails too).
func retriable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, changelog.ErrCorrupt), errors.Is(err, errShape), errors.Is(err, ErrTopicSettings):
		return false
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable || errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
	}
	return true
}

const maxAttempts = 40

func backoff(ctx context.Context, attempt int) error {
	d := min(time.Duration(attempt+1)*25*time.Millisecond, 500*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errShape: a response that does not answer the one partition asked
// about. Not retried.
var errShape = errors.New("unexpected response shape")

// withRetries calls fn until it succeeds, fails in a way retrying cannot
// fix (see retriable), ctx ends or maxAttempts pass; forget, if set, runs
// before each retry (the cached leader is dropped).
func withRetries(ctx context.Context, forget func(), fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !retriable(err) || attempt == maxAttempts || ctx.Err() != nil {
			return err
		}
		if forget != nil {
			forget()
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

func (ld *leader) lookup(ctx context.Context, l *kafkaLog) (int32, [16]byte, error) {
	ld.mu.Lock()
	if ld.known {
		id, tid := ld.id, ld.topicID
		ld.mu.Unlock()
		return id, tid, nil
	}
	ld.mu.Unlock()
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(l.topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, l.p.cl)
	if err != nil {
		return 0, [16]byte{}, err
	}
	if len(resp.Topics) != 1 {
		return 0, [16]byte{}, fmt.Errorf("metadata of %s: %d topics: %w", l.topic, len(resp.Topics), errShape)
	}
	rt := resp.Topics[0]
	if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
		return 0, [16]byte{}, err
	}
	if len(rt.Partitions) != 1 {
		// Not a bucket log's topic (created by someone else): permanent.
		return 0, [16]byte{}, fmt.Errorf("%w: %s has %d partitions, want 1", ErrTopicSettings, l.topic, len(rt.Partitions))
	}
	rp := rt.Partitions[0]
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		return 0, [16]byte{}, err
	}
	if rp.Leader < 0 {
		return 0, [16]byte{}, kerr.LeaderNotAvailable
	}
	ld.mu.Lock()
	ld.known, ld.id, ld.topicID = true, rp.Leader, rt.TopicID
	ld.mu.Unlock()
	return rp.Leader, rt.TopicID, nil
}

func (ld *leader) forget() {
	ld.mu.Lock()
	ld.known = false
	ld.mu.Unlock()
}

// fetch reads the records from Kafka offset from on, without waiting at
// the broker. kerr.OffsetOutOfRange means from lies outside the partition.
func (ld *leader) fetch(ctx context.Context, l *kafkaLog, from int64) (res fetchResult, err error) {
	err = withRetries(ctx, ld.forget, func() error {
		res, err = ld.fetchOnce(ctx, l, from)
		return err
	})
	return res, err
}

func (ld *leader) fetchOnce(ctx context.Context, l *kafkaLog, from int64) (fetchResult, error) {
	id, tid, err := ld.lookup(ctx, l)
	if err != nil {
		return fetchResult{}, err
	}
	maxBytes := 2 * l.p.maxMessage
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis, req.MinBytes = 0, 0
	req.MaxBytes = maxBytes
	req.SessionEpoch = -1
	t := kmsg.NewFetchRequestTopic()
	t.Topic, t.TopicID = l.topic, tid
	p := kmsg.NewFetchRequestTopicPartition()
	p.Partition, p.FetchOffset, p.PartitionMaxBytes = 0, from, maxBytes
	p.LogStartOffset, p.CurrentLeaderEpoch = -1, -1
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, l.p.cl.Broker(int(id)))
	if err != nil {
		return fetchResult{}, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fetchResult{}, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fetchResult{}, fmt.Errorf("fetch of %s: %w", l.topic, errShape)
	}
	rp := &resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
		return fetchResult{}, err
	}
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: l.topic}, rp, kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		return fetchResult{}, fp.Err
	}
	res := fetchResult{hw: rp.HighWatermark, logStart: rp.LogStartOffset, entries: make([]entry, 0, len(fp.Records))}
	for _, r := range fp.Records {
		if r.Offset >= res.hw {
			break
		}
		e, err := decodeEntry(r.Offset, r.Key, r.Value)
		if err != nil {
			return fetchResult{}, fmt.Errorf("%s: %w", l.topic, err)
		}
		res.entries = append(res.entries, e)
	}
	return res, nil
}

// listStart returns the partition's first retained Kafka offset.
func (ld *leader) listStart(ctx context.Context, l *kafkaLog) (start int64, err error) {
	err = withRetries(ctx, nil, func() error {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = l.topic
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp, p.CurrentLeaderEpoch = 0, -2, -1
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, l.p.cl)
		switch {
		case err != nil:
			return err
		case len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1:
			return errShape
		}
		rp := resp.Topics[0].Partitions[0]
		start = rp.Offset
		return kerr.ErrorForCode(rp.ErrorCode)
	})
	if err != nil {
		return 0, fmt.Errorf("list offsets of %s: %w", l.topic, err)
	}
	return start, nil
}

// deleteRecords deletes the records below Kafka offset k.
func (ld *leader) deleteRecords(ctx context.Context, l *kafkaLog, k int64) error {
	err := withRetries(ctx, nil, func() error {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.TimeoutMillis = 30_000
		t := kmsg.NewDeleteRecordsRequestTopic()
		t.Topic = l.topic
		p := kmsg.NewDeleteRecordsRequestTopicPartition()
		p.Partition, p.Offset = 0, k
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, l.p.cl)
		switch {
		case err != nil:
			return err
		case len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1:
			return errShape
		}
		return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	})
	if err != nil {
		return fmt.Errorf("delete records of %s below %d: %w", l.topic, k, err)
	}
	return nil
}
