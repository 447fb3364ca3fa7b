package promoter

import (
	"slices"
	"testing"
	"time"
)

// TestPrunable: which finished records a prune deletes, target by target.
func TestPrunable(t *testing.T) {
	now := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	cutoff := now.Add(-30 * day)
	// rec is a record of target (lake table, partition) created and last
	// updated daysAgo days before now.
	rec := func(id, lakeTable, partition string, phase Phase, daysAgo int) Record {
		at := now.Add(-time.Duration(daysAgo) * day)
		return Record{ID: id, Policy: "p", Catalog: "default", LakeTable: lakeTable, Partition: partition,
			Database: "shop", Table: "events", Phase: phase, CreatedAt: at, UpdatedAt: at}
	}
	retriable := func(r Record) Record { r.Retriable = true; return r }
	updated := func(r Record, daysAgo int) Record {
		r.UpdatedAt = now.Add(-time.Duration(daysAgo) * day)
		return r
	}
	for _, tc := range []struct {
		name string
		recs []Record
		want []string // pruned, oldest first
	}{
		{"empty", nil, nil},
		{"a lone commit stays however old", []Record{rec("c", "lake.e", "d1", PhaseCommitted, 400)}, nil},
		{"commits superseded by a newer commit go", []Record{
			rec("c1", "lake.e", "d1", PhaseCommitted, 90),
			rec("c2", "lake.e", "d1", PhaseCommitted, 60),
			rec("c3", "lake.e", "d1", PhaseCommitted, 45),
		}, []string{"c1", "c2"}},
		{"attempts around the commit go", []Record{
			rec("a", "lake.e", "d1", PhaseAborted, 90),
			rec("c", "lake.e", "d1", PhaseCommitted, 80),
			rec("f", "lake.e", "d1", PhaseFailed, 70),
			retriable(rec("r", "lake.e", "d1", PhaseFailed, 60)),
		}, []string{"a", "f", "r"}},
		{"without a commit the newest lasting failure stays", []Record{
			rec("f1", "lake.e", "d1", PhaseFailed, 90),
			rec("f2", "lake.e", "d1", PhaseFailed, 80),
			retriable(rec("r", "lake.e", "d1", PhaseFailed, 70)),
			rec("a", "lake.e", "d1", PhaseAborted, 60),
		}, []string{"f1", "r", "a"}},
		{"retriable failures and aborts alone all go", []Record{
			retriable(rec("r", "lake.e", "d1", PhaseFailed, 90)),
			rec("a", "lake.e", "d1", PhaseAborted, 60),
		}, []string{"r", "a"}},
		{"unfinished records stay however old", []Record{
			rec("p", "lake.e", "d1", PhasePlanned, 90),
			rec("b", "lake.e", "d2", PhaseBegun, 90),
			rec("u", "lake.e", "d3", PhaseBuilding, 90),
			rec("m", "lake.e", "d4", PhaseCommitting, 90),
		}, nil},
		{"within the retention by UpdatedAt", []Record{
			rec("c", "lake.e", "d1", PhaseCommitted, 5),
			updated(rec("a", "lake.e", "d1", PhaseAborted, 90), 29),
			rec("a2", "lake.e", "d1", PhaseAborted, 31),
			rec("c0", "lake.e", "d1", PhaseCommitted, 29),
		}, []string{"a2"}},
		{"targets are kept apart", []Record{
			rec("c1", "lake.e", "d1", PhaseCommitted, 90),
			rec("c2", "lake.e", "d2", PhaseCommitted, 80),
			rec("c3", "lake.f", "d1", PhaseCommitted, 70),
			rec("f1", "lake.e", "d3", PhaseFailed, 60),
			rec("a1", "lake.e", "d2", PhaseAborted, 50),
		}, []string{"a1"}},
		{"the newest commit is by creation, not by update", []Record{
			updated(rec("old", "lake.e", "d1", PhaseCommitted, 90), 40),
			rec("new", "lake.e", "d1", PhaseCommitted, 60),
		}, []string{"old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range prunable(slices.Clone(tc.recs), cutoff) {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("pruned %v, want %v", got, tc.want)
			}
		})
	}
}

// TestQueueTryAcquire: a key held by a promotion, or waiting in the queue,
// is not taken; a free key is, whatever its policy's limit, and done
// releases it.
func TestQueueTryAcquire(t *testing.T) {
	q := newQueue(func(string) int { return 1 })
	a, b := Key{Policy: "p", Partition: "a"}, Key{Policy: "p", Partition: "b"}
	if err := q.acquire(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if q.tryAcquireIdle(a) {
		t.Fatal("took a running key")
	}
	if !q.tryAcquireIdle(b) {
		t.Fatal("did not take a free key of a policy at its limit")
	}
	q.done(b)
	q.done(a)
	if !q.tryAcquireIdle(a) {
		t.Fatal("did not take a released key")
	}
	q.done(a)
	if p, r := q.depth(); p != 0 || r != 0 {
		t.Fatalf("depth %d pending %d running", p, r)
	}
	// Pending: checked and taken under one lock (a separate queued check
	// raced a request queued in between).
	q.add(a, item{requested: true, ids: []string{"p-1"}, rev: 7})
	if q.tryAcquireIdle(a) {
		t.Fatal("took a pending key")
	}
	if err := q.acquire(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	q.add(b, item{})
	if q.tryAcquireIdle(b) {
		t.Fatal("took a running key queued again (dirty)")
	}
}

// TestQueueRemoveID: Cancel's removal finds the id and takes its item out
// under one lock; an id no queued item carries any more (its item started,
// and a reconcile queued the key again without it) is not removed.
func TestQueueRemoveID(t *testing.T) {
	q := newQueue(func(string) int { return 2 })
	a := Key{Policy: "p", Partition: "a"}
	q.add(a, item{requested: true, ids: []string{"p-1"}, rev: 3})
	if k, _, err := q.get(t.Context()); err != nil || k != a {
		t.Fatalf("get: %v %v", k, err)
	}
	q.add(a, item{}) // a reconcile: dirty while it runs
	if k, got, ok := q.removeID("p-1"); ok {
		t.Fatalf("removed %v %+v: the id's item runs", k, got)
	}
	q.add(a, item{requested: true, ids: []string{"p-2"}, rev: 4})
	if k, got, ok := q.removeID("p-2"); !ok || k != a || got.rev != 4 {
		t.Fatalf("removeID of a dirty key's id: %v %+v %v", k, got, ok)
	}
}
