package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/pkg/results"
)

// decisionRequeue is how soon a pass follows one that recorded a
// decision a driver acts on.
const decisionRequeue = 100 * time.Millisecond

// reconcileApproval records and makes the approval decision of the active
// run's plan. Sets Approved: Unknown while the gate waits, True when
// approved (through the TerraformRun, in the engine or automatically), False
// when rejected, timed out, or when spec.approval.approvedPlan names another
// plan than the one waiting.
func (r *TerraformRunReconciler) reconcileApproval(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	prog := st.progress
	if !st.active || st.child == nil || prog.Plan == nil {
		return ctrl.Result{}, nil
	}
	digest := prog.Plan.Digest
	if autoWithoutGate(st.eff) && prog.Plan.HasChanges {
		r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Approved: true, Source: infrav1.ApprovedAutomatically, At: metav1.NewTime(r.now())}, "plan approved automatically (approval mode Auto)")
		return ctrl.Result{}, nil
	}
	switch prog.Gate.State {
	case engine.GateApproved, engine.GateRejected:
		before := run.Status.Approval
		res, err := gateErr(r.setEngineDecision(ctx, run, st, prog.Gate, digest))
		if _, drives := st.engine.(engine.Driver); drives && err == nil && run.Status.Approval != before {
			// The driver ran earlier in this pass, without the decision
			// recorded only now, and a status write wakes no pass: the
			// next one acts on it. (The gate opened before its decision
			// reached status: a manager that crashed between the two.)
			res.RequeueAfter = decisionRequeue
		}
		return res, err
	case engine.GatePending:
		return r.decideGate(ctx, run, st)
	}
	return ctrl.Result{}, nil
}

// decideGate gathers what the gate decides from (gateInput), asks the
// gate (gate.Decide), records its count in status.approvals and acts: it
// publishes who may still pass the gate in the engine, and approves,
// rejects or times out the gate, or reports why the plan waits or is
// held; it requeues for the approval timeout or the change windows.
func (r *TerraformRunReconciler) decideGate(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	approver, ok := st.engine.(engine.Approver)
	if !ok {
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval, "engine "+string(st.engine.Name())+" can only be approved in its own UI")
		return ctrl.Result{}, nil
	}
	timeout := r.approvalTimeout(st.eff.Spec.Approval)
	in, pol, err := r.gateInput(ctx, run, st)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := gate.Decide(in)
	var unreadable *planUnreadable
	if d.Effect == gate.HoldUnreadable && !errors.As(in.Unreadable, &unreadable) {
		return ctrl.Result{}, in.Unreadable // the records could not be read: retry
	}
	t := d.Tally
	t.Policy = pol
	run.Status.Approvals = &t // the changes below show too
	if pub, ok := st.engine.(engine.GatePublisher); ok && d.Publish != nil {
		if err := pub.PublishGate(ctx, r.Client, st.child, engine.GatePolicy(*d.Publish)); err != nil {
			return gateErr(err)
		}
	}
	return r.actOnGate(ctx, run, st, approver, in, d, timeout)
}

// actOnGate does what the gate decided about the plan waiting: approves
// (once it holds a slot for the apply), rejects or times out the gate in
// the engine, or says why the plan waits or is held.
func (r *TerraformRunReconciler) actOnGate(ctx context.Context, run *infrav1.TerraformRun, st *passState, approver engine.Approver, in gate.Input, d gate.Decision, timeout time.Duration) (ctrl.Result, error) {
	prog := st.progress
	digest := prog.Plan.Digest
	t := *run.Status.Approvals
	plan := fmt.Sprintf("plan %s (%s)", prog.Plan.Short(), digest)
	var err error
	switch d.Effect {
	case gate.Deny:
		err = r.denyByRule(ctx, run, st, approver, d.Why)
	case gate.Reject:
		err = r.reject(ctx, run, st, approver, *d.Rejection, t)
	case gate.TimeOut:
		err = r.timeOut(ctx, run, st, approver, timeout)
	case gate.HoldChanged:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonPolicyChanged,
			fmt.Sprintf("%s is held at the gate: %s; plan again to decide it under them (kubectl tfrun rerun %s), or reject it", plan, d.Why, run.Name))
	case gate.HoldUnreadable:
		r.holdUnreadable(run, plan, in.Unreadable)
	case gate.HoldWindow:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonOutsideChangeWindow,
			fmt.Sprintf("%s is approved (%s) and %s", plan, d.Why, windowHeld(d.Window)))
		return ctrl.Result{RequeueAfter: max(d.Recheck.Sub(r.now()), time.Second)}, nil
	case gate.Approve:
		if ok, wait := r.slotForApply(run); !ok {
			st.report(progressing, infrav1.ReasonQueued, fmt.Sprintf("plan %s is approved; its apply is queued: %s", digest, wait))
			return ctrl.Result{RequeueAfter: queueRetry}, nil
		}
		err = r.approve(ctx, run, st, approver, in.Votes, t, d.Source, d.How)
		if w := d.Window; err == nil && w != nil && w.OverriddenBy != "" {
			run.Status.Approval.ChangeWindowOverriddenBy = w.OverriddenBy
			r.event(run, "Warning", "ChangeWindowOverridden", "Approved", fmt.Sprintf("plan %s applies outside its change windows (%s): overridden by %s", digest, w.Message, w.OverriddenBy))
		}
	case gate.Stale:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonStaleApproval,
			fmt.Sprintf("refused: spec.approval.approvedPlan is %s, but the plan waiting for approval is %s (%s); review it and approve that digest", shortDigest(st.eff.Spec.Approval.ApprovedPlan), digest, prog.Plan.Short()))
	default:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval,
			fmt.Sprintf("%s waits for approval, %s: %s", plan, d.Why, r.approvalHint(run, st)))
	}
	if err != nil {
		return gateErr(err)
	}
	if !d.Recheck.IsZero() {
		return ctrl.Result{RequeueAfter: d.Recheck.Sub(r.now())}, nil
	}
	return ctrl.Result{}, nil
}

