package coordinator

import (
	"reflect"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/bulktxn"
)

// TestFenceReportNamesNotEmptyBuckets: a server's fence confirmation says
// which of its buckets hold data, so that the abort's message names those
// and not every bucket the server has.
func TestFenceReportNamesNotEmptyBuckets(t *testing.T) {
	rec := &bulkload.Record{TxnID: "0e4c7c36-6a4d-4d89-9b11-7d7f3c0f0a01"}
	var sts []*tierv1.ReplicaStatus
	for b := range 4 {
		sts = append(sts, &tierv1.ReplicaStatus{
			Bucket: int32(b), State: tierv1.ReplicaState_REPLICA_STATE_READY, DataState: tierv1.DataState_DATA_STATE_LOADING,
			BulkLoadId: rec.TxnID, Empty: b != 2, LogEndOffset: map[bool]int64{true: 7}[b == 2],
		})
	}
	got := roundReport("fence", 3, "ts-1", []int{0, 1, 2, 3}, rec, sts)
	want := bulktxn.FenceReport{Round: 3, Server: "ts-1", Buckets: []int{0, 1, 2, 3}, Empty: false, NotEmpty: []int{2}, LogEnd: 7}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("report %+v, want %+v", got, want)
	}
}
