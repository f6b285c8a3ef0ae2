package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/tenancy"
)

// reconcileRelease removes the finalizer without destroying anything when
// spec.deletionPolicy is Retain or the skip-destroy annotation is set, after
// asking an active run to stop. A planOnly TerraformRun is not released
// here: one that never applied loses its finalizer in reconcileDelete (no
// apply step ever ran), and one switched to planOnly after an apply is
// destroyed like any other, since its resources exist. It runs first, so the escape hatch works
// whatever state the run is in. Sets nothing; ends the pass when it acted.
func (r *TerraformRunReconciler) reconcileRelease(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	skip := run.Annotations[infrav1.SkipDestroyAnnotation] == "true"
	if !controllerutil.ContainsFinalizer(run, infrav1.Finalizer) || (!skip && st.eff.Spec.DeletionPolicy != infrav1.DeletionRetain) {
		return ctrl.Result{}, nil
	}
	r.stopActiveQuietly(ctx, run, st)
	ctrl.LoggerFrom(ctx).Info("removing finalizer without destroy", "policy", st.eff.Spec.DeletionPolicy, "skipDestroy", skip)
	st.stop = true
	return ctrl.Result{}, r.removeFinalizer(ctx, run)
}

// reconcileDelete destroys what the TerraformRun manages, then removes the
// finalizer. A TerraformRun whose apply step never ran loses it at once.
// An active apply run is stopped
// (its cleanup still runs) and followed to its end first, so what it did is
// known. A failed destroy is retried when infra.opr8r.io/run-requested-at
// changes. Sets Reconciling (Destroying) while it works, and Stalled when
// the destroy fails, times out or its engine is unavailable, with the
// escape hatch in the message.
func (r *TerraformRunReconciler) reconcileDelete(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(run, infrav1.Finalizer) {
		return ctrl.Result{}, nil
	}
	cur := run.Status.Run
	if st.active && cur.Type != infrav1.RunDestroy {
		if !applyStarted(st.progress.Steps) && !mayHaveResources(run) {
			// Stopped before its apply step, the run changes nothing.
			r.stopActiveQuietly(ctx, run, st)
			ctrl.LoggerFrom(ctx).Info("removing finalizer: no apply step ever ran", "stopped", cur.ID)
			return ctrl.Result{}, r.removeFinalizer(ctx, run)
		}
		return r.stopBeforeDestroy(ctx, run, st)
	}
	if !st.active && !mayHaveResources(run) {
		ctrl.LoggerFrom(ctx).Info("removing finalizer: no apply step ever ran")
		return ctrl.Result{}, r.removeFinalizer(ctx, run)
	}
	escape := fmt.Sprintf("; to delete without destroying, run: kubectl annotate tfrun %s %s=true", run.Name, infrav1.SkipDestroyAnnotation)
	e, err := r.engineFor(st.eff.Spec.Engine)
	if st.active {
		e, err = r.engineFor(cur.Engine)
	}
	if err != nil {
		return ctrl.Result{}, withSuffix(err, escape)
	}
	if st.active {
		return r.followDestroy(ctx, run, st, escape)
	}
	return r.nextDestroy(ctx, run, st, e, escape)
}

