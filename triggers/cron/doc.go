// Package cron turns cron schedules into promotion requests: at each
// scheduled time it calls a fire function with the policy's name (the
// promoter enqueues that policy's keys). Triggers only enqueue keys; they
// never promote. This is the only package that imports
// github.com/robfig/cron/v3, and only its parser: the loop is our own so
// that it reads the clock only through time.Now and time.Timer and can be
// tested with testing/synctest.
//
// # Expressions
//
// Standard 5-field expressions (minute hour day-of-month month
// day-of-week; names JAN-DEC and SUN-SAT; *, ?, ranges, lists, steps) and
// the descriptors @yearly, @annually, @monthly, @weekly, @daily,
// @midnight, @hourly and "@every <duration>". No seconds field. The zone
// is a separate setting (IANA name, "" = UTC; "Local" and CRON_TZ=/TZ=
// prefixes are refused); zones come from the embedded time zone database.
// An expression that parses but never matches ("0 0 30 2 *") is invalid.
//
// # Daylight saving time
//
// Times are computed in the entry's zone. A local time that a spring-
// forward change skips does not fire that day (02:30 in Europe/Berlin on
// the last Sunday of March). A time that a fall-back change repeats fires
// once when the hour field is fixed ("30 2 * * *"); with an hour of * the
// schedule keeps firing by the clock through the repeated hour, as in Vixie
// cron. Every other day fires, also where the change removes midnight
// (Africa/Cairo, Asia/Beirut) or shifts by 30 minutes (Lord Howe Island):
// the local calendar is walked day by day. Schedule away from the local
// clock changes (02:00-03:00 in most zones, midnight in some), or in UTC,
// to avoid both.
// @every intervals are absolute durations and ignore zones.
//
// # Run
//
// Trigger.Run blocks until its context is done and returns nil. It computes
// each entry's next time from the moment it starts, sleeps on one timer until
// the earliest, fires every entry that is due (in the order given to New),
// and computes their next times from the clock after firing. fire is called
// from Run's goroutine, one call at a time, and should only enqueue. Fire
// times missed while the process was down, or while fire was running, are
// not replayed: the promoter's periodic reconcile is level-based and catches
// up. Run is meant to run on the leading promoter only.
package cron

import _ "time/tzdata" // zones, whatever the machine has
