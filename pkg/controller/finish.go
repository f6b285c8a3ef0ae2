package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

// The finish* functions record the end of a run or a check: its result in
// status.run and status.history, its outputs, and its outcome for
// summarize.

// finishRun records a finished run: for an apply run its outputs first, so
// a run is never recorded as finished with its outputs unwritten; then the
// run's result in status.run and status.history.
func (r *TerraformRunReconciler) finishRun(ctx context.Context, run *infrav1.TerraformRun, st *passState) error {
	cur, prog := run.Status.Run, st.progress
	r.Limiter.Release(run.Namespace, cur.ID)
	switch cur.Type {
	case infrav1.RunApply:
		if err := r.finishApply(ctx, run, st); err != nil {
			return err
		}
	case infrav1.RunPlan:
		r.finishPlanOnly(run, st)
	}
	cur.Phase, cur.Message, cur.FinishedAt = prog.Phase, prog.Message, r.finishedAt(prog.FinishedAt)
	if cur.Type == infrav1.RunApply && applyMayHaveRun(prog.Steps) {
		run.Status.ResourcesMayExist = true
	}
	if cur.SpecHash == st.hash {
		run.Status.ObservedGeneration = run.Generation
	}
	appendHistory(run, cur, limitsOf(run, st.eff.Spec))
	st.active, st.finished = false, true
	runsFinished.WithLabelValues(string(cur.Engine), string(cur.Type), string(cur.Phase)).Inc()
	return nil
}

// applyMayHaveRun says whether a finished run's apply step may have changed
// anything: it ran, or the child does not say.
func applyMayHaveRun(steps []infrav1.StepStatus) bool {
	for _, s := range steps {
		if s.Name == names.StepApply {
			return s.Phase != infrav1.StepPending && s.Phase != infrav1.StepSkipped
		}
	}
	// No apply step reported: the plan failed or was rejected before it, or
	// the engine shows no steps; only the former is known to be harmless.
	for _, s := range steps {
		if s.Name == names.StepPlan || s.Name == names.StepApprove {
			return false
		}
	}
	return true
}

// finishApply records the result of a finished apply run: the approval the
// engine shows, the outputs Secret, and Applied and Ready, or Stalled.
func (r *TerraformRunReconciler) finishApply(ctx context.Context, run *infrav1.TerraformRun, st *passState) error {
	cur, prog := run.Status.Run, st.progress
	switch prog.Phase {
	case infrav1.RunSucceeded:
		return r.finishSucceeded(ctx, run, st)
	case infrav1.RunRejected:
		if prog.Plan != nil {
			if err := r.setEngineDecision(ctx, run, st, prog.Gate, prog.Plan.Digest); err != nil {
				return err
			}
		}
		reason := infrav1.ReasonRejected
		if a := run.Status.Approval; a != nil && a.Source == infrav1.ApprovalTimedOut {
			reason = infrav1.ReasonApprovalTimeout
		}
		msg := fmt.Sprintf("run %s: %s; change the spec or request a rerun (kubectl tfrun rerun %s)", cur.ID, prog.Message, run.Name)
		st.report(stalled, reason, msg)
		r.notifyEnd(run, st, infrav1.NotifyFailed, msg)
	default:
		msg := fmt.Sprintf("run %s failed: %s", cur.ID, prog.Message)
		st.report(stalled, infrav1.ReasonRunFailed, msg)
		r.notifyEnd(run, st, infrav1.NotifyFailed, msg)
	}
	return nil
}

// finishSucceeded records a successful apply run: its approval, its outputs,
// Applied and Ready.
func (r *TerraformRunReconciler) finishSucceeded(ctx context.Context, run *infrav1.TerraformRun, st *passState) error {
	cur, prog := run.Status.Run, st.progress
	if prog.Plan != nil && prog.Plan.HasChanges && autoWithoutGate(st.eff) {
		r.setApproval(run, infrav1.ApprovalStatus{Digest: prog.Plan.Digest, Approved: true, Source: infrav1.ApprovedAutomatically, At: metav1.NewTime(r.now())}, "plan approved automatically (approval mode Auto)")
	}
	if prog.Gate.State == engine.GateApproved && prog.Plan != nil {
		if err := r.setEngineDecision(ctx, run, st, prog.Gate, prog.Plan.Digest); err != nil {
			return err
		}
	}
	if prog.OutputsExported {
		if err := r.projectOutputs(ctx, run, st.eff, cur.ID); err != nil {
			return err
		}
	}
	if prog.Applied {
		msg := "applied plan " + digestOf(run) + " (" + run.Status.PlanSummary + ")"
		r.transition(run, infrav1.AppliedCondition, metav1True, infrav1.ReasonApplied, msg)
		r.notifyEnd(run, st, infrav1.NotifyApplied, "run "+cur.ID+" "+msg)
	} else {
		r.transition(run, infrav1.AppliedCondition, metav1True, infrav1.ReasonNoChanges, "the plan had no changes; nothing to apply")
	}
	run.Status.LastAppliedHash, run.Status.LastAppliedGeneration = cur.SpecHash, cur.Generation
	run.Status.LastApplied = &infrav1.AppliedRevision{Revision: cur.Commit, Inputs: cur.Inputs, RunID: cur.ID}
	if c := findCondition(run, infrav1.DriftedCondition); c != nil && c.Status == metav1True {
		r.transition(run, infrav1.DriftedCondition, metav1False, infrav1.ReasonNoDrift, "run "+cur.ID+" applied the spec again")
	}
	st.report(ready, infrav1.ReasonSucceeded, fmt.Sprintf("run %s succeeded: %s; %d outputs in Secret %s", cur.ID, planSummaryOrNone(run), len(run.Status.Outputs), run.Status.OutputsSecretName))
	return nil
}

