package controller

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=delete

// reconcileRecords prunes the records (step logs and plans, pkg/records)
// of runs that have left status.history: those numbered below the oldest
// run the stored history keeps. It lists a TerraformRun's records only
// when its oldest kept run has moved since the last prune, so a pass of a
// run whose history did not change costs nothing. A failed prune is
// logged and tried again on a later pass; it never holds a run back.
// It sets no conditions.
func (r *TerraformRunReconciler) reconcileRecords(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if r.Records == nil {
		return ctrl.Result{}, nil
	}
	h := st.persisted.History
	if len(h) == 0 || int32(len(h)) < *st.eff.Spec.History.KeepRecords {
		return ctrl.Result{}, nil // nothing has left a history that is not full
	}
	oldest := h[0].Number
	for _, rec := range h {
		oldest = min(oldest, rec.Number)
	}
	if done, ok := r.recordsPruned.Load(run.UID); ok && done.(int64) >= oldest {
		return ctrl.Result{}, nil
	}
	gone, err := records.Prune(ctx, r.Records, run.Namespace, run.Name, oldest)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "pruning the records of runs that left the history; trying again later")
		return ctrl.Result{}, nil
	}
	if len(gone) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("pruned the records of runs that left the history", "runs", gone)
	}
	r.recordsPruned.Store(run.UID, oldest)
	return ctrl.Result{}, nil
}

// forgetRecords deletes every record of a TerraformRun that is going away.
// The record Secrets are owned by it, so the garbage collector would also
// remove them; deleting them here makes that immediate, and is what removes
// them from an object store. A store that fails is logged, not waited for:
// deletion is never held up by records (the object store's retention sweep
// removes what is left).
func (r *TerraformRunReconciler) forgetRecords(ctx context.Context, run *infrav1.TerraformRun) {
	r.recordsPruned.Delete(run.UID)
	if r.Records == nil {
		return
	}
	if err := r.Records.Delete(ctx, run.Namespace, run.Name); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "deleting the records of a deleted TerraformRun")
	}
}
