package kafkalog

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

func precreate(t *testing.T, p *Provider, topic string, parts int32, cfg map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
	for k, v := range cfg {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), p.cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatal(err, resp)
	}
}

// TestExistingTopicSettingsChecked: Open took an existing topic whatever
// its settings (one a broker auto-created, an operator's, another
// config's), and Kafka's retention then deleted records the tier had not
// truncated (the log became corrupt, the records lost), or a small
// max.message.bytes refused every large batch. Open refuses such a topic
// (ErrTopicSettings, naming what is wrong); one with the tier's settings
// is taken. A topic of several partitions fails at once, not after every
// retry (it took 15 s).
func TestExistingTopicSettingsChecked(t *testing.T) {
	p := provider(t, brokers(t, 1))
	good := map[string]string{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "100000000"}
	for i, cfg := range []map[string]string{
		{"retention.ms": "60000", "max.message.bytes": "1000"},
		{"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "100000000"},
		{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "1000000", "max.message.bytes": "100000000"},
		{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "1000"},
		nil,
	} {
		id := changelog.BucketLogID{TableID: 9, Bucket: int32(i)}
		precreate(t, p, p.Topic(id), 1, cfg)
		if l, err := p.Open(t.Context(), id); !errors.Is(err, ErrTopicSettings) {
			if err == nil {
				_ = l.Close()
			}
			t.Errorf("Open of a topic with %v: %v, want ErrTopicSettings", cfg, err)
		}
	}
	id := changelog.BucketLogID{TableID: 9, Bucket: 10}
	precreate(t, p, p.Topic(id), 1, good)
	l := open(t, p, id)
	appendN(t, l, 0, 2)

	id = changelog.BucketLogID{TableID: 9, Bucket: 11}
	precreate(t, p, p.Topic(id), 3, good)
	l = open(t, p, id)
	st := time.Now()
	if _, _, err := l.Offsets(t.Context()); !errors.Is(err, ErrTopicSettings) || time.Since(st) > 10*time.Second {
		t.Fatalf("a topic of 3 partitions: %v after %v; want ErrTopicSettings, at once", err, time.Since(st))
	}
}
