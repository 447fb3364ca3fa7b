package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/kv"
)

// TestDropDeletesChangelogs: dropping a table deletes its buckets' logs,
// on the local segment log (the directories under {data_dir}/changelog)
// and on the Kafka changelog (the topics), once the replicas have closed.
func TestDropDeletesChangelogs(t *testing.T) {
	eachDropChangelog(t, func(t *testing.T, cl *cluster, logs logLister) {
		ctx := t.Context()
		if err := cl.c.DropTable(ctx, db, orders); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dayOne, dayTwo} {
			eventually(t, "logs of "+p+" deleted", func(ctx context.Context) error { return logs.count(ctx, p, 0) })
		}
	})
}

// TestSweepDeletesOrphanedChangelogs: a partition dropped while every
// tablet server is down leaves its logs behind (no replica closes to
// delete them); the servers' changelog sweep deletes them when they come
// back, and keeps the logs of the partition that still exists.
func TestSweepDeletesOrphanedChangelogs(t *testing.T) {
	eachDropChangelog(t, func(t *testing.T, cl *cluster, logs logLister) {
		ctx := t.Context()
		servers := cl.e.Tablets()
		for _, id := range servers {
			if err := cl.e.StopTablet(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cl.coord.DropPartition(ctx, connect.NewRequest(&tierv1.DropPartitionRequest{
			Path: &tierv1.TablePath{Database: db, Table: orders}, Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: dayOne},
		})); err != nil {
			t.Fatal(err)
		}
		if err := logs.count(ctx, dayOne, buckets); err != nil {
			t.Fatalf("with every tablet server down: %v", err)
		}
		for _, id := range servers {
			if err := cl.e.StartTablet(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "logs of "+dayOne+" swept", func(ctx context.Context) error { return logs.count(ctx, dayOne, 0) })
		eventually(t, dayTwo+" replicated again", func(ctx context.Context) error { return cl.replicated(ctx, dayTwo, 3) })
		if err := logs.count(ctx, dayTwo, buckets); err != nil {
			t.Fatalf("the live partition: %v", err)
		}
		row := order(dayTwo, 2, "y", 2)
		eventually(t, "the live partition's row", func(ctx context.Context) error {
			return cl.expectRows(ctx, model{keyOf(row): render(row)})
		})
		var swept float64
		for _, id := range servers {
			v, _, err := metricvalue.Value(cl.e.Gatherer(), "thaw_tablet_changelogs_swept_total", map[string]string{"server": id})
			if err != nil {
				t.Fatal(err)
			}
			swept += v
		}
		// Every server sweeps the same logs at start (one local log serves
		// the host; the Kafka topics serve all), so most Deletes find the
		// log already gone; only the one that removed it counts.
		if swept != buckets {
			t.Errorf("thaw_tablet_changelogs_swept_total sums to %v, want %d (one per log)", swept, buckets)
		}
	})
}

// logLister counts the logs of a partition of shop.orders: directories
// under {data_dir}/changelog or Kafka topics.
type logLister struct {
	table   int64
	parts   map[string]int64 // partition name → id
	dir     string           // the local changelog's root
	brokers []string         // the Kafka changelog's
}

func (l logLister) count(ctx context.Context, partition string, want int) error {
	var names []string
	var err error
	if l.brokers != nil {
		names, err = topics(ctx, l.brokers, fmt.Sprintf("thaw.changelog.t%d.p%d.", l.table, l.parts[partition]))
	} else {
		var ents []os.DirEntry
		ents, err = os.ReadDir(l.dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("t%d-p%d-", l.table, l.parts[partition])) {
				names = append(names, e.Name())
			}
		}
	}
	if err == nil && len(names) != want {
		err = fmt.Errorf("logs of %s: %v, want %d", partition, names, want)
	}
	return err
}

// eachDropChangelog runs test on the local and on the Kafka changelog, on
// a cluster where shop.orders has a row in each partition and every bucket
// of both partitions has its log.
func eachDropChangelog(t *testing.T, test func(*testing.T, *cluster, logLister)) {
	for _, kafka := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "kafka"}[kafka], func(t *testing.T) {
			var logs logLister
			if kafka {
				k, err := kfake.NewCluster(kfake.NumBrokers(1))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(k.Close)
				logs.brokers = k.ListenAddrs()
			}
			cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
				logs.dir = filepath.Join(c.DataDir, "changelog")
				if kafka {
					c.Changelog.Kafka = &daemon.KafkaChangelogOptions{Brokers: logs.brokers, PollInterval: 50 * time.Millisecond}
				}
			})
			ctx := t.Context()
			cl.createOrders(ctx)
			logs.parts = map[string]int64{}
			for i, p := range []string{dayOne, dayTwo} {
				if err := cl.c.Upsert(ctx, target(p), []kv.Row{order(p, int64(i+1), "xy"[i:i+1], int32(i+1))}); err != nil {
					t.Fatal(err)
				}
				eventually(t, "replicated "+p, func(ctx context.Context) error { return cl.replicated(ctx, p, 3) })
				loc, err := cl.locations(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				logs.table, logs.parts[p] = loc.GetTargetId().GetTableId(), loc.GetTargetId().GetPartitionId()
			}
			for _, p := range []string{dayOne, dayTwo} {
				eventually(t, "a log per bucket of "+p, func(ctx context.Context) error { return logs.count(ctx, p, buckets) })
			}
			test(t, cl, logs)
		})
	}
}

