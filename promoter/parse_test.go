package promoter

import (
	"strings"
	"testing"
)

// goldenRecord is the stored form of seedRecords()[1] (a begun record), as
// encodeRecord writes it.
const goldenRecord = `{"id":"p-126d53e32daad94f","policy":"events","catalog":"default","lake_table":"lake.events",` +
	`"partition":"2024-01-05","lake_partitions":["0/event_day=2024-01-05","1/event_day=2024-01-05/region=eu"],` +
	`"source_snapshot_id":42,"scan_snapshot_id":43,"database":"shop","table":"events",` +
	`"caller_token":"thaw-promoter/p-126d53e32daad94f/1","attempt":1,"phase":"begun",` +
	`"txn_id":"0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11","buckets":4,"rows":0,"bytes":0,"duplicates":0,` +
	`"created_at":"2024-01-08T10:30:00.123456789Z","updated_at":"2024-01-08T10:30:01.123456789Z",` +
	`"begun_at":"2024-01-08T10:30:01.123456789Z"}`

const goldenID = "p-126d53e32daad94f"

type badRecord struct {
	name, id, doc, want string
}

// edit returns doc with old replaced by new; a case that changes nothing
// would test nothing, so a missing old panics.
func edit(doc, old, new string) string {
	if !strings.Contains(doc, old) {
		panic("test case: " + old + " not in the document")
	}
	return strings.Replace(doc, old, new, 1)
}

func badRecords() []badRecord {
	g, id := goldenRecord, goldenID
	return []badRecord{
		{"empty", id, ``, "unexpected end of JSON input"},
		{"null", id, `null`, "not a JSON object"},
		{"array", id, `[]`, "not a JSON object"},
		{"truncated", id, g[:len(g)-1], "unexpected end of JSON input"},
		{"trailing object", id, g + `{}`, "trailing data"},
		{"trailing brace", id, g + `}`, "trailing data"},
		{"trailing bracket", id, g + `]`, "trailing data"},
		{"invalid utf-8", id, edit(g, `"events"`, "\"ev\xffents\""), "invalid utf-8"},
		{"unknown member", id, edit(g, `"rows":0`, `"rows":0,"token":"x"`), `unknown member "token"`},
		{"member in another case", id, edit(g, `"rows":0`, `"Rows":0`), `unknown member "Rows"`},
		{"duplicate member", id, edit(g, `"attempt":1`, `"attempt":1,"attempt":2`), `duplicate member "attempt"`},
		{"missing member", id, edit(g, `"duplicates":0,`, ``), `missing member "duplicates"`},
		{"missing created_at", id, edit(g, `"created_at":"2024-01-08T10:30:00.123456789Z",`, ``), `missing member "created_at"`},
		{"null member", id, edit(g, `"begun_at":"2024-01-08T10:30:01.123456789Z"`, `"begun_at":null`), `member "begun_at" is null`},
		{"wrong type", id, edit(g, `"buckets":4`, `"buckets":"4"`), "Record.buckets"},
		{"fraction", id, edit(g, `"rows":0`, `"rows":0.5`), "Record.rows"},
		{"bad time", id, edit(g, `"created_at":"2024-01-08T10:30:00.123456789Z"`, `"created_at":"yesterday"`), "yesterday"},
		{"unknown phase", id, edit(g, `"phase":"begun"`, `"phase":"began"`), `phase "began" is not one of`},
		{"empty phase", id, edit(g, `"phase":"begun"`, `"phase":""`), `phase "" is not one of`},
		{"attempt zero", id, edit(g, `"attempt":1`, `"attempt":0`), "attempt 0 below 1"},
		{"negative buckets", id, edit(g, `"buckets":4`, `"buckets":-4`), "buckets -4 not in 0..4096"},
		{"too many buckets", id, edit(g, `"buckets":4`, `"buckets":5000`), "buckets 5000 not in 0..4096"},
		{"negative rows", id, edit(g, `"rows":0`, `"rows":-1`), "rows -1 negative"},
		{"negative bytes", id, edit(g, `"bytes":0`, `"bytes":-1`), "bytes -1 negative"},
		{"negative duplicates", id, edit(g, `"duplicates":0`, `"duplicates":-1`), "duplicates -1 negative"},
		{"retriable without error", id, edit(g, `"duplicates":0,`, `"duplicates":0,"retriable":true,`), "retriable without an error"},
		{"bad txn id", id, edit(g, `"txn_id":"0b0d6f7e`, `"txn_id":"XX0d6f7e`), "txn_id:"},
		{"bad id", "p-../../leader", edit(g, `"id":"p-126d53e32daad94f"`, `"id":"p-../../leader"`), `id "p-../../leader" is not p- and 16 lowercase hex digits`},
		{"uppercase id", "p-126D53E32DAAD94F", edit(g, `"id":"p-126d53e32daad94f"`, `"id":"p-126D53E32DAAD94F"`), "is not p- and 16 lowercase hex digits"},
		{"record of another key", "p-0000000000000000", g, "record p-126d53e32daad94f stored under the key of p-0000000000000000"},
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	if _, err := decodeRecord(goldenID, []byte(goldenRecord)); err != nil {
		t.Fatalf("golden record: %v", err)
	}
	for _, tc := range badRecords() {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeRecord(tc.id, []byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted %s: %+v", tc.doc, r)
			}
			if !strings.HasPrefix(err.Error(), "decode record: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestDecodeRecordCompatible: what encodeRecord writes decodes to the
// record it encoded, and the golden record is what it writes.
func TestDecodeRecordCompatible(t *testing.T) {
	for i, r := range seedRecords() {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && string(b) != goldenRecord {
			t.Fatalf("encoding changed:\n got %s\nwant %s", b, goldenRecord)
		}
		got, err := decodeRecord(r.ID, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if enc, _ := encodeRecord(got); string(enc) != string(b) || !got.CreatedAt.Equal(r.CreatedAt) ||
			got.Phase != r.Phase || got.TxnID != r.TxnID || got.Error != r.Error {
			t.Fatalf("%s decoded to %+v", b, got)
		}
	}
}