// holdUnreadable says why the rules could not judge the plan (a plan
// too large to read, or a rule that no longer compiles) and how to go on.
func (r *TerraformRunReconciler) holdUnreadable(run *infrav1.TerraformRun, plan string, err error) {
	var unreadable *planUnreadable
	if !errors.As(err, &unreadable) {
		return
	}
	reason := infrav1.ReasonPlanUnreadable
	if unreadable.rules != nil {
		reason = infrav1.ReasonRulesInvalid
	}
	r.transition(run, infrav1.ApprovedCondition, metav1Unknown, reason,
		fmt.Sprintf("%s is held at the gate: %v; %s", plan, unreadable, unreadable.advice()))
}

// gateInput gathers what the gate decides the plan waiting from: the
// combined policy, the authors, the votes (and extra ones, the engine's),
// the rules' outcome (or why the plan could not be read), whether the
// policies changed since it reached the gate, and the time. It returns
// the policy to record with the count.
func (r *TerraformRunReconciler) gateInput(ctx context.Context, run *infrav1.TerraformRun, st *passState, extra ...gate.Vote) (gate.Input, *infrav1.EffectiveApproval, error) {
	digest := st.progress.Plan.Digest
	votes, err := r.votes(ctx, run, digest)
	if err != nil {
		return gate.Input{}, nil, generic("ListApprovals", err, "listing the TerraformRunApprovals of %s", run.Name)
	}
	gov := st.gov
	if gov.Needs == nil {
		gov = gate.Combine(st.eff.Spec.Approval, nil) // a pass that combined no policies (unit tests)
	}
	in := gate.Input{Policy: gov, Digest: digest, Authors: r.runAuthors(run), Votes: append(votes, extra...), Now: r.now()}
	if timeout := r.approvalTimeout(st.eff.Spec.Approval); timeout > 0 && st.progress.Gate.Since != nil {
		in.Deadline = st.progress.Gate.Since.Add(timeout)
	}
	pol, changed := recordedPolicies(run, gov, digest)
	in.Changed = changed
	in.Rules, in.Unreadable = r.planRules(ctx, run, st)
	return in, pol, nil
}

// autoWithoutGate says whether a run's plans are approved as they are
// made: mode Auto, and no spec.approval.rules (which need the gate).
func autoWithoutGate(eff *infrav1.TerraformRun) bool {
	return !pipeline.ApprovalNeedsGate(eff.Spec.Approval)
}

// slotForApply takes a slot for the apply of an approved plan before
// opr8r passes the gate: the plan gave its slot back while it waited.
func (r *TerraformRunReconciler) slotForApply(run *infrav1.TerraformRun) (bool, queue.Wait) {
	return r.Limiter.Claim(client.ObjectKeyFromObject(run), run.Status.Run.ID, prioRun)
}

// approvalTimeout is how long a plan may wait for approval: the run's
// spec.approval.timeout, else the manager's default (0: no limit).
func (r *TerraformRunReconciler) approvalTimeout(ap infrav1.ApprovalSpec) time.Duration {
	if ap.Timeout != nil {
		return ap.Timeout.Duration
	}
	return r.DefaultApprovalTimeout
}

