package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/gen/thaw/tier/v1/tierv1connect"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestCoordinatorAwaitsServers: a tier restarted whole, its coordinator
// leading before its tablet servers register again. With the server grace
// the coordinator keeps the replicas and the leaders of the servers its
// assignments name until they register, so the tier comes back as it was
// (no assignment is written at all); when the grace ends, or without it,
// its first round with one server back drops the others' replicas and
// leads every bucket from the one server back.
func TestCoordinatorAwaitsServers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		want  string // replicas of every bucket while only ts-1 is back
	}{
		{"kept while awaited", time.Minute, "ts-1,ts-2,ts-3"},
		{"replaced after the grace", 1500 * time.Millisecond, "ts-1"},
		{"replaced at once without grace", -1, "ts-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := EmbeddedConfig{TabletServers: 3}
			cfg.Coordinator.ServerGrace = tc.grace
			e := startTest(t, cfg)
			ctx := t.Context()
			createTable4x3(t, e)
			if got := replicaSets(t, e); got != strings.Repeat("ts-1,ts-2,ts-3 ", 4) {
				t.Fatalf("placed: %q", got)
			}
			placed := buckets(t, e, func(b meta.BucketAssignment) string { return fmt.Sprintf("%s#%d", b.Leader, b.LeaderEpoch) })
			revs := assignmentRevs(t, e)
			kept := tc.grace == time.Minute

			// The whole tier goes down; the coordinator comes back first,
			// then ts-1 alone.
			if err := e.KillCoordinator(ctx, "coord-1"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
				if err := e.KillTablet(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.StartCoordinator(ctx, "coord-1"); err != nil {
				t.Fatal(err)
			}
			retry(t, "the coordinator leads", func() error {
				_, err := e.Leader(ctx)
				return err
			})
			if err := e.StartTablet(ctx, "ts-1"); err != nil {
				t.Fatal(err)
			}
			if !kept {
				// Rounds with ts-1 back have run once ts-1 leads every
				// bucket.
				retry(t, "ts-1 leads every bucket", func() error {
					if got := leaders(t, e); got != strings.Repeat("ts-1 ", 4) {
						return fmt.Errorf("leaders %q", got)
					}
					return nil
				})
			}
			retry(t, "replicas "+tc.want, func() error {
				if got := replicaSets(t, e); got != strings.Repeat(tc.want+" ", 4) {
					return fmt.Errorf("replicas %q", got)
				}
				return nil
			})
			if kept {
				// A moment with ts-1 back changes nothing (the end of
				// the test checks that nothing was written at all).
				time.Sleep(500 * time.Millisecond)
				if got := replicaSets(t, e); got != strings.Repeat(tc.want+" ", 4) {
					t.Fatalf("replicas while awaited: %q", got)
				}
			}
			// The others come back and get (or keep) their replicas.
			for _, id := range []string{"ts-2", "ts-3"} {
				if err := e.StartTablet(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			retry(t, "every server holds every bucket", func() error {
				if got := replicaSets(t, e); got != strings.Repeat("ts-1,ts-2,ts-3 ", 4) {
					return fmt.Errorf("replicas %q", got)
				}
				return nil
			})
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := e.WaitReady(wctx); err != nil {
				t.Fatal(err)
			}
			if kept {
				// Back as it was: the same leaders and epochs, and no
				// assignment written during the restart (a replica
				// dropped and given back would have written it twice).
				if got := buckets(t, e, func(b meta.BucketAssignment) string { return fmt.Sprintf("%s#%d", b.Leader, b.LeaderEpoch) }); got != placed {
					t.Errorf("leaders after the restart %q, before %q", got, placed)
				}
				if got := assignmentRevs(t, e); got != revs {
					t.Errorf("assignments written during the restart: revisions %s, before %s", got, revs)
				}
			}
			// Every bucket takes writes and answers reads again.
			writeAndRead(t, e)
		})
	}
}

// assignments returns every assignment.
func assignments(t *testing.T, e *Embedded) []meta.Versioned[meta.Assignment] {
	t.Helper()
	as, err := e.Meta().ListAssignments(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// assignmentRevs returns the etcd revision of every assignment.
func assignmentRevs(t *testing.T, e *Embedded) string {
	var b strings.Builder
	for _, a := range assignments(t, e) {
		fmt.Fprintf(&b, "%d ", a.Rev)
	}
	return b.String()
}

// writeAndRead writes 64 rows to d.t (every bucket gets some) and reads
// them back, retrying while leaders settle.
func writeAndRead(t *testing.T, e *Embedded) {
	t.Helper()
	ctx := t.Context()
	c, err := tierclient.New(ctx, e.Address(), tierclient.WithHTTPClient(e.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	target := tierclient.Target{Database: "d", Table: "t"}
	rows := make([]kv.Row, 64)
	for i := range rows {
		rows[i] = kv.Row{int64(i)}
	}
	retry(t, "write and read every bucket", func() error {
		if err := c.Upsert(ctx, target, rows); err != nil {
			return err
		}
		got, err := c.Get(ctx, target, rows)
		if err != nil {
			return err
		}
		for i, r := range got {
			if r == nil {
				return fmt.Errorf("key %d not found", i)
			}
		}
		return nil
	})
}

// buckets returns what f says of each bucket of every assignment,
// space-separated.
func buckets(t *testing.T, e *Embedded, f func(meta.BucketAssignment) string) string {
	var b strings.Builder
	for _, a := range assignments(t, e) {
		for _, bk := range a.Value.Buckets {
			b.WriteString(f(bk) + " ")
		}
	}
	return b.String()
}

// replicaSets returns each bucket's sorted replicas.
func replicaSets(t *testing.T, e *Embedded) string {
	return buckets(t, e, func(b meta.BucketAssignment) string {
		return strings.Join(slices.Sorted(slices.Values(b.Replicas)), ",")
	})
}

// leaders returns each bucket's leader.
func leaders(t *testing.T, e *Embedded) string {
	return buckets(t, e, func(b meta.BucketAssignment) string { return b.Leader })
}

// createTable4x3 creates table d.t (4 buckets, replication factor 3) and
// returns the coordinator client it used.
func createTable4x3(t *testing.T, e *Embedded) tierv1connect.CoordinatorServiceClient {
	t.Helper()
	ctx := t.Context()
	coord := tierv1connect.NewCoordinatorServiceClient(e.HTTPClient(), e.Address())
	if _, err := coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: "d"})); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.CreateTable(ctx, connect.NewRequest(&tierv1.CreateTableRequest{
		Path: &tierv1.TablePath{Database: "d", Table: "t"}, ReplicationFactor: 3,
		Schema: &tierv1.TableSchema{Columns: []*tierv1.Column{{Name: "id", Type: "BIGINT"}}, PrimaryKey: []string{"id"}, Buckets: 4},
	})); err != nil {
		t.Fatal(err)
	}
	return coord
}
