package promoter

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// unversionedRecord is the stored form of seedRecords()[1] (a begun
// record) as promoters wrote it before records carried a version: such
// records are in etcd and must keep decoding.
const unversionedRecord = `{"id":"p-126d53e32daad94f","policy":"events","catalog":"default","lake_table":"lake.events",` +
	`"partition":"2024-01-05","lake_partitions":["0/event_day=2024-01-05","1/event_day=2024-01-05/region=eu"],` +
	`"source_snapshot_id":42,"scan_snapshot_id":43,"database":"shop","table":"events",` +
	`"caller_token":"thaw-promoter/p-126d53e32daad94f/1","attempt":1,"phase":"begun",` +
	`"txn_id":"0b0d6f7e-52f1-4b8e-9a43-0b2a1e6c1d11","buckets":4,"rows":0,"bytes":0,"duplicates":0,` +
	`"created_at":"2024-01-08T10:30:00.123456789Z","updated_at":"2024-01-08T10:30:01.123456789Z",` +
	`"begun_at":"2024-01-08T10:30:01.123456789Z"}`

// goldenRecord is the stored form of seedRecords()[1], as encodeRecord
// writes it: version 1, first.
var goldenRecord = `{"version":1,` + unversionedRecord[1:]

const goldenID = "p-126d53e32daad94f"

// goldenRecordV2 is seedRecords()[1] with two interrupted builds (InterruptedBuilds 2) as
// encodeRecord writes it: version 2, the lowest that holds "interrupted_builds".
var goldenRecordV2 = strings.Replace(strings.Replace(goldenRecord, `"version":1,`, `"version":2,`, 1),
	`"attempt":1,`, `"attempt":1,"interrupted_builds":2,`, 1)

// versionMessage is what a record of version v is refused with.
func versionMessage(v string) string {
	return "record version " + v + ": this promoter reads versions 1 to 2; upgrade it"
}

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
		{"wrong type", id, edit(g, `"buckets":4`, `"buckets":"4"`), `member "buckets": string is not int`},
		{"fraction", id, edit(g, `"rows":0`, `"rows":0.5`), `member "rows": number 0.5 is not int64`},
		{"wrong element type", id, edit(g, `"lake_partitions":[`, `"lake_partitions":[7,`), `member "lake_partitions": number is not string`},
		{"bad time", id, edit(g, `"created_at":"2024-01-08T10:30:00.123456789Z"`, `"created_at":"yesterday"`), "yesterday"},
		{"time as a number", id, edit(g, `"created_at":"2024-01-08T10:30:00.123456789Z"`, `"created_at":5`), `member "created_at"`},
		{"bad time names the member", id, edit(g, `"begun_at":"2024-01-08T10:30:01.123456789Z"`, `"begun_at":"soon"`), `member "begun_at"`},
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

		// The version: checked before the members, so a newer record is
		// refused by its version whatever members it has.
		{"version 3", id, edit(g, `"version":1`, `"version":3`), versionMessage("3")},
		{"version 3 with a new member", id, edit(edit(g, `"version":1`, `"version":3`), `"rows":0`, `"rows":0,"shard_hint":3`), versionMessage("3")},
		{"version 3 with a member gone", id, edit(edit(g, `"version":1`, `"version":3`), `"duplicates":0,`, ``), versionMessage("3")},
		{"version 3 elsewhere", id, edit(edit(g, `"version":1,`, ``), `"rows":0`, `"rows":0,"version":3`), versionMessage("3")},
		{"version 3 alone", id, `{"version":3}`, versionMessage("3")},
		{"version 10", id, edit(g, `"version":1`, `"version":10`), versionMessage("10")},
		{"huge version", id, edit(g, `"version":1`, `"version":123456789012345678901234567890123456789`), versionMessage("12345678901234567890123456789012…")},
		{"version 0", id, edit(g, `"version":1`, `"version":0`), `member "version": 0 is not a positive integer`},
		{"negative version", id, edit(g, `"version":1`, `"version":-1`), `member "version": -1 is not a positive integer`},
		{"fractional version", id, edit(g, `"version":1`, `"version":1.0`), `member "version": 1.0 is not a positive integer`},
		{"exponent version", id, edit(g, `"version":1`, `"version":1e0`), `member "version": 1e0 is not a positive integer`},
		{"string version", id, edit(g, `"version":1`, `"version":"1"`), `member "version": "1" is not a positive integer`},
		{"null version", id, edit(g, `"version":1`, `"version":null`), `member "version": null is not a positive integer`},
		{"boolean version", id, edit(g, `"version":1`, `"version":true`), `member "version": true is not a positive integer`},
		{"object version", id, edit(g, `"version":1`, `"version":{"major":1}`), `member "version": {"major":1} is not a positive integer`},
		{"long string version", id, edit(g, `"version":1`, `"version":"`+strings.Repeat("é", 20)+`"`), `member "version": "` + strings.Repeat("é", 15) + `…`},
		{"duplicate version", id, edit(g, `"version":1`, `"version":1,"version":1`), `duplicate member "version"`},
		{"version in another case", id, edit(g, `"version":1`, `"Version":1`), `unknown member "Version"`},
		{"unversioned with a new member", id, edit(unversionedRecord, `"rows":0`, `"rows":0,"shard_hint":3`), `unknown member "shard_hint"`},
		{"version 1 with a new member", id, edit(g, `"rows":0`, `"rows":0,"shard_hint":3`), `unknown member "shard_hint"`},
		// Version 2 added "interrupted_builds".
		{"version 1 with interrupted_builds", id, edit(g, `"attempt":1`, `"attempt":1,"interrupted_builds":1`), `member "interrupted_builds" in a record of version 1`},
		{"unversioned with interrupted_builds", id, edit(unversionedRecord, `"attempt":1`, `"attempt":1,"interrupted_builds":1`), `member "interrupted_builds" in a record of version 1`},
		{"version 2 with a new member", id, edit(goldenRecordV2, `"rows":0`, `"rows":0,"shard_hint":3`), `unknown member "shard_hint"`},
		{"negative interrupted_builds", id, edit(goldenRecordV2, `"interrupted_builds":2`, `"interrupted_builds":-1`), "interrupted_builds -1 negative"},
		{"fractional interrupted_builds", id, edit(goldenRecordV2, `"interrupted_builds":2`, `"interrupted_builds":1.5`), `member "interrupted_builds": number 1.5 is not int`},
		{"null interrupted_builds", id, edit(goldenRecordV2, `"interrupted_builds":2`, `"interrupted_builds":null`), `member "interrupted_builds" is null`},
		// A null element decoded as "" and [] as an empty list (written as
		// nothing: it came back nil).
		{"null lake partition", id, edit(g, `"lake_partitions":["0/event_day=2024-01-05",`, `"lake_partitions":[null,`), `lake_partitions[0] "" is not spec/path`},
		{"empty lake partitions", id, edit(g, `"lake_partitions":["0/event_day=2024-01-05","1/event_day=2024-01-05/region=eu"]`, `"lake_partitions":[]`), `lake_partitions []`},
		{"lake partition without a spec", id, edit(g, `"1/event_day=2024-01-05/region=eu"`, `"event_day=2024-01-05"`), `lake_partitions[1] "event_day=2024-01-05" is not spec/path`},
		{"lake partition with a signed spec", id, edit(g, `"1/event_day=2024-01-05/region=eu"`, `"+1/x"`), `lake_partitions[1] "+1/x" is not spec/path`},
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
			// Only a record of another version is ErrRecordVersion.
			if newer := strings.Contains(tc.want, "this promoter reads versions"); errors.Is(err, ErrRecordVersion) != newer {
				t.Fatalf("error %q: errors.Is ErrRecordVersion = %t, want %t", err, !newer, newer)
			}
		})
	}
}

