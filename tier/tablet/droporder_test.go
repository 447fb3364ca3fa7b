package tablet_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tablet"
)

// TestDroppedLogDeletedInEitherOrder: DropTable writes the Dropping mark and
// deletes the assignment in one transaction, but the server follows them
// on two watches. When the table record's event came first, the replica
// was stopped as not servable before the target was known deleted, and
// its changelog was never deleted (only by the sweep, when enabled). The
// two halves are applied here in each order, the sweep off.
func TestDroppedLogDeletedInEitherOrder(t *testing.T) {
	for _, recordFirst := range []bool{false, true} {
		name := "assignment-first"
		if recordFirst {
			name = "record-first"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t)
			ctx := t.Context()
			ts := c.startServer("ts-1", func(cfg *tablet.Config) { cfg.ChangelogSweepInterval = -1 })
			tb := c.createTable("t", []string{"ts-1"})
			waitReady(t, ts, tb, 0, leader, 1)
			mustWrite(t, ts, tb, 0, 1, tb.upsert(t, row{"a", 1, "x"})...)
			logID := changelog.BucketLogID{TableID: tb.rec.ID, Bucket: 0}

			cur, err := c.store.GetTable(ctx, c.db, "t")
			if err != nil {
				t.Fatal(err)
			}
			rec := cur.Value
			rec.Dropping = true
			b, _ := json.Marshal(rec)
			tkey := c.store.Prefix() + "/tables/" + c.db + "/t"
			akey := c.store.Prefix() + "/assignment/" + strconv.FormatInt(tb.rec.ID, 10)
			if got, err := c.cli.Get(ctx, akey); err != nil || len(got.Kvs) != 1 {
				t.Fatalf("no assignment at %s: %v", akey, err)
			}
			steps := []func(){
				func() {
					if _, err := c.cli.Delete(ctx, akey); err != nil {
						t.Fatal(err)
					}
				},
				func() {
					if _, err := c.cli.Put(ctx, tkey, string(b)); err != nil {
						t.Fatal(err)
					}
				},
			}
			if recordFirst {
				slices.Reverse(steps)
			}
			steps[0]()
			// let the loop apply the first half and stop the replica
			eventually(t, "replica gone", func() error {
				resp, err := ts.client.ReplicaStatus(ctx, connect.NewRequest(&tierv1.ReplicaStatusRequest{Target: tb.id}))
				if err != nil {
					return err
				}
				if len(resp.Msg.Replicas) != 0 {
					return errString("still serving")
				}
				return nil
			})
			time.Sleep(200 * time.Millisecond)
			steps[1]()
			if ds, err := c.store.DroppedTargets(ctx, []meta.Target{tb.mtgt}); err != nil || len(ds) != 1 {
				t.Fatalf("metadata does not say dropped: %v %v", ds, err)
			}
			deadline := time.Now().Add(20 * time.Second) // the deletion retries with backoff
			for {
				ids, err := c.logs.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(ids, logID) {
					return // deleted, as a drop should
				}
				if time.Now().After(deadline) {
					t.Fatalf("changelog %v of the dropped table still exists 20 s after the drop (logs %v)", logID, ids)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }
