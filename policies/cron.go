package policies

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

type cronField struct {
	name     string
	min, max int
	names    map[string]int
}

var cronFields = [5]cronField{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}},
	{name: "day-of-week", min: 0, max: 6, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}},
}

var cronDescriptors = map[string]bool{
	"@yearly": true, "@annually": true, "@monthly": true, "@weekly": true,
	"@daily": true, "@midnight": true, "@hourly": true,
}

// ValidateCron checks a cron expression: five fields (minute 0-59, hour
// 0-23, day-of-month 1-31, month 1-12 or JAN-DEC, day-of-week 0-6 or SUN-SAT;
// each a comma list of *, ?, N, N-M, with an optional /step) or one of the
// descriptors @yearly, @annually, @monthly, @weekly, @daily, @midnight,
// @hourly, "@every <duration>" (at least 1s). A CRON_TZ= or TZ= prefix is
// refused: the zone is a separate setting.
//
// It accepts a subset of what the cron trigger's parser (robfig/cron, the
// standard parser) accepts, so a policy that validates here also schedules
// there; it lives here so that this package needs only the standard library.
func ValidateCron(expr string) error {
	fields := strings.Fields(expr)
	if len(fields) == 0 {
		return fmt.Errorf("empty cron expression")
	}
	if strings.HasPrefix(fields[0], "TZ=") || strings.HasPrefix(fields[0], "CRON_TZ=") {
		return fmt.Errorf("cron %q: set the zone with timeZone, not a %s prefix", expr, fields[0][:strings.IndexByte(fields[0], '=')+1])
	}
	if strings.HasPrefix(fields[0], "@") {
		if fields[0] == "@every" {
			if len(fields) != 2 {
				return fmt.Errorf("cron %q: want @every <duration>, such as @every 1h30m", expr)
			}
			d, err := time.ParseDuration(fields[1])
			if err != nil {
				return fmt.Errorf("cron %q: %w", expr, err)
			}
			if d < time.Second {
				return fmt.Errorf("cron %q: the interval must be at least 1s", expr)
			}
			return nil
		}
		if len(fields) != 1 || !cronDescriptors[fields[0]] {
			return fmt.Errorf("cron %q: unknown descriptor (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)", expr)
		}
		return nil
	}
	if len(fields) != 5 {
		return fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, len(fields))
	}
	var sets [5]cronSet
	for i, f := range fields {
		set, err := cronFields[i].check(f)
		if err != nil {
			return fmt.Errorf("cron %q: %s field %q: %w", expr, cronFields[i].name, f, err)
		}
		sets[i] = set
	}
	// As in the trigger's parser: a day-of-week written * (or ?) leaves the
	// day to the day of the month alone; if no day of the month it names
	// occurs in a month it names (February has 29 days in leap years), the
	// schedule never fires.
	days, months, weekdays := sets[2], sets[3], sets[4]
	if !days.star && weekdays.star {
		for m := 1; m <= 12; m++ {
			for d := 1; d <= daysIn[m]; d++ {
				if months.bits&(1<<m) != 0 && days.bits&(1<<d) != 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("cron %q: never fires: no day of the month it names (%s) occurs in a month it names (%s)", expr, fields[2], fields[3])
	}
	return nil
}

// daysIn is the most days each month has (February's in a leap year).
var daysIn = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// cronSet is the values a field selects, and whether it is written * or ?
// (without a step above 1), which the trigger's parser treats as "any".
type cronSet struct {
	bits uint64
	star bool
}

func (cf cronField) check(field string) (cronSet, error) {
	var set cronSet
	for part := range strings.SplitSeq(field, ",") {
		ps, err := cf.checkPart(part)
		if err != nil {
			return cronSet{}, err
		}
		set.bits |= ps.bits
		set.star = set.star || ps.star
	}
	return set, nil
}

// checkPart checks one list element and returns what it selects.
func (cf cronField) checkPart(part string) (cronSet, error) {
	if part == "" {
		return cronSet{}, fmt.Errorf("empty list element")
	}
	rng, stepText, hasStep := strings.Cut(part, "/")
	if hasStep && strings.Contains(stepText, "/") {
		return cronSet{}, fmt.Errorf("%q: too many slashes", part)
	}
	lowText, highText, hasHigh := strings.Cut(rng, "-")
	var low, high int
	wild := lowText == "*" || lowText == "?"
	if wild {
		if hasHigh {
			return cronSet{}, fmt.Errorf("%q: a range cannot start with %s", part, lowText)
		}
		low, high = cf.min, cf.max
	} else {
		var err error
		if low, err = cf.value(lowText); err != nil {
			return cronSet{}, err
		}
		high = low
		if hasHigh {
			if high, err = cf.value(highText); err != nil {
				return cronSet{}, err
			}
		}
	}
	step := 1
	if hasStep {
		var err error
		step, err = strconv.Atoi(stepText)
		if err != nil || strings.TrimLeft(stepText, "0123456789") != "" || step <= 0 {
			return cronSet{}, fmt.Errorf("%q: the step must be a positive integer", part)
		}
		if !hasHigh && !wild {
			high = cf.max // "N/step" means N-max/step
		}
	}
	switch {
	case low < cf.min:
		return cronSet{}, fmt.Errorf("%d is below the minimum %d", low, cf.min)
	case high > cf.max:
		return cronSet{}, fmt.Errorf("%d is above the maximum %d", high, cf.max)
	case low > high:
		return cronSet{}, fmt.Errorf("%q: the range starts after it ends", part)
	}
	set := cronSet{star: wild && step == 1}
	for v := low; v <= high; v += step {
		set.bits |= 1 << v
	}
	return set, nil
}

func (cf cronField) value(s string) (int, error) {
	if n, ok := cf.names[strings.ToLower(s)]; ok {
		return n, nil
	}
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		if cf.names != nil {
			return 0, fmt.Errorf("%q is not a number or a %s name", s, cf.name)
		}
		return 0, fmt.Errorf("%q is not a number", s)
	}
	n, _ := strconv.Atoi(s)
	return n, nil
}

// LoadTimeZone loads an IANA time zone for a schedule. Names that stand
// for the machine's own zone or a file of its zoneinfo directory rather
// than an IANA zone are refused, since they would make a schedule (and
// whether a policy validates) depend on the machine: "Local", "localtime"
// (a link to /etc/localtime on Debian), "posixrules", and the "posix/"
// and "right/" trees (right/ counts leap seconds).
func LoadTimeZone(name string) (*time.Location, error) {
	if name == "Local" || name == "" || name == "localtime" || name == "posixrules" ||
		strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/") {
		return nil, fmt.Errorf("time zone %q: want an IANA zone name such as UTC or Europe/Berlin", name)
	}
	if strings.ContainsAny(name, " \t\n") {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return loc, nil
}
