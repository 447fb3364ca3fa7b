package cron_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/thawdb/thaw/policies"
	"github.com/thawdb/thaw/triggers/cron"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNext(t *testing.T) {
	cases := []struct {
		name, cron, zone, after string
		want                    []string // successive fire times, UTC
	}{
		{"every 15 minutes", "*/15 * * * *", "", "2026-03-28T23:59:30Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T00:15:00Z", "2026-03-29T00:30:00Z"}},
		{"every 15 minutes from a fire time", "*/15 * * * *", "UTC", "2026-03-29T00:15:00Z",
			[]string{"2026-03-29T00:30:00Z"}},
		{"@daily in UTC", "@daily", "", "2026-01-10T05:00:00Z",
			[]string{"2026-01-11T00:00:00Z", "2026-01-12T00:00:00Z"}},
		{"@daily in Berlin is 23:00 UTC in winter", "@daily", "Europe/Berlin", "2026-01-10T05:00:00Z",
			[]string{"2026-01-10T23:00:00Z", "2026-01-11T23:00:00Z"}},
		{"@hourly", "@hourly", "", "2026-01-10T05:59:59Z",
			[]string{"2026-01-10T06:00:00Z", "2026-01-10T07:00:00Z"}},
		{"@every 90s", "@every 90s", "", "2026-01-10T05:00:00Z",
			[]string{"2026-01-10T05:01:30Z", "2026-01-10T05:03:00Z"}},
		// Europe/Berlin springs forward on 2026-03-29 at 02:00 CET -> 03:00 CEST.
		{"03:00 Berlin across spring forward", "0 3 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"}},
		{"02:30 Berlin is skipped on spring forward day", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T00:30:00Z"}},
		// and falls back on 2026-10-25 at 03:00 CEST -> 02:00 CET: 02:30 happens twice.
		{"02:30 Berlin fires once on fall back day", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"every 20 minutes of hour 2 Berlin: once on fall back day", "*/20 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z",
			[]string{"2026-10-25T00:40:00Z", "2026-10-26T01:00:00Z"}},
		{"every 15 minutes Berlin runs on through the repeated hour", "*/15 * * * *", "Europe/Berlin", "2026-10-25T00:30:00Z",
			[]string{"2026-10-25T00:45:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z"}},
		{"weekdays in New York", "0 9 * * MON-FRI", "America/New_York", "2026-01-09T15:00:00Z", // a Friday, after 09:00 EST
			[]string{"2026-01-12T14:00:00Z", "2026-01-13T14:00:00Z"}},
		{"first of the month", "0 0 1 * *", "", "2026-01-31T00:00:00Z",
			[]string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"extra spaces", "  0   2 * * *  ", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T02:00:00Z"}},
		// Lord Howe Island shifts by 30 minutes: on 2026-04-05 02:00
		// +11 -> 01:30 +1030, on 2026-10-04 02:00 +1030 -> 02:30 +11.
		// Daily times fire every day (robfig's Next skipped those days).
		{"23:00 Lord Howe across fall back", "0 23 * * *", "Australia/Lord_Howe", "2026-04-04T11:00:00Z",
			[]string{"2026-04-04T12:00:00Z", "2026-04-05T12:30:00Z", "2026-04-06T12:30:00Z"}},
		{"01:45 Lord Howe fires once on fall back day", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z",
			[]string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"23:00 Lord Howe across spring forward", "0 23 * * *", "Australia/Lord_Howe", "2026-10-03T11:00:00Z",
			[]string{"2026-10-03T12:30:00Z", "2026-10-04T12:00:00Z"}},
		{"02:15 Lord Howe is skipped on spring forward day", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:30:00Z",
			[]string{"2026-10-04T15:15:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := cron.Entry{Policy: "p", Cron: c.cron, TimeZone: c.zone}
			after := at(c.after)
			var got []string
			for range c.want {
				next, err := cron.Next(e, after)
				if err != nil {
					t.Fatal(err)
				}
				if !next.After(after) {
					t.Fatalf("Next(%s) = %s, not after it", after, next)
				}
				got = append(got, next.UTC().Format(time.RFC3339))
				after = next
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("fires %v, want %v", got, c.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	good := []struct{ cron, zone string }{
		{"0 2 * * *", ""}, {"0 2 * * *", "Europe/Berlin"}, {"*/5 1-3,7 1,15 JAN-mar sun", "UTC"},
		{"@weekly", "Asia/Tokyo"}, {"@every 1h30m", ""}, {"0 0 29 2 *", ""}, {"? * * * ?", ""},
	}
	for _, c := range good {
		if err := cron.Validate(c.cron, c.zone); err != nil {
			t.Errorf("Validate(%q, %q) = %v", c.cron, c.zone, err)
		}
	}
	bad := []struct{ cron, zone, msg string }{
		{"", "", "empty"},
		{"0 0 2 * * *", "", "expected exactly 5 fields"},
		{"0 2 * *", "", "expected exactly 5 fields"},
		{"61 * * * *", "", "above maximum"},
		{"0 0 * * 7", "", "above maximum"},
		{"CRON_TZ=UTC 0 2 * * *", "", "CRON_TZ= prefix"},
		{"TZ=UTC 0 2 * * *", "", "TZ= prefix"},
		{"0 2 * * *", "Mars/Olympus", `unknown time zone "Mars/Olympus"`},
		{"0 2 * * *", "Local", "Local"},
		// Files of the machine's zoneinfo directory, not IANA zones.
		{"0 2 * * *", "localtime", `time zone "localtime": want an IANA zone name`},
		{"0 2 * * *", "posixrules", "want an IANA zone name"},
		{"0 2 * * *", "right/UTC", "want an IANA zone name"},
		{"0 2 * * *", "posix/Europe/Berlin", "want an IANA zone name"},
		{"0 2 * * *", "Europe/Berlin ", "unknown time zone"},
		{"0 0 30 2 *", "", "never fires"},
		{"@fortnightly", "", "unrecognized descriptor"},
		// robfig would fire these every second.
		{"@every -1h", "", "at least 1s"},
		{"@every 0s", "", "at least 1s"},
		{"@every 10ms", "", "at least 1s"},
	}
	for _, c := range bad {
		err := cron.Validate(c.cron, c.zone)
		if err == nil || !errors.Is(err, cron.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Validate(%q, %q) = %v, want ErrInvalid mentioning %q", c.cron, c.zone, err, c.msg)
		}
	}
	if _, err := cron.Next(cron.Entry{Policy: "nightly", Cron: "0 25 * * *"}, time.Now()); err == nil || !strings.Contains(err.Error(), "policy nightly") {
		t.Errorf("Next with a bad entry: %v", err)
	}
}

// The policies package validates cron expressions without robfig; whatever
// it accepts must schedule here.
var agreementCorpus = []string{
	"0 2 * * *", "*/15 * * * *", "5/15 * * * *", "0 0-23/2 * * *", "0 0 1,15 * *", "0 0 * JAN,Jul *",
	"0 0 * * MON-FRI", "0 0 * * sun", "? ? ? ? ?", "0 12 31 12 6", "59 23 31 dec sat", "0 0 1 1 0",
	"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@every 1s", "@every 2h45m",
	"60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * 0 *", "* * * * 7", "*/0 * * * *",
	"5-1 * * * *", "*-5 * * * *", "1-2-3 * * * *", "1/2/3 * * * *", "a * * * *", "* * * * * *", "* * * *",
	"@every 0s", "@every", "@every x", "@daily extra", "1,,2 * * * *", "+5 * * * *", "-1 * * * *",
	// Days that never occur in the months named, and what still fires.
	"0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30,31 feb ?", "0 0 30 2 */1", "0 0 31 2-4/2 *",
	"0 0 29 2 *", "0 0 30 2 1", "0 0 30 2 */2", "0 0 ? 2 *", "0 0 31 1-2 *", "0 0 30 2,3 *",
}

func TestPoliciesValidatorAgrees(t *testing.T) {
	accepted := 0
	for _, expr := range agreementCorpus {
		if checkAgreement(t, expr) {
			accepted++
		}
	}
	if accepted < 20 || accepted == len(agreementCorpus) {
		t.Errorf("policies accepted %d of %d: the corpus should hold both kinds", accepted, len(agreementCorpus))
	}
}

func checkAgreement(t testing.TB, expr string) bool {
	t.Helper()
	perr := policies.ValidateCron(expr)
	cerr := cron.Validate(expr, "UTC")
	switch {
	case perr == nil && cerr != nil:
		t.Errorf("policies accepts %q, the cron trigger does not: %v", expr, cerr)
	case perr != nil && cerr == nil && strings.Contains(perr.Error(), "never fires"):
		t.Errorf("policies says %q never fires, the cron trigger schedules it: %v", expr, perr)
	case perr == nil:
		return true
	}
	return false
}

func FuzzPoliciesValidatorAgrees(f *testing.F) {
	for _, expr := range agreementCorpus {
		f.Add(expr)
	}
	f.Fuzz(func(t *testing.T, expr string) { checkAgreement(t, expr) })
}

type recorder struct {
	mu    sync.Mutex
	start time.Time
	fires []string
}

func (r *recorder) fire(ctx context.Context, policy string) {
	if ctx.Err() != nil {
		panic("fired with a done context")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fires = append(r.fires, fmt.Sprintf("%s@%s", policy, time.Since(r.start)))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.fires
	r.fires = nil
	return out
}

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble's clock starts at 2000-01-01 00:00:00 UTC (01:00 in Berlin).
		r := &recorder{start: time.Now()}
		tr, err := cron.New([]cron.Entry{
			{Policy: "quarter", Cron: "*/15 * * * *"},
			{Policy: "hourly", Cron: "@hourly"},
			{Policy: "berlin", Cron: "30 0 * * *", TimeZone: "Europe/Berlin"},
		}, r.fire, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx) }()

		time.Sleep(61 * time.Minute)
		synctest.Wait()
		want := []string{"quarter@15m0s", "quarter@30m0s", "quarter@45m0s", "quarter@1h0m0s", "hourly@1h0m0s"}
		if got := r.take(); !reflect.DeepEqual(got, want) {
			t.Errorf("first hour: %v, want %v", got, want)
		}

		// 00:30 Berlin is 23:30 UTC.
		time.Sleep(23*time.Hour - 2*time.Minute) // to 23:59
		synctest.Wait()
		var berlin []string
		for _, f := range r.take() {
			if strings.HasPrefix(f, "berlin@") {
				berlin = append(berlin, f)
			}
		}
		if want := []string{"berlin@23h30m0s"}; !reflect.DeepEqual(berlin, want) {
			t.Errorf("berlin fires %v, want %v", berlin, want)
		}

		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		default:
			t.Fatal("Run did not return after cancel")
		}
		time.Sleep(3 * time.Hour)
		synctest.Wait()
		if got := r.take(); len(got) != 0 {
			t.Errorf("fired after cancel: %v", got)
		}
	})
}

func TestRunSlowFireSkipsMissedTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{start: time.Now()}
		slow := func(ctx context.Context, policy string) {
			r.fire(ctx, policy)
			time.Sleep(40 * time.Minute) // 15m + 40m = 55m: 30m and 45m pass meanwhile
		}
		tr, err := cron.New([]cron.Entry{{Policy: "q", Cron: "*/15 * * * *"}}, slow, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx) }()
		time.Sleep(61 * time.Minute)
		synctest.Wait()
		if got, want := r.take(), []string{"q@15m0s", "q@1h0m0s"}; !reflect.DeepEqual(got, want) {
			t.Errorf("fires %v, want %v", got, want)
		}
		cancel()
		time.Sleep(time.Hour) // let the slow fire in progress finish
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestRunWithoutEntriesWaitsForCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, err := cron.New(nil, func(context.Context, string) { panic("fired") }, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx) }()
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Run returned before cancel")
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestNewValidatesEveryEntry(t *testing.T) {
	_, err := cron.New([]cron.Entry{
		{Policy: "ok", Cron: "@daily"},
		{Policy: "bad-field", Cron: "0 24 * * *"},
		{Policy: "bad-zone", Cron: "@daily", TimeZone: "Nowhere/City"},
	}, func(context.Context, string) {}, nil)
	if err == nil || !errors.Is(err, cron.ErrInvalid) {
		t.Fatalf("New: %v, want ErrInvalid", err)
	}
	for _, name := range []string{"policy bad-field", "policy bad-zone"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), "policy ok") {
		t.Errorf("error %q names the valid entry", err)
	}
	if _, err := cron.New(nil, nil, nil); err == nil {
		t.Errorf("New with a nil fire function succeeded")
	}
}

