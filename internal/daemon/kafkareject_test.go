package daemon

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/triggers/kafka"
)

// fakeLakeGoneFlaky: lake.gone does not exist (terminal); lake.flaky's
// catalog is unreachable for now (transient). A fake: the failure of a
// catalog that cannot be reached is what it stands for.
type fakeLakeGoneFlaky struct{ describeOnly }

// describeOnly is the part of a fake promoter.Lake that only describes
// tables: the rest is never called.
type describeOnly struct{}

func (describeOnly) Partitions(context.Context, string, *int64) ([]lake.PartitionStats, error) {
	return nil, errors.New("unused")
}
func (describeOnly) Scan(context.Context, string, lake.ScanOptions) (*arrow.Schema, iter.Seq2[arrow.RecordBatch, error], error) {
	return nil, nil, errors.New("unused")
}
func (describeOnly) RewrittenFiles(context.Context, string, lake.ScanOptions) (int, error) {
	return 0, errors.New("unused")
}

func (fakeLakeGoneFlaky) Describe(_ context.Context, name string) (*lake.TableInfo, error) {
	if name == "lake.gone" {
		return nil, fmt.Errorf("%w: table %s", lake.ErrNotFound, name)
	}
	return nil, errors.New("dial tcp 10.0.0.1:8181: connect: connection refused")
}

type noTier struct{ promoter.Tier }
type noBulkLoader struct{ promoter.BulkLoader }
type noLedger struct{ promoter.Ledger }

func eventPolicy(t *testing.T, name, table string, triggers string) *policies.Policy {
	doc := fmt.Sprintf(`apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata:
  name: %s
spec:
  source: {catalog: default, table: lake.%s}
  target: {database: shop, table: %s, buckets: 2}
  triggers: %s
`, name, table, table, triggers)
	ps, err := policies.Parse([]byte(doc), name+".yaml")
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// TestReconcileAllTransientNotMaskedByTerminal: a reconcile-all event whose
// policies fail, one for good (its lake table is gone) and one for now
// (the catalog is unreachable), is retried, not rejected: the handler
// rejected it (the trigger then committed it and never retried the
// reconcile that failed for a reason that may pass). With only the
// terminal failure it is rejected.
func TestReconcileAllTransientNotMaskedByTerminal(t *testing.T) {
	p, err := promoter.New(promoter.Config{
		Policies: []*policies.Policy{
			eventPolicy(t, "gone", "gone", "{onRequest: true}"),
			eventPolicy(t, "flaky", "flaky", "{onRequest: true}"),
		},
		Lakes:    map[string]promoter.Lake{"default": fakeLakeGoneFlaky{}},
		Tier:     noTier{},
		BulkLoad: noBulkLoader{},
		Ledger:   noLedger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := controlHandler(p, slog.New(slog.DiscardHandler))
	err = h(t.Context(), kafka.Event{Version: 1, Type: kafka.TypeReconcile})
	if err == nil || errors.Is(err, kafka.ErrRejected) {
		t.Errorf("reconcile-all event: %v, want a retried error (policy flaky failed for a reason that may pass)", err)
	}
	err = h(t.Context(), kafka.Event{Version: 1, Type: kafka.TypeReconcile, Policy: "gone"})
	if !errors.Is(err, kafka.ErrRejected) {
		t.Errorf("reconcile of policy gone: %v, want it rejected", err)
	}
}