// nextDestroy starts the destroy run, retries a failed one on request, or
// removes the finalizer once it succeeded.
func (r *TerraformRunReconciler) nextDestroy(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine, escape string) (ctrl.Result, error) {
	cur := run.Status.Run
	request := run.Annotations[infrav1.RunRequestAnnotation]
	switch {
	case cur == nil || cur.Type != infrav1.RunDestroy:
		res, err := r.startRun(ctx, run, st, e, newRun{typ: infrav1.RunDestroy, trigger: infrav1.TriggerDeletion})
		if namespaceTerminating(err) {
			return ctrl.Result{}, r.releaseInDeletedNamespace(ctx, run, st)
		}
		return res, err
	case cur.Phase == infrav1.RunSucceeded:
		r.event(run, corev1.EventTypeNormal, reasonDestroyed, "Destroy", "destroy run "+cur.ID+" succeeded; removing the finalizer")
		return ctrl.Result{}, r.removeFinalizer(ctx, run)
	case cur.ApprovalMode == infrav1.ApprovalManual && !pipeline.HasGate(st.eff, infrav1.RunDestroy):
		// Stopped at its gate: a platform admin let it go without approval.
		return r.startRun(ctx, run, st, e, newRun{typ: infrav1.RunDestroy, trigger: infrav1.TriggerDeletion, detail: infrav1.DestroyWithoutApprovalAnnotation + " was set"})
	case st.childGone:
		// The destroy child was deleted (by hand, or with its namespace):
		// destroy again.
		res, err := r.startRun(ctx, run, st, e, newRun{typ: infrav1.RunDestroy, trigger: infrav1.TriggerDeletion, detail: "the previous destroy's " + cur.Child.Kind + " was deleted"})
		if namespaceTerminating(err) {
			return ctrl.Result{}, r.releaseInDeletedNamespace(ctx, run, st)
		}
		return res, err
	case request != "" && request != run.Status.LastHandledRunRequest:
		return r.startRun(ctx, run, st, e, newRun{typ: infrav1.RunDestroy, trigger: infrav1.TriggerRerunRequest, detail: request})
	}
	return ctrl.Result{}, stalling(infrav1.ReasonDestroyFailed,
		"destroy run %s failed: %s; fix the cause and retry with kubectl tfrun rerun %s (annotation %s)%s", cur.ID, cur.Message, run.Name, infrav1.RunRequestAnnotation, escape)
}

// followDestroy waits for the active destroy run, up to DestroyTimeout. A
// destroy of a TerraformRun with Manual approval waits for the approval of
// its plan first, like an apply (reconcileApproval decides it), and that
// wait is the approval's: only spec.approval.timeout ends it.
func (r *TerraformRunReconciler) followDestroy(ctx context.Context, run *infrav1.TerraformRun, st *passState, escape string) (ctrl.Result, error) {
	cur := run.Status.Run
	if st.progress.Gate.State == engine.GatePending {
		return r.destroyAwaitingApproval(ctx, run, st)
	}
	timeout := r.DestroyTimeout
	if timeout == 0 {
		timeout = DefaultDestroyTimeout
	}
	// Never before the destroy's own steps may end (spec.timeouts.destroy):
	// a long destroy is not stuck.
	timeout = max(timeout, pipeline.RunDeadline(st.eff, r.Config, infrav1.RunDestroy))
	if cur.StartedAt != nil && r.now().Sub(cur.StartedAt.Time) > timeout {
		return ctrl.Result{}, stalling(infrav1.ReasonDestroyTimeout, "destroy run %s has run for more than %s; check its steps%s", cur.ID, timeout, escape)
	}
	st.report(deleting, infrav1.ReasonDestroying, "destroy run "+cur.ID+" is running")
	if cur.StartedAt != nil {
		return ctrl.Result{RequeueAfter: timeout - r.now().Sub(cur.StartedAt.Time)}, nil
	}
	return ctrl.Result{}, nil
}

