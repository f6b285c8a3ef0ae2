package controller

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Priorities of runs waiting for a slot: runs people asked for (applies,
// reruns, destroys, planOnly previews) go before scheduled checks.
const (
	prioRun   = 0
	prioCheck = 1
)

// Limiter caps the children that are active at once across the whole
// manager (--max-active-runs), so that a thousand scheduled checks never
// become a thousand pods at once. A run takes a slot before its child is
// created and gives it back when the child has finished; waiting runs are
// served by priority, then first come first served. It lives in memory:
// after a restart, Warm counts the children that are active before any slot
// is given out.
type Limiter struct {
	mu      sync.Mutex
	max     int
	warm    bool
	active  map[string]bool // child keys holding a slot
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
const staleWaiter = 3 * queueRetry

// NewLimiter returns a limiter of max active children (0: no limit) that
// sends the TerraformRuns it wakes to wake.
func NewLimiter(max int, wake chan<- event.GenericEvent) *Limiter {
	return &Limiter{max: max, active: map[string]bool{}, waiting: map[types.NamespacedName]waiter{}, wake: wake, now: time.Now}
}

func childKey(ns, child string) string { return ns + "/" + child }

// Acquire asks for a slot for run's next child. It reports whether the
// slot is given and, when not, the run's place in the queue (from 1) and
// how many wait.
func (l *Limiter) Acquire(run types.NamespacedName, child string, prio int) (bool, int, int) {
	if l == nil || l.max <= 0 {
		return true, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := childKey(run.Namespace, child)
	if l.active[key] {
		return true, 0, 0
	}
	w, ok := l.waiting[run]
	if !ok || w.prio != prio {
		w = waiter{prio: prio, since: l.now()}
	}
	w.seen = l.now()
	l.waiting[run] = w
	order := l.order()
	pos := slices.Index(order, run) + 1
	if l.warm && len(l.active) < l.max && pos <= l.max-len(l.active) {
		delete(l.waiting, run)
		l.active[key] = true
		queueWait.WithLabelValues(prioName(prio)).Observe(l.now().Sub(w.since).Seconds())
		l.gauges()
		return true, 0, 0
	}
	l.gauges()
	return false, pos, len(order)
}

// Hold records a child seen active (after a restart, or adopted).
func (l *Limiter) Hold(ns, child string) {
	if l == nil || l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active[childKey(ns, child)] = true
	l.gauges()
}

// Release gives a finished child's slot back and wakes the runs that may
// now take it.
func (l *Limiter) Release(ns, child string) {
	if l == nil || l.max <= 0 {
		return
	}
	l.mu.Lock()
	key := childKey(ns, child)
	if !l.active[key] {
		l.mu.Unlock()
		return
	}
	delete(l.active, key)
	l.gauges()
	next := l.head(l.max - len(l.active))
	l.mu.Unlock()
	l.notify(next)
}

// Forget drops a run from the queue (it was deleted, or no longer wants
// a run).
func (l *Limiter) Forget(run types.NamespacedName) {
	if l == nil || l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, run)
	l.gauges()
}

// Warm marks the limiter ready once the children active at start are held,
// and wakes the runs that waited meanwhile.
func (l *Limiter) Warm() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.warm = true
	next := l.head(l.max - len(l.active))
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

func (l *Limiter) order() []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(l.waiting))
	for k, w := range l.waiting {
		if l.now().Sub(w.seen) > staleWaiter {
			delete(l.waiting, k)
			continue
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := l.waiting[out[i]], l.waiting[out[j]]
		if a.prio != b.prio {
			return a.prio < b.prio
		}
		if !a.since.Equal(b.since) {
			return a.since.Before(b.since)
		}
		return out[i].String() < out[j].String()
	})
	return out
}

func (l *Limiter) head(n int) []types.NamespacedName {
	order := l.order()
	if n < 0 {
		n = 0
	}
	if n < len(order) {
		order = order[:n]
	}
	return order
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
			// look again every queueRetry) still gets it there.
		}
	}
}

func (l *Limiter) gauges() {
	activeRuns.Set(float64(len(l.active)))
	waiting := map[int]int{}
	for _, w := range l.waiting {
		waiting[w.prio]++
	}
	queuedRuns.WithLabelValues(prioName(prioRun)).Set(float64(waiting[prioRun]))
	queuedRuns.WithLabelValues(prioName(prioCheck)).Set(float64(waiting[prioCheck]))
}

func prioName(p int) string {
	if p == prioCheck {
		return "check"
	}
	return "run"
}

// queueRetry is how often a queued run looks again, besides being woken.
const queueRetry = 30 * time.Second

// DefaultMinCheckInterval is the shortest spec.interval a manager honours
// unless told otherwise (--min-check-interval).
const DefaultMinCheckInterval = time.Minute

// LimiterWarmer is a manager runnable that, once the caches have synced,
// counts the children active at start (every run in progress, and the
// scheduled checks status does not record yet) into the reconciler's
// Limiter, then lets it give out slots. Until then no slot is given out,
// so a restart never overshoots --max-active-runs.
type LimiterWarmer struct {
	Reconciler *TerraformRunReconciler
	Cache      cache.Cache
	// Wait bounds how long it waits for engines whose CRDs are missing.
	Wait time.Duration
}

// Start implements manager.Runnable.
func (w *LimiterWarmer) Start(ctx context.Context) error {
	r := w.Reconciler
	if r.Limiter == nil || r.Limiter.max <= 0 {
		return nil
	}
	if !w.Cache.WaitForCacheSync(ctx) {
		return nil
	}
	wait := w.Wait
	if wait == 0 {
		wait = 15 * time.Second
	}
	deadline := time.Now().Add(wait)
	for !allAvailable(r) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	runs := &infrav1.TerraformRunList{}
	if err := r.List(ctx, runs); err != nil {
		return err
	}
	for i := range runs.Items {
		w.hold(ctx, &runs.Items[i])
	}
	r.Limiter.Warm()
	ctrl.LoggerFrom(ctx).Info("run limiter ready", "active", r.Limiter.Active(), "max", r.Limiter.max)
	return nil
}

func (w *LimiterWarmer) hold(ctx context.Context, run *infrav1.TerraformRun) {
	r := w.Reconciler
	if cur := run.Status.Run; cur != nil && !isTerminal(cur.Phase) {
		r.Limiter.Hold(run.Namespace, cur.ID)
	}
	e, ok := r.Engines.Get(pipelineEngine(run, r))
	if !ok || !r.Available.IsAvailable(e.Name()) || run.Spec.Interval == nil {
		return
	}
	if check, prog, err := r.unrecordedCheck(ctx, run, e); err == nil && check != nil && !prog.Finished {
		r.Limiter.Hold(run.Namespace, check.GetName())
	}
}

func pipelineEngine(run *infrav1.TerraformRun, r *TerraformRunReconciler) infrav1.EngineName {
	if run.Spec.Engine != "" {
		return run.Spec.Engine
	}
	return r.DefaultEngine
}

func allAvailable(r *TerraformRunReconciler) bool {
	for _, e := range r.Engines.All() {
		if !r.Available.IsAvailable(e.Name()) {
			return false
		}
	}
	return true
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader starts runs.
func (w *LimiterWarmer) NeedLeaderElection() bool { return true }