// approvalSource is TerraformRunApproval when any approval came from one,
// else TerraformRun (spec.approval.approvedPlan).
func approvalSource(votes []gate.Vote) infrav1.ApprovalSource {
	for _, v := range votes {
		if v.Approve && strings.HasPrefix(v.Source, "TerraformRunApproval/") {
			return infrav1.ApprovedByApproval
		}
	}
	return infrav1.ApprovedBySpec
}

// runAuthors are the authors of the active run's change (none when unknown
// or not trusted): everyone who changed what it executes since the last
// applied run.
func (r *TerraformRunReconciler) runAuthors(run *infrav1.TerraformRun) []string {
	if r.UntrustedIdentity {
		return nil
	}
	if run.Status.Run != nil {
		return gate.Authors(run)
	}
	return authors(run)
}

// approvalHint says how to approve: kubectl tfrun, and the engine's own way.
func (r *TerraformRunReconciler) approvalHint(run *infrav1.TerraformRun, st *passState) string {
	hint := "kubectl tfrun approve " + run.Name
	if h, ok := st.engine.(engine.ApprovalHinter); ok {
		hint += ", or " + h.ApprovalHint(run.Namespace, st.child.GetName())
	}
	return hint
}

// approve passes the gate. src and msg, when set, say how a plan that
// needed no person's approval was approved (ruleApproval).
func (r *TerraformRunReconciler) approve(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, votes []gate.Vote, t infrav1.ApprovalTally, src infrav1.ApprovalSource, msg string) error {
	digest := st.progress.Plan.Digest
	by := strings.Join(t.ApprovedBy, ", ")
	if src != "" {
		by = ""
	}
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelApproved); err != nil {
		return err
	}
	if err := a.Approve(ctx, r.Client, st.child, engine.Decision{Digest: digest, By: by}); err != nil {
		return err
	}
	if src != "" {
		msg = "plan " + digest + " " + msg
	} else {
		src = approvalSource(votes)
		via := "spec.approval.approvedPlan"
		if src == infrav1.ApprovedByApproval {
			via = "TerraformRunApproval"
		}
		msg = "plan " + digest + " approved through " + via
		if by != "" {
			msg += " by " + by
		}
	}
	r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Approved: true, Source: src, By: by, At: metav1.NewTime(r.now())}, msg)
	approvalWait.Observe(engine.Elapsed(r.now(), st.progress.Gate.Since).Seconds())
	return nil
}

func (r *TerraformRunReconciler) reject(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, v gate.Vote, t infrav1.ApprovalTally) error {
	digest := st.progress.Plan.Digest
	reason := v.Reason
	if reason == "" {
		reason = "rejected through " + v.Source
	}
	by := strings.Join(t.RejectedBy, ", ")
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelRejected); err != nil {
		return err
	}
	if err := a.Reject(ctx, r.Client, st.child, engine.Decision{Digest: digest, By: by, Reason: reason}); err != nil {
		return err
	}
	src := infrav1.ApprovedBySpec
	if strings.HasPrefix(v.Source, "TerraformRunApproval/") {
		src = infrav1.ApprovedByApproval
	}
	msg := "plan " + digest + " rejected"
	if by != "" {
		msg += " by " + by
	}
	r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Source: src, By: by, At: metav1.NewTime(r.now()), Reason: reason}, msg+": "+reason)
	return nil
}

// denyByRule rejects the plan at the gate because spec.approval.rules
// deny it: a Deny rule matched, or the rules could not decide.
func (r *TerraformRunReconciler) denyByRule(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, reason string) error {
	digest := st.progress.Plan.Digest
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelRejected); err != nil {
		return err
	}
	if err := a.Reject(ctx, r.Client, st.child, engine.Decision{Digest: digest, By: "rule", Reason: reason}); err != nil {
		return err
	}
	r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Source: infrav1.ApprovedByRule, At: metav1.NewTime(r.now()), Reason: reason}, "plan "+digest+" rejected: "+reason)
	return nil
}

// timeoutDecision is how engines record opr8r's rejection of a plan whose
// approval timed out: decided by "opr8r (timeout)".
var timeoutDecision = engine.Decision{By: "timeout"}

func (r *TerraformRunReconciler) timeOut(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, after time.Duration) error {
	digest := st.progress.Plan.Digest
	reason := fmt.Sprintf("approval timed out after %s", after)
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelTimedOut); err != nil {
		return err
	}
	d := timeoutDecision
	d.Digest, d.Reason = digest, reason
	if err := a.Reject(ctx, r.Client, st.child, d); err != nil {
		return err
	}
	r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Source: infrav1.ApprovalTimedOut, At: metav1.NewTime(r.now()), Reason: reason}, "plan "+digest+" rejected: "+reason)
	return nil
}

