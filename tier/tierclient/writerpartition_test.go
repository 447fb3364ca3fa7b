package tierclient_test

import (
	"errors"
	"testing"

	"github.com/thawdb/thaw/internal/daemon"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/tierclient"
)

// TestWriterInvalidRowCreatesNoPartition: a Writer.Write of a row the
// schema refuses created its partition (routing looks only at the
// partition columns) before the row failed: a loader meeting bad input
// left empty partitions named after it. Client.Upsert checked first.
func TestWriterInvalidRowCreatesNoPartition(t *testing.T) {
	e := startTier(t, daemon.EmbeddedConfig{TabletServers: 1})
	c := newClient(t, e.HostPort(), tierclient.WithCreatePartitions(true))
	schema := kv.TableSchema{
		Columns: []kv.Column{
			{Name: "dt", Type: kv.Type{Kind: kv.KindString}},
			{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}},
			{Name: "v", Type: kv.Type{Kind: kv.KindString}},
		},
		PrimaryKey:    []string{"dt", "id"},
		PartitionKeys: []string{"dt"},
		Buckets:       2,
	}
	target, _ := createTable(t, c, "parts", schema, 0)
	// Client.Upsert: an invalid row creates nothing.
	if err := c.Upsert(t.Context(), target, []kv.Row{{"2027-01-01", int64(1), nil}}); err == nil {
		t.Fatal("upsert of an invalid row succeeded")
	}
	if names, _ := c.Partitions(t.Context(), "db", "parts"); len(names) != 0 {
		t.Fatalf("Upsert created partitions %v", names)
	}
	w, err := c.NewWriter(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	var re *kv.RowError
	if err := w.Write(t.Context(), kv.Row{"2027-01-02", int64(1), nil}); !errors.As(err, &re) { // v is NOT NULL
		t.Fatalf("write of an invalid row: %v", err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if names, _ := c.Partitions(t.Context(), "db", "parts"); len(names) != 0 {
		t.Fatalf("Writer.Write of a row rejected as invalid created partitions %v", names)
	}
}
