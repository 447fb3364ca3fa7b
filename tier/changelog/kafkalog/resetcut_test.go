package kafkalog

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/tier/changelog"
)

// TestResetCutShortLeavesEmptyLog: ResetTo of an emptied log writes its
// reset marker and then deletes the records below it. When the deletion
// fails (or the process dies between the two steps), the log is still
// empty at the new offset: Offsets says [offset, offset) on the writing
// handle and on a restarted one, and a retried ResetTo succeeds.
func TestResetCutShortLeavesEmptyLog(t *testing.T) {
	c := faultCluster(t)
	addrs := c.ListenAddrs()
	id := changelog.BucketLogID{TableID: 41}
	l := open(t, provider(t, addrs), id)
	ctx := t.Context()
	appendN(t, l, 0, 4)
	if err := l.TruncateBefore(ctx, 4); err != nil { // emptied: [4, 4)
		t.Fatal(err)
	}
	offsets(t, l, 4, 4)

	// The DeleteRecords of the reset fails once (as if the tablet server
	// crashed right after producing the reset marker).
	c.ControlKey(kmsg.DeleteRecords.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		req := r.(*kmsg.DeleteRecordsRequest)
		resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewDeleteRecordsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewDeleteRecordsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.PolicyViolation.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if err := l.ResetTo(ctx, 1000); err == nil {
		t.Fatal("reset with a failing delete succeeded")
	}

	offsets(t, l, 1000, 1000) // the handle that wrote the marker agrees

	// A restarted tablet server (a fresh provider and handle).
	fresh := open(t, provider(t, addrs), id)
	s, e, err := fresh.Offsets(ctx)
	t.Logf("after the interrupted reset: Offsets = [%d, %d), %v", s, e, err)
	if err == nil && s < e {
		recs, rerr := fresh.Read(ctx, s, 1<<20)
		t.Logf("Read(%d) = %d records, %v", s, len(recs), rerr)
	}
	rerr := fresh.ResetTo(ctx, 1000)
	t.Logf("ResetTo(1000) again: %v", rerr)
	if err != nil || s != e {
		t.Errorf("the log holds no record but Offsets reports [%d, %d) (%v); want [1000, 1000) or [4, 4)", s, e, err)
	}
	if rerr != nil {
		t.Errorf("retrying the reset: %v; want nil", rerr)
	}
}
