package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// reconcileRun drives the apply pipeline: it follows the active run to its
// end, then starts a new one when the spec hash changed or a rerun was
// requested. Sets Reconciling while a run is active, Ready when the latest
// run for the current spec succeeded, and Stalled when it failed or was
// rejected; Planned, Approved and Applied follow the run's steps.
func (r *TerraformRunReconciler) reconcileRun(ctx context.Context, run, eff *infrav1.TerraformRun) (ctrl.Result, error) {
	hash := pipeline.SpecHash(eff)
	request := run.Annotations[infrav1.RunRequestAnnotation]
	cur := run.Status.Run
	newRequest := request != "" && request != run.Status.LastHandledRunRequest
	wantNew := cur == nil || cur.Type != infrav1.RunApply || cur.SpecHash != hash || newRequest

	if cur != nil && !isTerminal(cur.Phase) {
		res, active, err := r.followActive(ctx, run, eff, cur, wantNew)
		if err != nil || active {
			return res, err
		}
	}
	if !wantNew {
		if cur.Phase == infrav1.RunSucceeded && cur.Type == infrav1.RunApply {
			if err := r.restoreOutputs(ctx, run, eff); err != nil {
				return ctrl.Result{}, err
			}
		}
		run.Status.ObservedGeneration = run.Generation
		return ctrl.Result{}, nil
	}
	if run.Spec.Suspend {
		setStatus(run, infrav1.ReconcilingCondition, metav1False, infrav1.ReasonSuspended, "spec.suspend is true: no new run starts")
		return ctrl.Result{}, nil
	}
	e, err := r.engineFor(eff.Spec.Engine)
	if err != nil {
		return ctrl.Result{}, err
	}
	attempt := int32(1)
	if cur != nil && cur.Type == infrav1.RunApply && cur.SpecHash == hash {
		attempt = cur.Attempt + 1
	}
	return r.startRun(ctx, run, eff, e, infrav1.RunApply, hash, attempt)
}

// followActive observes the active run, decides its approval gate and, once
// it has finished, records its result. It reports whether the run is still
// active.
func (r *TerraformRunReconciler) followActive(ctx context.Context, run, eff *infrav1.TerraformRun, cur *infrav1.RunStatus, superseded bool) (ctrl.Result, bool, error) {
	e, err := r.engineFor(cur.Engine)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	child, pr, err := r.observeChild(ctx, run, e, cur)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if child == nil {
		r.childDeleted(run, cur)
		return ctrl.Result{}, false, nil
	}
	if !pr.Finished {
		if superseded && pr.Gate.State == engine.GatePending {
			return r.supersede(ctx, run, e, child, cur)
		}
		res, err := r.reconcileGate(ctx, run, eff, e, child, pr)
		if err == nil && pr.Gate.State != engine.GatePending {
			res = r.checkProgress(run, cur, res)
		}
		return res, true, err
	}
	if err := r.finishRun(ctx, run, eff, pr); err != nil {
		return ctrl.Result{}, true, err
	}
	r.pruneHistory(ctx, run, eff, e)
	return ctrl.Result{}, false, nil
}

// checkProgress sets Stalled (reason NoProgress) when an active run's steps
// have not moved for ProgressTimeout: a stuck engine controller, pods that
// never schedule. Waiting for approval is not counted. The run keeps
// waiting; the next step that moves clears the condition.
func (r *TerraformRunReconciler) checkProgress(run *infrav1.TerraformRun, cur *infrav1.RunStatus, res ctrl.Result) ctrl.Result {
	if r.ProgressTimeout <= 0 {
		return res
	}
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
	if last == nil {
		return res
	}
	idle := r.now().Sub(last.Time)
	if idle < r.ProgressTimeout {
		return shorter(res, r.ProgressTimeout-idle)
	}
	r.setStalled(run, infrav1.ReasonNoProgress, fmt.Sprintf("run %s has made no progress for %s (%s): check the engine's controller and the step pods of %s %s; opr8r keeps waiting",
		cur.ID, idle.Round(time.Second), step, cur.Child.Kind, cur.ID))
	return shorter(res, r.ProgressTimeout)
}