// gateErr retries a conflict or a gate the engine has already moved on from.
func gateErr(err error) (ctrl.Result, error) {
	if err == nil {
		return ctrl.Result{}, nil
	}
	if errors.Is(err, engine.ErrGateNotPending) || apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, generic("DecideGate", err, "deciding the approval gate")
}

// setEngineDecision records a decision the engine shows and opr8r has not
// recorded yet. A rejection is recorded as it is: it only stops a plan. An
// approval counts only as opr8r would have counted it: the plan's
// decisions opr8r reads itself (TerraformRunApprovals, spec.approval),
// plus one approval by the person whose engine-native approval the API
// server stamped at admission (a person's Argo resume, judged by
// opr8r-argo-resume). If that meets spec.approval's policy, the approval is
// recorded; otherwise the engine let through a plan nobody may approve
// that way (someone who may write the engine's objects decided, or admission
// did not stamp who), and opr8r refuses it: it stops the child, records
// the plan rejected (Approved False, ApprovedOutsidePolicy) and the apply
// step, which waits for opr8r's record of the approval, never runs.
func (r *TerraformRunReconciler) setEngineDecision(ctx context.Context, run *infrav1.TerraformRun, st *passState, g engine.Gate, digest string) error {
	if a := run.Status.Approval; a != nil && a.Digest == digest {
		return nil
	}
	at := metav1.NewTime(r.now())
	if g.DecidedAt != nil {
		at = *g.DecidedAt
	}
	a := infrav1.ApprovalStatus{Digest: digest, Approved: g.State == engine.GateApproved, Source: infrav1.ApprovedByEngine, By: g.By, At: at}
	if !a.Approved {
		r.setEngineRejection(run, a, g, digest)
		return nil
	}
	stamped := g.Stamped && !r.UntrustedIdentity && g.By != ""
	var extra []gate.Vote
	if stamped {
		extra = append(extra, gate.Vote{User: g.By, Groups: g.ByGroups, Approve: true, Source: "engine", At: at.Time})
	}
	in, pol, err := r.gateInput(ctx, run, st, extra...)
	if err != nil {
		return err
	}
	d := gate.Decide(in) // a resume after the deadline does not count: the plan timed out
	var unreadable *planUnreadable
	if d.Effect == gate.HoldUnreadable && !errors.As(in.Unreadable, &unreadable) {
		return in.Unreadable
	}
	t := d.Tally
	t.Policy = pol
	run.Status.Approvals = &t
	switch d.Effect {
	case gate.Approve:
		a.ChangeWindowOverriddenBy = ""
		if d.Window != nil {
			a.ChangeWindowOverriddenBy = d.Window.OverriddenBy
		}
		a.By = strings.Join(t.ApprovedBy, ", ")
		if !stamped {
			a.Source = approvalSource(in.Votes)
		}
		r.setApproval(run, a, "plan "+digest+" approved by "+a.By)
		return nil
	case gate.HoldChanged, gate.HoldUnreadable:
		return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine, but "+d.Why)
	case gate.Deny:
		return r.refuseEngineApproval(ctx, run, st, a, "the engine shows the plan approved, but "+d.Why)
	case gate.Reject:
		return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine, but rejected by "+strings.Join(t.RejectedBy, ", "))
	case gate.HoldWindow:
		return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine while the plan "+windowHeld(d.Window))
	case gate.TimeOut:
		return r.refuseEngineApproval(ctx, run, st, a, fmt.Sprintf("approved in the engine after the plan's wait for approval timed out (at %s)", in.Deadline.UTC().Format(time.RFC3339)))
	}
	return r.refuseEngineApproval(ctx, run, st, a, engineApprovalFault(g, stamped, t))
}

// engineApprovalFault says why an approval the engine shows does not count.
func engineApprovalFault(g engine.Gate, stamped bool, t infrav1.ApprovalTally) string {
	who := "someone"
	if g.By != "" {
		who = g.By
	}
	if !stamped {
		return "the engine shows the plan approved by " + who + ", but no approval of it was stamped at admission (only opr8r's own decisions and a person's resume that opr8r's admission policy judged count; whoever can write the engine's objects cannot approve): " + gate.TallyMessage(t)
	}
	return "approved in the engine by " + who + ", which spec.approval does not count: " + gate.TallyMessage(t)
}

