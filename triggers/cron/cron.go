package cron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/thawdb/thaw/policies"
)

// ErrInvalid reports an expression or time zone that cannot be scheduled.
var ErrInvalid = errors.New("cron: invalid schedule")

// Entry is one policy's schedule.
type Entry struct {
	Policy string
	// Cron is a standard 5-field expression (minute hour day-of-month month
	// day-of-week) or a descriptor (@daily, @hourly, @every 1h30m, ...).
	Cron string
	// TimeZone is an IANA zone name; "" is UTC.
	TimeZone string
}

// neverRef is a fixed instant to test that a schedule fires at all (a
// leap year, so that February 29 is found).
var neverRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// parser is the standard 5-field parser plus descriptors; no seconds field.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// schedule parses expr in the named zone.
func schedule(expr, timeZone string) (cron.Schedule, error) {
	fields := strings.Fields(expr)
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: empty cron expression", ErrInvalid)
	}
	if strings.HasPrefix(fields[0], "TZ=") || strings.HasPrefix(fields[0], "CRON_TZ=") {
		return nil, fmt.Errorf("%w: %q: give the zone as the time zone, not a %s prefix", ErrInvalid, expr, fields[0][:strings.IndexByte(fields[0], '=')+1])
	}
	if timeZone == "" {
		timeZone = "UTC"
	}
	if _, err := policies.LoadTimeZone(timeZone); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if fields[0] == "@every" && len(fields) == 2 {
		// robfig raises an interval below a second (zero, negative) to
		// one: a policy reconciled every second.
		if d, err := time.ParseDuration(fields[1]); err == nil && d < time.Second {
			return nil, fmt.Errorf("%w: %q: the interval must be at least 1s", ErrInvalid, expr)
		}
	}
	// robfig reads the zone from a CRON_TZ prefix; the fields are re-joined
	// with single spaces because its descriptor matching is exact.
	s, err := parser.Parse("CRON_TZ=" + timeZone + " " + strings.Join(fields, " "))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalid, expr, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		s = localSchedule{SpecSchedule: spec, repeat: spec.Hour&starBit != 0}
	}
	// robfig gives up (zero time) when nothing matches within five years:
	// "0 0 30 2 *" parses but never fires.
	if s.Next(neverRef).IsZero() {
		return nil, fmt.Errorf("%w: %q never fires", ErrInvalid, expr)
	}
	return s, nil
}

// starBit marks a field written as * or ? in robfig's SpecSchedule.
const starBit = 1 << 63

// localSchedule is a 5-field schedule walked on the local calendar:
// robfig's Next steps days by adding hours, which a 30-minute clock change
// (Lord Howe Island) throws off, and from local midnights, which a change
// at midnight (Africa/Cairo, Asia/Beirut) removes: both skipped whole
// days. A local time that a daylight-saving change skips does not fire
// that day. One it repeats fires once, at its first occurrence (robfig
// fires 02:30 twice on a fall-back night), unless the schedule's hour is
// * (repeat): then, as in Vixie cron, it fires by the clock through the
// repeated hour, at both occurrences.
type localSchedule struct {
	*cron.SpecSchedule
	repeat bool
}

// dstShifts are the clock changes that exist (Lord Howe Island shifts by
// 30 minutes, everyone else by one hour; two hours covers the historical
// double summer times), largest first.
var dstShifts = []time.Duration{2 * time.Hour, time.Hour, 30 * time.Minute}

// nextDays is how far Next looks, as robfig does: five years.
const nextDays = 5*366 + 1

