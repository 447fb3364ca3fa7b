package promoter_test

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/promoter"
	"github.com/thawdb/thaw/snapshotbuild"
)

// eventLog is a StatusSink that keeps every event's JSON.
type eventLog struct {
	mu  sync.Mutex
	raw [][]byte
}

func (l *eventLog) Publish(e promoter.StatusEvent) {
	b, err := e.Marshal()
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	l.raw = append(l.raw, b)
	l.mu.Unlock()
}

// of parses the events of promotion id, in publication order.
func (l *eventLog) of(t *testing.T, id string) []promoter.StatusEvent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []promoter.StatusEvent
	for _, b := range l.raw {
		e, err := promoter.ParseStatusEvent(b)
		if err != nil {
			t.Fatalf("published event does not parse: %v\n%s", err, b)
		}
		if e.Promotion == id {
			out = append(out, e)
		}
	}
	return out
}

func phases(es []promoter.StatusEvent) string {
	var s []string
	for _, e := range es {
		s = append(s, string(e.Phase))
	}
	return strings.Join(s, " ")
}

// TestStatusEvents: every ledger write of a promotion publishes its state,
// in order and with rising revisions, ending with the record the ledger
// holds: a committed promotion and one that fails (a repeated key under
// duplicateKeys: error), whose last event carries the error. The events
// hold no caller token.
func TestStatusEvents(t *testing.T) {
	e := newEnv(t, 600)
	ctx := t.Context()
	e.setNow(time.Date(2024, 1, 8, 0, 0, 0, 0, time.UTC))
	var clean, dup string
	for _, d := range []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"} {
		if e.lakeRowCount(d) != len(e.lakeRows(d)) {
			dup = e.partitionOf(d)
		} else {
			clean = e.partitionOf(d)
		}
	}
	if clean == "" || dup == "" {
		t.Fatalf("the sample needs a day with and one without repeated keys: %q %q", clean, dup)
	}
	cfg := e.config([]*policies.Policy{windowPolicy(t, "status", "status", "7d", "  duplicateKeys: error\n")})
	events := &eventLog{}
	cfg.Status = events
	p := e.promoter(cfg)

	for _, tc := range []struct {
		partition string
		phases    string
		check     func(r promoter.Record, err error) bool
	}{
		{clean, "planned begun building committing committed", func(r promoter.Record, err error) bool {
			return err == nil && r.Phase == promoter.PhaseCommitted
		}},
		{dup, "planned begun building aborted failed", func(r promoter.Record, err error) bool {
			return errors.Is(err, snapshotbuild.ErrDuplicateKey) && r.Phase == promoter.PhaseFailed
		}},
	} {
		r, err := p.Promote(ctx, promoter.Key{Policy: "status", Partition: tc.partition})
		if !tc.check(r, err) {
			t.Fatalf("%s: %+v %v", tc.partition, r, err)
		}
		got := events.of(t, r.ID)
		if phases(got) != tc.phases {
			t.Fatalf("%s: events %q, want %q", tc.partition, phases(got), tc.phases)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Revision <= got[i-1].Revision {
				t.Fatalf("%s: revision %d after %d", tc.partition, got[i].Revision, got[i-1].Revision)
			}
		}
		stored, err := p.Promotion(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if last := got[len(got)-1]; !reflect.DeepEqual(last, roundTrip(t, promoter.StatusEventOf(stored))) {
			t.Fatalf("%s: last event\n%+v\nthe ledger's record\n%+v", tc.partition, last, stored)
		}
		if last := got[len(got)-1]; last.Phase == promoter.PhaseFailed && !strings.Contains(last.Error, "duplicate primary key") {
			t.Fatalf("failed event without its error: %+v", last)
		}
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	for _, b := range events.raw {
		if strings.Contains(string(b), "thaw-promoter/") || strings.Contains(string(b), "caller_token") {
			t.Fatalf("an event carries the caller token: %s", b)
		}
	}
}

// roundTrip is e as a consumer reads it (times lose their monotonic part).
func roundTrip(t *testing.T, e promoter.StatusEvent) promoter.StatusEvent {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out, err := promoter.ParseStatusEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func validStatusEvent(t testing.TB) []byte {
	t.Helper()
	b, err := promoter.StatusEvent{
		Version: promoter.StatusEventVersion, Type: promoter.StatusEventType,
		Promotion: "p-0123456789abcdef", Revision: 7, Policy: "pol", Catalog: "default", LakeTable: "lake.events",
		LakePartitions: []string{"0/event_day=2024-01-01"}, SourceSnapshotID: 3, ScanSnapshotID: 4,
		Database: "shop", Table: "events", Partition: "2024-01-01", Attempt: 1, Phase: promoter.PhaseBuilding,
		Buckets: 2, Rows: 10,
	}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseStatusEventRejects: the reader refuses what the promoter never
// writes, naming what is wrong.
func TestParseStatusEventRejects(t *testing.T) {
	good := string(validStatusEvent(t))
	if _, err := promoter.ParseStatusEvent([]byte(good)); err != nil {
		t.Fatalf("valid event: %v\n%s", err, good)
	}
	edit := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("%q not in %s", old, good)
		}
		return strings.Replace(good, old, new, 1)
	}
	for _, tc := range []struct{ doc, want string }{
		{"", "unexpected end of JSON input"},
		{"[]", "not a JSON object"},
		{good + "{}", "trailing data"},
		{edit(`"rows":10`, `"rows":10,"rows":11`), `duplicate member "rows"`},
		{edit(`"rows":10`, `"rows":10,"extra":1`), `unknown member "extra"`},
		{edit(`"rows":10,`, ``), `missing member "rows"`},
		{edit(`"error":""`, `"error":null`), `"error" is null`},
		{edit(`"version":1`, `"version":2`), "version 2: this reader reads version 1"},
		{edit(`"type":"promotion"`, `"type":"plan"`), `type "plan", want "promotion"`},
		{edit(`"promotion":"p-0123456789abcdef"`, `"promotion":"p-0123"`), `id "p-0123" is not p-`},
		{edit(`"phase":"building"`, `"phase":"done"`), `phase "done" is not one of`},
		{edit(`"rows":10`, `"rows":-1`), "rows -1 negative"},
		{edit(`"revision":7`, `"revision":0`), "revision 0 below 1"},
		{edit(`"retriable":false`, `"retriable":true`), "retriable without an error"},
		{edit(`"rows":10`, `"rows":"10"`), "cannot unmarshal string"},
		{edit(`"updated_at":"0001-01-01T00:00:00Z"`, `"updated_at":"yesterday"`), "cannot parse"},
		{edit(`"rows":10`, `"rows":10,"pad":"`+strings.Repeat("x", promoter.MaxStatusEventBytes)+`"`), "more than 983040"},
	} {
		_, err := promoter.ParseStatusEvent([]byte(tc.doc))
		if !errors.Is(err, promoter.ErrInvalidStatusEvent) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// TestStatusEventOfCutsLongErrors: an error message is cut at a UTF-8
// boundary, so that an event stays small and valid.
func TestStatusEventOfCutsLongErrors(t *testing.T) {
	r := promoter.Record{ID: "p-0123456789abcdef", Revision: 1, Attempt: 1, Phase: promoter.PhaseFailed,
		Error: strings.Repeat("é", 10000), Retriable: true}
	e := promoter.StatusEventOf(r)
	if len(e.Error) > 4<<10+len("…") || !strings.HasSuffix(e.Error, "…") {
		t.Fatalf("error of %d bytes: %.40q", len(e.Error), e.Error)
	}
	if got := roundTrip(t, e); got.Error != e.Error {
		t.Fatalf("cut error does not round-trip")
	}
}

// FuzzParseStatusEvent: what parses marshals back to an event that parses
// to the same value.
func FuzzParseStatusEvent(f *testing.F) {
	f.Add(validStatusEvent(f))
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := promoter.ParseStatusEvent(b)
		if err != nil {
			return
		}
		if again := roundTrip(t, e); !reflect.DeepEqual(again, e) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, again)
		}
	})
}
