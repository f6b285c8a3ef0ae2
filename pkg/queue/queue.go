// Package queue gives out the slots of --max-active-runs and
// --max-active-runs-per-namespace: which run's child may start now, and
// where the others wait. It is the manager's, shared by every pass, with
// its own metrics (metrics.go).
package queue

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Priorities of runs waiting for a slot: runs people asked for (applies,
// reruns, destroys, planOnly previews) go before scheduled checks.
const (
	PrioRun   = 0
	PrioCheck = 1
)

// Limiter caps the children that are active at once across the whole
// manager (--max-active-runs), so that a thousand scheduled checks never
// become a thousand pods at once, and the children of one namespace
// (--max-active-runs-per-namespace), so that one tenant cannot take every
// slot. A run takes a slot before its child is created and gives it back
// when the child has finished. Waiting runs are served by priority, then
// the run of the namespace holding the fewest slots, then first come first
// served; a run whose namespace holds its share waits whatever is free. It
// lives in memory: after a restart, Warm counts the children that are
// active before any slot is given out.
type Limiter struct {
	mu    sync.Mutex
	max   int
	share int
	warm  bool
	// active are the child keys holding a slot, each with the TerraformRun
	// that holds it; held counts them by namespace.
	active  map[string]types.NamespacedName
	held    map[string]int
	waiting map[types.NamespacedName]waiter
	// wake receives the TerraformRuns to reconcile when a slot frees.
	wake chan<- event.GenericEvent
	now  func() time.Time
}

type waiter struct {
	prio  int
	since time.Time
	// seen is the waiter's last Acquire: one that stops asking (its
	// TerraformRun changed its mind) leaves the queue after staleWaiter.
	seen time.Time
}

// staleWaiter is how long a waiter stays queued without asking again.
const staleWaiter = 3 * Retry

// NewLimiter returns a limiter of max active children (0: no limit), at
// most share of them in one namespace (0: no share), that sends the
// TerraformRuns it wakes to wake.
func NewLimiter(max, share int, wake chan<- event.GenericEvent) *Limiter {
	return &Limiter{max: max, share: share, active: map[string]types.NamespacedName{}, held: map[string]int{},
		waiting: map[types.NamespacedName]waiter{}, wake: wake, now: time.Now}
}

// DefaultNamespaceShare is --max-active-runs-per-namespace when it is not
// given: a quarter of max, at least 1; no share without a cap.
func DefaultNamespaceShare(limit int) int {
	if limit <= 0 {
		return 0
	}
	return max(limit/4, 1)
}

// Enabled says whether the limiter holds anything back.
func (l *Limiter) Enabled() bool { return l != nil && (l.max > 0 || l.share > 0) }

func childKey(ns, child string) string { return ns + "/" + child }

// Wait says why a run waits for a slot, for its Queued condition.
type Wait struct {
	// Position is the run's place among the waiting runs (from 1), in the
	// order slots are given; Waiting is how many wait.
	Position, Waiting int
	// Max is --max-active-runs (0: no cap).
	Max int
	// Namespace is set when the run waits for its namespace, which holds
	// Held slots and would take the rest of its Share
	// (--max-active-runs-per-namespace) with runs queued ahead of it.
	Namespace   string
	Held, Share int
}

// String says why the run waits, naming the flag that holds it back.
func (w Wait) String() string {
	if w.Namespace == "" {
		return fmt.Sprintf("position %d of %d waiting for one of the %d slots of --max-active-runs", w.Position, w.Waiting, w.Max)
	}
	held := fmt.Sprintf("%d active", w.Held)
	if ahead := w.Share - w.Held; ahead > 0 {
		held += fmt.Sprintf(" and %d queued ahead", ahead)
	}
	return fmt.Sprintf("namespace %s holds its share of the slots (--max-active-runs-per-namespace=%d: %s); position %d of %d waiting",
		w.Namespace, w.Share, held, w.Position, w.Waiting)
}

// Acquire asks for a slot for run's next child. It reports whether the
// slot is given and, when not, the run's place in the queue (from 1) and
// how many wait (Claim also says why).
func (l *Limiter) Acquire(run types.NamespacedName, child string, prio int) (bool, int, int) {
	ok, w := l.Claim(run, child, prio)
	return ok, w.Position, w.Waiting
}

// Claim asks for a slot for run's next child. It reports whether the slot
// is given and, when not, why the run waits.
func (l *Limiter) Claim(run types.NamespacedName, child string, prio int) (bool, Wait) {
	if !l.Enabled() {
		return true, Wait{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := childKey(run.Namespace, child)
	if l.holds(key) {
		return true, Wait{}
	}
	w, ok := l.waiting[run]
	if !ok || w.prio != prio {
		w = waiter{prio: prio, since: l.now()}
	}
	w.seen = l.now()
	l.waiting[run] = w
	q := l.plan()
	pos := slices.Index(q.order, run) + 1
	if l.warm && pos > 0 && pos <= q.eligible && pos <= l.free(q.eligible) {
		delete(l.waiting, run)
		l.active[key] = run
		l.held[run.Namespace]++
		queueWait.WithLabelValues(prioName(prio)).Observe(l.now().Sub(w.since).Seconds())
		l.gauges(&q)
		return true, Wait{}
	}
	l.gauges(&q)
	wait := Wait{Position: pos, Waiting: len(q.order), Max: l.max}
	if pos > q.eligible {
		wait.Namespace, wait.Held, wait.Share = run.Namespace, l.held[run.Namespace], l.share
	}
	return false, wait
}

// free is how many slots may be given now: up to n without a cap.
func (l *Limiter) free(n int) int {
	if l.max <= 0 {
		return n
	}
	return max(l.max-len(l.active), 0)
}

// Hold records a child of run seen active (after a restart, or adopted).
func (l *Limiter) Hold(run types.NamespacedName, child string) {
	if !l.Enabled() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if key := childKey(run.Namespace, child); !l.holds(key) {
		l.active[key] = run
		l.held[run.Namespace]++
	}
	l.gauges(nil)
}

// Release gives a finished child's slot back and wakes the runs that may
// now take it.
func (l *Limiter) Release(ns, child string) {
	if !l.Enabled() {
		return
	}
	l.mu.Lock()
	if !l.drop(childKey(ns, child), ns) {
		l.mu.Unlock()
		return
	}
	next := l.head()
	l.mu.Unlock()
	l.notify(next)
}

func (l *Limiter) holds(key string) bool {
	_, ok := l.active[key]
	return ok
}

// drop frees key's slot, reporting whether it held one.
func (l *Limiter) drop(key, ns string) bool {
	if !l.holds(key) {
		return false
	}
	delete(l.active, key)
	if l.held[ns]--; l.held[ns] <= 0 {
		delete(l.held, ns)
	}
	return true
}

// ReleaseRun gives back every slot run holds and drops it from the queue:
// the TerraformRun is gone, or leaves without waiting for its children (a
// plan waiting for approval, Retain, planOnly, a check nobody recorded), so
// no finish will ever release them.
func (l *Limiter) ReleaseRun(run types.NamespacedName) {
	if !l.Enabled() {
		return
	}
	l.mu.Lock()
	delete(l.waiting, run)
	freed := false
	for key, owner := range l.active {
		if owner == run {
			freed = l.drop(key, run.Namespace) || freed
		}
	}
	var next []types.NamespacedName
	if freed {
		next = l.head()
	}
	l.gauges(nil)
	l.mu.Unlock()
	l.notify(next)
}

// Forget drops a run from the queue (it was deleted, or no longer wants
// a run).
func (l *Limiter) Forget(run types.NamespacedName) {
	if !l.Enabled() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, run)
	l.gauges(nil)
}

// Warm marks the limiter ready once the children active at start are held,
// and wakes the runs that waited meanwhile.
func (l *Limiter) Warm() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.warm = true
	next := l.head()
	l.mu.Unlock()
	l.notify(next)
}

// Active is how many slots are taken.
func (l *Limiter) Active() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.active)
}