// TestNextDailyEveryDay: a daily schedule with a fixed time fires exactly
// once on every local date of a year on which that wall-clock time exists
// (twice-occurring times fire once, at the first), in zones with unusual
// clock changes: 30 minutes (Lord Howe), 2 hours (Troll), negative
// summer time (Dublin), 45-minute offsets (Chatham), midnight changes
// (Santiago, Beirut).
func TestNextDailyEveryDay(t *testing.T) {
	for _, zone := range []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll",
		"Europe/Dublin", "Pacific/Chatham", "America/Santiago", "Asia/Beirut"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, hm := range [][2]int{{0, 0}, {0, 30}, {1, 45}, {2, 0}, {2, 15}, {2, 30}, {3, 0}, {23, 0}, {23, 59}} {
			e := cron.Entry{Policy: "p", Cron: fmt.Sprintf("%d %d * * *", hm[1], hm[0]), TimeZone: zone}
			fires := map[string]time.Time{}
			after := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			for {
				next, err := cron.Next(e, after)
				if err != nil {
					t.Fatal(err)
				}
				if next.Year() > 2026 && next.In(loc).Year() > 2026 {
					break
				}
				l := next.In(loc)
				date := l.Format(time.DateOnly)
				if l.Hour() != hm[0] || l.Minute() != hm[1] {
					t.Fatalf("%s %q fired at %s", zone, e.Cron, l)
				}
				if prev, ok := fires[date]; ok {
					t.Fatalf("%s %q fired twice on %s: %s and %s", zone, e.Cron, date, prev, next)
				}
				fires[date] = next
				after = next
			}
			for d := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC); d.Year() == 2026; d = d.AddDate(0, 0, 1) {
				w := time.Date(d.Year(), d.Month(), d.Day(), hm[0], hm[1], 0, 0, loc)
				exists := w.Day() == d.Day() && w.Hour() == hm[0] && w.Minute() == hm[1]
				got, fired := fires[d.Format(time.DateOnly)]
				switch {
				case exists && !fired:
					t.Errorf("%s %q did not fire on %s", zone, e.Cron, d.Format(time.DateOnly))
				case !exists && fired:
					t.Errorf("%s %q fired on %s at %s, a time that does not exist then", zone, e.Cron, d.Format(time.DateOnly), got)
				case fired:
					for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
						if b := got.Add(-back).In(loc); b.Day() == d.Day() && b.Hour() == hm[0] && b.Minute() == hm[1] {
							t.Errorf("%s %q fired on %s at the second occurrence, %s", zone, e.Cron, d.Format(time.DateOnly), got)
						}
					}
				}
			}
		}
	}
}

