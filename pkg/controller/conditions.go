package controller

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

const (
	metav1True    = metav1.ConditionTrue
	metav1False   = metav1.ConditionFalse
	metav1Unknown = metav1.ConditionUnknown
)

// setStatus sets a condition and reports whether its status or reason changed.
func setStatus(run *infrav1.TerraformRun, t string, s metav1.ConditionStatus, reason, msg string) bool {
	old := apimeta.FindStatusCondition(run.Status.Conditions, t)
	changed := old == nil || old.Status != s || old.Reason != reason
	apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: truncate(msg, 1024), ObservedGeneration: run.Generation,
	})
	return changed
}

// transition sets a condition and, when its status or reason changed, emits
// an Event with the same reason and message: conditions and events never
// disagree, and events fire on transitions only.
func (r *TerraformRunReconciler) transition(run *infrav1.TerraformRun, t string, s metav1.ConditionStatus, reason, msg string) {
	if !setStatus(run, t, s, reason, msg) {
		return
	}
	typ := corev1.EventTypeNormal
	if warningReasons[reason] {
		typ = corev1.EventTypeWarning
	}
	r.event(run, typ, reason, t, msg)
}

// warningReasons are the condition reasons whose Events are Warnings.
var warningReasons = map[string]bool{
	infrav1.ReasonRunFailed: true, infrav1.ReasonRejected: true, infrav1.ReasonApprovalTimeout: true,
	infrav1.ReasonStaleApproval: true, infrav1.ReasonChildDeleted: true, infrav1.ReasonDestroyFailed: true,
	infrav1.ReasonDestroyTimeout: true, infrav1.ReasonEngineUnavailable: true, infrav1.ReasonOutputsFailed: true,
	infrav1.ReasonNoProgress: true, infrav1.ReasonInvalidSpec: true, infrav1.ReasonDriftDetected: true,
	infrav1.ReasonApprovedOutsidePolicy: true,
}

func (r *TerraformRunReconciler) event(run *infrav1.TerraformRun, typ, reason, action, msg string) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(run, nil, typ, reason, action, "%s", truncate(msg, 1024))
}

// setProgressing marks a run in progress (kstatus): Reconciling True, Ready
// Unknown, no Stalled.
func (r *TerraformRunReconciler) setProgressing(run *infrav1.TerraformRun, reason, msg string) {
	setStatus(run, infrav1.ReconcilingCondition, metav1True, reason, msg)
	setStatus(run, infrav1.ReadyCondition, metav1Unknown, reason, msg)
	apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.StalledCondition)
}

// setReady marks the run ready: Ready True, no Reconciling, no Stalled.
func (r *TerraformRunReconciler) setReady(run *infrav1.TerraformRun, msg string) {
	r.transition(run, infrav1.ReadyCondition, metav1True, infrav1.ReasonSucceeded, msg)
	apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.ReconcilingCondition)
	apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.StalledCondition)
}

// setStalled marks a run that cannot progress without a person: Stalled
// True, Ready False, no Reconciling.
func (r *TerraformRunReconciler) setStalled(run *infrav1.TerraformRun, reason, msg string) {
	r.transition(run, infrav1.StalledCondition, metav1True, reason, msg)
	setStatus(run, infrav1.ReadyCondition, metav1False, reason, msg)
	apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.ReconcilingCondition)
}

// summarize derives the printed phase and plan columns from the status.
func summarize(run *infrav1.TerraformRun) {
	st := &run.Status
	switch {
	case !run.DeletionTimestamp.IsZero():
		st.Phase = "Deleting"
	case apimeta.IsStatusConditionTrue(st.Conditions, infrav1.StalledCondition) && st.Run == nil:
		st.Phase = "Stalled"
	case apimeta.FindStatusCondition(st.Conditions, infrav1.StalledCondition) != nil &&
		apimeta.FindStatusCondition(st.Conditions, infrav1.StalledCondition).Reason == infrav1.ReasonEngineUnavailable:
		st.Phase = infrav1.ReasonEngineUnavailable
	case st.Run != nil:
		st.Phase = string(st.Run.Phase)
	default:
		st.Phase = string(infrav1.RunPending)
	}
	if st.Plan != nil {
		st.PlanSummary = st.Plan.Summary
	} else {
		st.PlanSummary = ""
	}
}

func statusEqual(a, b infrav1.TerraformRunStatus) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}
