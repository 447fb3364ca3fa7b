package daemon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestLocalChangelogsKeepBucketsApart runs two thaw tablet processes'
// worth of tablet servers, each with its own local changelog (as two hosts
// without Kafka would): no bucket gets replicas on both, and a bucket
// whose only server stops waits for it instead of moving to the other
// server, which would serve the bucket's last snapshot without the writes
// since (they are in the stopped server's changelog). When the server
// comes back every row is there.
func TestLocalChangelogsKeepBucketsApart(t *testing.T) {
	tr := startTabletRoles(t, nil)
	tr.start("ts-1")
	tr.start("ts-2")
	// Each registered its own changelog.
	logOf := tr.registeredChangelogs(2)
	if !strings.HasPrefix(logOf["ts-1"], "local:") || !strings.HasPrefix(logOf["ts-2"], "local:") || logOf["ts-1"] == logOf["ts-2"] {
		t.Fatalf("changelogs registered: %q", logOf)
	}

	c := tr.client()
	tr.createTables(c, 8, map[string]int{"r1": 1, "r2": 2})
	coord := tierv1connect.NewCoordinatorServiceClient(NewHTTPClient(nil), BaseURL(tr.coordAddr))
	locations := func(table string) []*tierv1.BucketLocation {
		t.Helper()
		resp, err := coord.GetTargetLocations(tr.ctx, connect.NewRequest(&tierv1.GetTargetLocationsRequest{Target: &tierv1.TargetPath{Database: "d", Table: table}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetBuckets()
	}
	// Replication factor 2 with one server per changelog: one replica each
	// (under-replicated), never one on each server.
	on := map[string]int{}
	for _, b := range locations("r2") {
		if len(b.GetReplicas()) != 1 {
			t.Fatalf("d.r2 bucket %d has replicas %v across changelogs", b.GetBucket(), b.GetReplicas())
		}
		on[b.GetReplicas()[0]]++
	}
	if on["ts-1"] == 0 || on["ts-2"] == 0 {
		t.Fatalf("d.r2's buckets are not spread: %v", on)
	}

	target := tierclient.Target{Database: "d", Table: "r1"}
	rows := idRows(100, "v")
	retry(t, "write", func() error { return c.Upsert(tr.ctx, target, rows) })
	var onTS2 []int32
	for _, b := range locations("r1") {
		if b.GetLeaderId() == "ts-2" {
			onTS2 = append(onTS2, b.GetBucket())
		}
	}
	if len(onTS2) == 0 {
		t.Fatal("no bucket of d.r1 on ts-2")
	}

	tr.stop("ts-2")
	tr.registeredChangelogs(1)
	// Rounds of the reconciler (every 100ms) go by: ts-2's buckets stay
	// with ts-2, leaderless until it comes back.
	time.Sleep(2 * time.Second)
	for _, b := range locations("r1") {
		if slices.Contains(onTS2, b.GetBucket()) && (b.GetLeaderId() != "ts-2" || !slices.Equal(b.GetReplicas(), []string{"ts-2"}) || b.GetLeaderAddress() != "") {
			t.Fatalf("bucket %d of d.r1 moved off its changelog's server: %v", b.GetBucket(), b)
		}
	}

	tr.start("ts-2")
	retry(t, "read every row back", func() error { return readBack(tr.ctx, c, target, rows) })
}