// TestNextHourStarByTheClock: a schedule whose hour is * fires at every
// instant whose local wall clock matches, as a minute-by-minute clock
// sees it, around every clock change of 2026 in zones whose changes fall
// at midnight (Africa/Cairo, Asia/Beirut: robfig's Next skipped the whole
// matching day, stepping days from a midnight that does not exist), by
// 30 minutes (Lord Howe) or the usual hour: the repeated hour fires twice,
// a skipped time not at all.
func TestNextHourStarByTheClock(t *testing.T) {
	for _, zone := range []string{"Africa/Cairo", "Asia/Beirut", "Europe/Berlin", "Australia/Lord_Howe", "America/Havana", "America/Santiago"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		// The clock changes of 2026.
		var changes []time.Time
		for h := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); h.Year() == 2026; h = h.Add(time.Hour) {
			if _, a := h.In(loc).Zone(); func() bool { _, b := h.Add(time.Hour).In(loc).Zone(); return a != b }() {
				changes = append(changes, h)
			}
		}
		if len(changes) == 0 {
			t.Fatalf("%s: no clock change in 2026", zone)
		}
		for _, expr := range []string{"0 * * * *", "*/20 * * * *", "30 * * * *", "0 * * * SUN,FRI,SAT", "15 * 24-29 3,4,9,10 *"} {
			e := cron.Entry{Policy: "p", Cron: expr, TimeZone: zone}
			spec := mustMatcher(t, expr)
			for _, ch := range changes {
				from, to := ch.Add(-36*time.Hour), ch.Add(36*time.Hour)
				var want []time.Time
				for m := from.Add(time.Minute); !m.After(to); m = m.Add(time.Minute) {
					if spec(m.In(loc)) {
						want = append(want, m)
					}
				}
				after := from
				for i, w := range want {
					next, err := cron.Next(e, after)
					if err != nil {
						t.Fatal(err)
					}
					if !next.Equal(w) {
						t.Fatalf("%s %q around %s: fire %d is %s (%s), want %s (%s)", zone, expr, ch, i,
							next.UTC(), next.In(loc), w.UTC(), w.In(loc))
					}
					after = next
				}
			}
		}
	}
}