// shorter keeps the earlier of two requeues.
func shorter(res ctrl.Result, after time.Duration) ctrl.Result {
	if res.RequeueAfter == 0 || after < res.RequeueAfter {
		res.RequeueAfter = after
	}
	return res
}

// startRun creates the child of a new run with a deterministic name: a
// racing or restarted reconcile computes the same name and adopts the
// existing child instead of creating a second one.
func (r *TerraformRunReconciler) startRun(ctx context.Context, run, eff *infrav1.TerraformRun, e engine.Engine, t infrav1.RunType, hash string, attempt int32) (ctrl.Result, error) {
	name := pipeline.ChildName(run.Name, t, hash, attempt)
	if other, err := r.activeChild(ctx, run, e, name); err != nil {
		return ctrl.Result{}, err
	} else if other != "" {
		r.setProgressing(run, infrav1.ReasonProgressing, fmt.Sprintf("waiting for %s %s to finish before starting %s", e.ChildGVK().Kind, other, name))
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	obj, err := e.Build(engine.Request{Run: eff, Type: t, Name: name, SpecHash: hash, Config: r.Config})
	if err != nil {
		return ctrl.Result{}, &stallingError{reason: infrav1.ReasonInvalidSpec, msg: "cannot build the pipeline: " + err.Error()}
	}
	key := types.NamespacedName{Namespace: run.Namespace, Name: name}
	if cached := e.NewChild(); r.Get(ctx, key, cached) == nil {
		// The child exists: either our status write recording it has not
		// reached the cache yet (then write nothing and look again), or it
		// was lost (a crash between create and status): adopt the child.
		if !metav1.IsControlledBy(cached, run) {
			return ctrl.Result{}, &stallingError{reason: infrav1.ReasonInvalidSpec,
				msg: fmt.Sprintf("%s %s exists and is not owned by this TerraformRun; delete or rename it", e.ChildGVK().Kind, name)}
		}
		fresh := &infrav1.TerraformRun{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), fresh); err != nil {
			return ctrl.Result{}, err
		}
		if fresh.Status.Run != nil && fresh.Status.Run.ID == name {
			return ctrl.Result{}, errStaleCache
		}
		obj = cached
	} else if err := r.Create(ctx, obj); err != nil {
		if apimeta.IsNoMatchError(err) {
			r.Available.Set(e.Name(), false)
			return ctrl.Result{}, &waitingError{reason: infrav1.ReasonEngineUnavailable, after: DefaultEngineRetryPeriod,
				msg: fmt.Sprintf("engine %q is unavailable: %v", e.Name(), err)}
		}
		if !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, fmt.Errorf("creating %s %s: %w", e.ChildGVK().Kind, name, err)
		}
		existing := e.NewChild()
		if err := r.APIReader.Get(ctx, key, existing); err != nil {
			return ctrl.Result{}, fmt.Errorf("adopting %s %s: %w", e.ChildGVK().Kind, name, err)
		}
		if !metav1.IsControlledBy(existing, run) {
			return ctrl.Result{}, &stallingError{reason: infrav1.ReasonInvalidSpec,
				msg: fmt.Sprintf("%s %s exists and is not owned by this TerraformRun; delete or rename it", e.ChildGVK().Kind, name)}
		}
		obj = existing
	}
	if err := r.createInputs(ctx, eff, obj); err != nil {
		return ctrl.Result{}, err
	}

	now := metav1.NewTime(r.now())
	gvk := e.ChildGVK()
	run.Status.Run = &infrav1.RunStatus{
		ID: name, Type: t, Engine: e.Name(), SpecHash: hash, Attempt: attempt,
		Child:     infrav1.ChildReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name},
		Phase:     infrav1.RunPending,
		StartedAt: &now,
	}
	if t == infrav1.RunApply {
		run.Status.LastHandledRunRequest = run.Annotations[infrav1.RunRequestAnnotation]
		run.Status.Plan = nil
		run.Status.Approval = nil
		apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.ApprovedCondition)
		setStatus(run, infrav1.PlannedCondition, metav1Unknown, infrav1.ReasonProgressing, "run "+name+" is planning")
	}
	reason := infrav1.ReasonProgressing
	if t == infrav1.RunDestroy {
		reason = infrav1.ReasonDestroying
	}
	// The same message project() writes for a child that has not started,
	// so the reconcile that the child's creation triggers writes nothing.
	r.setProgressing(run, reason, fmt.Sprintf("run %s: %s", name, describeSteps(nil)))
	// An apply run's start emits no Event: it would be one more API write
	// per run started and says nothing status does not. Reconciling (True,
	// Progressing, "run <child>: pending") and status.run (id, type, engine,
	// child kind and name, startedAt) carry it, and the Planned event
	// follows. A destroy, rare and the start of removing infrastructure,
	// keeps its Event, paired with Destroyed.
	if t == infrav1.RunDestroy {
		r.event(run, "Normal", "RunStarted", string(t), fmt.Sprintf("started %s run %s as %s %s", t, name, gvk.Kind, name))
	}
	runsStarted.WithLabelValues(string(e.Name()), string(t)).Inc()
	return ctrl.Result{}, nil
}

