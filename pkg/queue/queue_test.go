package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestLimiter(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	wake := make(chan event.GenericEvent, 10)
	now := t0
	l := NewLimiter(1, 0, wake)
	l.now = func() time.Time { return now }

	if ok, _, _ := l.Acquire(a, "a-1", PrioRun); ok {
		t.Fatal("a slot was given before the limiter was warm")
	}
	l.Warm()
	if got := len(wake); got != 1 {
		t.Fatalf("warming woke %d runs, want the one waiting", got)
	}
	<-wake
	if ok, _, _ := l.Acquire(a, "a-1", PrioRun); !ok {
		t.Fatal("no slot once warm")
	}
	now = now.Add(time.Second)
	if ok, pos, total := l.Acquire(c, "c-drift-2", PrioCheck); ok || pos != 1 || total != 1 {
		t.Fatalf("a check got %v, position %d of %d; want to wait first of 1", ok, pos, total)
	}
	now = now.Add(time.Second)
	if ok, pos, total := l.Acquire(b, "b-1", PrioRun); ok || pos != 1 || total != 2 {
		t.Fatalf("a run got %v, position %d of %d; want to wait ahead of the check", ok, pos, total)
	}
	if ok, _, _ := l.Acquire(a, "a-1", PrioRun); !ok {
		t.Fatal("a slot already held is not held again")
	}
	l.Release("ns", "a-1")
	if ev := <-wake; ev.Object.GetName() != "b" {
		t.Fatalf("the freed slot woke %s, want the run b before the check", ev.Object.GetName())
	}
	if ok, _, _ := l.Acquire(c, "c-drift-2", PrioCheck); ok {
		t.Fatal("the check took the slot the run b is owed")
	}
	if ok, _, _ := l.Acquire(b, "b-1", PrioRun); !ok {
		t.Fatal("the run b got no slot")
	}
	l.Release("ns", "b-1")
	<-wake
	if ok, _, _ := l.Acquire(c, "c-drift-2", PrioCheck); !ok {
		t.Fatal("the check got no slot once free")
	}
	if l.Active() != 1 {
		t.Fatalf("%d active, want 1", l.Active())
	}

	By := func(string) {}
	By("a waiter that stops asking leaves the queue")
	now = now.Add(time.Second)
	l.Acquire(a, "a-2", PrioRun)
	now = now.Add(staleWaiter + time.Second)
	l.Release("ns", "c-drift-2")
	if ok, _, _ := l.Acquire(c, "c-drift-3", PrioCheck); !ok {
		t.Fatal("a stale waiter kept the slot from the check")
	}
}

func TestLimiterAfterAQueuedStart(t *testing.T) {
	run := types.NamespacedName{Namespace: "ns", Name: "checked"}
	l := NewLimiter(1, 0, make(chan event.GenericEvent, 10))
	l.Acquire(run, "checked-1", PrioRun)
	l.Warm()
	if ok, _, _ := l.Acquire(run, "checked-1", PrioRun); !ok {
		t.Fatal("no slot")
	}
	l.Release("ns", "checked-1")
	if ok, pos, total := l.Acquire(run, "checked-drift-2", PrioCheck); !ok {
		t.Fatalf("the run's check waits (%d of %d) with every slot free", pos, total)
	}
}

func TestNoLimit(t *testing.T) {
	var nilLimiter *Limiter
	for _, l := range []*Limiter{nilLimiter, NewLimiter(0, 0, nil)} {
		if ok, _, _ := l.Acquire(types.NamespacedName{Name: "a"}, "a-1", PrioCheck); !ok {
			t.Fatal("a limiter without a cap held a run back")
		}
		l.Release("", "a-1")
		l.Hold(types.NamespacedName{Name: "a"}, "a-1")
		l.ReleaseRun(types.NamespacedName{Name: "a"})
		l.Forget(types.NamespacedName{Name: "a"})
	}
}

// limiterStep is one call to a Limiter in a namespace-share scenario: a run asks
// for a slot (claim, with what it should get) or gives its child's back
// (release, with the runs it should wake, in order).
type limiterStep struct {
	claim, release string // "ns/run": the run's child is "<run>-1"
	prio           int
	wantOK         bool
	wantWhy        string   // part of the Wait's text when refused
	wantWoken      []string // "ns/run", after a release
}

