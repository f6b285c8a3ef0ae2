package gate

import (
	"os"

	"sigs.k8s.io/yaml"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func win(name string, typ infrav1.WindowType, schedule string, d time.Duration, tz string) infrav1.ChangeWindow {
	return infrav1.ChangeWindow{Name: name, Type: typ, Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: tz}
}

func TestState(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// Monday 2026-11-30.
	at := func(day, hour, minute int) time.Time { return time.Date(2026, 11, 30+day, hour, minute, 0, 0, berlin) }
	business := win("business-hours", infrav1.WindowAllow, "0 9 * * 1-5", 8*time.Hour, "Europe/Berlin")
	// Fridays from 15:00 to Monday 06:00.
	freeze := win("friday-freeze", infrav1.WindowDeny, "0 15 * * 5", 63*time.Hour, "Europe/Berlin")
	for _, tc := range []struct {
		what    string
		windows []infrav1.ChangeWindow
		now     time.Time
		open    bool
		why     string
		next    time.Time
	}{
		{"no windows", nil, at(0, 3, 0), true, "", time.Time{}},
		{"inside business hours", []infrav1.ChangeWindow{business}, at(0, 10, 0), true, "", time.Time{}},
		{"at the opening", []infrav1.ChangeWindow{business}, at(0, 9, 0), true, "", time.Time{}},
		{"at the closing: closed", []infrav1.ChangeWindow{business}, at(0, 17, 0), false, "outside every allow window", at(1, 9, 0)},
		{"before business hours", []infrav1.ChangeWindow{business}, at(0, 7, 30), false, "outside every allow window (the next is business-hours)", at(0, 9, 0)},
		{"Friday afternoon: frozen though in business hours", []infrav1.ChangeWindow{business, freeze}, at(4, 16, 0), false, "inside deny window friday-freeze", at(7, 9, 0)},
		{"Friday morning: open", []infrav1.ChangeWindow{business, freeze}, at(4, 11, 0), true, "", time.Time{}},
		{"Sunday, only the freeze: frozen until Monday 06:00", []infrav1.ChangeWindow{freeze}, at(6, 12, 0), false, "inside deny window friday-freeze", at(7, 6, 0)},
		{"the same instant in UTC", []infrav1.ChangeWindow{business}, at(0, 10, 0).UTC(), true, "", time.Time{}},
	} {
		ws, err := Compile(tc.windows)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		open, why, next := ws.State(tc.now)
		if open != tc.open || !strings.HasPrefix(why, tc.why) || !next.Equal(tc.next) {
			t.Errorf("%s: State(%s) = %v, %q, %s; want %v, %q, %s", tc.what, tc.now, open, why, next, tc.open, tc.why, tc.next)
		}
	}
}

func TestBadWindowsAreNamed(t *testing.T) {
	for _, tc := range []struct {
		w    infrav1.ChangeWindow
		want string
	}{
		{win("w", infrav1.WindowAllow, "0 9 * *", time.Hour, ""), "spec.approval.windows[1] (w).schedule \"0 9 * *\" is not a cron schedule"},
		{win("w", infrav1.WindowAllow, "0 9 * * *", time.Hour, "Mars/Olympus"), "spec.approval.windows[1] (w).timeZone \"Mars/Olympus\""},
		{win("w", infrav1.WindowAllow, "@every 1h", time.Hour, ""), "repeats from whenever it is read"},
		{win("w", infrav1.WindowAllow, "CRON_TZ=UTC 0 9 * * *", time.Hour, ""), "set the time zone in timeZone"},
		{win("w", infrav1.WindowAllow, "0 9 30 2 *", time.Hour, ""), "spec.approval.windows[1] (w).schedule \"0 9 30 2 *\" never opens"},
		{win("w", infrav1.WindowDeny, "0 9 31 4,6,9,11 *", time.Hour, ""), "never opens"},
		{win("w", infrav1.WindowAllow, "0 9 * * *", time.Hour, "Local"), "spec.approval.windows[1] (w).timeZone Local is the manager's own time zone"},
	} {
		_, err := Compile([]infrav1.ChangeWindow{win("ok", infrav1.WindowDeny, "@daily", time.Hour, ""), tc.w})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.w, err, tc.want)
		}
	}
}

