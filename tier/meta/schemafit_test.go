package meta_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/thawdb/thaw/bulkload"
	"github.com/thawdb/thaw/kv"
	"github.com/thawdb/thaw/tier/meta"
)

// TestWidestSchemaFitsOneRequest: the widest schema kv accepts (kv.MaxColumns
// columns whose names and types take kv.MaxSchemaText bytes as JSON writes
// them, in names of plain letters, control characters, quotes or U+2028)
// gives a table record and a bulk-load record of 4096 buckets (which holds
// the schema again) that fit one etcd request (1.5 MiB) together: the
// activation of a load writes both at once. kv counted raw bytes, and names
// of control characters, six bytes each in JSON, passed kv and then made
// every fence write of the load too large for etcd.
func TestWidestSchemaFitsOneRequest(t *testing.T) {
	const etcdRequest = 3 << 19 // 1.5 MiB
	// wide fills kv.MaxColumns columns' names with unit, unitLen bytes of
	// the budget each.
	wide := func(unit string, unitLen int) kv.TableSchema {
		s := kv.TableSchema{PrimaryKey: []string{"id"}, Buckets: kv.MaxBuckets}
		s.Columns = append(s.Columns, kv.Column{Name: "id", Type: kv.Type{Kind: kv.KindBigInt}})
		per := (kv.MaxSchemaText - len("idBIGINT")) / (kv.MaxColumns - 1)
		for i := 1; i < kv.MaxColumns; i++ {
			prefix := fmt.Sprintf("c%04d", i)
			s.Columns = append(s.Columns, kv.Column{Name: prefix + strings.Repeat(unit, (per-len("INT")-len(prefix))/unitLen),
				Type: kv.Type{Kind: kv.KindInt}, Nullable: true})
		}
		return s
	}
	fits := func(t *testing.T, tbl *kv.Table) {
		t.Helper()
		rec, err := meta.Marshal(meta.TableRecord{Version: 1, ID: math.MaxInt64, Database: strings.Repeat("d", kv.MaxNameLen),
			Name: strings.Repeat("t", kv.MaxNameLen), Schema: tbl.Schema(), ReplicationFactor: 3, RemoteDataDir: "s3://bucket/" + strings.Repeat("p", 200),
			DataState: meta.Loading, BulkLoadID: "0f8fad5b-d9cb-469f-a165-70867728950e", CreatedMs: math.MaxInt64, ModifiedMs: math.MaxInt64})
		if err != nil {
			t.Fatalf("table record: %v", err)
		}
		ids := make([]int64, kv.MaxBuckets)
		for i := range ids {
			ids[i] = math.MaxInt64
		}
		reason := bulkload.TargetNotEmpty
		brec, err := bulkload.EncodeRecord(bulkload.Record{
			TxnID: "0f8fad5b-d9cb-469f-a165-70867728950e", State: bulkload.Aborted, CallerToken: strings.Repeat("k", 256),
			Target: bulkload.Target{Database: "d", Table: "t"}, TableID: 1, Creator: bulkload.Principal{Type: "User", Name: strings.Repeat("u", 200)},
			RemoteDataDir: "s3://bucket/" + strings.Repeat("p", 200), Schema: mustJSON(t, tbl.Schema()), Buckets: kv.MaxBuckets, Bucketing: "fluss",
			SnapshotIDs: ids, CreatedMs: 1, UpdatedMs: math.MaxInt64, BuildDeadlineMs: math.MaxInt64, ResultExpireMs: math.MaxInt64,
			AbortReason: &reason, AbortMessage: strings.Repeat("m", 64<<10),
		})
		if err != nil {
			t.Fatalf("bulk-load record: %v", err)
		}
		if n := len(rec) + len(brec); n > etcdRequest-64<<10 {
			t.Errorf("table record %d + bulk-load record %d = %d bytes, over etcd's request limit less 64 KiB", len(rec), len(brec), n)
		}
	}
	for name, unit := range map[string]string{"letters": "x", "control characters": "\x01", "quotes": `"`, "U+2028": "\u2028"} {
		t.Run(name, func(t *testing.T) {
			// Names as long as the budget in JSON: taken, and they fit.
			tbl, err := kv.NewTable(wide(unit, len(mustJSON(t, unit))-2))
			if err != nil {
				t.Fatal(err)
			}
			fits(t, tbl)
			// As long in raw bytes: refused, or they fit.
			if tbl, err := kv.NewTable(wide(unit, len(unit))); err == nil {
				fits(t, tbl)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
