package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/opr8r/opr8r/pkg/names"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// reconcileActive follows the active run (status.run, not yet finished): it
// reads the run's child, projects its progress into status.run and, once the
// child has finished, records the run's result (outputs first) in
// status.run and status.history. Sets Planned, Applied and Reconciling from
// the child's steps; on finish Ready (succeeded) or Stalled (failed,
// rejected); Stalled ChildDeleted when the child is gone.
func (r *TerraformRunReconciler) reconcileActive(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !st.active {
		return ctrl.Result{}, nil
	}
	cur := run.Status.Run
	e, err := r.engineFor(cur.Engine)
	if err != nil {
		return ctrl.Result{}, err
	}
	child, err := r.getChild(ctx, run.Namespace, e, cur.ID)
	if err != nil {
		return ctrl.Result{}, err
	}
	if child == nil {
		r.childDeleted(run, st)
		return ctrl.Result{}, nil
	}
	prog, err := r.observe(ctx, e, child)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.engine, st.child, st.progress = e, child, prog
	r.project(run, st, cur, prog)
	if !prog.Finished {
		r.holdSlot(run, cur.ID, prog)
		return ctrl.Result{}, nil
	}
	if err := r.finishRun(ctx, run, st); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// reconcileDrive lets an engine that no controller drives (the Job engine)
// create its child's next step, or tidy up after it finished. Sets nothing.
func (r *TerraformRunReconciler) reconcileDrive(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	d, ok := st.engine.(engine.Driver)
	if !ok || st.child == nil {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.drive(ctx, d, st.engine, st.child, st.progress, recordedDecision(run))
}

// drive lets a Driver move a child on, with what it may act on: the
// decision opr8r recorded (not one read back from the child) and the
// check of the child's seal. A broken seal stalls the run: someone changed
// what opr8r built, and nothing more is made of it.
func (r *TerraformRunReconciler) drive(ctx context.Context, d engine.Driver, e engine.Engine, child client.Object, prog engine.Progress, decision *engine.RecordedDecision) error {
	err := d.Drive(ctx, r.Client, r.APIReader, child, prog, engine.DriveInput{Decision: decision, Verify: r.Seals.Verifier(e)})
	if errors.Is(err, engine.ErrSealBroken) {
		return &StallingError{Reason: infrav1.ReasonRunFailed, Err: err}
	}
	return generic("Drive", err, "driving %s", child.GetName())
}

// recordedDecision is the gate's decision status.approval records for the
// run's current plan, or nil.
func recordedDecision(run *infrav1.TerraformRun) *engine.RecordedDecision {
	if a := run.Status.Approval; a != nil && run.Status.Plan != nil && a.Digest == run.Status.Plan.Digest {
		return &engine.RecordedDecision{Approved: a.Approved, Digest: a.Digest}
	}
	return nil
}

// getChild reads a child by name. It returns nil when the child is gone,
// confirmed past the cache, which may lag behind a child created moments ago.
func (r *TerraformRunReconciler) getChild(ctx context.Context, ns string, e engine.Engine, name string) (client.Object, error) {
	child := e.NewChild()
	key := types.NamespacedName{Namespace: ns, Name: name}
	err := r.Get(ctx, key, child)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, child)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, generic("GetChild", err, "getting %s %s", e.ChildGVK().Kind, name)
	}
	if child.GetDeletionTimestamp() != nil {
		// Being deleted (an orphaning delete waits for the garbage
		// collector): gone, as far as the run is concerned.
		return nil, nil
	}
	return child, nil
}

// observe reads a child's progress, with its related objects for engines
// that have them. A child the engine cannot read stalls the run.
func (r *TerraformRunReconciler) observe(ctx context.Context, e engine.Engine, child client.Object) (engine.Progress, error) {
	return r.observeWith(ctx, r.Client, e, child)
}

// observeSettled observes a child whose end the stored status records. A
// pass cut short while labelling it settled (a crash, a lost write) leaves
// some of its step objects labelled, and so out of the cache, and the child
// not: the cache's view then reads as a run still waiting for its steps
// (for up to engine.CacheLagGrace, or for good), and would hold the run's
// next run and the child's own label. Such a child is observed again with
// its step objects read from the API server, which has them all; a child
// that really still runs (a stopped run's cleanup) reads so there too.
func (r *TerraformRunReconciler) observeSettled(ctx context.Context, e engine.Engine, child client.Object) (engine.Progress, error) {
	prog, err := r.observe(ctx, e, child)
	if err != nil || prog.Finished {
		return prog, err
	}
	if _, ok := e.(engine.RelatedLister); !ok {
		return prog, nil
	}
	return r.observeWith(ctx, r.APIReader, e, child)
}

// observeWith is observe with the child's related objects read by rd.
func (r *TerraformRunReconciler) observeWith(ctx context.Context, rd client.Reader, e engine.Engine, child client.Object) (engine.Progress, error) {
	var related []client.Object
	if rl, ok := e.(engine.RelatedLister); ok {
		var err error
		if related, err = rl.Related(ctx, rd, child); err != nil {
			return engine.Progress{}, generic("ListSteps", err, "listing the steps of %s", child.GetName())
		}
	}
	prog, err := e.Observe(child, related, r.now())
	if err != nil {
		return engine.Progress{}, &StallingError{Reason: infrav1.ReasonRunFailed, Err: err}
	}
	return prog, nil
}