// The Friday freeze of docs/policies.md, as docs/examples/plan-rules.yaml
// holds it.
func TestDocFreeze(t *testing.T) {
	b, err := os.ReadFile("../../docs/examples/plan-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var run infrav1.TerraformRun
	if err := yaml.Unmarshal(b, &run); err != nil {
		t.Fatal(err)
	}
	ws, err := Compile(run.Spec.Approval.Windows)
	if err != nil || len(run.Spec.Approval.Windows) != 1 {
		t.Fatalf("%v, %+v", err, run.Spec.Approval.Windows)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, tc := range []struct {
		now  time.Time
		open bool
		next time.Time
	}{
		{time.Date(2026, 12, 4, 14, 59, 0, 0, berlin), true, time.Time{}},                                // Friday
		{time.Date(2026, 12, 4, 15, 0, 0, 0, berlin), false, time.Date(2026, 12, 7, 6, 0, 0, 0, berlin)}, // Friday
		{time.Date(2026, 12, 6, 23, 0, 0, 0, berlin), false, time.Date(2026, 12, 7, 6, 0, 0, 0, berlin)}, // Sunday
		{time.Date(2027, 3, 26, 16, 0, 0, 0, berlin), false, time.Date(2027, 3, 29, 7, 0, 0, 0, berlin)}, // 63 hours of elapsed time: 07:00 CEST the weekend summer time starts
		{time.Date(2026, 12, 7, 6, 0, 0, 0, berlin), true, time.Time{}},                                  // Monday
	} {
		open, _, next := ws.State(tc.now)
		if open != tc.open || !next.Equal(tc.next) {
			t.Errorf("%s: open %v until %s, want %v until %s", tc.now, open, next, tc.open, tc.next)
		}
	}
}

// DST nights (Europe/Berlin, 2027): a wall time the spring night skips
// opens at the first instant after the gap, the same day (cron alone
// opened it a day late); a wall time the autumn night has twice opens at
// the first occurrence after now.
func TestDaylightSavingNights(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	utc := func(mo time.Month, d, h, mi int) time.Time { return time.Date(2027, mo, d, h, mi, 0, 0, time.UTC) }
	daily := []infrav1.ChangeWindow{win("nightly", infrav1.WindowAllow, "30 2 * * *", time.Hour, "Europe/Berlin")}
	for _, tc := range []struct {
		what string
		now  time.Time
		open bool
		next time.Time
	}{
		// 28 March: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
		{"the spring night, before the gap", utc(3, 28, 0, 30), false, utc(3, 28, 1, 0)},
		{"the spring night, just after the gap", utc(3, 28, 1, 10), true, time.Time{}},
		{"the spring night, an hour after the gap", utc(3, 28, 2, 0), false, utc(3, 29, 0, 30)},
		{"the day before", utc(3, 27, 1, 40), true, time.Time{}},
		// 31 October: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30
		// is 00:30 UTC, then 01:30 UTC.
		{"the autumn night, before both", utc(10, 31, 0, 10), false, utc(10, 31, 0, 30)},
		{"the autumn night, inside the first", utc(10, 31, 0, 45), true, time.Time{}},
		{"the autumn night, between them", utc(10, 31, 1, 10), true, time.Time{}},
		{"the autumn night, after both", utc(10, 31, 2, 40), false, utc(11, 1, 1, 30)},
	} {
		ws, err := Compile(daily)
		if err != nil {
			t.Fatal(err)
		}
		open, _, next := ws.State(tc.now)
		if open != tc.open || !next.Equal(tc.next) {
			t.Errorf("%s: State(%s) = open %v, next %s; want %v, %s", tc.what, tc.now.In(berlin), open, next.In(berlin), tc.open, tc.next.In(berlin))
		}
	}
}
