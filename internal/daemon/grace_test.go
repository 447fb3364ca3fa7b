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
	"github.com/thawdb/thaw/tier/meta"
)

// TestCoordinatorAwaitsServers: a tier restarted whole, its coordinator
// leading before its tablet servers register again. With the server grace
// the coordinator keeps the replicas of the servers its assignments name
// (moving only leadership to a server that is back) until they register,
// or until the grace ends; without it, its first round with one server
// back drops the others' replicas.
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
			if got := replicaSets(t, e); got != strings.Repeat("ts-1,ts-2,ts-3 ", 4) {
				t.Fatalf("placed: %q", got)
			}

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
			// Rounds with ts-1 back have run once ts-1 leads every bucket.
			retry(t, "ts-1 leads every bucket", func() error {
				if got := leaders(t, e); got != strings.Repeat("ts-1 ", 4) {
					return fmt.Errorf("leaders %q", got)
				}
				return nil
			})
			retry(t, "replicas "+tc.want, func() error {
				if got := replicaSets(t, e); got != strings.Repeat(tc.want+" ", 4) {
					return fmt.Errorf("replicas %q", got)
				}
				return nil
			})
			if tc.grace == time.Minute {
				// Still kept a moment later: the rounds do not drop them.
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
		})
	}
}

// buckets returns what f says of each bucket of every assignment,
// space-separated.
func buckets(t *testing.T, e *Embedded, f func(meta.BucketAssignment) string) string {
	t.Helper()
	as, err := e.Meta().ListAssignments(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range as {
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
