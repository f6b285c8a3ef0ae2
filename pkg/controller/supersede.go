package controller

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// reconcileSupersede stops an active run whose plan waits for approval when
// the spec changed, a rerun was requested or a dependency's outputs changed:
// the new inputs need a new plan.
// The run's cleanup still runs; the next run starts once it has stopped.
// Sets Approved False (Superseded) and Reconciling (Superseded), and ends
// the pass.
func (r *TerraformRunReconciler) reconcileSupersede(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !st.active || st.child == nil || run.Status.Run == nil {
		return ctrl.Result{}, nil
	}
	if run.Status.Run.Type == infrav1.RunPlan && !st.progress.Finished {
		return r.supersedePlanOnly(ctx, run, st)
	}
	if st.progress.Gate.State != engine.GatePending {
		return ctrl.Result{}, nil
	}
	trigger, detail, want := r.wantRun(run, st)
	if !want {
		return ctrl.Result{}, nil
	}
	c, ok := st.engine.(engine.Canceller)
	if !ok {
		return ctrl.Result{}, nil
	}
	cur := run.Status.Run
	why := "a spec change"
	if trigger == infrav1.TriggerDependencyChange || trigger == infrav1.TriggerSourceChange {
		why = detail
	}
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelSuperseded); err != nil {
		return gateErr(err)
	}
	if err := c.Cancel(ctx, r.Client, st.child, "superseded by "+why); err != nil {
		return ctrl.Result{}, generic("Supersede", err, "stopping superseded run %s", cur.ID)
	}
	r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonSuperseded, "plan of run "+cur.ID+" was superseded by "+why+" before approval")
	st.report(progressing, infrav1.ReasonSuperseded, "stopping run "+cur.ID+" (superseded); a new run starts when it has stopped")
	st.stop = true
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}

// supersedePlanOnly stops a planOnly run (a preview) still planning when a
// newer source or spec calls for a new plan (a push to a pull request
// moves its preview): nothing is applied, so its plan is of no use. The
// next run starts once it has stopped.
func (r *TerraformRunReconciler) supersedePlanOnly(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	trigger, detail, want := r.wantRun(run, st)
	c, ok := st.engine.(engine.Canceller)
	if !want || !ok {
		return ctrl.Result{}, nil
	}
	cur := run.Status.Run
	why := "a spec change"
	if trigger == infrav1.TriggerDependencyChange || trigger == infrav1.TriggerSourceChange || trigger == infrav1.TriggerRerunRequest {
		why = string(trigger) + " (" + detail + ")"
	}
	if st.child.GetAnnotations()[engine.CancelledAnnotation] == "" {
		if err := c.Cancel(ctx, r.Client, st.child, "superseded by "+why); err != nil {
			return ctrl.Result{}, generic("Supersede", err, "stopping superseded run %s", cur.ID)
		}
	}
	st.report(progressing, infrav1.ReasonSuperseded, "stopping run "+cur.ID+" (superseded by "+why+"); a new run starts when it has stopped")
	st.stop = true
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}
