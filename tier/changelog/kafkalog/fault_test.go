package kafkalog

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// faultCluster starts three kfake brokers and returns the cluster too, for
// injecting faults.
func faultCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// failFetches makes the next n fetches fail with code (a broker-side
// error) or, with code 0, with a closed connection.
func failFetches(c *kfake.Cluster, n int32, code int16) *atomic.Int32 {
	var seen atomic.Int32
	c.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if seen.Add(1) >= n {
			c.DropControl()
		} else {
			c.KeepControl()
		}
		if code == 0 {
			return nil, errors.New("injected: connection dropped"), true
		}
		return fetchAnswer(r, func(sp *kmsg.FetchResponseTopicPartition) { sp.ErrorCode = code }), nil, true
	})
	return &seen
}

// fetchAnswer is a fetch response to r with no records: each requested
// partition as set sets it.
func fetchAnswer(r kmsg.Request, set func(*kmsg.FetchResponseTopicPartition)) *kmsg.FetchResponse {
	req := r.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			set(&sp)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// TestBrokerFaults: the partition's leadership moves, fetches answer
// NOT_LEADER_OR_FOLLOWER or lose their connection: a handle looks the
// leader up again and reads on. A fault that retrying cannot fix is
// returned at once, and the handle works again once it is gone.
func TestBrokerFaults(t *testing.T) {
	c := faultCluster(t)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 11}
	w := open(t, provider(t, addrs), id)
	p := provider(t, addrs)
	r := open(t, p, id)
	want := appendN(t, w, 0, 2, 2)
	readAll(t, r, 0, 1, want) // r knows the leader now

	topic := p.Topic(id)
	leader := c.LeaderFor(topic, 0)
	if err := c.MoveTopicPartition(topic, 0, (leader+1)%3); err != nil {
		t.Fatal(err)
	}
	want = append(want, appendN(t, w, 4, 3)...)
	offsets(t, r, 0, 7)
	readAll(t, r, 0, 1, want)

	seen := failFetches(c, 3, kerr.NotLeaderForPartition.Code)
	want = append(want, appendN(t, w, 7, 1)...)
	offsets(t, r, 0, 8)
	if seen.Load() < 3 {
		t.Fatalf("%d fetches failed, want 3", seen.Load())
	}
	seen = failFetches(c, 2, 0)
	readAll(t, open(t, p, id), 0, 1<<20, want) // a new handle: no stash to read from
	if seen.Load() < 2 {
		t.Fatalf("%d connections dropped, want 2", seen.Load())
	}

	failFetches(c, 1, kerr.TopicAuthorizationFailed.Code)
	fresh := open(t, p, id)
	if _, _, err := fresh.Offsets(t.Context()); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("offsets under an authorization failure: %v", err)
	}
	offsets(t, fresh, 0, 8)
}

// answerDeletes makes the next DeleteTopics request get the response that
// answer fills in, without the broker deleting anything.
func answerDeletes(c *kfake.Cluster, answer func(*kmsg.DeleteTopicsResponse)) {
	c.ControlKey(kmsg.DeleteTopics.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		req := r.(*kmsg.DeleteTopicsRequest)
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		answer(resp)
		return resp, nil, true
	})
}

// TestDeleteAnswers: Delete believes the broker only when it answers for
// the one topic it asked about: an answer for no topic, for two, for
// another topic or naming none (a topic ID alone) is an error, a broker-side error code is returned, and
// none of them is taken for a deletion; the topic is still there
// afterwards.
func TestDeleteAnswers(t *testing.T) {
	c := faultCluster(t)
	p := provider(t, c.ListenAddrs())
	id := changelog.BucketLogID{TableID: 12}
	l := open(t, p, id)
	want := appendN(t, l, 0, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	topic := func(name string, code int16) kmsg.DeleteTopicsResponseTopic {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.ErrorCode = kmsg.StringPtr(name), code
		return rt
	}
	for _, tc := range []struct {
		name   string
		answer func(*kmsg.DeleteTopicsResponse)
		want   string      // in the error
		code   *kerr.Error // the error wraps it, when set
	}{
		{"no topics", func(*kmsg.DeleteTopicsResponse) {}, "answered for 0 topics", nil},
		{"two topics", func(resp *kmsg.DeleteTopicsResponse) {
			resp.Topics = append(resp.Topics, topic(p.Topic(id), 0), topic("other", 0))
		}, "answered for 2 topics", nil},
		{"another topic", func(resp *kmsg.DeleteTopicsResponse) {
			resp.Topics = append(resp.Topics, topic("other", 0))
		}, `answered for topic "other"`, nil},
		{"by topic ID only", func(resp *kmsg.DeleteTopicsResponse) {
			rt := topic("", 0)
			rt.Topic, rt.TopicID = nil, [16]byte{1}
			resp.Topics = append(resp.Topics, rt)
		}, "answered without a topic name", nil},
		{"broker error", func(resp *kmsg.DeleteTopicsResponse) {
			resp.Topics = append(resp.Topics, topic(p.Topic(id), kerr.TopicAuthorizationFailed.Code))
		}, "", kerr.TopicAuthorizationFailed},
	} {
		answerDeletes(c, tc.answer)
		deleted, err := p.Delete(t.Context(), id)
		switch {
		case err == nil || deleted:
			t.Fatalf("%s: delete returned %v, %v; want false and an error", tc.name, deleted, err)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Fatalf("%s: %v; want it to say %q", tc.name, err, tc.want)
		case tc.code != nil && !errors.Is(err, tc.code):
			t.Fatalf("%s: %v; want it to wrap %v", tc.name, err, tc.code)
		}
		r := open(t, p, id)
		readAll(t, r, 0, 1<<20, want)     // untouched
		if err := r.Close(); err != nil { // an open handle would stop the next Delete in this process
			t.Fatal(err)
		}
	}
	if deleted, err := p.Delete(t.Context(), id); err != nil || !deleted {
		t.Fatalf("delete once the broker answers properly: %v, %v; want true", deleted, err)
	}
}