// project copies a child's progress into status. Terminal phases are set by
// finishRun, once the run's results are recorded.
func (r *TerraformRunReconciler) project(run *infrav1.TerraformRun, st *passState, cur *infrav1.RunStatus, prog engine.Progress) {
	cur.Steps = prog.Steps
	if prog.Commit != "" {
		cur.Commit = prog.Commit
	}
	cur.Message = prog.Message
	if prog.Plan != nil && prog.Plan.Inputs != "" {
		cur.Inputs = prog.Plan.Inputs
	}
	if !prog.Finished {
		cur.Phase = prog.Phase
	}
	if cur.Type == infrav1.RunDestroy && prog.Plan != nil {
		// A destroy's plan waits for approval like an apply's (kubectl
		// tfrun plan and approve read it here), without the conditions of
		// the TerraformRun's applied state.
		run.Status.Plan = planStatus(prog.Plan, cur.ID)
	}
	if cur.Type != infrav1.RunApply && cur.Type != infrav1.RunPlan {
		return
	}
	r.projectPlan(run, cur, prog.Plan)
	r.projectSteps(run, prog.Steps)
	if !prog.Finished {
		reason := infrav1.ReasonProgressing
		if prog.Gate.State == engine.GatePending {
			reason = infrav1.ReasonAwaitingApproval
		}
		st.report(progressing, reason, fmt.Sprintf("run %s: %s", cur.ID, describeSteps(prog.Steps)))
	}
}

// projectPlan records the plan step's result and sets Planned.
func (r *TerraformRunReconciler) projectPlan(run *infrav1.TerraformRun, cur *infrav1.RunStatus, p *engine.PlanResult) {
	if p == nil {
		return
	}
	run.Status.Plan = planStatus(p, cur.ID)
	msg := fmt.Sprintf("plan %s (%s) from run %s", p.Short(), p.Digest, cur.ID)
	if !p.HasChanges {
		msg = "plan has no changes (run " + cur.ID + ")"
	}
	r.transition(run, infrav1.PlannedCondition, metav1True, infrav1.ReasonPlanned, msg)
}

func planStatus(p *engine.PlanResult, runID string) *infrav1.PlanStatus {
	return &infrav1.PlanStatus{
		Add: p.Add, Change: p.Change, Destroy: p.Destroy, Replace: p.Replace,
		Import: p.Import, Forget: p.Forget, Move: p.Move, Actions: p.Actions,
		HasChanges: p.HasChanges, Digest: p.Digest, Summary: p.Short(), RunID: runID,
		TextDigest: p.TextDigest, JSONDigest: p.JSONDigest, SensitiveJSONDigest: p.SensitiveJSONDigest,
	}
}

// projectSteps sets Planned False when the plan failed, and Applied while
// apply runs or when it failed.
func (r *TerraformRunReconciler) projectSteps(run *infrav1.TerraformRun, steps []infrav1.StepStatus) {
	for _, s := range steps {
		switch {
		case s.Name == names.StepPlan && s.Phase == infrav1.StepFailed:
			r.transition(run, infrav1.PlannedCondition, metav1False, infrav1.ReasonRunFailed, s.Message)
		case s.Name == names.StepApply && s.Phase == infrav1.StepRunning:
			r.transition(run, infrav1.AppliedCondition, metav1Unknown, infrav1.ReasonProgressing, "applying plan "+digestOf(run))
		case s.Name == names.StepApply && s.Phase == infrav1.StepFailed:
			r.transition(run, infrav1.AppliedCondition, metav1False, infrav1.ReasonRunFailed, s.Message)
		}
	}
}

func digestOf(run *infrav1.TerraformRun) string {
	if run.Status.Plan == nil {
		return ""
	}
	return run.Status.Plan.Digest
}

func describeSteps(steps []infrav1.StepStatus) string {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Phase == infrav1.StepRunning {
			if steps[i].Name == names.StepApprove {
				return "waiting for approval"
			}
			return "step " + steps[i].Name + " is running"
		}
	}
	return "pending"
}

// applyStarted says whether an active run's apply step has started.
func applyStarted(steps []infrav1.StepStatus) bool {
	for _, s := range steps {
		if s.Name == names.StepApply {
			return s.Phase == infrav1.StepRunning || s.Phase == infrav1.StepSucceeded || s.Phase == infrav1.StepFailed
		}
	}
	return false
}

// holdSlot keeps the slot of an active child, but gives it back while the
// child's plan waits at the gate for a decision opr8r has not made: no pod
// runs then, and a plan may wait for days. The apply takes a slot again
// before opr8r passes the gate (slotForApply).
func (r *TerraformRunReconciler) holdSlot(run *infrav1.TerraformRun, child string, prog engine.Progress) {
	if waitsForDecision(run, prog) {
		r.Limiter.Release(run.Namespace, child)
		return
	}
	r.Limiter.Hold(client.ObjectKeyFromObject(run), child)
}

// waitsForDecision says whether a child waits at its gate with no approval
// of its plan recorded.
func waitsForDecision(run *infrav1.TerraformRun, prog engine.Progress) bool {
	if prog.Gate.State != engine.GatePending || prog.Plan == nil {
		return false
	}
	a := run.Status.Approval
	return a == nil || !a.Approved || a.Digest != prog.Plan.Digest
}