// createInputs creates the ConfigMap the child mounts, owned by the child.
func (r *TerraformRunReconciler) createInputs(ctx context.Context, eff *infrav1.TerraformRun, child client.Object) error {
	cms, err := pipeline.InputObjects(eff, child.GetName())
	if err != nil {
		return &stallingError{reason: infrav1.ReasonInvalidSpec, msg: err.Error()}
	}
	for _, cm := range cms {
		if err := controllerutil.SetControllerReference(child, cm, r.Scheme()); err != nil {
			return fmt.Errorf("owning ConfigMap %s: %w", cm.Name, err)
		}
		// Created without looking first: it is new, except when a child is
		// adopted, and then AlreadyExists is success. Never reading
		// ConfigMaps keeps them out of the manager's cache and watches.
		if err := r.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsInvalid(err) {
				// Too large (vars and inline files share one ConfigMap, at
				// most 1 MiB): no retry fixes that.
				return &stallingError{reason: infrav1.ReasonInvalidSpec, msg: fmt.Sprintf("the inputs ConfigMap %s is refused: %v; keep inline files and vars under 1 MiB together, or use a git or configMapRef source", cm.Name, err)}
			}
			return fmt.Errorf("creating ConfigMap %s: %w", cm.Name, err)
		}
	}
	return nil
}

// activeChild returns the name of an unfinished child other than name, if any.
func (r *TerraformRunReconciler) activeChild(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine, name string) (string, error) {
	list := e.NewChildList()
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingLabels{infrav1.RunNameLabel: run.Name}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return "", nil
		}
		return "", fmt.Errorf("listing children: %w", err)
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return "", err
	}
	for _, it := range items {
		obj := it.(client.Object)
		if obj.GetName() == name || !metav1.IsControlledBy(obj, run) {
			continue
		}
		pr, err := r.observe(ctx, e, obj)
		if err == nil && !pr.Finished {
			return obj.GetName(), nil
		}
	}
	return "", nil
}

// observeChild reads the run's child and projects its progress into status.
// It returns a nil child when the child is gone (confirmed past the cache).
func (r *TerraformRunReconciler) observeChild(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine, cur *infrav1.RunStatus) (client.Object, engine.Progress, error) {
	child := e.NewChild()
	key := types.NamespacedName{Namespace: run.Namespace, Name: cur.ID}
	err := r.Get(ctx, key, child)
	if apierrors.IsNotFound(err) {
		// The cache may lag behind a child created moments ago.
		err = r.APIReader.Get(ctx, key, child)
		if apierrors.IsNotFound(err) {
			return nil, engine.Progress{}, nil
		}
	}
	if err != nil {
		return nil, engine.Progress{}, fmt.Errorf("getting %s %s: %w", e.ChildGVK().Kind, cur.ID, err)
	}
	pr, err := r.observe(ctx, e, child)
	if err != nil {
		return nil, engine.Progress{}, err
	}
	r.project(run, cur, pr)
	return child, pr, nil
}

