package kafka

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseEvent(t *testing.T) {
	id := int64(42)
	for _, tc := range []struct {
		in   string
		want Event
	}{
		{`{"version":1,"type":"promote","table":"quickstart.events","partition":"2024-01-04"}`,
			Event{Version: 1, Type: TypePromote, Table: "quickstart.events", Partition: "2024-01-04"}},
		{`{"version":1,"type":"promote","policy":"events-recent"}`,
			Event{Version: 1, Type: TypePromote, Policy: "events-recent"}},
		{` {"type":"reconcile","version":1} `, Event{Version: 1, Type: TypeReconcile}},
		{`{"version":1,"type":"reconcile","policy":"p"}`, Event{Version: 1, Type: TypeReconcile, Policy: "p"}},
		{`{"version":1,"type":"lake_commit","catalog":"default","table":"sample.events","snapshot_id":42}`,
			Event{Version: 1, Type: TypeLakeCommit, Catalog: "default", Table: "sample.events", SnapshotID: &id}},
		{`{"version":1,"type":"lake_commit","catalog":"c","table":"a.b.c"}`,
			Event{Version: 1, Type: TypeLakeCommit, Catalog: "c", Table: "a.b.c"}},
	} {
		got, err := ParseEvent([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseEventRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, "empty"},
		{`   `, "empty"},
		{`[1]`, "not a JSON object"},
		{`"promote"`, "not a JSON object"},
		{`{"version":1,"type":"promote","table":"a.b"} {}`, "trailing data"},
		{`{"version":1,"type":"promote","table":"a.b"`, "unexpected end"},
		{"{\"version\":1,\"type\":\"promote\",\"table\":\"a.\xff\"}", "invalid utf-8"},
		{`{"version":1,"type":"promote","table":"a.b","table":"c.d"}`, `duplicate member "table"`},
		{`{"version":1,"type":"promote","Table":"a.b"}`, `unknown member "Table"`},
		{`{"version":1,"type":"promote","tabel":"a.b"}`, `unknown field "tabel"`},
		{`{"type":"promote","table":"a.b"}`, `missing member "version"`},
		{`{"version":1,"table":"a.b"}`, `missing member "type"`},
		{`{"version":2,"type":"promote","table":"a.b"}`, "version 2: this promoter reads version 1"},
		{`{"version":1.5,"type":"promote","table":"a.b"}`, "cannot unmarshal"},
		{`{"version":"1","type":"promote","table":"a.b"}`, "cannot unmarshal"},
		{`{"version":1,"type":"delete","table":"a.b"}`, `type "delete": want promote, reconcile or lake_commit`},
		{`{"version":1,"type":"promote","table":null}`, `member "table" is null`},
		{`{"version":1,"type":"promote"}`, "names neither a policy nor a table"},
		{`{"version":1,"type":"promote","table":"events"}`, `table "events": want DATABASE.TABLE`},
		{`{"version":1,"type":"promote","table":"a..b"}`, `table "a..b": want DATABASE.TABLE`},
		{`{"version":1,"type":"promote","table":""}`, "table: empty"},
		{`{"version":1,"type":"promote","policy":" p"}`, "surrounding spaces"},
		{`{"version":1,"type":"promote","policy":"p\u0000"}`, "control character"},
		{`{"version":1,"type":"promote","policy":"` + strings.Repeat("p", 513) + `"}`, "513 bytes, more than 512"},
		{`{"version":1,"type":"promote","table":"a.b","partition":"2024/01"}`, `partition "2024/01"`},
		{`{"version":1,"type":"promote","table":"a.b","partition":""}`, `partition ""`},
		{`{"version":1,"type":"promote","table":"a.b","catalog":"c"}`, `promote event: unknown member "catalog"`},
		{`{"version":1,"type":"reconcile","table":"a.b"}`, `reconcile event: unknown member "table"`},
		{`{"version":1,"type":"lake_commit","table":"a.b"}`, `lake_commit event: missing member "catalog"`},
		{`{"version":1,"type":"lake_commit","catalog":"c"}`, `lake_commit event: missing member "table"`},
		{`{"version":1,"type":"lake_commit","catalog":"c","table":"a.b","partition":"p"}`, `unknown member "partition"`},
		{`{"version":1,"type":"lake_commit","catalog":"c","table":"a.b","snapshot_id":-1}`, "snapshot_id -1 is negative"},
		{`{"version":1,"type":"lake_commit","catalog":"c","table":"a.b","snapshot_id":1e3}`, "cannot unmarshal"},
		{`{"version":1,"type":"promote","table":"a.b","x":{"y":1}}`, `unknown field "x"`},
		{`{"version":1,"type":"promote","table":"a.b","pad":"` + strings.Repeat("x", MaxEventBytes) + `"}`, "more than 65536"},
	} {
		_, err := ParseEvent([]byte(tc.in))
		if err == nil {
			t.Errorf("%.80s: accepted", tc.in)
			continue
		}
		if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s: got %v, want ErrInvalidEvent and %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseEvent: what ParseEvent accepts re-encodes to an event it
// accepts again, equal to the first.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"type":"promote","table":"quickstart.events","partition":"2024-01-04"}`,
		`{"version":1,"type":"reconcile"}`,
		`{"version":1,"type":"lake_commit","catalog":"default","table":"sample.events","snapshot_id":42}`,
		`{"version":1,"type":"promote","policy":"p","table":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseEvent(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("error without ErrInvalidEvent: %v", err)
			}
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseEvent(out)
		if err != nil {
			t.Fatalf("%s re-encoded as %s: %v", b, out, err)
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("%s: %+v, then %+v", b, e, again)
		}
	})
}
