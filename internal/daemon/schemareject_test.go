package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/triggers/kafka"
)

// reservedColLake: lake.bad has a column "__meta", which the tier refuses
// (reserved prefix): the schema can never map.
type reservedColLake struct{ describeOnly }

func (reservedColLake) Describe(_ context.Context, name string) (*lake.TableInfo, error) {
	s := lake.SchemaInfo{ID: 0, Fields: []lake.FieldInfo{
		{ID: 1, Name: "id", Type: "long", Required: true},
		{ID: 2, Name: "__meta", Type: "string"},
	}, IdentifierFields: []string{"id"}}
	return &lake.TableInfo{Name: name, FormatVersion: 2, Schema: s, Schemas: []lake.SchemaInfo{s},
		Spec: lake.PartitionSpecInfo{}, Specs: []lake.PartitionSpecInfo{{}}}, nil
}

// TestSchemaErrorRejected: a control event for a policy whose lake schema
// the tier can never take (a reserved column name) is rejected, not
// retried. The schema error wraps its cause too, and the handler took
// such an error for several policies' joined errors, one of them (the
// kv cause) retriable: it retried the event for ever, and every event
// behind it in its Kafka partition waited. A reconcile of all policies
// still rejects only if every policy's error is terminal.
func TestSchemaErrorRejected(t *testing.T) {
	p, err := promoter.New(promoter.Config{
		Policies: []*policies.Policy{eventPolicy(t, "bad", "bad", "{onRequest: true}")},
		Lakes:    map[string]promoter.Lake{"default": reservedColLake{}},
		Tier:     noTier{}, BulkLoad: noBulkLoader{}, Ledger: noLedger{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, rerr := p.ReconcilePolicy(t.Context(), "bad"); !errors.Is(rerr, promoter.ErrSchema) || promoter.IsRetriable(rerr) {
		t.Fatalf("reconcile: %v", rerr)
	}
	h := controlHandler(p, slog.New(slog.DiscardHandler))
	err = h(t.Context(), kafka.Event{Version: 1, Type: kafka.TypeReconcile, Policy: "bad"})
	if !errors.Is(err, kafka.ErrRejected) {
		t.Errorf("reconcile event of a policy whose lake schema cannot map: %v, want it rejected", err)
	}
	// Several policies: rejected only when every one failed for good.
	terminal, transient := fmt.Errorf("%w: x", promoter.ErrSchema), errors.New("etcd unavailable")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&promoter.PolicyErrors{Errs: []error{terminal, terminal}}, true},
		{&promoter.PolicyErrors{Errs: []error{terminal, transient}}, false},
		{fmt.Errorf("reconcile: %w", &promoter.PolicyErrors{Errs: []error{transient}}), false},
		{fmt.Errorf("%w: policy p: %w", promoter.ErrSchema, transient), true},
		{transient, false},
	} {
		if got := rejects(c.err); got != c.want {
			t.Errorf("rejects(%v) = %v", c.err, got)
		}
	}
}
