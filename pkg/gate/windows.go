package gate

// This file says whether an approved plan may apply now under
// spec.approval.windows, and when it may if not. The manager holds a plan
// at the approval gate outside its windows; kubectl tfrun shows the same.

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones without the host's zoneinfo (distroless images)

	"github.com/robfig/cron/v3"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Windows are compiled change windows.
type Windows struct {
	ws []window
}

type window struct {
	spec  infrav1.ChangeWindow
	sched cron.Schedule
	loc   *time.Location
	dur   time.Duration
}

// Compile parses windows; the error names the first window that does not
// parse, and its field.
func Compile(windows []infrav1.ChangeWindow) (*Windows, error) {
	w := &Windows{}
	for i, cw := range windows {
		at := fmt.Sprintf("spec.approval.windows[%d] (%s)", i, cw.Name)
		if strings.HasPrefix(cw.Schedule, "TZ=") || strings.HasPrefix(cw.Schedule, "CRON_TZ=") {
			return nil, fmt.Errorf("%s.schedule: set the time zone in timeZone, not in the schedule", at)
		}
		if strings.HasPrefix(cw.Schedule, "@every") {
			return nil, fmt.Errorf("%s.schedule %q repeats from whenever it is read, so it opens no window at set times; use cron's five fields, e.g. \"*/10 * * * *\"", at, cw.Schedule)
		}
		sched, err := cron.ParseStandard(cw.Schedule)
		if err != nil {
			return nil, fmt.Errorf("%s.schedule %q is not a cron schedule (minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"): %v", at, cw.Schedule, err)
		}
		loc := time.UTC
		if cw.TimeZone == "Local" {
			return nil, fmt.Errorf("%s.timeZone Local is the manager's own time zone, which nobody reading the window knows; name an IANA zone (e.g. Europe/Berlin) or leave it out for UTC", at)
		}
		if cw.TimeZone != "" {
			if loc, err = time.LoadLocation(cw.TimeZone); err != nil {
				return nil, fmt.Errorf("%s.timeZone %q is not a time zone of the IANA database (e.g. Europe/Berlin): %v", at, cw.TimeZone, err)
			}
		}
		if cw.Duration.Duration <= 0 {
			return nil, fmt.Errorf("%s.duration must be positive", at)
		}
		x := window{spec: cw, sched: sched, loc: loc, dur: cw.Duration.Duration}
		// cron gives up after five years: a schedule such as "0 9 30 2 *"
		// (the 30th of February) never opens, and would hold every
		// approved plan for good.
		if x.next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, fmt.Errorf("%s.schedule %q never opens (no day matches it); check its day-of-month and month", at, cw.Schedule)
		}
		w.ws = append(w.ws, x)
	}
	return w, nil
}

// next is the window's first opening after t.
//
// cron's own Next skips a time that a DST night skips (a daily 02:30
// Europe/Berlin window opened a day late on the last Sunday of March), and
// sees a wall time that an autumn night has twice only once. So the
// schedule is read on the wall clock of the window's zone, from a little
// before t's wall time (the wall clock goes back in autumn), and each wall
// time it gives is mapped to every instant that has it: a wall time the
// spring night skips opens at the first instant after the gap (03:00 CEST
// for 02:30), and one the autumn night has twice opens at each.
func (w window) next(t time.Time) time.Time {
	const slack = 3 * time.Hour // more than any zone's DST shift
	wall := wallClock(t, w.loc).Add(-slack)
	var best time.Time
	for range 2000 {
		n := w.sched.Next(wall)
		if n.IsZero() || (!best.IsZero() && n.Sub(wallClock(best, w.loc)) > slack) {
			break
		}
		for _, at := range instants(n, w.loc) {
			if at.After(t) && (best.IsZero() || at.Before(best)) {
				best = at
			}
		}
		wall = n
	}
	return best
}

// wallClock is t's wall time in loc, written as a UTC time.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instants are the instants whose wall time in loc is wall (two on an
// autumn night), or, when a spring night skips it, the instant the gap
// ends.
func instants(wall time.Time, loc *time.Location) []time.Time {
	a := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, loc)
	var out []time.Time
	for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -30 * time.Minute, 0, 30 * time.Minute, time.Hour, 2 * time.Hour} {
		if c := a.Add(d); wallClock(c, loc).Equal(wall) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		// In a gap: time.Date went past it by the gap's length; the gap
		// ends where the zone in effect at a begins.
		if start, _ := a.ZoneBounds(); !start.IsZero() && start.Before(a) {
			a = start
		}
		out = append(out, a)
	}
	return out
}

// openAt says whether a window is open at t, and when it closes.
func (w window) openAt(t time.Time) (bool, time.Time) {
	// The last opening at or before t is the first after t - duration, if
	// it is not after t.
	start := w.next(t.Add(-w.dur))
	if start.IsZero() || start.After(t) {
		return false, time.Time{}
	}
	return true, start.Add(w.dur)
}

// State says whether a plan may apply at t: outside every Deny window, and
// inside an Allow window when there are any. When it may not, why names
// the window, and next is the earliest time it may (zero: not within a
// year).
func (w *Windows) State(t time.Time) (open bool, why string, next time.Time) {
	if w == nil || len(w.ws) == 0 {
		return true, "", time.Time{}
	}
	first := ""
	at := t
	for range 1000 {
		ok, reason, until := w.stateAt(at)
		if first == "" {
			first = reason
		}
		if ok {
			if at.Equal(t) {
				return true, "", time.Time{}
			}
			return false, first, at
		}
		if until.IsZero() || until.Sub(t) > 366*24*time.Hour {
			break
		}
		at = until
	}
	return false, first, time.Time{}
}

// stateAt says whether t is open, and otherwise the next time that may
// change.
func (w *Windows) stateAt(t time.Time) (bool, string, time.Time) {
	var denyEnd time.Time
	denyName := ""
	hasAllow := false
	var allowNext time.Time
	allowName := ""
	allowed := false
	for _, x := range w.ws {
		open, end := x.openAt(t)
		switch x.spec.Type {
		case infrav1.WindowDeny:
			if open && end.After(denyEnd) {
				denyEnd, denyName = end, x.spec.Name
			}
		default:
			hasAllow = true
			if open {
				allowed = true
				continue
			}
			if n := x.next(t); !n.IsZero() && (allowNext.IsZero() || n.Before(allowNext)) {
				allowNext, allowName = n, x.spec.Name
			}
		}
	}
	switch {
	case !denyEnd.IsZero():
		return false, "inside deny window " + denyName, denyEnd
	case hasAllow && !allowed:
		return false, "outside every allow window (the next is " + allowName + ")", allowNext
	}
	return true, "", time.Time{}
}
