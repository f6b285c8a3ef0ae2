package receiver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// sha is a commit SHA of the digit d.
func shaOf(d string) string { return strings.Repeat(d, 40) }

// push is a push of main from before to after in the test repository,
// received at minute m, with the given state.
func push(delivery, before, after string, m int, state infrav1.ReceivedPushState) infrav1.ReceivedPush {
	return infrav1.ReceivedPush{Delivery: delivery, Digest: "digest-" + delivery, ReceivedAt: metav1.NewTime(t0.Add(time.Duration(m) * time.Minute)),
		Event: infrav1.ReceiverPush, Ref: "main", Repos: []string{"https://git.example.com/team/infra.git"}, Before: before, Commit: after, State: state}
}

func states(pushes []infrav1.ReceivedPush) []string {
	var out []string
	for _, p := range pushes {
		out = append(out, p.Delivery+"="+string(p.State))
	}
	return out
}

func TestRecord(t *testing.T) {
	done := infrav1.PushDone
	handled := []infrav1.ReceivedPush{push("d1", "", shaOf("1"), 0, done), push("d2", shaOf("1"), shaOf("2"), 1, done)}
	for name, tc := range map[string]struct {
		have    []infrav1.ReceivedPush
		p       infrav1.ReceivedPush
		now     time.Time
		want    []string
		wantErr error
	}{
		"a new push is pending": {
			have: handled, p: push("d3", shaOf("2"), shaOf("3"), 2, ""),
			want: []string{"d1=Done", "d2=Done", "d3=Pending"},
		},
		"the same delivery id is a duplicate": {
			have: handled, p: func() infrav1.ReceivedPush {
				p := push("d2", shaOf("2"), shaOf("3"), 2, "")
				p.Digest = "other"
				return p
			}(),
			wantErr: ErrDuplicate,
		},
		"the same payload under a fresh delivery id is a duplicate (a replay: the id is not signed)": {
			have: handled, p: func() infrav1.ReceivedPush {
				p := push("forged-id", shaOf("1"), shaOf("2"), 2, "")
				p.Digest = "digest-d2"
				return p
			}(),
			wantErr: ErrDuplicate,
		},
		"a late push whose commit is the before of a push handled is stale": {
			have: handled, p: push("d0", shaOf("0"), shaOf("1"), 2, ""),
			want: []string{"d1=Done", "d2=Done", "d0=Stale"},
		},
		"a push to the head already reached is stale": {
			have: handled, p: push("d9", shaOf("9"), shaOf("2"), 2, ""),
			want: []string{"d1=Done", "d2=Done", "d9=Stale"},
		},
		"a force push back to an old commit from the head moves forward": {
			have: handled, p: push("d3", shaOf("2"), shaOf("1"), 2, ""),
			want: []string{"d1=Done", "d2=Done", "d3=Pending"},
		},
		"a push that relates to none recorded is new": {
			have: handled, p: push("d3", shaOf("7"), shaOf("8"), 2, ""),
			want: []string{"d1=Done", "d2=Done", "d3=Pending"},
		},
		"a stale push is no head: the next push of the chain is still new": {
			have: append(handled, push("d0", shaOf("0"), shaOf("1"), 2, infrav1.PushStale)), p: push("d3", shaOf("2"), shaOf("3"), 3, ""),
			want: []string{"d1=Done", "d2=Done", "d0=Stale", "d3=Pending"},
		},
		"another branch has its own order": {
			have: handled, p: func() infrav1.ReceivedPush { p := push("d3", "", shaOf("1"), 2, ""); p.Ref = "release"; return p }(),
			want: []string{"d1=Done", "d2=Done", "d3=Pending"},
		},
		"deliveries older than the TTL are dropped, pending ones kept": {
			have: []infrav1.ReceivedPush{push("d1", "", shaOf("1"), 0, done), push("d2", shaOf("1"), shaOf("2"), 1, infrav1.PushPending)},
			p:    push("d3", shaOf("2"), shaOf("3"), 0, ""), now: t0.Add(DefaultDeliveryTTL + 2*time.Minute),
			want: []string{"d2=Pending", "d3=Pending"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = tc.p.ReceivedAt.Time
			}
			got, err := Record(tc.have, tc.p, now, DefaultDeliveryTTL)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, states(got)); diff != "" {
				t.Errorf("pushes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecordKeepsAtMostMax(t *testing.T) {
	var have []infrav1.ReceivedPush
	for i := range infrav1.MaxReceivedPushes {
		p := push(string(rune('a'+i%26))+strings.Repeat("x", i/26), "", "", i, infrav1.PushDone)
		p.Digest = p.Delivery
		have = append(have, p)
	}
	got, err := Record(have, push("new", "", shaOf("1"), 200, ""), t0.Add(200*time.Minute), DefaultDeliveryTTL)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != infrav1.MaxReceivedPushes || got[0].Delivery != have[1].Delivery || got[len(got)-1].Delivery != "new" {
		t.Errorf("got %d pushes from %s to %s, want %d from %s to new", len(got), got[0].Delivery, got[len(got)-1].Delivery, infrav1.MaxReceivedPushes, have[1].Delivery)
	}
	for i := range have {
		have[i].State = infrav1.PushPending
	}
	if _, err := Record(have, push("new", "", shaOf("1"), 200, ""), t0.Add(200*time.Minute), DefaultDeliveryTTL); !errors.Is(err, ErrBacklog) {
		t.Errorf("a list full of pending pushes: error %v, want ErrBacklog", err)
	}
}

func TestDecide(t *testing.T) {
	done := infrav1.PushDone
	pushes := []infrav1.ReceivedPush{push("d1", "", shaOf("1"), 0, done), push("d2", shaOf("1"), shaOf("2"), 1, done), push("d3", shaOf("2"), shaOf("3"), 2, done)}
	run := func(marked, planned, applied string) *infrav1.TerraformRun {
		r := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if marked != "" {
			r.Annotations[infrav1.SourcePushAnnotation] = marked
		}
		if planned != "" {
			r.Status.Run = &infrav1.RunStatus{Commit: planned}
		}
		if applied != "" {
			r.Status.LastApplied = &infrav1.AppliedRevision{Revision: applied}
		}
		return r
	}
	for name, tc := range map[string]struct {
		p    infrav1.ReceivedPush
		run  *infrav1.TerraformRun
		want Wake
	}{
		"a push ahead of the run marks it":                   {p: push("d4", shaOf("3"), shaOf("4"), 3, ""), run: run(shaOf("3"), shaOf("3"), shaOf("2")), want: WakeMark},
		"a push of the commit marked already":                {p: push("d3", shaOf("2"), shaOf("3"), 3, ""), run: run(shaOf("3"), "", ""), want: WakeAlready},
		"a commit behind the plan waiting never moves it":    {p: push("x", shaOf("0"), shaOf("1"), 3, ""), run: run("", shaOf("3"), ""), want: WakeBehind},
		"a commit behind the last apply never moves it":      {p: push("x", shaOf("0"), shaOf("2"), 3, ""), run: run("", "", shaOf("3")), want: WakeBehind},
		"a commit behind the last mark never moves it":       {p: push("x", shaOf("0"), shaOf("1"), 3, ""), run: run(shaOf("2"), "", ""), want: WakeBehind},
		"a commit whose relation is unknown marks":           {p: push("x", shaOf("7"), shaOf("8"), 3, ""), run: run(shaOf("3"), shaOf("3"), ""), want: WakeMark},
		"a new run, never marked, planned or applied, marks": {p: push("d4", shaOf("3"), shaOf("4"), 3, ""), run: run("", "", ""), want: WakeMark},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Decide(pushes, tc.p, tc.run); got != tc.want {
				t.Errorf("Decide = %s, want %s", got, tc.want)
			}
		})
	}
}

// Issue 49's attack review: a pull-request author pushes a hundred times to
// branches of their own; the head main reached stays recorded, so a late
// or replayed old push of main is still stale.
func TestRecordKeepsEachRefsHead(t *testing.T) {
	pushes := []infrav1.ReceivedPush{push("m1", shaOf("0"), shaOf("1"), 0, infrav1.PushDone), push("m2", shaOf("1"), shaOf("2"), 1, infrav1.PushDone)}
	pushes[0].Woken, pushes[1].Woken = 3, 3 // main is tracked; the branches below are not
	for i := 0; i < 2*infrav1.MaxReceivedPushes; i++ {
		q := push("pr-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), "", shaOf("5"), 2+i, infrav1.PushDone)
		q.Ref = "feature-" + time.Duration(i).String()
		q.Commit = strings.Repeat("5", 39) + string(rune('a'+i%6))
		var err error
		if pushes, err = Record(pushes, q, t0.Add(time.Duration(2+i)*time.Minute), DefaultDeliveryTTL); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Record(pushes, push("replayed", shaOf("0"), shaOf("1"), 400, ""), t0.Add(400*time.Minute), DefaultDeliveryTTL)
	if err != nil {
		t.Fatal(err)
	}
	if last := got[len(got)-1]; last.State != infrav1.PushStale {
		t.Fatalf("an old push of main after a hundred pushes to other branches: %s (%s), want Stale", last.State, last.Message)
	}
	late, err := Record(pushes, push("late", shaOf("0"), shaOf("1"), 90*60, ""), t0.Add(90*time.Hour), DefaultDeliveryTTL)
	if err != nil {
		t.Fatal(err)
	}
	if last := late[len(late)-1]; last.State != infrav1.PushStale {
		t.Fatalf("an old push of main after the delivery ttl: %s, want Stale (main's head is kept)", last.State)
	}
}

// A force push back from the head, in order, is not behind the pushes
// that came before it: the rollback is planned.
func TestBehindForcePushBack(t *testing.T) {
	pushes := []infrav1.ReceivedPush{
		push("d1", shaOf("0"), shaOf("1"), 0, infrav1.PushDone),
		push("d2", shaOf("1"), shaOf("2"), 1, infrav1.PushDone),
		push("back", shaOf("2"), shaOf("1"), 2, infrav1.PushPending),
	}
	if Behind(pushes, pushes[2], shaOf("2")) {
		t.Fatal("a force push back from 2 to 1, taken after the push to 2, counts as behind 2: the rollback would never plan")
	}
	late := push("late", shaOf("0"), shaOf("1"), 3, infrav1.PushPending)
	if !Behind(append(pushes[:2:2], late), late, shaOf("2")) {
		t.Fatal("a late push to 1, the before of the push to 2 taken earlier, is not behind 2")
	}
}