// finishPlanOnly records a finished run of a planOnly TerraformRun: Ready
// when the plan was made (nothing is applied), Stalled when it failed.
func (r *TerraformRunReconciler) finishPlanOnly(run *infrav1.TerraformRun, st *passState) {
	cur, prog := run.Status.Run, st.progress
	if prog.Phase != infrav1.RunSucceeded || prog.Plan == nil {
		msg := fmt.Sprintf("run %s failed: %s", cur.ID, prog.Message)
		st.report(stalled, infrav1.ReasonRunFailed, msg)
		r.notifyEnd(run, st, infrav1.NotifyFailed, msg)
		return
	}
	st.report(ready, infrav1.ReasonPlannedOnly,
		fmt.Sprintf("run %s planned %s; nothing is applied (spec.planOnly): kubectl tfrun plan %s", cur.ID, prog.Plan.Short(), run.Name))
}

func planSummaryOrNone(run *infrav1.TerraformRun) string {
	if run.Status.Plan == nil {
		return "no plan"
	}
	if !run.Status.Plan.HasChanges {
		return "no changes"
	}
	p := run.Status.Plan
	return "applied " + results.ShortAll(p.Add, p.Change, p.Destroy, p.Import, p.Forget, p.Move, p.Actions)
}

// childDeleted records an active run whose child was deleted by hand. It is
// not restarted by itself: the person who deleted it may have meant to stop
// it. What its apply step did is unknown, so the state may hold resources.
func (r *TerraformRunReconciler) childDeleted(run *infrav1.TerraformRun, st *passState) {
	cur := run.Status.Run
	cur.Phase = infrav1.RunFailed
	cur.FinishedAt = r.finishedAt(nil)
	cur.Message = fmt.Sprintf("%s %s was deleted before it finished", cur.Child.Kind, cur.ID)
	if cur.Type == infrav1.RunApply {
		run.Status.ResourcesMayExist = true
	}
	r.Limiter.Release(run.Namespace, cur.ID)
	appendHistory(run, cur, limitsOf(run, st.eff.Spec))
	st.active, st.finished, st.childGone = false, true, true
	st.report(stalled, infrav1.ReasonChildDeleted, cur.Message+fmt.Sprintf("; request a new run with kubectl tfrun rerun %s (annotation %s)", run.Name, infrav1.RunRequestAnnotation))
}

// finishCheck records a finished check and judges what it found.
func (r *TerraformRunReconciler) finishCheck(run *infrav1.TerraformRun, st *passState, check client.Object, prog engine.Progress) {
	r.Limiter.Release(run.Namespace, check.GetName())
	rec := checkRecord(st.eff.Spec.Engine, check, prog)
	rec.FinishedAt = r.finishedAt(rec.FinishedAt)
	result := r.judgeCheck(run, st, check, prog, rec)
	if rec.Message == "" {
		rec.Message = result
	} else {
		rec.Message = result + ": " + rec.Message
	}
	if n := childNumber(check); n > run.Status.LastRunNumber {
		run.Status.LastRunNumber = n
	}
	run.Status.History = historyWith(run.Status.History, rec, limitsOf(run, st.eff.Spec))
	run.Status.Drift = &infrav1.DriftStatus{LastCheckID: check.GetName(), LastCheckedAt: *rec.FinishedAt, Result: result, Revision: prog.Commit}
	if result == infrav1.CheckDrifted {
		run.Status.Drift.Plan = rec.Plan
	}
	checksFinished.WithLabelValues(result).Inc()
	runsFinished.WithLabelValues(string(rec.Engine), string(infrav1.RunDrift), string(rec.Result)).Inc()
	st.finished = true
}

// checkRecord is a finished check's history record.
func checkRecord(e infrav1.EngineName, check client.Object, prog engine.Progress) infrav1.RunRecord {
	l := check.GetLabels()
	rec := infrav1.RunRecord{
		ID: check.GetName(), Number: childNumber(check), Type: infrav1.RunDrift, Engine: e,
		Trigger: infrav1.TriggerSchedule, SpecHash: l[infrav1.SpecHashLabel], Revision: prog.Commit,
		Result: prog.Phase, StartedAt: prog.StartedAt, FinishedAt: prog.FinishedAt, Message: truncate(prog.Message, 900),
	}
	if prog.Plan != nil {
		rec.Plan = planStatus(prog.Plan, check.GetName())
		rec.Inputs = prog.Plan.Inputs
	}
	return rec
}