// topics lists the Kafka topics whose names start with prefix.
func topics(ctx context.Context, brokers []string, prefix string) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range resp.Topics {
		if t.Topic != nil && strings.HasPrefix(*t.Topic, prefix) {
			names = append(names, *t.Topic)
		}
	}
	return names, nil
}

// TestDropDeletesData: dropping a partition deletes its snapshots from
// object storage (the leading coordinator's dropped-data pass) and keeps
// the other partition's, which stays readable; the drop's record is
// forgotten once a pass after the grace finds nothing left. Dropping the
// table then deletes the rest.
func TestDropDeletesData(t *testing.T) {
	var remote string
	cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
		remote = filepath.Join(c.DataDir, "remote")
		c.Coordinator.DroppedDataCleanInterval = time.Second
		c.Coordinator.DroppedDataGrace = time.Second
	})
	ctx := t.Context()
	cl.createOrders(ctx)
	dirs := map[string]string{}
	var tableDir string
	for i, p := range []string{dayOne, dayTwo} {
		if err := cl.c.Upsert(ctx, target(p), []kv.Row{order(p, int64(i+1), "xy"[i:i+1], int32(i+1))}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "replicated "+p, func(ctx context.Context) error { return cl.replicated(ctx, p, 3) })
		cl.snapshotAll(ctx, p)
		loc, err := cl.locations(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		id := loc.GetTargetId()
		tableDir = filepath.Join(remote, "kv", db, fmt.Sprintf("%s-%d", orders, id.GetTableId()))
		dirs[p] = filepath.Join(tableDir, fmt.Sprintf("%s-p%d", p, id.GetPartitionId()))
	}
	files := func(dir string) int {
		n := 0
		err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return err
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return n
	}
	before := map[string]int{}
	for p, dir := range dirs {
		if before[p] = files(dir); before[p] == 0 {
			t.Fatalf("no snapshot files of %s under %s", p, dir)
		}
	}
	dropped := func(want int) func(context.Context) error {
		return func(ctx context.Context) error {
			ds, err := cl.e.Meta().ListDroppedData(ctx)
			if err == nil && len(ds) != want {
				err = fmt.Errorf("%d dropped targets remembered, want %d", len(ds), want)
			}
			return err
		}
	}

	if _, err := cl.coord.DropPartition(ctx, connect.NewRequest(&tierv1.DropPartitionRequest{
		Path: &tierv1.TablePath{Database: db, Table: orders}, Partition: &tierv1.DropPartitionRequest_PartitionName{PartitionName: dayOne},
	})); err != nil {
		t.Fatal(err)
	}
	eventually(t, dayOne+"'s data deleted", func(context.Context) error {
		if n := files(dirs[dayOne]); n > 0 {
			return fmt.Errorf("%d files left under %s", n, dirs[dayOne])
		}
		return nil
	})
	eventually(t, "the drop forgotten", dropped(0))
	if n := files(dirs[dayTwo]); n != before[dayTwo] {
		t.Fatalf("%s: %d files, %d before the drop of %s", dayTwo, n, before[dayTwo], dayOne)
	}
	row := order(dayTwo, 2, "y", 2)
	if err := cl.expectRows(ctx, model{keyOf(row): render(row)}); err != nil {
		t.Fatal(err)
	}
	var deleted float64
	for _, id := range []string{"coord-1", "coord-2", "coord-3"} {
		v, _, err := metricvalue.Value(cl.e.Gatherer(), "thaw_coordinator_dropped_files_deleted_total", map[string]string{"coordinator": id})
		if err != nil {
			t.Fatal(err)
		}
		deleted += v
	}
	if deleted != float64(before[dayOne]) {
		t.Errorf("thaw_coordinator_dropped_files_deleted_total = %v, want %d", deleted, before[dayOne])
	}

	if err := cl.c.DropTable(ctx, db, orders); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the table's data deleted", func(context.Context) error {
		if n := files(tableDir); n > 0 {
			return fmt.Errorf("%d files left under %s", n, tableDir)
		}
		return nil
	})
	eventually(t, "the table's drop forgotten", dropped(0))
}