// observe reads a child's progress, with its related objects for engines
// that have them.
func (r *TerraformRunReconciler) observe(ctx context.Context, e engine.Engine, child client.Object) (engine.Progress, error) {
	var related []client.Object
	if rl, ok := e.(engine.RelatedLister); ok {
		var err error
		if related, err = rl.Related(ctx, r.Client, child); err != nil {
			return engine.Progress{}, fmt.Errorf("listing the steps of %s: %w", child.GetName(), err)
		}
	}
	pr, err := e.Observe(child, related)
	if err != nil {
		return engine.Progress{}, &stallingError{reason: infrav1.ReasonRunFailed, msg: err.Error()}
	}
	return pr, nil
}

// project copies a child's progress into status. Terminal phases are set by
// finishRun, once the run's results are recorded.
func (r *TerraformRunReconciler) project(run *infrav1.TerraformRun, cur *infrav1.RunStatus, pr engine.Progress) {
	cur.Steps = pr.Steps
	if pr.Commit != "" {
		cur.Commit = pr.Commit
	}
	cur.Message = pr.Message
	if !pr.Finished {
		cur.Phase = pr.Phase
	}
	if cur.Type != infrav1.RunApply {
		return
	}
	if p := pr.Plan; p != nil {
		sum := planSummary(p.Add, p.Change, p.Destroy)
		run.Status.Plan = &infrav1.PlanStatus{
			Add: p.Add, Change: p.Change, Destroy: p.Destroy, Replace: p.Replace,
			HasChanges: p.HasChanges, Digest: p.Digest, Summary: sum, RunID: cur.ID,
		}
		msg := fmt.Sprintf("plan %s (%s) from run %s", sum, p.Digest, cur.ID)
		if !p.HasChanges {
			msg = "plan has no changes (run " + cur.ID + ")"
		}
		r.transition(run, infrav1.PlannedCondition, metav1True, infrav1.ReasonPlanned, msg)
	}
	for _, s := range pr.Steps {
		switch {
		case s.Name == pipeline.StepPlan && s.Phase == infrav1.StepFailed:
			r.transition(run, infrav1.PlannedCondition, metav1False, infrav1.ReasonRunFailed, s.Message)
		case s.Name == pipeline.StepApply && s.Phase == infrav1.StepRunning:
			r.transition(run, infrav1.AppliedCondition, metav1Unknown, infrav1.ReasonProgressing, "applying plan "+digestOf(run))
		case s.Name == pipeline.StepApply && s.Phase == infrav1.StepFailed:
			r.transition(run, infrav1.AppliedCondition, metav1False, infrav1.ReasonRunFailed, s.Message)
		}
	}
	if !pr.Finished {
		reason := infrav1.ReasonProgressing
		if pr.Gate.State == engine.GatePending {
			reason = infrav1.ReasonAwaitingApproval
		}
		r.setProgressing(run, reason, fmt.Sprintf("run %s: %s", cur.ID, describeSteps(pr.Steps)))
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
			if steps[i].Name == pipeline.StepApprove {
				return "waiting for approval"
			}
			return "step " + steps[i].Name + " is running"
		}
	}
	return "pending"
}