func (s localSchedule) Next(after time.Time) time.Time {
	y, m, d := after.In(s.Location).Date()
	for i := range nextDays {
		// Calendar arithmetic in UTC, where every day has 24 hours.
		day := time.Date(y, m, d+i, 0, 0, 0, 0, time.UTC)
		if s.Month&(1<<uint(day.Month())) == 0 || !s.dayMatches(day) {
			continue
		}
		if t := s.nextOn(day, after); !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// nextOn returns the first fire time after after on the local day day (a
// UTC date), or zero. A repeated hour's second occurrences come after the
// first occurrences of later wall-clock times, so the earliest instant of
// the day is kept, not the first wall-clock time found.
func (s localSchedule) nextOn(day, after time.Time) time.Time {
	var best time.Time
	consider := func(t time.Time) {
		if t.After(after) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	for h := range 24 {
		if s.Hour&(1<<uint(h)) == 0 {
			continue
		}
		for mi := range 60 {
			if s.Minute&(1<<uint(mi)) == 0 {
				continue
			}
			for sec := range 60 {
				if s.Second&(1<<uint(sec)) == 0 {
					continue
				}
				t := time.Date(day.Year(), day.Month(), day.Day(), h, mi, sec, 0, s.Location)
				if t.Day() != day.Day() || t.Hour() != h || t.Minute() != mi || t.Second() != sec {
					continue // a time the clock change skips
				}
				t = s.first(t)
				if !s.repeat {
					// First occurrences follow the wall clock's order.
					if t.After(after) {
						return t
					}
					continue
				}
				consider(t)
				for _, d := range dstShifts {
					if later := t.Add(d); sameWallClock(later.In(s.Location), t.In(s.Location)) {
						consider(later)
					}
				}
			}
		}
	}
	return best
}

// dayMatches is robfig's rule: day of month and day of week both match
// when either is *, else either matches.
func (s localSchedule) dayMatches(day time.Time) bool {
	dom := s.Dom&(1<<uint(day.Day())) != 0
	dow := s.Dow&(1<<uint(day.Weekday())) != 0
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// first returns the first instant whose wall clock in the schedule's zone
// is t's: t itself unless a clock change repeats it.
func (s localSchedule) first(t time.Time) time.Time {
	local := t.In(s.Location)
	for _, d := range dstShifts {
		if earlier := t.Add(-d); sameWallClock(earlier.In(s.Location), local) {
			return earlier
		}
	}
	return t
}

func sameWallClock(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

// Validate checks that expr parses (5 fields or a descriptor) and timeZone
// is a known IANA zone ("" = UTC).
func Validate(expr, timeZone string) error {
	_, err := schedule(expr, timeZone)
	return err
}

// Next returns the entry's first fire time strictly after after. Times are
// computed in the entry's zone: a local time that a daylight-saving change
// skips does not fire that day, and one it repeats fires once.
func Next(e Entry, after time.Time) (time.Time, error) {
	s, err := schedule(e.Cron, e.TimeZone)
	if err != nil {
		return time.Time{}, fmt.Errorf("policy %s: %w", e.Policy, err)
	}
	next := s.Next(after)
	if next.IsZero() {
		return time.Time{}, fmt.Errorf("%w: policy %s: %q never fires", ErrInvalid, e.Policy, e.Cron)
	}
	return next, nil
}

// Trigger calls fire for each entry at its scheduled times.
type Trigger struct {
	entries []entry
	fire    func(ctx context.Context, policy string)
	log     *slog.Logger
}

type entry struct {
	Entry
	sched cron.Schedule
}

// New validates every entry. fire is called from Run's goroutine, one call
// at a time; it should only enqueue (a slow fire delays later fires, and
// fire times that pass while it runs are skipped, not replayed). A nil
// logger discards.
func New(entries []Entry, fire func(ctx context.Context, policy string), logger *slog.Logger) (*Trigger, error) {
	if fire == nil {
		return nil, errors.New("cron: nil fire function")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &Trigger{fire: fire, log: logger}
	var errs []error
	for _, e := range entries {
		s, err := schedule(e.Cron, e.TimeZone)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", e.Policy, err))
			continue
		}
		t.entries = append(t.entries, entry{Entry: e, sched: s})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// maxSleep bounds one wait of Run between looks at the wall clock.
const maxSleep = time.Minute

// Run fires entries until ctx is done, then returns nil. It reads the clock
// only through time.Now and time.NewTimer, so testing/synctest can drive it.
// Schedules start from the time Run starts: fire times missed while the
// process was not running are not replayed (the promoter's periodic
// reconcile catches up level-based). Entries due at the same instant fire
// in the order given to New.
func (t *Trigger) Run(ctx context.Context) error {
	if len(t.entries) == 0 {
		<-ctx.Done()
		return nil
	}
	now := time.Now()
	next := make([]time.Time, len(t.entries))
	for i, e := range t.entries {
		next[i] = e.sched.Next(now)
		t.log.Debug("cron scheduled", "policy", e.Policy, "cron", e.Cron, "zone", e.TimeZone, "next", next[i])
	}
	for {
		earliest := time.Time{}
		for _, n := range next {
			if !n.IsZero() && (earliest.IsZero() || n.Before(earliest)) {
				earliest = n
			}
		}
		if earliest.IsZero() {
			<-ctx.Done() // nothing will ever fire
			return nil
		}
		// Fire times are wall-clock times, timers run on the monotonic
		// clock: sleeping at most maxSleep at a time, the loop notices a
		// wall clock set forward (NTP after boot) or time spent suspended
		// within that, instead of firing that much late.
		timer := time.NewTimer(min(time.Until(earliest), maxSleep))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		now = time.Now()
		for i, e := range t.entries {
			if next[i].IsZero() || next[i].After(now) {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			t.log.Info("cron fired", "policy", e.Policy, "scheduled", next[i])
			t.fire(ctx, e.Policy)
			next[i] = e.sched.Next(time.Now())
		}
	}
}
