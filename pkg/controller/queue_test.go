package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestLimiter(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	wake := make(chan event.GenericEvent, 10)
	now := t0
	l := NewLimiter(1, wake)
	l.now = func() time.Time { return now }

	if ok, _, _ := l.Acquire(a, "a-1", prioRun); ok {
		t.Fatal("a slot was given before the limiter was warm")
	}
	l.Warm()
	if got := len(wake); got != 1 {
		t.Fatalf("warming woke %d runs, want the one waiting", got)
	}
	<-wake
	if ok, _, _ := l.Acquire(a, "a-1", prioRun); !ok {
		t.Fatal("no slot once warm")
	}
	now = now.Add(time.Second)
	if ok, pos, total := l.Acquire(c, "c-drift-2", prioCheck); ok || pos != 1 || total != 1 {
		t.Fatalf("a check got %v, position %d of %d; want to wait first of 1", ok, pos, total)
	}
	now = now.Add(time.Second)
	if ok, pos, total := l.Acquire(b, "b-1", prioRun); ok || pos != 1 || total != 2 {
		t.Fatalf("a run got %v, position %d of %d; want to wait ahead of the check", ok, pos, total)
	}
	if ok, _, _ := l.Acquire(a, "a-1", prioRun); !ok {
		t.Fatal("a slot already held is not held again")
	}
	l.Release("ns", "a-1")
	if ev := <-wake; ev.Object.GetName() != "b" {
		t.Fatalf("the freed slot woke %s, want the run b before the check", ev.Object.GetName())
	}
	if ok, _, _ := l.Acquire(c, "c-drift-2", prioCheck); ok {
		t.Fatal("the check took the slot the run b is owed")
	}
	if ok, _, _ := l.Acquire(b, "b-1", prioRun); !ok {
		t.Fatal("the run b got no slot")
	}
	l.Release("ns", "b-1")
	<-wake
	if ok, _, _ := l.Acquire(c, "c-drift-2", prioCheck); !ok {
		t.Fatal("the check got no slot once free")
	}
	if l.Active() != 1 {
		t.Fatalf("%d active, want 1", l.Active())
	}

	By := func(string) {}
	By("a waiter that stops asking leaves the queue")
	now = now.Add(time.Second)
	l.Acquire(a, "a-2", prioRun)
	now = now.Add(staleWaiter + time.Second)
	l.Release("ns", "c-drift-2")
	if ok, _, _ := l.Acquire(c, "c-drift-3", prioCheck); !ok {
		t.Fatal("a stale waiter kept the slot from the check")
	}
}

func TestLimiterAfterAQueuedStart(t *testing.T) {
	run := types.NamespacedName{Namespace: "ns", Name: "checked"}
	l := NewLimiter(1, make(chan event.GenericEvent, 10))
	l.Acquire(run, "checked-1", prioRun)
	l.Warm()
	if ok, _, _ := l.Acquire(run, "checked-1", prioRun); !ok {
		t.Fatal("no slot")
	}
	l.Release("ns", "checked-1")
	if ok, pos, total := l.Acquire(run, "checked-drift-2", prioCheck); !ok {
		t.Fatalf("the run's check waits (%d of %d) with every slot free", pos, total)
	}
}

func TestNoLimit(t *testing.T) {
	var nilLimiter *Limiter
	for _, l := range []*Limiter{nilLimiter, NewLimiter(0, nil)} {
		if ok, _, _ := l.Acquire(types.NamespacedName{Name: "a"}, "a-1", prioCheck); !ok {
			t.Fatal("a limiter without a cap held a run back")
		}
		l.Release("", "a-1")
		l.Hold("", "a-1")
		l.Forget(types.NamespacedName{Name: "a"})
	}
}
