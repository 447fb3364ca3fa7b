package kafka

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAbortedTransactionNotHandled: an event a producer wrote in a Kafka
// transaction it then aborted never happened, and is not handled; the
// committed events around it are (franz-go reads uncommitted records
// unless told otherwise).
func TestAbortedTransactionNotHandled(t *testing.T) {
	brokers := cluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("lake-writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := t.Context()
	produce(t, brokers, 0, promote("before"))
	for _, end := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		name := map[kgo.TransactionEndTry]string{kgo.TryAbort: "aborted", kgo.TryCommit: "committed"}[end]
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(promote(name))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	produce(t, brokers, 0, promote("after"))
	rec := newRecorder(nil)
	start(t, testConfig(brokers, rec.handle, slog.New(slog.DiscardHandler), prometheus.NewRegistry()))
	rec.waitFor(t, 3)
	time.Sleep(500 * time.Millisecond) // an aborted event handled late would show
	var got []string
	for _, e := range rec.events() {
		got = append(got, e.Policy)
	}
	if len(got) != 3 || got[0] != "before" || got[1] != "committed" || got[2] != "after" {
		t.Fatalf("handled %v, want [before committed after]", got)
	}
}
