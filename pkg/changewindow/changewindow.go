// Package changewindow says whether an approved plan may apply now under
// spec.approval.windows, and when it may if not. The manager holds a plan
// at the approval gate outside its windows; kubectl tfrun shows the same.
package changewindow

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
		if cw.TimeZone != "" {
			if loc, err = time.LoadLocation(cw.TimeZone); err != nil {
				return nil, fmt.Errorf("%s.timeZone %q is not a time zone of the IANA database (e.g. Europe/Berlin): %v", at, cw.TimeZone, err)
			}
		}
		if cw.Duration.Duration <= 0 {
			return nil, fmt.Errorf("%s.duration must be positive", at)
		}
		w.ws = append(w.ws, window{spec: cw, sched: sched, loc: loc, dur: cw.Duration.Duration})
	}
	return w, nil
}

// openAt says whether a window is open at t, and when it closes.
func (w window) openAt(t time.Time) (bool, time.Time) {
	// The last opening at or before t is the first after t - duration, if
	// it is not after t.
	start := w.sched.Next(t.In(w.loc).Add(-w.dur))
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
			if n := x.sched.Next(t.In(x.loc)); !n.IsZero() && (allowNext.IsZero() || n.Before(allowNext)) {
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