// refuseEngineApproval stops a child whose engine let through a plan
// that spec.approval does not approve, and records the plan refused.
func (r *TerraformRunReconciler) refuseEngineApproval(ctx context.Context, run *infrav1.TerraformRun, st *passState, a infrav1.ApprovalStatus, why string) error {
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelRejected); err != nil {
		return err
	}
	if c, ok := st.engine.(engine.Canceller); ok {
		if err := c.Cancel(ctx, r.Client, st.child, "approval refused: "+why); err != nil {
			return generic("RefuseApproval", err, "stopping %s, whose approval opr8r refused", st.child.GetName())
		}
	}
	a.Approved, a.Reason = false, "refused: "+why
	advice := ""
	if h, ok := st.engine.(engine.ApprovalHinter); ok {
		advice = "; " + h.ApprovalRights()
	}
	run.Status.Approval = &a
	r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonApprovedOutsidePolicy,
		"plan "+a.Digest+" refused and its run stopped: "+why+advice)
	return nil
}

// setEngineRejection records a rejection the engine shows.
func (r *TerraformRunReconciler) setEngineRejection(run *infrav1.TerraformRun, a infrav1.ApprovalStatus, g engine.Gate, digest string) {
	a.Reason = g.Message
	msg := "plan " + digest + " rejected in the engine: " + g.Message
	if g.By == timeoutDecision.Actor() {
		// opr8r's own timeout, seen by a pass that did not see its record
		// (a stale cache, a lost status write): recorded as the timeout it
		// was, not as somebody's rejection.
		a.Source, a.By = infrav1.ApprovalTimedOut, ""
		msg = "plan " + digest + " rejected: " + g.Message
	}
	r.setApproval(run, a, msg)
}

// setApproval records a decision in status.approval and sets Approved.
func (r *TerraformRunReconciler) setApproval(run *infrav1.TerraformRun, a infrav1.ApprovalStatus, msg string) {
	if old := run.Status.Approval; old != nil && old.Digest == a.Digest && old.Approved == a.Approved && old.Source == a.Source {
		return
	}
	run.Status.Approval = &a
	switch {
	case a.Approved && (a.Source == infrav1.ApprovedAutomatically || a.Source == infrav1.ApprovedByRule):
		r.transition(run, infrav1.ApprovedCondition, metav1True, infrav1.ReasonAutoApproved, msg)
	case a.Approved:
		r.transition(run, infrav1.ApprovedCondition, metav1True, infrav1.ReasonApproved, msg)
	case a.Source == infrav1.ApprovalTimedOut:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonApprovalTimeout, msg)
	case a.Source == infrav1.ApprovedByRule:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonDeniedByRule, msg)
	default:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonRejected, msg)
	}
}

// shortPlan is a plan's counts for messages.
func shortPlan(p *infrav1.PlanStatus) string {
	return results.ShortAll(p.Add, p.Change, p.Destroy, p.Import, p.Forget, p.Move, p.Actions)
}

// recordedPolicies is the combined policy that counts the plan digest,
// with the policies that governed it when it reached the gate (kept from
// the tally of the same plan), and how those have changed since ("" when
// they have not): one added, changed or deleted holds the plan (a change
// under a waiting plan never loosens it).
func recordedPolicies(run *infrav1.TerraformRun, gov gate.Governed, digest string) (*infrav1.EffectiveApproval, string) {
	pol := gate.Effective(gov)
	prev := run.Status.Approvals
	if prev == nil || prev.Digest != digest || prev.Policy == nil {
		return pol, ""
	}
	pol.Policies = prev.Policy.Policies
	pol.Changed = prev.Policy.Changed
	if pol.Changed == "" {
		pol.Changed = gate.Change(prev.Policy.Policies, gov.Refs)
	}
	return pol, pol.Changed
}

// ApprovalRunIndex indexes TerraformRunApprovals by spec.runName.
const ApprovalRunIndex = "spec.runName"

// votes gathers the decisions about digest (gate.VotesOf): the run's
// TerraformRunApprovals for that plan and spec.approval's approvedPlan or
// rejectedPlan. Without trusted identities, no vote names a user.
func (r *TerraformRunReconciler) votes(ctx context.Context, run *infrav1.TerraformRun, digest string) ([]gate.Vote, error) {
	list := &infrav1.TerraformRunApprovalList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingFields{ApprovalRunIndex: run.Name}); err != nil {
		return nil, err
	}
	out := gate.VotesOf(run, list.Items, digest)
	if r.UntrustedIdentity {
		for i := range out {
			out[i].User, out[i].Groups = "", nil
		}
	}
	return out, nil
}