func nsName(s string) types.NamespacedName {
	ns, name, _ := strings.Cut(s, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// TestLimiterNamespaceShare: --max-active-runs-per-namespace keeps one
// namespace from taking every slot: a namespace at its share waits while
// another starts, a freed slot goes to the namespace holding the fewest,
// and a released slot can be taken again.
func TestLimiterNamespaceShare(t *testing.T) {
	cases := map[string]struct {
		max, share int
		steps      []limiterStep
	}{
		"a namespace at its share waits while another starts": {
			max: 4, share: 2, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "a/2", wantOK: true},
				{claim: "a/3", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=2: 2 active); position 1 of 1 waiting"},
				{claim: "b/1", wantOK: true},
				{claim: "a/3", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=2: 2 active)"},
			},
		},
		"a freed slot goes to the namespace holding the fewest, whoever came first": {
			max: 3, share: 2, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "a/2", wantOK: true}, {claim: "b/1", wantOK: true},
				{claim: "a/3", wantWhy: "namespace a holds its share"},
				{claim: "b/2", wantWhy: "position 1 of 2 waiting for one of the 3 slots of --max-active-runs"},
				// c holds none: it goes first, though it came last.
				{claim: "c/1", wantWhy: "position 1 of 3 waiting for one of the 3 slots"},
				{release: "a/1", wantWoken: []string{"c/1"}},
				// a and b hold one each: a/3 came before b/2.
				{claim: "a/3", wantWhy: "position 2 of 3"}, {claim: "b/2", wantWhy: "position 3 of 3"},
				{claim: "c/1", wantOK: true},
				{release: "b/1", wantWoken: []string{"b/2"}},
				{claim: "a/3", wantWhy: "position 2 of 2"},
				{claim: "b/2", wantOK: true},
			},
		},
		"a namespace's runs queued ahead count against its share": {
			max: 2, share: 2, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "b/1", wantOK: true},
				{claim: "a/2", wantWhy: "position 1 of 1 waiting for one of the 2 slots"},
				{claim: "a/3", wantWhy: "(--max-active-runs-per-namespace=2: 1 active and 1 queued ahead); position 2 of 2"},
				{claim: "c/1", wantWhy: "position 1 of 3"},
			},
		},
		"runs people asked for still go before checks": {
			max: 2, share: 1, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "b/1", wantOK: true},
				{claim: "c/check", prio: PrioCheck, wantWhy: "position 1 of 1"},
				{claim: "a/2", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=1: 1 active)"},
				{claim: "d/1", wantWhy: "position 1 of 3"},
				{release: "a/1", wantWoken: []string{"a/2"}},
				{claim: "c/check", prio: PrioCheck, wantWhy: "position 3 of 3"},
				{claim: "a/2", wantOK: true},
				{claim: "d/1", wantWhy: "position 1 of 2"},
			},
		},
		"releasing gives the namespace its share back": {
			max: 10, share: 1, steps: []limiterStep{
				{claim: "a/1", wantOK: true},
				{claim: "a/2", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=1: 1 active)"},
				{release: "a/1", wantWoken: []string{"a/2"}},
				{release: "a/1"}, // twice: nothing more to give
				{claim: "a/2", wantOK: true},
				{claim: "a/3", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=1: 1 active)"},
			},
		},
		"no cap, a share: only the namespace waits": {
			max: 0, share: 1, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "b/1", wantOK: true},
				{claim: "a/2", wantWhy: "namespace a holds its share of the slots (--max-active-runs-per-namespace=1: 1 active)"},
				{release: "a/1", wantWoken: []string{"a/2"}},
				{claim: "a/2", wantOK: true},
			},
		},
		"no share: one namespace may take every slot": {
			max: 2, share: 0, steps: []limiterStep{
				{claim: "a/1", wantOK: true}, {claim: "a/2", wantOK: true},
				{claim: "b/1", wantWhy: "position 1 of 1 waiting for one of the 2 slots"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wake := make(chan event.GenericEvent, 10)
			now := t0
			l := NewLimiter(tc.max, tc.share, wake)
			l.now = func() time.Time { now = now.Add(time.Second); return now }
			l.Warm()
			playLimiter(t, l, wake, tc.steps)
		})
	}
}

// playLimiter plays steps on a warm limiter, each a second after the one
// before, and checks what each gets.
func playLimiter(t *testing.T, l *Limiter, wake chan event.GenericEvent, steps []limiterStep) {
	t.Helper()
	for i, s := range steps {
		if s.release != "" {
			r := nsName(s.release)
			l.Release(r.Namespace, r.Name+"-1")
			var woken []string
			for len(wake) > 0 {
				ev := <-wake
				woken = append(woken, ev.Object.GetNamespace()+"/"+ev.Object.GetName())
			}
			if diff := cmp.Diff(s.wantWoken, woken); diff != "" {
				t.Fatalf("step %d: releasing %s woke (-want +got):\n%s", i, s.release, diff)
			}
			continue
		}
		r := nsName(s.claim)
		ok, why := l.Claim(r, r.Name+"-1", s.prio)
		if ok != s.wantOK || !strings.Contains(why.String(), s.wantWhy) {
			t.Fatalf("step %d: %s got a slot %v (%s); want %v (%q)", i, s.claim, ok, why, s.wantOK, s.wantWhy)
		}
	}
}

func TestDefaultNamespaceShare(t *testing.T) {
	got := map[int]int{}
	for _, max := range []int{0, 1, 3, 4, 100} {
		got[max] = DefaultNamespaceShare(max)
	}
	want := map[int]int{0: 0, 1: 1, 3: 1, 4: 1, 100: 25}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DefaultNamespaceShare (-want +got):\n%s", diff)
	}
	waits := map[string]string{
		fmt.Sprint(Wait{Position: 2, Waiting: 3, Max: 5}):                                    "position 2 of 3 waiting for one of the 5 slots of --max-active-runs",
		fmt.Sprint(Wait{Position: 3, Waiting: 3, Max: 5, Namespace: "a", Held: 1, Share: 2}): "namespace a holds its share of the slots (--max-active-runs-per-namespace=2: 1 active and 1 queued ahead); position 3 of 3 waiting",
	}
	for got, want := range waits {
		if got != want {
			t.Errorf("Wait = %q, want %q", got, want)
		}
	}
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