// reconcileGate records and makes approval decisions for the active run.
// Sets Approved: Unknown while the gate waits, True when approved (here, in
// the engine or automatically), False when rejected, timed out or when
// spec.approval.approvedPlan names another plan than the one waiting.
func (r *TerraformRunReconciler) reconcileGate(ctx context.Context, run, eff *infrav1.TerraformRun, e engine.Engine, child client.Object, pr engine.Progress) (ctrl.Result, error) {
	if pr.Plan == nil {
		return ctrl.Result{}, nil
	}
	digest := pr.Plan.Digest
	if eff.Spec.Approval.Mode == infrav1.ApprovalAuto && pr.Plan.HasChanges {
		r.recordApproval(run, infrav1.ApprovalStatus{Digest: digest, Approved: true, Source: infrav1.ApprovedAutomatically, At: metav1.NewTime(r.now())}, "plan approved automatically (approval mode Auto)")
		return ctrl.Result{}, nil
	}
	switch pr.Gate.State {
	case engine.GateApproved, engine.GateRejected:
		r.recordGateDecision(run, pr.Gate, digest)
		return ctrl.Result{}, nil
	case engine.GatePending:
	default:
		return ctrl.Result{}, nil
	}

	ap := eff.Spec.Approval
	approver, ok := e.(engine.Approver)
	if !ok {
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval, "engine "+string(e.Name())+" can only be approved in its own UI")
		return ctrl.Result{}, nil
	}
	now := r.now()
	var deadline time.Time
	if ap.Timeout != nil && pr.Gate.Since != nil {
		deadline = pr.Gate.Since.Add(ap.Timeout.Duration)
	}
	switch {
	case ap.RejectedPlan == digest:
		reason := ap.RejectReason
		if reason == "" {
			reason = "rejected through spec.approval.rejectedPlan"
		}
		if err := approver.Reject(ctx, r.Client, child, engine.Decision{Digest: digest, By: "TerraformRun", Reason: reason}); err != nil {
			return gateErr(err)
		}
		r.recordApproval(run, infrav1.ApprovalStatus{Digest: digest, Source: infrav1.ApprovedBySpec, At: metav1.NewTime(now), Reason: reason}, "plan "+digest+" rejected: "+reason)
	case ap.ApprovedPlan == digest:
		if err := approver.Approve(ctx, r.Client, child, engine.Decision{Digest: digest, By: "TerraformRun"}); err != nil {
			return gateErr(err)
		}
		r.recordApproval(run, infrav1.ApprovalStatus{Digest: digest, Approved: true, Source: infrav1.ApprovedBySpec, At: metav1.NewTime(now)}, "plan "+digest+" approved through spec.approval.approvedPlan")
		approvalWait.Observe(engine.Elapsed(now, pr.Gate.Since).Seconds())
	case !deadline.IsZero() && !now.Before(deadline):
		reason := fmt.Sprintf("approval timed out after %s", ap.Timeout.Duration)
		if err := approver.Reject(ctx, r.Client, child, engine.Decision{Digest: digest, By: "timeout", Reason: reason}); err != nil {
			return gateErr(err)
		}
		r.recordApproval(run, infrav1.ApprovalStatus{Digest: digest, Source: infrav1.ApprovalTimedOut, At: metav1.NewTime(now), Reason: reason}, "plan "+digest+" rejected: "+reason)
	case ap.ApprovedPlan != "":
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonStaleApproval,
			fmt.Sprintf("refused: spec.approval.approvedPlan is %s, but the plan waiting for approval is %s (%s); review it and approve that digest", shortDigest(ap.ApprovedPlan), digest, planSummary(pr.Plan.Add, pr.Plan.Change, pr.Plan.Destroy)))
	default:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval,
			fmt.Sprintf("plan %s (%s) waits for approval: kubectl tfrun approve %s, or argo resume %s", planSummary(pr.Plan.Add, pr.Plan.Change, pr.Plan.Destroy), digest, run.Name, child.GetName()))
	}
	if !deadline.IsZero() && now.Before(deadline) {
		return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
	}
	return ctrl.Result{}, nil
}

// gateErr retries a conflict or a gate the engine has already moved on from.
func gateErr(err error) (ctrl.Result, error) {
	if errors.Is(err, engine.ErrGateNotPending) || apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, fmt.Errorf("deciding the approval gate: %w", err)
}

// recordGateDecision records a decision the engine shows and opr8r has not
// recorded yet: someone ran `argo resume` or used the Argo UI.
func (r *TerraformRunReconciler) recordGateDecision(run *infrav1.TerraformRun, g engine.Gate, digest string) {
	if a := run.Status.Approval; a != nil && a.Digest == digest {
		return
	}
	at := metav1.NewTime(r.now())
	if g.DecidedAt != nil {
		at = *g.DecidedAt
	}
	a := infrav1.ApprovalStatus{Digest: digest, Approved: g.State == engine.GateApproved, Source: infrav1.ApprovedByEngine, By: g.By, At: at}
	msg := "plan " + digest + " approved in the engine"
	if g.By != "" {
		msg += " by " + g.By
	}
	if !a.Approved {
		a.Reason = g.Message
		msg = "plan " + digest + " rejected in the engine: " + g.Message
	}
	r.recordApproval(run, a, msg)
}

