package kafkalog

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestProduceRetryAfterAppend: a produce the broker applies but answers
// with a retriable error (REQUEST_TIMED_OUT after the append) is retried
// by the client. With the idempotent producer the batch lands once and
// Append reports it; a client option that turns idempotence off (the
// batch landed twice, and Append answered ErrConflict, "nothing written",
// for a batch every reader applies) is refused by New.
func TestProduceRetryAfterAppend(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := New(Config{Brokers: c.ListenAddrs(), ClientOptions: []kgo.Opt{kgo.DisableIdempotentWrite()}}); err == nil ||
		!strings.Contains(err.Error(), "idempotent") {
		t.Fatalf("New with idempotence off: %v, want refused", err)
	}
	p := provider(t, c.ListenAddrs())
	id := changelog.BucketLogID{TableID: 901}
	l := open(t, p, id)
	appendN(t, l, 0, 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.Topic(id), Err: kerr.RequestTimedOut})
	first, err := l.Append(t.Context(), [][]byte{[]byte("x"), []byte("y")})
	if err != nil || first != 2 {
		t.Fatalf("append after a lost answer: %d, %v; want 2", first, err)
	}
	r := open(t, provider(t, c.ListenAddrs()), id)
	if _, end, err := r.Offsets(t.Context()); err != nil || end != 4 {
		t.Fatalf("a fresh reader's end %d (%v), want 4: the batch once", end, err)
	}
}

// TestWaitRacingCloseForgotten: a Wait whose handle closes while it syncs
// does not register the closed handle with the poller afterwards (it
// stayed there, polled every interval, until its topic grew).
func TestWaitRacingCloseForgotten(t *testing.T) {
	p := provider(t, brokers(t, 1))
	id := changelog.BucketLogID{TableID: 902}
	appendN(t, open(t, p, id), 0, 1)
	for i := range 400 {
		l, err := p.Open(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.Offsets(t.Context()); err != nil { // anchored: Wait's sync is one fetch
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := l.Wait(t.Context(), 1000)
			done <- err
		}()
		time.Sleep(time.Duration(i%40) * 25 * time.Microsecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, changelog.ErrClosed) {
			t.Fatalf("iteration %d: Wait %v, want ErrClosed", i, err)
		}
		p.poll.mu.Lock()
		_, kept := p.poll.waiters[l.(*kafkaLog)]
		p.poll.mu.Unlock()
		if kept {
			t.Fatalf("iteration %d: the closed handle is still registered with the poller", i)
		}
	}
}

// TestOpenChecksRecreatedTopic: a topic deleted and created again with
// settings under which Kafka deletes records is refused at the next Open
// (the provider remembered the first topic's check and took the second
// without one).
func TestOpenChecksRecreatedTopic(t *testing.T) {
	p := provider(t, brokers(t, 1))
	id := changelog.BucketLogID{TableID: 903}
	precreate(t, p, p.Topic(id), 1, map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "100000000"})
	l, err := p.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Delete(t.Context(), id); err != nil || !ok {
		t.Fatalf("delete: %v %v", ok, err)
	}
	precreate(t, p, p.Topic(id), 1, map[string]string{"retention.ms": "60000"})
	if l, err := p.Open(t.Context(), id); !errors.Is(err, ErrTopicSettings) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("Open of the topic created again with retention.ms 60000: %v, want ErrTopicSettings", err)
	}
}

// TestTopicPrefixLimit: a prefix is accepted only if the longest log name
// after it keeps the topic name within Kafka's 249 characters (200 were
// accepted, and a real broker refused such a log's topic at Open).
func TestTopicPrefixLimit(t *testing.T) {
	addrs := []string{"127.0.0.1:9092"}
	if err := (Config{Brokers: addrs, TopicPrefix: strings.Repeat("p", maxTopicPrefix+1)}).Validate(); err == nil {
		t.Fatalf("a prefix of %d characters accepted", maxTopicPrefix+1)
	}
	cfg := Config{Brokers: addrs, TopicPrefix: strings.Repeat("p", maxTopicPrefix)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := provider(t, addrs, func(c *Config) { c.TopicPrefix = cfg.TopicPrefix })
	id := changelog.BucketLogID{TableID: math.MaxInt64, Partitioned: true, PartitionID: math.MaxInt64, Bucket: math.MaxInt32}
	if err := id.Validate(); err != nil {
		t.Fatal(err)
	}
	if topic := p.Topic(id); len(topic) != 249 {
		t.Fatalf("the longest topic name has %d characters, want 249", len(topic))
	}
}
