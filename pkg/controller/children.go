package controller

import (
	"context"
	"sort"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// recordRetry is how long after finishing a run the pass that labels its
// child recorded comes: once the status that records it is stored.
const recordRetry = time.Second

// unfinishedRetry is how soon a pass looks again at a child due for
// pruning that it did not see finished (a stopped run's cleanup still
// running, or a view of it that lacks its steps), as a waiting run's
// passes do.
const unfinishedRetry = 5 * time.Second

// reconcileChildren labels finished children recorded once their result
// is in the status stored on the API server (the status this pass started
// from), so the cache lets go of them; and deletes finished children (with
// the plan and outputs Secrets they own) beyond
// spec.history.keepFinished, and those older than
// spec.history.ttlAfterFinished, on every engine. So no result is lost
// with its child. Sets nothing; requeues for the next TTL expiry, and
// shortly after a run finished, to label its child.
func (r *TerraformRunReconciler) reconcileChildren(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	e, ok := r.Engines.Get(st.eff.Spec.Engine)
	if cur := run.Status.Run; cur != nil {
		e, ok = r.Engines.Get(cur.Engine)
	}
	if !ok || !r.Available.IsAvailable(e.Name()) {
		return ctrl.Result{}, nil
	}
	var res ctrl.Result
	if st.finished {
		res.RequeueAfter = recordRetry
	}
	ttl := st.eff.Spec.History.TTLAfterFinished
	if st.persisted.LastRunNumber == 0 || (st.active && !st.finished && ttl == nil) {
		// No run recorded yet, or one in progress: every earlier child was
		// labelled on the pass after its run finished.
		return res, nil
	}
	cached, err := r.listChildren(ctx, run, e)
	if err != nil {
		return res, err
	}
	marked := 0
	for _, c := range cached {
		if !storedIn(c, st.persisted) {
			continue
		}
		if prog, err := r.observeSettled(ctx, e, c); err != nil || !prog.Finished {
			continue
		}
		if err := r.markSettled(ctx, e, c); err != nil {
			return res, err
		}
		name := c.GetName()
		if err := r.unguardChildren(ctx, run.Namespace, func(n string) bool { return n == name }); err != nil {
			return res, err
		}
		marked++
	}
	if !st.finished && ttl == nil && marked == 0 {
		return res, nil
	}
	recorded, err := r.listSettled(ctx, run, e)
	if err != nil {
		return res, err
	}
	next, err := r.prune(ctx, e, mergeChildren(cached, recorded), st)
	return lowestRequeue(res, ctrl.Result{RequeueAfter: next}), err
}

// mergeChildren is the cached children and the recorded ones, each once
// (a child just labelled may still be in the cache).
func mergeChildren(cached, recorded []client.Object) []client.Object {
	out := append([]client.Object{}, cached...)
	seen := map[string]bool{}
	for _, c := range cached {
		seen[c.GetName()] = true
	}
	for _, c := range recorded {
		if !seen[c.GetName()] {
			out = append(out, c)
		}
	}
	return out
}

// prune deletes the finished children past keepFinished and the TTL, and
// returns when the next TTL expires.
func (r *TerraformRunReconciler) prune(ctx context.Context, e engine.Engine, children []client.Object, st *passState) (time.Duration, error) {
	ttl := st.eff.Spec.History.TTLAfterFinished
	sort.Slice(children, func(i, j int) bool { return childNumber(children[i]) > childNumber(children[j]) })
	var pinned string
	if a := st.persisted.LastApplied; a != nil {
		// The last successful apply's child owns the raw outputs the
		// outputs Secret is restored from: keepFinished never prunes it
		// (ttlAfterFinished, the user's explicit choice, still does).
		pinned = a.RunID
	}
	var next time.Duration
	for i, c := range children {
		if !storedIn(c, st.persisted) {
			if ttl != nil {
				// Finished in this pass or not yet: look again once its
				// result is stored.
				next = soonest(next, max(ttl.Duration, time.Second))
			}
			continue
		}
		due := time.Duration(1)
		if ttl != nil {
			due = r.ttlLeft(c, st.persisted, ttl.Duration)
		}
		if (i < int(*st.eff.Spec.History.KeepFinished) || c.GetName() == pinned) && due > 0 {
			if ttl != nil {
				next = soonest(next, due)
			}
			continue
		}
		deleted, err := r.deleteFinished(ctx, e, c)
		if err != nil {
			return next, err
		}
		if !deleted {
			// Not seen finished yet: look again soon, whether or not
			// anything else wakes the run.
			next = soonest(next, unfinishedRetry)
		}
	}
	return next, nil
}

// storedIn says whether the stored status has a child's result: every run
// up to its lastRunNumber except its run still in progress.
func storedIn(c client.Object, persisted infrav1.TerraformRunStatus) bool {
	n := childNumber(c)
	if n == 0 || n > persisted.LastRunNumber {
		return false
	}
	cur := persisted.Run
	return cur == nil || cur.ID != c.GetName() || isTerminal(cur.Phase)
}

func soonest(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

func childNumber(c client.Object) int64 {
	n, _ := strconv.ParseInt(c.GetLabels()[infrav1.RunNumberLabel], 10, 64)
	return n
}

// ttlLeft is how long a child has left before its TTL expires, from its
// run's recorded finish time. A child whose record has left the history is
// older than every recorded run: its TTL has expired.
func (r *TerraformRunReconciler) ttlLeft(c client.Object, persisted infrav1.TerraformRunStatus, ttl time.Duration) time.Duration {
	var finished *metav1.Time
	if cur := persisted.Run; cur != nil && cur.ID == c.GetName() {
		finished = cur.FinishedAt
	}
	for _, h := range persisted.History {
		if h.ID == c.GetName() && finished == nil {
			finished = h.FinishedAt
		}
	}
	if finished == nil {
		return 0
	}
	return ttl - r.now().Sub(finished.Time)
}

// deleteFinished deletes a child once the engine confirms it has finished
// (a settled child was confirmed when it was labelled), and says whether
// it did.
func (r *TerraformRunReconciler) deleteFinished(ctx context.Context, e engine.Engine, c client.Object) (bool, error) {
	if !isSettled(c) {
		if prog, err := r.observeSettled(ctx, e, c); err != nil || !prog.Finished {
			return false, nil
		}
	}
	err := r.Delete(ctx, c, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Info("could not prune a finished run", "child", c.GetName(), "error", err.Error())
	}
	return true, nil
}