// mustMatcher is a minute-resolution reference for the few 5-field forms
// TestNextHourStarByTheClock uses: "M * DOM MON DOW" with lists, ranges,
// */N and names of days.
func mustMatcher(t *testing.T, expr string) func(time.Time) bool {
	t.Helper()
	f := strings.Fields(expr)
	field := func(s string, lo, hi int, names map[string]int) map[int]bool {
		set := map[int]bool{}
		for _, part := range strings.Split(s, ",") {
			switch {
			case part == "*":
				for i := lo; i <= hi; i++ {
					set[i] = true
				}
			case strings.HasPrefix(part, "*/"):
				var n int
				fmt.Sscanf(part, "*/%d", &n)
				for i := lo; i <= hi; i += n {
					set[i] = true
				}
			case names[part] != 0 || part == "SUN":
				set[names[part]] = true
			case strings.Contains(part, "-"):
				var a, b int
				fmt.Sscanf(part, "%d-%d", &a, &b)
				for i := a; i <= b; i++ {
					set[i] = true
				}
			default:
				var n int
				if _, err := fmt.Sscanf(part, "%d", &n); err != nil {
					t.Fatalf("reference cannot read %q", part)
				}
				set[n] = true
			}
		}
		return set
	}
	days := map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
	minute, dom, month, dow := field(f[0], 0, 59, nil), field(f[2], 1, 31, nil), field(f[3], 1, 12, nil), field(f[4], 0, 6, days)
	if f[1] != "*" {
		t.Fatalf("reference: hour %q is not *", f[1])
	}
	domStar, dowStar := f[2] == "*", f[4] == "*"
	return func(l time.Time) bool {
		d, w := dom[l.Day()], dow[int(l.Weekday())]
		day := d && w
		if !domStar && !dowStar {
			day = d || w
		}
		return l.Second() == 0 && minute[l.Minute()] && month[int(l.Month())] && day
	}
}