func (r *TerraformRunReconciler) recordApproval(run *infrav1.TerraformRun, a infrav1.ApprovalStatus, msg string) {
	if old := run.Status.Approval; old != nil && old.Digest == a.Digest && old.Approved == a.Approved && old.Source == a.Source {
		return
	}
	run.Status.Approval = &a
	switch {
	case a.Approved && a.Source == infrav1.ApprovedAutomatically:
		r.transition(run, infrav1.ApprovedCondition, metav1True, infrav1.ReasonAutoApproved, msg)
	case a.Approved:
		r.transition(run, infrav1.ApprovedCondition, metav1True, infrav1.ReasonApproved, msg)
	case a.Source == infrav1.ApprovalTimedOut:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonApprovalTimeout, msg)
	default:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonRejected, msg)
	}
}

// supersede stops a run whose plan waits for approval when the spec changed:
// the new spec needs a new plan. The run's cleanup still runs.
func (r *TerraformRunReconciler) supersede(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine, child client.Object, cur *infrav1.RunStatus) (ctrl.Result, bool, error) {
	c, ok := e.(engine.Canceller)
	if !ok {
		return ctrl.Result{}, true, nil
	}
	if err := c.Cancel(ctx, r.Client, child, "superseded by a spec change"); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("stopping superseded run %s: %w", cur.ID, err)
	}
	r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonSuperseded, "plan of run "+cur.ID+" was superseded by a spec change before approval")
	r.setProgressing(run, infrav1.ReasonSuperseded, "stopping run "+cur.ID+" (superseded); a new run starts when it has stopped")
	return ctrl.Result{RequeueAfter: 5 * time.Second}, true, nil
}

// finishRun records a finished run: outputs first, so a run is never marked
// finished with its outputs unwritten.
func (r *TerraformRunReconciler) finishRun(ctx context.Context, run, eff *infrav1.TerraformRun, pr engine.Progress) error {
	cur := run.Status.Run
	if cur.Type == infrav1.RunApply {
		switch pr.Phase {
		case infrav1.RunSucceeded:
			if pr.Plan != nil && pr.Plan.HasChanges && eff.Spec.Approval.Mode == infrav1.ApprovalAuto {
				r.recordApproval(run, infrav1.ApprovalStatus{Digest: pr.Plan.Digest, Approved: true, Source: infrav1.ApprovedAutomatically, At: metav1.NewTime(r.now())}, "plan approved automatically (approval mode Auto)")
			}
			if pr.Gate.State == engine.GateApproved && pr.Plan != nil {
				r.recordGateDecision(run, pr.Gate, pr.Plan.Digest)
			}
			if pr.OutputsExported {
				if err := r.projectOutputs(ctx, run, eff, cur.ID); err != nil {
					return err
				}
			}
			if pr.Applied {
				r.transition(run, infrav1.AppliedCondition, metav1True, infrav1.ReasonApplied, "applied plan "+digestOf(run)+" ("+run.Status.PlanSummary+")")
			} else {
				r.transition(run, infrav1.AppliedCondition, metav1True, infrav1.ReasonNoChanges, "the plan had no changes; nothing to apply")
			}
			run.Status.LastAppliedHash = cur.SpecHash
			r.setReady(run, fmt.Sprintf("run %s succeeded: %s; %d outputs in Secret %s", cur.ID, planSummaryOrNone(run), len(run.Status.Outputs), run.Status.OutputsSecretName))
		case infrav1.RunRejected:
			if pr.Plan != nil {
				r.recordGateDecision(run, pr.Gate, pr.Plan.Digest)
			}
			reason := infrav1.ReasonRejected
			if a := run.Status.Approval; a != nil && a.Source == infrav1.ApprovalTimedOut {
				reason = infrav1.ReasonApprovalTimeout
			}
			r.setStalled(run, reason, fmt.Sprintf("run %s: %s; change the spec or request a rerun (kubectl tfrun rerun %s)", cur.ID, pr.Message, run.Name))
		default:
			r.setStalled(run, infrav1.ReasonRunFailed, fmt.Sprintf("run %s failed: %s", cur.ID, pr.Message))
		}
	}
	cur.Phase = pr.Phase
	cur.Message = pr.Message
	cur.FinishedAt = pr.FinishedAt
	if cur.FinishedAt == nil {
		now := metav1.NewTime(r.now())
		cur.FinishedAt = &now
	}
	if cur.SpecHash == pipeline.SpecHash(eff) {
		run.Status.ObservedGeneration = run.Generation
	}
	runsFinished.WithLabelValues(string(cur.Engine), string(cur.Type), string(cur.Phase)).Inc()
	return nil
}