// destroyAwaitingApproval reports a destroy whose plan waits for approval,
// or stops it when a platform admin let the deletion destroy without
// approval since it started (nextDestroy then starts one without the gate).
func (r *TerraformRunReconciler) destroyAwaitingApproval(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	cur := run.Status.Run
	if !pipeline.HasGate(st.eff, infrav1.RunDestroy) {
		st.report(deleting, infrav1.ReasonDestroying, "stopping destroy run "+cur.ID+", which waits for approval: "+infrav1.DestroyWithoutApprovalAnnotation+" is set, a destroy without approval follows")
		if c, ok := st.engine.(engine.Canceller); ok && st.child != nil {
			if err := c.Cancel(ctx, r.Client, st.child, infrav1.DestroyWithoutApprovalAnnotation+" is set"); err != nil {
				return ctrl.Result{}, generic("CancelRun", err, "stopping run %s", cur.ID)
			}
		}
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	plan := ""
	if p := st.progress.Plan; p != nil {
		plan = " (" + p.Short() + ", " + p.Digest + ")"
	}
	st.report(deleting, infrav1.ReasonDestroying, fmt.Sprintf("destroy run %s waits for approval of its plan%s: kubectl tfrun approve %s (to delete without destroying: kubectl annotate tfrun %s %s=true; a platform admin may let it destroy without approval: %s=true)",
		cur.ID, plan, run.Name, run.Name, infrav1.SkipDestroyAnnotation, infrav1.DestroyWithoutApprovalAnnotation))
	return ctrl.Result{}, nil
}

// stopBeforeDestroy stops the active apply run and waits for it to end.
func (r *TerraformRunReconciler) stopBeforeDestroy(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	cur := run.Status.Run
	st.report(deleting, infrav1.ReasonDestroying, "waiting for the active run "+cur.ID+" to stop before destroying")
	if c, ok := st.engine.(engine.Canceller); ok && st.child != nil {
		if err := c.Cancel(ctx, r.Client, st.child, "the TerraformRun is being deleted"); err != nil {
			return ctrl.Result{}, generic("CancelRun", err, "stopping run %s", cur.ID)
		}
	}
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}

// stopActiveQuietly asks an active run to stop, when the finalizer goes
// without a destroy; a failure is only logged.
func (r *TerraformRunReconciler) stopActiveQuietly(ctx context.Context, run *infrav1.TerraformRun, st *passState) {
	if !st.active {
		return
	}
	cur := run.Status.Run
	e, ok := r.Engines.Get(cur.Engine)
	c, canCancel := e.(engine.Canceller)
	if !ok || !canCancel {
		return
	}
	child, err := r.getChild(ctx, run.Namespace, e, cur.ID)
	if err == nil && child != nil {
		err = c.Cancel(ctx, r.Client, child, "the TerraformRun is being deleted")
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("could not stop the active run before removing the finalizer", "child", cur.ID, "error", err.Error())
	}
}

// mayHaveResources says whether the state may hold resources: an apply step
// may have run (status.resourcesMayExist), or status from before that field
// shows an apply.
func mayHaveResources(run *infrav1.TerraformRun) bool {
	if run.Status.ResourcesMayExist || run.Status.LastAppliedHash != "" {
		return true
	}
	c := apimeta.FindStatusCondition(run.Status.Conditions, infrav1.AppliedCondition)
	return c != nil && (c.Reason == infrav1.ReasonApplied || c.Reason == infrav1.ReasonProgressing || c.Reason == infrav1.ReasonRunFailed)
}

func (r *TerraformRunReconciler) removeFinalizer(ctx context.Context, run *infrav1.TerraformRun) error {
	r.Limiter.ReleaseRun(client.ObjectKeyFromObject(run))
	driftDetected.DeleteLabelValues(run.Namespace, run.Name)
	r.forgetRecords(ctx, run)
	if err := r.unguardChildren(ctx, run.Namespace, func(n string) bool { return tenancy.ChildOfRun(run.Name, n) }); err != nil {
		return err
	}
	patch := client.MergeFrom(run.DeepCopy())
	controllerutil.RemoveFinalizer(run, infrav1.Finalizer)
	if err := r.Patch(ctx, run, patch); err != nil && !apierrors.IsNotFound(err) {
		return generic("RemoveFinalizer", err, "removing finalizer")
	}
	return nil
}

// namespaceTerminating says whether an API error is the refusal to create
// anything in a namespace that is being deleted.
func namespaceTerminating(err error) bool {
	var s apierrors.APIStatus
	if err == nil || !errors.As(err, &s) {
		return false
	}
	if d := s.Status().Details; d != nil {
		for _, c := range d.Causes {
			if c.Type == corev1.NamespaceTerminatingCause {
				return true
			}
		}
	}
	return false
}

// releaseInDeletedNamespace ends the deletion of a TerraformRun whose
// namespace is being deleted: no destroy run can start there, and the
// namespace's deletion takes the state Secret (the kubernetes backend's)
// with it. Holding the finalizer would only hold the namespace in
// Terminating for ever, so opr8r says so, loudly, and lets go.
func (r *TerraformRunReconciler) releaseInDeletedNamespace(ctx context.Context, run *infrav1.TerraformRun, st *passState) error {
	msg := fmt.Sprintf("namespace %s is being deleted: the destroy run cannot start there, so nothing was destroyed; resources the state recorded may remain in their provider, and a state kept in the namespace (the kubernetes backend's tfstate Secret) goes with it. Delete a TerraformRun and let its destroy finish before deleting its namespace (docs/long-lived-runs.md)", run.Namespace)
	r.event(run, corev1.EventTypeWarning, infrav1.ReasonDestroyFailed, "Destroy", msg)
	ctrl.LoggerFrom(ctx).Info("removing finalizer without destroy: the namespace is being deleted", "namespace", run.Namespace)
	st.report(deleting, infrav1.ReasonDestroyFailed, msg)
	st.stop = true
	return r.removeFinalizer(ctx, run)
}