// queue is the waiting runs in the order slots go to them: the first
// eligible may take one (their namespaces are under their share), the
// rest wait for their namespace's slots whatever is free.
type queue struct {
	order    []types.NamespacedName
	eligible int
}

// plan orders the waiting runs (dropping those that stopped asking) as
// slots would be given one by one: of the runs of highest priority, the
// one whose namespace then holds the fewest slots, then the first come;
// a namespace that reaches its share gives no more, and its other runs go
// last.
func (l *Limiter) plan() queue {
	byNS := map[string][]types.NamespacedName{}
	for k, w := range l.waiting {
		if l.now().Sub(w.seen) > staleWaiter {
			delete(l.waiting, k)
			continue
		}
		byNS[k.Namespace] = append(byNS[k.Namespace], k)
	}
	h := &nsHeap{l: l}
	var held []types.NamespacedName
	// next queues a namespace's runs for slots, or, at its share, last.
	next := func(n *nsQueue) {
		switch {
		case len(n.runs) == 0:
		case l.share > 0 && n.held >= l.share:
			held = append(held, n.runs...)
		default:
			heap.Push(h, n)
		}
	}
	for ns, runs := range byNS {
		sort.Slice(runs, func(i, j int) bool { return l.before(runs[i], runs[j]) })
		next(&nsQueue{ns: ns, runs: runs, held: l.held[ns]})
	}
	var q queue
	for h.Len() > 0 {
		n := heap.Pop(h).(*nsQueue)
		q.order = append(q.order, n.runs[0])
		n.runs, n.held = n.runs[1:], n.held+1
		next(n)
	}
	q.eligible = len(q.order)
	sort.Slice(held, func(i, j int) bool { return l.before(held[i], held[j]) })
	q.order = append(q.order, held...)
	return q
}