func planSummaryOrNone(run *infrav1.TerraformRun) string {
	if run.Status.Plan == nil {
		return "no plan"
	}
	if !run.Status.Plan.HasChanges {
		return "no changes"
	}
	return "applied " + run.Status.Plan.Summary
}

// childDeleted records an active run whose child was deleted by hand. It is
// not restarted by itself: the person who deleted it may have meant to stop it.
func (r *TerraformRunReconciler) childDeleted(run *infrav1.TerraformRun, cur *infrav1.RunStatus) {
	now := metav1.NewTime(r.now())
	cur.Phase = infrav1.RunFailed
	cur.FinishedAt = &now
	cur.Message = fmt.Sprintf("%s %s was deleted before it finished", cur.Child.Kind, cur.ID)
	r.setStalled(run, infrav1.ReasonChildDeleted, cur.Message+fmt.Sprintf("; request a new run with kubectl tfrun rerun %s (annotation %s)", run.Name, infrav1.RunRequestAnnotation))
}

// stopActive cancels the active run and reports whether it has stopped.
func (r *TerraformRunReconciler) stopActive(ctx context.Context, run *infrav1.TerraformRun, cur *infrav1.RunStatus) (bool, error) {
	e, err := r.engineFor(cur.Engine)
	if err != nil {
		return false, err
	}
	child, pr, err := r.observeChild(ctx, run, e, cur)
	if err != nil {
		return false, err
	}
	if child == nil || pr.Finished {
		cur.Phase = pr.Phase
		if child == nil {
			cur.Phase = infrav1.RunFailed
		}
		return true, nil
	}
	if c, ok := e.(engine.Canceller); ok {
		return false, c.Cancel(ctx, r.Client, child, "the TerraformRun is being deleted")
	}
	return false, nil
}

func (r *TerraformRunReconciler) cancelChild(ctx context.Context, run *infrav1.TerraformRun, cur *infrav1.RunStatus, reason string) error {
	e, ok := r.Engines.Get(cur.Engine)
	if !ok {
		return nil
	}
	c, ok := e.(engine.Canceller)
	if !ok {
		return nil
	}
	child := e.NewChild()
	if err := r.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: cur.ID}, child); err != nil {
		return client.IgnoreNotFound(err)
	}
	return c.Cancel(ctx, r.Client, child, reason)
}

// pruneHistory deletes finished children beyond spec.history.keepFinished,
// oldest first; the latest run's child is always kept.
func (r *TerraformRunReconciler) pruneHistory(ctx context.Context, run, eff *infrav1.TerraformRun, e engine.Engine) {
	keep := int(*eff.Spec.History.KeepFinished)
	list := e.NewChildList()
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingLabels{infrav1.RunNameLabel: run.Name}); err != nil {
		return
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return
	}
	var finished []client.Object
	for _, it := range items {
		obj := it.(client.Object)
		if obj.GetName() == run.Status.Run.ID || !metav1.IsControlledBy(obj, run) {
			continue
		}
		if pr, err := r.observe(ctx, e, obj); err == nil && pr.Finished {
			finished = append(finished, obj)
		}
	}
	sort.Slice(finished, func(i, j int) bool {
		ti, tj := finished[i].GetCreationTimestamp(), finished[j].GetCreationTimestamp()
		return tj.Before(&ti)
	})
	for i := keep - 1; i < len(finished); i++ {
		if i < 0 {
			continue
		}
		if err := r.Delete(ctx, finished[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Info("could not prune a finished run", "child", finished[i].GetName(), "error", err.Error())
		}
	}
}

func isTerminal(p infrav1.RunPhase) bool {
	return p == infrav1.RunSucceeded || p == infrav1.RunFailed || p == infrav1.RunRejected
}
