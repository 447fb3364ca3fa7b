package promoter

import (
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/policies"
)

// TestRenamedDayFieldWindow: a lake table's day field is renamed
// (event_day -> day): Iceberg writes a new spec with the same field over
// the same column and transform. A policy whose window names the old field
// is accepted (checkSelectionFields: "a renamed day field is a key") and
// selects partitions written after the rename too: it selected none of
// them ("window: no partition field event_day").
func TestRenamedDayFieldWindow(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	info, err := lake.Sample(ctx, lake.SampleOptions{Dir: dir, Rows: 40, Days: 3, Seed: 1, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// Rename the partition field through iceberg-go.
	db, err := sql.Open(sqliteshim.ShimName, "file:"+dir+"/catalog.db?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := sqlcat.NewCatalog("default", db, sqlcat.SQLite, iceberg.Properties{"uri": "", "warehouse": "file://" + dir + "/warehouse", "init_catalog_tables": "false"})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"lake", "events"})
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.UpdateSpec(false).RenameField("event_day", "day").Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	// A new day after the rename: 2024-01-04.
	if _, err := lake.SampleAppendDay(ctx, info, lake.SampleAppend{Day: time.Date(2024, 1, 4, 0, 0, 0, 0, time.UTC), FirstID: 1000, Rows: 5, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	l, err := lake.Open(ctx, info.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ti, err := l.Describe(ctx, info.Table)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policies.Parse([]byte(`apiVersion: thaw.dev/v1
kind: PromotionPolicy
metadata: {name: recent}
spec:
  source: {table: lake.events}
  target: {buckets: 2}
  selection:
    partitions:
      window: {field: event_day, last: 2d, anchor: latest}
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol := pols[0]
	_, m, err := lake.MapSchema(ti, mappingOptions(pol, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSelectionFields(pol, ti, m); err != nil {
		t.Fatalf("policy refused: %v", err)
	}
	parts, err := l.Partitions(ctx, info.Table, nil)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*group{}
	for _, lp := range parts {
		name, err := m.PartitionName(lp)
		if err != nil {
			t.Fatalf("%s: %v", lp.Path, err)
		}
		if groups[name] == nil {
			groups[name] = &group{name: name}
		}
		groups[name].parts = append(groups[name].parts, lp)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range groups {
			if !yield(n) {
				return
			}
		}
	})
	var cands []policies.Candidate
	for _, n := range names {
		cands = append(cands, candidate(groups[n], m, keyAliases(ti, m)))
	}
	var selected, report []string
	for _, d := range pol.Select(cands, time.Now()) {
		report = append(report, d.Candidate.Name+": "+map[bool]string{true: "selected"}[d.Selected]+d.Reason)
		if d.Selected {
			selected = append(selected, d.Candidate.Name)
		}
	}
	t.Logf("tier partitions %v\n%s", names, strings.Join(report, "\n"))
	// The window of the last 2 days of data is [2024-01-03, 2024-01-05).
	if want := []string{"2024-01-03", "2024-01-04"}; !slices.Equal(selected, want) {
		t.Fatalf("window {field: event_day, last: 2d, anchor: latest} selected %v, want %v", selected, want)
	}
}
