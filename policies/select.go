package policies

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Candidate is one lake partition as the promoter sees it.
type Candidate struct {
	// Name is the tier partition name ("" for a non-partitioned table).
	Name string
	// Values maps an Iceberg partition field name to its human value
	// ("2024-01-15", "2024-01", "2024-01-15-13", "2024", "eu", "42", "null").
	Values map[string]string
	// Transforms maps a partition field name to its Iceberg transform
	// ("identity", "day", "month", "year", "hour", "bucket[16]", ...).
	Transforms map[string]string
	// Rows and Bytes are the lake partition's record count and data bytes.
	Rows, Bytes int64
}

// Decision is the policy's verdict on one candidate. Reason says why a
// candidate is not selected (empty when it is).
type Decision struct {
	Candidate Candidate
	Selected  bool
	Reason    string
}

// Select decides each candidate, in order: selected when every condition
// holds — the names list, each where condition, the window, and the row and
// byte bounds, checked in that order; the first that fails is the reason.
//
// The window's anchor is now, or for "latest" the end of the newest time
// range among all candidates (whatever the other conditions say). Select is
// pure: no I/O and no clock.
func (p *Policy) Select(cands []Candidate, now time.Time) []Decision {
	out := make([]Decision, len(cands))
	var anchor time.Time
	anchorOK := true
	if w := p.sel.Window; w != nil {
		anchor = now
		if w.Anchor == AnchorLatest {
			anchorOK = false
			for _, c := range cands {
				if _, end, err := timeRange(c, w.Field); err == nil && (!anchorOK || end.After(anchor)) {
					anchor, anchorOK = end, true
				}
			}
		}
	}
	for i, c := range cands {
		out[i] = Decision{Candidate: c}
		if reason := p.check(c, anchor, anchorOK); reason != "" {
			out[i].Reason = reason
		} else {
			out[i].Selected = true
		}
	}
	return out
}

func (p *Policy) check(c Candidate, anchor time.Time, anchorOK bool) string {
	s := &p.sel
	if len(s.Names) > 0 && !slices.Contains(s.Names, c.Name) {
		if c.Name == "" {
			return "names: the table is not partitioned"
		}
		return fmt.Sprintf("names: %s is not listed", c.Name)
	}
	for _, cond := range s.Where {
		v, ok := c.Values[cond.Field]
		if !ok {
			return fmt.Sprintf("where: no partition field %s", cond.Field)
		}
		if !cond.holds(v) {
			return fmt.Sprintf("where: %s=%s, want %s", cond.Field, v, cond)
		}
	}
	if w := s.Window; w != nil {
		start, end, err := timeRange(c, w.Field)
		if err != nil {
			return "window: " + err.Error()
		}
		if !anchorOK {
			return fmt.Sprintf("window: no partition has a time value for %s", w.Field)
		}
		from := anchor.Add(-w.Duration)
		v := c.Values[w.Field]
		if !end.After(from) {
			return fmt.Sprintf("window: %s is before %s", v, formatTime(from))
		}
		if !start.Before(anchor) {
			return fmt.Sprintf("window: %s is at or after %s", v, formatTime(anchor))
		}
	}
	if c.Rows < s.MinRows {
		return fmt.Sprintf("minRows: %d rows, want at least %d", c.Rows, s.MinRows)
	}
	if s.MaxRows > 0 && c.Rows > s.MaxRows {
		return fmt.Sprintf("maxRows: %d rows, want at most %d", c.Rows, s.MaxRows)
	}
	if c.Bytes < s.MinBytes {
		return fmt.Sprintf("minBytes: %d bytes, want at least %s", c.Bytes, FormatSize(s.MinBytes))
	}
	if s.MaxBytes > 0 && c.Bytes > s.MaxBytes {
		return fmt.Sprintf("maxBytes: %d bytes, want at most %s", c.Bytes, FormatSize(s.MaxBytes))
	}
	return ""
}

var opSymbol = map[string]string{
	"eq": "=", "ne": "!=", "in": "in", "notIn": "not in", "gt": ">", "gte": ">=", "lt": "<", "lte": "<=",
}

// String renders the condition as "field >= value" or "field in [a, b]".
func (c Condition) String() string {
	if c.Op == "in" || c.Op == "notIn" {
		return fmt.Sprintf("%s %s [%s]", c.Field, opSymbol[c.Op], strings.Join(c.Values, ", "))
	}
	return fmt.Sprintf("%s %s %s", c.Field, opSymbol[c.Op], c.Values[0])
}

// holds evaluates the condition on a partition value. Values compare as
// integers when both sides are integers, else as strings; a null value
// ("null") satisfies no ordering (gt, gte, lt, lte).
func (c Condition) holds(v string) bool {
	switch c.Op {
	case "eq":
		return compare(v, c.Values[0]) == 0
	case "ne":
		return compare(v, c.Values[0]) != 0
	case "in", "notIn":
		in := slices.ContainsFunc(c.Values, func(w string) bool { return compare(v, w) == 0 })
		return in == (c.Op == "in")
	}
	if v == "null" {
		return false
	}
	r := compare(v, c.Values[0])
	switch c.Op {
	case "gt":
		return r > 0
	case "gte":
		return r >= 0
	case "lt":
		return r < 0
	case "lte":
		return r <= 0
	}
	return false
}

func compare(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA == nil && errB == nil {
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	return strings.Compare(a, b)
}

// timeRange is the [start, end) in UTC that a candidate's value of field
// covers, by the field's transform.
func timeRange(c Candidate, field string) (start, end time.Time, err error) {
	v, ok := c.Values[field]
	if !ok {
		return start, end, fmt.Errorf("no partition field %s", field)
	}
	if v == "null" {
		return start, end, fmt.Errorf("%s is null", field)
	}
	tr := c.Transforms[field]
	var layout string
	step := func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }
	switch tr {
	case "day":
		layout = time.DateOnly
	case "identity", "":
		layout = time.DateOnly
		if _, err := time.Parse(layout, v); err != nil {
			return start, end, fmt.Errorf("%s value %q is not a date (YYYY-MM-DD)", field, v)
		}
	case "month":
		layout, step = "2006-01", func(t time.Time) time.Time { return t.AddDate(0, 1, 0) }
	case "year":
		layout, step = "2006", func(t time.Time) time.Time { return t.AddDate(1, 0, 0) }
	case "hour":
		layout, step = "2006-01-02-15", func(t time.Time) time.Time { return t.Add(time.Hour) }
	default:
		return start, end, fmt.Errorf("%s has transform %s, not a time (day, month, year, hour or identity over a date)", field, tr)
	}
	start, err = time.Parse(layout, v)
	if err != nil {
		return start, end, fmt.Errorf("%s value %q does not match its %s transform", field, v, tr)
	}
	return start, step(start), nil
}

func formatTime(t time.Time) string {
	t = t.UTC()
	switch {
	case t.Equal(t.Truncate(24 * time.Hour)):
		return t.Format(time.DateOnly)
	case t.Second() == 0 && t.Nanosecond() == 0:
		return t.Format("2006-01-02T15:04Z")
	}
	return t.Format(time.RFC3339Nano)
}
