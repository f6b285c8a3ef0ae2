package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// reconcileProgress sets Stalled (NoProgress) when an active run's steps
// have not moved for ProgressTimeout: a stuck engine controller, pods that
// never schedule. Waiting for approval is not counted, nor is a step that
// is running: an apply may take hours, and kstatus-based tools read
// Stalled as failure (the step's own deadline ends one that hangs). The
// run keeps waiting; the next step that moves clears the condition
// (project sets Reconciling again).
func (r *TerraformRunReconciler) reconcileProgress(_ context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !st.active || st.child == nil || st.progress.Gate.State == engine.GatePending || r.ProgressTimeout <= 0 {
		return ctrl.Result{}, nil
	}
	cur := run.Status.Run
	if stepRunning(cur) {
		return ctrl.Result{}, nil
	}
	last, step := lastMove(cur)
	if last == nil {
		return ctrl.Result{}, nil
	}
	idle := r.now().Sub(last.Time)
	if idle < r.ProgressTimeout {
		return ctrl.Result{RequeueAfter: r.ProgressTimeout - idle}, nil
	}
	// The message names when the run last moved, not for how long: a
	// message that changed on every pass would cost a status write each.
	st.report(stalled, infrav1.ReasonNoProgress, fmt.Sprintf("run %s has made no progress for over %s, since %s (%s): check the engine's controller and the step pods of %s %s; opr8r keeps waiting",
		cur.ID, r.ProgressTimeout, last.UTC().Format(time.RFC3339), step, cur.Child.Kind, cur.ID))
	return ctrl.Result{RequeueAfter: r.ProgressTimeout}, nil
}

// stepRunning says whether one of the run's steps is running.
func stepRunning(cur *infrav1.RunStatus) bool {
	for _, s := range cur.Steps {
		if s.Phase == infrav1.StepRunning {
			return true
		}
	}
	return false
}

// lastMove returns when the run's steps last moved, and what they wait for.
func lastMove(cur *infrav1.RunStatus) (*metav1.Time, string) {
	last := cur.StartedAt
	step := "the engine has not started it"
	for _, s := range cur.Steps {
		for _, t := range []*metav1.Time{s.StartedAt, s.FinishedAt} {
			if t != nil && (last == nil || t.After(last.Time)) {
				last = t
			}
		}
		switch s.Phase {
		case infrav1.StepRunning, infrav1.StepPending:
			step = fmt.Sprintf("step %s is %s", s.Name, s.Phase)
		case infrav1.StepSucceeded:
			step = fmt.Sprintf("step %s finished and the next has not started", s.Name)
		}
	}
	return last, step
}
