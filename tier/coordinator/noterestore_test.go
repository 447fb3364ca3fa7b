package coordinator

import (
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/thawdb/thaw/bulkload"
	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/testlog"
)

// TestNoteRestoreIgnoresUnknownBuckets: a RestoreSnapshot reply naming a
// bucket the load does not have (negative, or past its buckets: a
// tablet's bug or a version skew) is logged and ignored; the coordinator
// indexed its snapshot ids with it (a negative one panicked the runner,
// and with it the coordinator). A reply of a real bucket is noted.
func TestNoteRestoreIgnoresUnknownBuckets(t *testing.T) {
	var logs testlog.Buffer
	r := &runner{rec: bulkload.Record{SnapshotIDs: []int64{5, 6}}, log: slog.New(slog.NewTextHandler(&logs, nil)),
		restored: map[replicaKey]bool{}, progress: map[replicaKey]*tierv1.ReplicaStatus{}}
	ready := tierv1.ReplicaState_REPLICA_STATE_READY
	r.noteRestore([]*tierv1.ReplicaStatus{
		{Bucket: -1, ServerId: "s1", State: ready, LatestSnapshotId: proto.Int64(9)},
		{Bucket: 2, ServerId: "s1", State: ready, LatestSnapshotId: proto.Int64(9)},
		{Bucket: 1, ServerId: "s2", State: ready, LatestSnapshotId: proto.Int64(6)},
	})
	if len(r.progress) != 1 || len(r.restored) != 1 || !r.restored[replicaKey{1, "s2"}] {
		t.Fatalf("progress %v, restored %v: want bucket 1 on s2 only", r.progress, r.restored)
	}
	if n := strings.Count(logs.String(), "ignores a restore report of a bucket the load does not have"); n != 2 {
		t.Fatalf("%d warnings for the 2 unknown buckets:\n%s", n, logs.String())
	}
}
