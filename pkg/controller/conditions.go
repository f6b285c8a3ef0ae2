package controller

import (
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

const (
	metav1True    = metav1.ConditionTrue
	metav1False   = metav1.ConditionFalse
	metav1Unknown = metav1.ConditionUnknown
)

// polarity says which status of a condition is the normal one (kstatus:
// "abnormal-true" conditions such as Stalled and Drifted are negative).
type polarity int

const (
	// positive conditions are normal when True.
	positive polarity = iota
	// negative conditions are normal when False or absent.
	negative
)

// conditionSpec declares one condition type of a TerraformRun, once.
type conditionSpec struct {
	// Type is the condition's type.
	Type string
	// Polarity says which status is normal.
	Polarity polarity
	// Owner is the one function that sets it.
	Owner string
	// Warnings are the reasons whose Events are Warnings.
	Warnings []string
	// DegradesReady: while it is abnormal, a run that is otherwise Ready
	// is Ready False with its reason and message, and Ready again once it
	// is normal (summarize).
	DegradesReady bool
}

// stalledReasons are the reasons a run stalls for: a person must act.
var stalledReasons = []string{
	infrav1.ReasonRunFailed, infrav1.ReasonRejected, infrav1.ReasonApprovalTimeout, infrav1.ReasonChildDeleted,
	infrav1.ReasonDestroyFailed, infrav1.ReasonDestroyTimeout, infrav1.ReasonEngineUnavailable, infrav1.ReasonOutputsFailed,
	infrav1.ReasonNoProgress, infrav1.ReasonInvalidSpec,
}

// conditions is the table of a TerraformRun's conditions, after Flux's
// summarize: Ready, Reconciling and Stalled are summarize's alone, derived
// from the pass's outcome and error; every other condition has one owner
// among the sub-reconcilers, which never writes the three.
var conditions = []conditionSpec{
	{Type: infrav1.ReadyCondition, Polarity: positive, Owner: "summarize"},
	{Type: infrav1.ReconcilingCondition, Polarity: negative, Owner: "summarize"},
	{Type: infrav1.StalledCondition, Polarity: negative, Owner: "summarize", Warnings: stalledReasons},
	{Type: infrav1.PlannedCondition, Polarity: positive, Owner: "reconcileActive", Warnings: []string{infrav1.ReasonRunFailed}},
	{Type: infrav1.ApprovedCondition, Polarity: positive, Owner: "reconcileApproval", Warnings: []string{
		infrav1.ReasonRejected, infrav1.ReasonApprovalTimeout, infrav1.ReasonStaleApproval, infrav1.ReasonApprovedOutsidePolicy,
		infrav1.ReasonPlanUnreadable,
	}},
	{Type: infrav1.AppliedCondition, Polarity: positive, Owner: "reconcileActive", Warnings: []string{infrav1.ReasonRunFailed}},
	{Type: infrav1.DriftedCondition, Polarity: negative, Owner: "reconcileSchedule", Warnings: []string{infrav1.ReasonDriftDetected}, DegradesReady: true},
	{Type: infrav1.DependenciesReadyCondition, Polarity: positive, Owner: "reconcileDependencies"},
}

// specOf returns a condition type's declaration.
func specOf(t string) (conditionSpec, bool) {
	i := slices.IndexFunc(conditions, func(c conditionSpec) bool { return c.Type == t })
	if i < 0 {
		return conditionSpec{}, false
	}
	return conditions[i], true
}

// abnormal says whether a condition is in its abnormal status.
func (c conditionSpec) abnormal(s metav1.ConditionStatus) bool {
	if c.Polarity == negative {
		return s == metav1True
	}
	return s != metav1True
}

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
// disagree, and events fire on transitions only. Its Warnings (the table)
// say the Event's type.
func (r *TerraformRunReconciler) transition(run *infrav1.TerraformRun, t string, s metav1.ConditionStatus, reason, msg string) {
	if !setStatus(run, t, s, reason, msg) {
		return
	}
	typ := corev1.EventTypeNormal
	if spec, ok := specOf(t); ok && slices.Contains(spec.Warnings, reason) {
		typ = corev1.EventTypeWarning
	}
	r.event(run, typ, reason, t, msg)
}

func (r *TerraformRunReconciler) event(run *infrav1.TerraformRun, typ, reason, action, msg string) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(run, nil, typ, reason, action, "%s", truncate(msg, 1024))
	r.notify(run, reason, msg)
}

// outcomeKind is what a pass found of the run as a whole.
type outcomeKind int

const (
	// noOutcome: the pass changed nothing of the run's readiness.
	noOutcome outcomeKind = iota
	// progressing: a run, a start or a stop is under way (kstatus: in
	// progress): Reconciling True, Ready Unknown.
	progressing
	// deleting: the destroy is under way: Reconciling True; Ready keeps
	// what the last run left.
	deleting
	// suspended: spec.suspend holds new runs back: Reconciling False.
	suspended
	// ready: the run's desired state is reached: Ready True.
	ready
	// stalled: nothing moves without a person: Stalled True, Ready False.
	stalled
)

