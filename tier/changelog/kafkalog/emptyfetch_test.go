package kafkalog

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestEmptyFetchesOfAFreshHandle: fetches that return no record below
// the high watermark are retried at most maxEmptyFetches times in a row,
// also by a handle not yet anchored (it spun without bound: 100,000
// fetches in 2 s, until the caller's deadline), which then fails saying so.
func TestEmptyFetchesOfAFreshHandle(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 50}
	w := open(t, provider(t, addrs), id)
	appendN(t, w, 0, 1, 1, 1)
	var fetches atomic.Int32
	c.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
		return fetchAnswer(r, func(sp *kmsg.FetchResponseTopicPartition) { sp.HighWatermark, sp.LogStartOffset = 3, 0 }), nil, true
	})
	fresh := open(t, provider(t, addrs), id)
	// Only a guard against hanging: the fetch count and the message are
	// what is checked (a loaded machine takes ~1 s for 100 fetches).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, _, err = fresh.Offsets(ctx)
	if n := fetches.Load(); n > 2*maxEmptyFetches || err == nil || !strings.Contains(err.Error(), "no records from Kafka offset 0 although the high watermark is 3") {
		t.Fatalf("a fresh handle met empty fetches: %v after %d fetches (at most %d in a row)", err, n, maxEmptyFetches)
	}
}
