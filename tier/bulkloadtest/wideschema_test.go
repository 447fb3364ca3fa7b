package bulkloadtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	tierv1 "github.com/thawdb/thaw/gen/thaw/tier/v1"
	"github.com/thawdb/thaw/kv"
)

// wideSchema is itemsSchema(buckets) with extra INT columns up to
// kv.MaxColumns whose names and types take kv.MaxSchemaText bytes plus
// over.
func wideSchema(buckets, over int) *tierv1.TableSchema {
	s := itemsSchema(buckets, false)
	text := 0
	for _, c := range s.Columns {
		text += len(c.Name) + len(c.Type)
	}
	extra := kv.MaxColumns - len(s.Columns)
	per := (kv.MaxSchemaText - text) / extra
	for i := range extra {
		name := fmt.Sprintf("c%04d_", i)
		n := per - len("INT")
		if i == extra-1 {
			n = kv.MaxSchemaText - text - len("INT") + over
		}
		name += strings.Repeat("x", n-len(name))
		s.Columns = append(s.Columns, &tierv1.Column{Name: name, Type: "INT", Nullable: true})
		text += len(name) + len("INT")
	}
	return s
}

// TestWidestSchemaLoads: a table at the schema limits (kv.MaxColumns
// columns whose names and types take kv.MaxSchemaText bytes) is created,
// bulk-loaded and committed; one byte or one column more is refused at
// CreateTable. Before the limits, a schema a little wider passed
// CreateTable and Begin and made the activation write (the table record
// and the bulk-load record, which holds the schema again, in one etcd
// request) too large for etcd: the transaction stayed COMMITTING and the
// target LOADING for good (and a wider one hung Begin, holding the
// target); and a schema of 120,000 columns held the coordinator for
// minutes (its key lists were checked in quadratic time).
func TestWidestSchemaLoads(t *testing.T) {
	h := newHarness(t)
	n := h.startCoordinator("c-1")
	for _, id := range []string{"ts-1", "ts-2", "ts-3"} {
		h.startTablet(id)
	}
	ctx := t.Context()
	if _, err := n.coord.CreateDatabase(ctx, connect.NewRequest(&tierv1.CreateDatabaseRequest{Database: db, IgnoreIfExists: true})); err != nil {
		t.Fatal(err)
	}
	create := func(name string, s *tierv1.TableSchema) error {
		_, err := n.coord.CreateTable(ctx, connect.NewRequest(&tierv1.CreateTableRequest{
			Path: &tierv1.TablePath{Database: db, Table: name}, Schema: s, ReplicationFactor: 3}))
		return err
	}
	tooMany := wideSchema(2, 0)
	tooMany.Columns = append(tooMany.Columns, &tierv1.Column{Name: "one_more", Type: "INT", Nullable: true})
	huge := itemsSchema(2, false)
	for i := range 120_000 {
		huge.Columns = append(huge.Columns, &tierv1.Column{Name: fmt.Sprintf("c%d", i), Type: "INT", Nullable: true})
		huge.PrimaryKey = append(huge.PrimaryKey, fmt.Sprintf("c%d", i))
	}
	for name, s := range map[string]*tierv1.TableSchema{"text": wideSchema(2, 1), "columns": tooMany, "huge": huge} {
		start := time.Now()
		if err := create("over_"+name, s); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("a schema over the limit (%s): %v", name, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("refusing the %s schema took %v", name, d)
		}
	}

	if err := create("widest", wideSchema(2, 0)); err != nil {
		t.Fatal(err)
	}
	tp := target("widest", "")
	h.waitReady(tp)
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := begin(bctx, n, tp, "wide")
	if err != nil {
		t.Fatal(err)
	}
	info := resp.GetTargetInfo()
	rows := make([]kv.Row, 20)
	for i := range rows {
		r := make(kv.Row, kv.MaxColumns)
		r[0], r[1], r[2], r[kv.MaxColumns-1] = int64(i), fmt.Sprintf("item-%d", i), int32(i), int32(-i)
		rows[i] = r
	}
	m := h.load(info, rows)
	st, err := commit(bctx, n, info.GetHandle(), m)
	if err != nil || st.GetState() != tierv1.BulkLoadState_BULK_LOAD_STATE_COMMITTED {
		t.Fatalf("commit: %v, %v", st, err)
	}
}