// before orders two waiting runs of the same standing: by priority, then
// first come, then by name.
func (l *Limiter) before(a, b types.NamespacedName) bool {
	wa, wb := l.waiting[a], l.waiting[b]
	if wa.prio != wb.prio {
		return wa.prio < wb.prio
	}
	if !wa.since.Equal(wb.since) {
		return wa.since.Before(wb.since)
	}
	return a.String() < b.String()
}

// head is the waiting runs that may take the free slots now.
func (l *Limiter) head() []types.NamespacedName {
	q := l.plan()
	n := min(q.eligible, l.free(q.eligible))
	return q.order[:n]
}

// nsQueue is one namespace's waiting runs, in order, and the slots the
// namespace would hold once those before them are given theirs.
type nsQueue struct {
	ns   string
	runs []types.NamespacedName
	held int
}

// nsHeap orders namespaces by their first waiting run's priority, then the
// slots they hold (fewest first), then that run's place (Limiter.before).
type nsHeap struct {
	l     *Limiter
	items []*nsQueue
}

func (h *nsHeap) Len() int      { return len(h.items) }
func (h *nsHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *nsHeap) Push(x any)    { h.items = append(h.items, x.(*nsQueue)) }

func (h *nsHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}

func (h *nsHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if pa, pb := h.l.waiting[a.runs[0]].prio, h.l.waiting[b.runs[0]].prio; pa != pb {
		return pa < pb
	}
	if a.held != b.held {
		return a.held < b.held
	}
	return h.l.before(a.runs[0], b.runs[0])
}

func (l *Limiter) notify(runs []types.NamespacedName) {
	if l.wake == nil {
		return
	}
	for _, r := range runs {
		run := &infrav1.TerraformRun{}
		run.Namespace, run.Name = r.Namespace, r.Name
		select {
		case l.wake <- event.GenericEvent{Object: run}:
		default:
			// The wake channel is full: the run's own requeue (Queued runs
			// look again every Retry) still gets it there.
		}
	}
}

// gauges sets the limiter's metrics; the share-held count only with a
// queue just planned (Claim plans one anyway; Hold and Forget do not).
func (l *Limiter) gauges(q *queue) {
	activeRuns.Set(float64(len(l.active)))
	waiting := map[int]int{}
	for _, w := range l.waiting {
		waiting[w.prio]++
	}
	queuedRuns.WithLabelValues(prioName(PrioRun)).Set(float64(waiting[PrioRun]))
	queuedRuns.WithLabelValues(prioName(PrioCheck)).Set(float64(waiting[PrioCheck]))
	if q != nil {
		shareHeldRuns.Set(float64(len(q.order) - q.eligible))
	}
}

func prioName(p int) string {
	if p == PrioCheck {
		return "check"
	}
	return "run"
}

// Retry is how often a queued run looks again, besides being woken.
const Retry = 30 * time.Second

// Max is --max-active-runs (0: no cap); Share is
// --max-active-runs-per-namespace (0: no share).
func (l *Limiter) Max() int   { return l.max }
func (l *Limiter) Share() int { return l.share }
