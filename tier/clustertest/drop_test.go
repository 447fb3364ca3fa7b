package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
)

// TestDropDeletesChangelogs: dropping a table deletes its buckets' logs,
// on the local segment log (the directories under {data_dir}/changelog)
// and on the Kafka changelog (the topics), once the replicas have closed.
func TestDropDeletesChangelogs(t *testing.T) {
	for _, kafka := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "kafka"}[kafka], func(t *testing.T) {
			var dataDir string
			var brokers []string
			if kafka {
				k, err := kfake.NewCluster(kfake.NumBrokers(1))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(k.Close)
				brokers = k.ListenAddrs()
			}
			cl := startCluster(t, func(c *daemon.EmbeddedConfig) {
				dataDir = c.DataDir
				if kafka {
					c.Changelog.Kafka = &daemon.KafkaChangelogOptions{Brokers: brokers, PollInterval: 50 * time.Millisecond}
				}
			})
			ctx := t.Context()
			cl.createOrders(ctx)
			if err := cl.c.Upsert(ctx, target(dayOne), []kv.Row{order(dayOne, 1, "x", 1)}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{dayOne, dayTwo} {
				eventually(t, "replicated "+p, func(ctx context.Context) error { return cl.replicated(ctx, p, 3) })
			}
			loc, err := cl.locations(ctx, dayOne)
			if err != nil {
				t.Fatal(err)
			}
			table := loc.GetTargetId().GetTableId()
			logs := func(ctx context.Context) ([]string, error) {
				if kafka {
					return topics(ctx, brokers, fmt.Sprintf("thaw.changelog.t%d.", table))
				}
				ents, err := os.ReadDir(filepath.Join(dataDir, "changelog"))
				var names []string
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), fmt.Sprintf("t%d-", table)) {
						names = append(names, e.Name())
					}
				}
				return names, err
			}
			// Every bucket of both partitions has a log once the tablet
			// servers have opened them, then none after the drop.
			eventually(t, "a log per bucket", func(ctx context.Context) error {
				got, err := logs(ctx)
				if err == nil && len(got) != 2*buckets {
					err = fmt.Errorf("logs %v, want %d", got, 2*buckets)
				}
				return err
			})
			if err := cl.c.DropTable(ctx, db, orders); err != nil {
				t.Fatal(err)
			}
			eventually(t, "logs deleted", func(ctx context.Context) error {
				got, err := logs(ctx)
				if err == nil && len(got) > 0 {
					err = fmt.Errorf("still there: %v", got)
				}
				return err
			})
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
