package controller

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// The engine object of a run whose plan waits at, or passed, its approval
// gate is labelled infra.opr8r.io/approval: waiting, approved, rejected,
// timed-out or superseded. The dashboards filter lists by label (the Argo
// UI's workflow list, the Tekton Dashboard's PipelineRuns:
// infra.opr8r.io/approval=waiting lists every run that waits for someone),
// and the Tekton Dashboard's run header shows a PipelineRun's labels while
// its task tree shows no state of a custom task such as the gate
// (docs/dashboards.md). It costs one metadata patch per change of the
// gate's state; a decision opr8r makes is labelled before the engine is
// told, so that the objects the engine creates next (Tekton copies a
// PipelineRun's labels onto its TaskRuns) carry the decision.

// reconcileGateLabel labels the active child with where its plan's
// approval stands, as observed (a resume in the Argo UI, say) or decided
// in this pass.
func (r *TerraformRunReconciler) reconcileGateLabel(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !st.active || st.child == nil {
		return ctrl.Result{}, nil
	}
	v := gateLabelValue(run, st.progress)
	if v == "" {
		return ctrl.Result{}, nil
	}
	if err := r.labelGate(ctx, st.child, v); err != nil {
		if apierrors.IsConflict(err) {
			// The engine moved the child since the cache saw it: again
			// once the cache has the new version.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// gateLabelValue is the approval label for a run's observed gate ("" for
// none): the gate's state, or the decision status.approval records for the
// plan waiting (made in this pass, not yet shown by the engine).
func gateLabelValue(run *infrav1.TerraformRun, prog engine.Progress) string {
	if prog.Plan == nil {
		return ""
	}
	decided := ""
	if a := run.Status.Approval; a != nil && a.Digest == prog.Plan.Digest && a.Source != infrav1.ApprovedAutomatically {
		switch {
		case a.Approved:
			decided = infrav1.ApprovalLabelApproved
		case a.Source == infrav1.ApprovalTimedOut:
			decided = infrav1.ApprovalLabelTimedOut
		default:
			decided = infrav1.ApprovalLabelRejected
		}
	}
	switch prog.Gate.State {
	case engine.GatePending:
		if decided != "" {
			return decided
		}
		return infrav1.ApprovalLabelWaiting
	case engine.GateApproved:
		if decided == infrav1.ApprovalLabelRejected {
			// an approval the engine shows and opr8r refused
			return decided
		}
		return infrav1.ApprovalLabelApproved
	case engine.GateRejected:
		if decided == infrav1.ApprovalLabelTimedOut {
			return decided
		}
		return infrav1.ApprovalLabelRejected
	}
	return ""
}

// labelGate sets the approval label on the child unless it has that value,
// with a patch of its metadata guarded by the child's resourceVersion: the
// child then takes the version the patch made, so that a decision guarded
// by the same version (Argo's resume of the node, the Job engine's
// annotations) follows in the same pass. A conflict is returned as it is.
func (r *TerraformRunReconciler) labelGate(ctx context.Context, child client.Object, value string) error {
	if child.GetLabels()[infrav1.ApprovalLabel] == value {
		return nil
	}
	meta := map[string]any{"labels": map[string]string{infrav1.ApprovalLabel: value}}
	if rv := child.GetResourceVersion(); rv != "" {
		meta["resourceVersion"] = rv
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	m, err := r.patchMetadata(ctx, child, client.RawPatch(types.MergePatchType, patch))
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) {
			return err
		}
		return generic("LabelGate", err, "labelling %s %s %s=%s", kindOf(m), child.GetName(), infrav1.ApprovalLabel, value)
	}
	// The pass goes on with the label it wrote, so a later step of the same
	// pass writes it no more.
	setLabel(child, infrav1.ApprovalLabel, value)
	child.SetResourceVersion(m.GetResourceVersion())
	return nil
}