// outcome is a pass's finding, with the reason and message the conditions
// take.
type outcome struct {
	kind            outcomeKind
	reason, message string
}

// report records what a sub-reconciler found of the run as a whole; a
// later finding in the pass replaces an earlier one, and summarize writes
// the last.
func (st *passState) report(kind outcomeKind, reason, msg string) {
	st.outcome = outcome{kind: kind, reason: reason, message: msg}
}

// summarize is the one place Ready, Reconciling and Stalled are written.
// A stalling or waiting error of the pass is its outcome (Stalled; waiting
// errors are looked at again after their delay); other errors go to
// controller-runtime's backoff and change nothing. Then the table's
// conditions that degrade Ready are applied, and the printed columns
// derived.
func (r *TerraformRunReconciler) summarize(run *infrav1.TerraformRun, st *passState, res ctrl.Result, err error) (ctrl.Result, error) {
	var s *StallingError
	var w *WaitingError
	switch {
	case errors.As(err, &s):
		st.report(stalled, s.Reason, s.Error())
		res, err = ctrl.Result{}, nil
	case errors.As(err, &w):
		st.report(stalled, w.Reason, w.Error())
		res, err = ctrl.Result{RequeueAfter: w.RequeueAfter}, nil
	}
	r.applyOutcome(run, st.outcome)
	r.applyDegraders(run)
	summarizeColumns(run)
	return res, err
}

// applyOutcome writes the kstatus conditions of a pass's outcome; Events
// fire when Ready becomes True and when Stalled does.
func (r *TerraformRunReconciler) applyOutcome(run *infrav1.TerraformRun, o outcome) {
	conds := &run.Status.Conditions
	switch o.kind {
	case progressing:
		setStatus(run, infrav1.ReconcilingCondition, metav1True, o.reason, o.message)
		setStatus(run, infrav1.ReadyCondition, metav1Unknown, o.reason, o.message)
		apimeta.RemoveStatusCondition(conds, infrav1.StalledCondition)
	case deleting:
		setStatus(run, infrav1.ReconcilingCondition, metav1True, o.reason, o.message)
		apimeta.RemoveStatusCondition(conds, infrav1.StalledCondition)
	case suspended:
		setStatus(run, infrav1.ReconcilingCondition, metav1False, o.reason, o.message)
	case ready:
		r.transition(run, infrav1.ReadyCondition, metav1True, o.reason, o.message)
		apimeta.RemoveStatusCondition(conds, infrav1.ReconcilingCondition)
		apimeta.RemoveStatusCondition(conds, infrav1.StalledCondition)
	case stalled:
		r.transition(run, infrav1.StalledCondition, metav1True, o.reason, o.message)
		setStatus(run, infrav1.ReadyCondition, metav1False, o.reason, o.message)
		apimeta.RemoveStatusCondition(conds, infrav1.ReconcilingCondition)
	}
}

// applyDegraders applies the table's conditions that degrade Ready (Drifted):
// while one is abnormal, a run that is Ready (not in progress, not stalled)
// is Ready False with its reason and message; once it is normal again, a
// run whose Ready it degraded is Ready again, with its message.
func (r *TerraformRunReconciler) applyDegraders(run *infrav1.TerraformRun) {
	readyC := apimeta.FindStatusCondition(run.Status.Conditions, infrav1.ReadyCondition)
	if readyC == nil {
		return
	}
	for _, spec := range conditions {
		c := apimeta.FindStatusCondition(run.Status.Conditions, spec.Type)
		if !spec.DegradesReady || c == nil {
			continue
		}
		switch {
		case spec.abnormal(c.Status) && (readyC.Status == metav1True || readyC.Reason == c.Reason):
			setStatus(run, infrav1.ReadyCondition, metav1False, c.Reason, c.Message)
			return
		case !spec.abnormal(c.Status) && readyC.Status == metav1False && slices.Contains(spec.Warnings, readyC.Reason):
			r.transition(run, infrav1.ReadyCondition, metav1True, infrav1.ReasonSucceeded, c.Message)
			return
		}
	}
}

// summarizeColumns derives the printed phase and plan columns from the
// status.
func summarizeColumns(run *infrav1.TerraformRun) {
	st := &run.Status
	stalledC := apimeta.FindStatusCondition(st.Conditions, infrav1.StalledCondition)
	switch {
	case !run.DeletionTimestamp.IsZero():
		st.Phase = "Deleting"
	case stalledC != nil && stalledC.Status == metav1True && st.Run == nil:
		st.Phase = "Stalled"
	case stalledC != nil && stalledC.Reason == infrav1.ReasonEngineUnavailable:
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
