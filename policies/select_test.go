package policies_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/thawdb/thaw/policies"
)

func mustParse(t *testing.T, selection string) *policies.Policy {
	t.Helper()
	pols, err := policies.Parse([]byte(doc("  selection:\n"+selection)), "t.yaml")
	if err != nil {
		t.Fatalf("%v", err)
	}
	return pols[0]
}

// days are candidates of a table partitioned by day(ts) as event_day, one
// per day from first for n days, rows = 100 × day index + 100.
func days(first string, n int) []policies.Candidate {
	d0, err := time.Parse(time.DateOnly, first)
	if err != nil {
		panic(err)
	}
	var out []policies.Candidate
	for i := range n {
		v := d0.AddDate(0, 0, i).Format(time.DateOnly)
		out = append(out, policies.Candidate{
			Name:       v,
			Values:     map[string]string{"event_day": v},
			Transforms: map[string]string{"event_day": "day"},
			Rows:       int64(100*i + 100),
			Bytes:      int64(1000*i + 1000),
		})
	}
	return out
}

func selected(ds []policies.Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Selected {
			if d.Reason != "" {
				panic("selected with a reason: " + d.Reason)
			}
			out = append(out, d.Candidate.Name)
		}
	}
	return out
}

func reasons(ds []policies.Decision) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		if !d.Selected {
			out[d.Candidate.Name] = d.Reason
		}
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestSelectWindow(t *testing.T) {
	week := days("2024-01-01", 7) // 2024-01-01 .. 2024-01-07
	cases := []struct {
		name, window string
		now          string
		want         []string
	}{
		{"now at midnight: exactly seven days", "{field: event_day, last: 7d}", "2024-01-08T00:00:00Z", []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}},
		{"now at midnight: last three days", "{field: event_day, last: 3d}", "2024-01-08T00:00:00Z", []string{"2024-01-05", "2024-01-06", "2024-01-07"}},
		{"now at noon: partial overlap adds a day", "{field: event_day, last: 3d}", "2024-01-07T12:00:00Z", []string{"2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}},
		{"today's partial day is in", "{field: event_day, last: 1h}", "2024-01-05T00:30:00Z", []string{"2024-01-04", "2024-01-05"}},
		{"hours", "{field: event_day, last: 36h}", "2024-01-04T00:00:00Z", []string{"2024-01-02", "2024-01-03"}},
		{"weeks", "{field: event_day, last: 1w}", "2024-01-10T00:00:00Z", []string{"2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}},
		{"all in the future", "{field: event_day, last: 7d}", "2023-12-01T00:00:00Z", nil},
		{"all in the past", "{field: event_day, last: 7d}", "2025-01-01T00:00:00Z", nil},
		{"latest ignores now", "{field: event_day, last: 3d, anchor: latest}", "2030-06-01T00:00:00Z", []string{"2024-01-05", "2024-01-06", "2024-01-07"}},
		{"latest whole week", "{field: event_day, last: 7d, anchor: latest}", "1999-01-01T00:00:00Z", []string{"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"}},
		{"latest one day", "{field: event_day, last: 1d, anchor: latest}", "2024-01-01T00:00:00Z", []string{"2024-01-07"}},
		{"now in another zone is the same instant", "{field: event_day, last: 3d}", "2024-01-08T01:00:00+01:00", []string{"2024-01-05", "2024-01-06", "2024-01-07"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustParse(t, "    partitions:\n      window: "+c.window+"\n")
			ds := p.Select(week, utc(c.now))
			if got := selected(ds); !reflect.DeepEqual(got, c.want) {
				t.Errorf("selected %v, want %v", got, c.want)
			}
			if len(ds) != len(week) {
				t.Fatalf("%d decisions for %d candidates", len(ds), len(week))
			}
			for i, d := range ds {
				if d.Candidate.Name != week[i].Name {
					t.Errorf("decision %d is for %s, want input order", i, d.Candidate.Name)
				}
			}
		})
	}
}

func TestSelectWindowReasons(t *testing.T) {
	p := mustParse(t, "    partitions:\n      window: {field: event_day, last: 3d}\n")
	ds := p.Select(days("2024-01-01", 10), utc("2024-01-08T00:00:00Z"))
	r := reasons(ds)
	if got, want := r["2024-01-01"], "window: 2024-01-01 is before 2024-01-05"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if got, want := r["2024-01-09"], "window: 2024-01-09 is at or after 2024-01-08"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	ds = p.Select(days("2024-01-01", 10), utc("2024-01-08T06:30:00Z"))
	if got, want := reasons(ds)["2024-01-01"], "window: 2024-01-01 is before 2024-01-05T06:30Z"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
}

func TestSelectWindowTransforms(t *testing.T) {
	cand := func(name, value, transform string) policies.Candidate {
		return policies.Candidate{Name: name, Values: map[string]string{"f": value}, Transforms: map[string]string{"f": transform}}
	}
	cands := []policies.Candidate{
		cand("m-dec", "2023-12", "month"),
		cand("m-jan", "2024-01", "month"),
		cand("m-feb", "2024-02", "month"),
		cand("y-2023", "2023", "year"),
		cand("y-2024", "2024", "year"),
		cand("h-early", "2024-01-31-22", "hour"),
		cand("h-late", "2024-01-31-23", "hour"),
		cand("h-next", "2024-02-01-00", "hour"),
		cand("id-date", "2024-01-31", "identity"),
		cand("id-noname", "2024-01-30", ""),
		cand("id-text", "eu", "identity"),
		cand("bucket", "3", "bucket[16]"),
		cand("null", "null", "day"),
		cand("bad-day", "2024-1-5", "day"),
		{Name: "missing", Values: map[string]string{"g": "x"}},
	}
	// [2024-01-31 23:00, 2024-02-01 00:00)
	p := mustParse(t, "    partitions:\n      window: {field: f, last: 1h}\n")
	ds := p.Select(cands, utc("2024-02-01T00:00:00Z"))
	if got, want := selected(ds), []string{"m-jan", "y-2024", "h-late", "id-date"}; !reflect.DeepEqual(got, want) {
		t.Errorf("selected %v, want %v", got, want)
	}
	r := reasons(ds)
	for name, want := range map[string]string{
		"id-text": `f value "eu" is not a date`,
		"bucket":  "f has transform bucket[16], not a time",
		"null":    "f is null",
		"bad-day": `f value "2024-1-5" does not match its day transform`,
		"missing": "no partition field f",
		"m-dec":   "is before",
		"m-feb":   "is at or after",
	} {
		if !strings.Contains(r[name], want) || !strings.HasPrefix(r[name], "window: ") {
			t.Errorf("%s: reason %q, want it to contain %q", name, r[name], want)
		}
	}
	// latest: the newest range is 2024's year and February (both end
	// later than the hours); the newest end is 2025-01-01.
	p = mustParse(t, "    partitions:\n      window: {field: f, last: 1w, anchor: latest}\n")
	if got, want := selected(p.Select(cands, time.Time{})), []string{"y-2024"}; !reflect.DeepEqual(got, want) {
		t.Errorf("latest selected %v, want %v", got, want)
	}
	// latest with no time value at all.
	ds = p.Select([]policies.Candidate{cand("a", "eu", "identity"), cand("b", "3", "bucket[4]")}, time.Time{})
	if got := selected(ds); got != nil {
		t.Errorf("selected %v with no time values", got)
	}
	// An empty candidate list is fine.
	if ds := p.Select(nil, time.Time{}); len(ds) != 0 {
		t.Errorf("%d decisions for no candidates", len(ds))
	}
}

func TestSelectWhere(t *testing.T) {
	cand := func(region, shard, day string) policies.Candidate {
		return policies.Candidate{
			Name:   fmt.Sprintf("%s$%s$%s", region, shard, day),
			Values: map[string]string{"region": region, "shard": shard, "event_day": day},
		}
	}
	cands := []policies.Candidate{
		cand("eu", "2", "2024-01-01"),
		cand("us", "10", "2024-01-02"),
		cand("ap", "9", "2024-01-03"),
		cand("null", "null", "2024-01-04"),
		cand("eu", "010", "2024-01-10"),
	}
	cases := []struct {
		where string
		want  []string
	}{
		{"region: {eq: eu}", []string{"eu$2$2024-01-01", "eu$010$2024-01-10"}},
		{"region: {ne: eu}", []string{"us$10$2024-01-02", "ap$9$2024-01-03", "null$null$2024-01-04"}},
		{"region: {in: [eu, us]}", []string{"eu$2$2024-01-01", "us$10$2024-01-02", "eu$010$2024-01-10"}},
		{"region: {notIn: [eu, us]}", []string{"ap$9$2024-01-03", "null$null$2024-01-04"}},
		{"region: {eq: null}", []string{"null$null$2024-01-04"}},
		{"region: {notIn: [null]}", []string{"eu$2$2024-01-01", "us$10$2024-01-02", "ap$9$2024-01-03", "eu$010$2024-01-10"}},
		// Integers compare numerically: 10 > 9 and 010 = 10.
		{"shard: {gt: 9}", []string{"us$10$2024-01-02", "eu$010$2024-01-10"}},
		{"shard: {gte: 9}", []string{"us$10$2024-01-02", "ap$9$2024-01-03", "eu$010$2024-01-10"}},
		{"shard: {lt: 9}", []string{"eu$2$2024-01-01"}},
		{"shard: {lte: 9}", []string{"eu$2$2024-01-01", "ap$9$2024-01-03"}},
		{"shard: {eq: 10}", []string{"us$10$2024-01-02", "eu$010$2024-01-10"}},
		{"shard: {in: [2, 9]}", []string{"eu$2$2024-01-01", "ap$9$2024-01-03"}},
		// Strings compare as strings: "10" < "9" does not apply to dates.
		{"event_day: {gte: \"2024-01-02\", lt: \"2024-01-10\"}", []string{"us$10$2024-01-02", "ap$9$2024-01-03", "null$null$2024-01-04"}},
		{"event_day: {gt: 2024-01-03}", []string{"null$null$2024-01-04", "eu$010$2024-01-10"}},
		// Several fields: all must hold.
		{"region: {eq: eu}\n        shard: {gt: 5}", []string{"eu$010$2024-01-10"}},
		{"region: {eq: mars}", nil},
	}
	for _, c := range cases {
		t.Run(c.where, func(t *testing.T) {
			p := mustParse(t, "    partitions:\n      where:\n        "+c.where+"\n")
			if got := selected(p.Select(cands, time.Time{})); !reflect.DeepEqual(got, c.want) {
				t.Errorf("selected %v, want %v", got, c.want)
			}
		})
	}
	p := mustParse(t, "    partitions:\n      where:\n        region: {in: [eu, us]}\n        shard: {gte: 3}\n        zone: {eq: a}\n")
	r := reasons(p.Select(cands, time.Time{}))
	for name, want := range map[string]string{
		"ap$9$2024-01-03":  "where: region=ap, want region in [eu, us]",
		"eu$2$2024-01-01":  "where: shard=2, want shard >= 3",
		"us$10$2024-01-02": "where: no partition field zone",
	} {
		if r[name] != want {
			t.Errorf("%s: reason %q, want %q", name, r[name], want)
		}
	}
	// A null value satisfies no ordering.
	p = mustParse(t, "    partitions:\n      where:\n        shard: {lt: zzz}\n")
	if r := reasons(p.Select(cands, time.Time{})); r["null$null$2024-01-04"] != "where: shard=null, want shard < zzz" {
		t.Errorf("null under lt: %q", r["null$null$2024-01-04"])
	}
}

func TestSelectNamesAndBounds(t *testing.T) {
	week := days("2024-01-01", 7) // rows 100..700, bytes 1000..7000
	cases := []struct {
		selection string
		want      []string
	}{
		{"    partitions:\n      names: [\"2024-01-03\", \"2024-01-05\", \"2030-01-01\"]\n", []string{"2024-01-03", "2024-01-05"}},
		{"    minRows: 500\n", []string{"2024-01-05", "2024-01-06", "2024-01-07"}},
		{"    maxRows: 200\n", []string{"2024-01-01", "2024-01-02"}},
		{"    minRows: 300\n    maxRows: 300\n", []string{"2024-01-03"}},
		{"    minBytes: 6KB\n", []string{"2024-01-06", "2024-01-07"}},
		{"    maxBytes: 2000\n", []string{"2024-01-01", "2024-01-02"}},
		{"    minBytes: 1KiB\n    maxBytes: 3KiB\n", []string{"2024-01-02", "2024-01-03"}},
		{"    partitions:\n      names: [\"2024-01-02\", \"2024-01-06\"]\n      window: {field: event_day, last: 3d, anchor: latest}\n", []string{"2024-01-06"}},
		{"    partitions:\n      window: {field: event_day, last: 3d, anchor: latest}\n    minRows: 650\n", []string{"2024-01-07"}},
	}
	for _, c := range cases {
		t.Run(strings.TrimSpace(c.selection), func(t *testing.T) {
			p := mustParse(t, c.selection)
			if got := selected(p.Select(week, utc("2024-01-08T00:00:00Z"))); !reflect.DeepEqual(got, c.want) {
				t.Errorf("selected %v, want %v", got, c.want)
			}
		})
	}
	p := mustParse(t, "    partitions:\n      names: [\"2024-01-03\"]\n    minRows: 1\n")
	r := reasons(p.Select(append(week, policies.Candidate{Name: "", Rows: 0}), time.Time{}))
	if r["2024-01-01"] != "names: 2024-01-01 is not listed" || r[""] != "names: the table is not partitioned" {
		t.Errorf("reasons %q", r)
	}
	p = mustParse(t, "    minRows: 1\n    maxBytes: 1KiB\n")
	r = reasons(p.Select([]policies.Candidate{{Name: "a", Rows: 0}, {Name: "b", Rows: 5, Bytes: 2048}}, time.Time{}))
	if r["a"] != "minRows: 0 rows, want at least 1" || r["b"] != "maxBytes: 2048 bytes, want at most 1KiB" {
		t.Errorf("reasons %q", r)
	}
}

func TestSelectWholeTable(t *testing.T) {
	pols, err := policies.Parse([]byte(head), "t")
	if err != nil {
		t.Fatal(err)
	}
	cands := append(days("2024-01-01", 3), policies.Candidate{Name: ""})
	ds := pols[0].Select(cands, time.Time{})
	if got := selected(ds); len(got) != len(cands) {
		t.Errorf("whole table selected %v of %d", got, len(cands))
	}
}