// TestDecodeRecordVersions: a record without "version" and one of version
// 1 decode alike; one of version 2 holds "interrupted_builds", and a record is written
// at the lowest version that holds it. LedgerRecordVersion is 2 (changing
// it is a format change: this test, the golden records and
// docs/promoter.md go with it).
func TestDecodeRecordVersions(t *testing.T) {
	if LedgerRecordVersion != 2 {
		t.Fatalf("LedgerRecordVersion %d: update the golden records and the docs", LedgerRecordVersion)
	}
	seed := seedRecords()[1]
	v2, err := decodeRecord(goldenID, []byte(goldenRecordV2))
	if err != nil {
		t.Fatalf("version 2 record: %v", err)
	}
	if v2.InterruptedBuilds != 2 {
		t.Fatalf("version 2 record read interrupted_builds %d, want 2", v2.InterruptedBuilds)
	}
	if enc, err := encodeRecord(v2); err != nil || string(enc) != goldenRecordV2 {
		t.Fatalf("version 2 record written as %s (%v), want %s", enc, err, goldenRecordV2)
	}
	v2.InterruptedBuilds = 0
	if enc, err := encodeRecord(v2); err != nil || string(enc) != goldenRecord {
		t.Fatalf("record without interrupted builds written as %s (%v), want %s", enc, err, goldenRecord)
	}
	v2.Revision = seed.Revision
	if !reflect.DeepEqual(v2, seed) {
		t.Fatalf("version 2 record without its interrupted builds %+v, want %+v", v2, seed)
	}
	old, err := decodeRecord(goldenID, []byte(unversionedRecord))
	if err != nil {
		t.Fatalf("unversioned record: %v", err)
	}
	cur, err := decodeRecord(goldenID, []byte(goldenRecord))
	if err != nil {
		t.Fatalf("version 1 record: %v", err)
	}
	if !reflect.DeepEqual(old, cur) {
		t.Fatalf("unversioned %+v, version 1 %+v", old, cur)
	}
	// "version" is read wherever it stands.
	moved := edit(edit(goldenRecord, `"version":1,`, ``), `"rows":0`, `"rows":0,"version":1`)
	if r, err := decodeRecord(goldenID, []byte(moved)); err != nil || !reflect.DeepEqual(r, cur) {
		t.Fatalf("version 1 in the middle: %+v %v", r, err)
	}
	// What promoters wrote before versioning: each seed record as
	// encoding/json writes a Record. Rewriting one writes version 1.
	for _, r := range seedRecords() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"version"`)) {
			t.Fatalf("a Record encodes a version of its own: %s", b)
		}
		got, err := decodeRecord(r.ID, b)
		if err != nil {
			t.Fatalf("unversioned %s: %v", b, err)
		}
		enc, err := encodeRecord(got)
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte(`{"version":1,`), b[1:]...); !bytes.Equal(enc, want) {
			t.Fatalf("rewritten:\n got %s\nwant %s", enc, want)
		}
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
