package controller

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/queue"
)

// queueRetry is how often a queued run looks again (queue.Retry).
const queueRetry = queue.Retry

// Priorities of runs waiting for a slot (queue.PrioRun, queue.PrioCheck).
const (
	prioRun   = queue.PrioRun
	prioCheck = queue.PrioCheck
)

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
	if !r.Limiter.Enabled() {
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
	ctrl.LoggerFrom(ctx).Info("run limiter ready", "active", r.Limiter.Active(), "max", r.Limiter.Max(), "perNamespace", r.Limiter.Share())
	return nil
}

func (w *LimiterWarmer) hold(ctx context.Context, run *infrav1.TerraformRun) {
	r := w.Reconciler
	if cur := run.Status.Run; cur != nil && !isTerminal(cur.Phase) {
		r.Limiter.Hold(client.ObjectKeyFromObject(run), cur.ID)
	}
	e, ok := r.Engines.Get(pipelineEngine(run, r))
	if !ok || !r.Available.IsAvailable(e.Name()) || run.Spec.Interval == nil {
		return
	}
	if check, prog, err := r.unrecordedCheck(ctx, run, e); err == nil && check != nil && !prog.Finished {
		r.Limiter.Hold(client.ObjectKeyFromObject(run), check.GetName())
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
