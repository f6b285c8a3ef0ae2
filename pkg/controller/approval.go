package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/approvalpolicy"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/planpolicy"
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

// decideGate counts the decisions about the plan waiting at the gate under
// spec.approval's policy (tally), records the count in status.approvals,
// and approves, rejects or times out the gate, or reports that it waits;
// it requeues for the approval timeout.
func (r *TerraformRunReconciler) decideGate(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	prog, ap := st.progress, st.eff.Spec.Approval
	digest := prog.Plan.Digest
	approver, ok := st.engine.(engine.Approver)
	if !ok {
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval, "engine "+string(st.engine.Name())+" can only be approved in its own UI")
		return ctrl.Result{}, nil
	}
	var deadline time.Time
	timeout := r.approvalTimeout(ap)
	if timeout > 0 && prog.Gate.Since != nil {
		deadline = prog.Gate.Since.Add(timeout)
	}
	votes, err := r.votes(ctx, run, ap, digest)
	if err != nil {
		return ctrl.Result{}, generic("ListApprovals", err, "listing the TerraformRunApprovals of %s", run.Name)
	}
	timedOut := !deadline.IsZero() && !r.now().Before(deadline)
	if timedOut {
		votes = dropLateApprovals(votes, deadline)
	}
	t, rejection := tally(ap, r.runAuthors(run), digest, votes)
	changed := recordPolicies(&t, run, st)
	rules, rerr := r.planRules(ctx, run, st)
	var unreadable *planUnreadable
	if rerr != nil && !errors.As(rerr, &unreadable) && rejection == nil && !timedOut {
		// Only an approval needs the rules: a rejection or the timeout
		// is acted on though the plan could not be read (below).
		return ctrl.Result{}, rerr
	}
	if rerr == nil {
		applyRules(&t, rules, ap.Mode, st.gov, votes)
	}
	run.Status.Approvals = &t // the changes below show too
	denied := rules != nil && rules.Decision == planpolicy.Deny
	if pub, ok := st.engine.(engine.GatePublisher); ok && rerr == nil && rejection == nil && !denied && !changed && t.Needed > 0 {
		gp := gatePolicy(ap, r.runAuthors(run), t)
		ruleGatePolicy(&gp, ap, rules, t)
		if err := pub.PublishGate(ctx, r.Client, st.child, gp); err != nil {
			return gateErr(err)
		}
	}
	switch {
	case denied:
		err = r.denyByRule(ctx, run, st, approver, rules.DenyMessage())
	case rejection != nil:
		err = r.reject(ctx, run, st, approver, *rejection, t)
	case (rerr != nil || changed) && timedOut:
		err = r.timeOut(ctx, run, st, approver, timeout)
	case changed:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonPolicyChanged,
			fmt.Sprintf("plan %s (%s) is held at the gate: %s; plan again to decide it under them (kubectl tfrun rerun %s), or reject it", prog.Plan.Short(), digest, t.Policy.Changed, run.Name))
	case unreadable != nil:
		reason := infrav1.ReasonPlanUnreadable
		if unreadable.rules != nil {
			reason = infrav1.ReasonRulesInvalid
		}
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, reason,
			fmt.Sprintf("plan %s (%s) is held at the gate: %v; %s", prog.Plan.Short(), digest, unreadable, unreadable.advice()))
	case t.Needed == 0:
		src, msg := ruleApproval(rules, ap.Mode)
		if rules != nil && rules.Decision == planpolicy.AutoApprove && t.Required > 0 {
			// Another layer asked people too, and they approved.
			src, msg = "", ""
		}
		if w := r.windowState(st, votes); w != nil {
			t.ChangeWindow = w
			if !w.Open {
				how := msg
				if how == "" {
					how = tallyMessage(t)
				}
				r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonOutsideChangeWindow,
					fmt.Sprintf("plan %s (%s) is approved (%s) and %s", prog.Plan.Short(), digest, how, windowHeld(w)))
				return ctrl.Result{RequeueAfter: windowWait(w, r.now())}, nil
			}
		}
		if ok, wait := r.slotForApply(run); !ok {
			st.report(progressing, infrav1.ReasonQueued, fmt.Sprintf("plan %s is approved; its apply is queued: %s", digest, wait))
			return ctrl.Result{RequeueAfter: queueRetry}, nil
		}
		err = r.approve(ctx, run, st, approver, votes, t, src, msg)
		if w := t.ChangeWindow; err == nil && w != nil && w.OverriddenBy != "" {
			run.Status.Approval.ChangeWindowOverriddenBy = w.OverriddenBy
			r.event(run, "Warning", "ChangeWindowOverridden", "Approved", fmt.Sprintf("plan %s applies outside its change windows (%s): overridden by %s", digest, w.Message, w.OverriddenBy))
		}
	case timedOut:
		err = r.timeOut(ctx, run, st, approver, timeout)
	case ap.ApprovedPlan != "" && ap.ApprovedPlan != digest:
		r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonStaleApproval,
			fmt.Sprintf("refused: spec.approval.approvedPlan is %s, but the plan waiting for approval is %s (%s); review it and approve that digest", shortDigest(ap.ApprovedPlan), digest, prog.Plan.Short()))
	default:
		r.transition(run, infrav1.ApprovedCondition, metav1Unknown, infrav1.ReasonAwaitingApproval,
			fmt.Sprintf("plan %s (%s) waits for approval, %s: %s", prog.Plan.Short(), digest, tallyMessage(t), r.approvalHint(run, st)))
	}
	if err != nil {
		return gateErr(err)
	}
	if left := deadline.Sub(r.now()); !deadline.IsZero() && left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return ctrl.Result{}, nil
}

// autoWithoutGate says whether a run's plans are approved as they are
// made: mode Auto, and no spec.approval.rules (which need the gate).
func autoWithoutGate(eff *infrav1.TerraformRun) bool {
	return !pipeline.ApprovalNeedsGate(eff.Spec.Approval)
}

// dropLateApprovals keeps the votes that still count once the approval
// deadline passed: every rejection, whenever it was cast, and the
// approvals known to be cast before the deadline. The deadline bounds
// approvals only: a plan approved in time and held past it by a change
// window must still be stopped by a rejection until it is applied. An
// approval in the TerraformRun's spec (approvedPlan) has no time of its
// own; made in time, it was counted when the spec changed.
func dropLateApprovals(votes []vote, deadline time.Time) []vote {
	var out []vote
	for _, v := range votes {
		if !v.approve || (!v.at.IsZero() && !v.at.After(deadline)) {
			out = append(out, v)
		}
	}
	return out
}

// slotForApply takes a slot for the apply of an approved plan before
// opr8r passes the gate: the plan gave its slot back while it waited.
func (r *TerraformRunReconciler) slotForApply(run *infrav1.TerraformRun) (bool, Wait) {
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

// gatePolicy is who may still pass the gate in the engine: spec.approval's
// approvers, less the authors (selfApproval Forbidden) and those who have
// approved this plan already, and how many approvals it still needs.
func gatePolicy(ap infrav1.ApprovalSpec, authors []string, t infrav1.ApprovalTally) engine.GatePolicy {
	p := engine.GatePolicy{Digest: t.Digest, Needed: t.Needed, Barred: append([]string{}, t.ApprovedBy...)}
	if ap.Approvers != nil {
		p.Users = append([]string{}, ap.Approvers.Users...)
		p.Groups = append([]string{}, ap.Approvers.Groups...)
	}
	if ap.SelfApproval == infrav1.SelfApprovalForbidden {
		for _, a := range authors {
			if !slices.Contains(p.Barred, a) {
				p.Barred = append(p.Barred, a)
			}
		}
	}
	sort.Strings(p.Barred)
	return p
}

// approvalSource is TerraformRunApproval when any approval came from one,
// else TerraformRun (spec.approval.approvedPlan).
func approvalSource(votes []vote) infrav1.ApprovalSource {
	for _, v := range votes {
		if v.approve && strings.HasPrefix(v.source, "TerraformRunApproval/") {
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
		return approvalpolicy.Authors(run)
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
func (r *TerraformRunReconciler) approve(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, votes []vote, t infrav1.ApprovalTally, src infrav1.ApprovalSource, msg string) error {
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

func (r *TerraformRunReconciler) reject(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, v vote, t infrav1.ApprovalTally) error {
	digest := st.progress.Plan.Digest
	reason := v.reason
	if reason == "" {
		reason = "rejected through " + v.source
	}
	by := strings.Join(t.RejectedBy, ", ")
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelRejected); err != nil {
		return err
	}
	if err := a.Reject(ctx, r.Client, st.child, engine.Decision{Digest: digest, By: by, Reason: reason}); err != nil {
		return err
	}
	src := infrav1.ApprovedBySpec
	if strings.HasPrefix(v.source, "TerraformRunApproval/") {
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
	votes, err := r.votes(ctx, run, st.eff.Spec.Approval, digest)
	if err != nil {
		return generic("ListApprovals", err, "listing the TerraformRunApprovals of %s", run.Name)
	}
	stamped := g.Stamped && !r.UntrustedIdentity && g.By != ""
	if stamped {
		votes = append(votes, vote{user: g.By, groups: g.ByGroups, approve: true, source: "engine", at: at.Time})
	}
	t, _ := tally(st.eff.Spec.Approval, r.runAuthors(run), digest, votes)
	if recordPolicies(&t, run, st) {
		run.Status.Approvals = &t
		return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine, but "+t.Policy.Changed)
	}
	rules, err := r.planRules(ctx, run, st)
	var unreadable *planUnreadable
	if errors.As(err, &unreadable) {
		run.Status.Approvals = &t
		return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine, but "+unreadable.Error())
	}
	if err != nil {
		return err
	}
	applyRules(&t, rules, st.eff.Spec.Approval.Mode, st.gov, votes)
	run.Status.Approvals = &t
	if rules != nil && rules.Decision == planpolicy.Deny {
		return r.refuseEngineApproval(ctx, run, st, a, "the engine shows the plan approved, but "+rules.DenyMessage())
	}
	if w := r.windowState(st, votes); t.Needed == 0 && w != nil {
		t.ChangeWindow = w
		if !w.Open {
			return r.refuseEngineApproval(ctx, run, st, a, "approved in the engine while the plan "+windowHeld(w))
		}
		a.ChangeWindowOverriddenBy = w.OverriddenBy
	}
	if t.Needed == 0 {
		a.By = strings.Join(t.ApprovedBy, ", ")
		if !stamped {
			a.Source = approvalSource(votes)
		}
		r.setApproval(run, a, "plan "+digest+" approved by "+a.By)
		return nil
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
		return "the engine shows the plan approved by " + who + ", but no approval of it was stamped at admission (only opr8r's own decisions and a person's resume that opr8r's admission policy judged count; whoever can write the engine's objects cannot approve): " + tallyMessage(t)
	}
	return "approved in the engine by " + who + ", which spec.approval does not count: " + tallyMessage(t)
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

// shortPlan is a plan's counts for messages.
func shortPlan(p *infrav1.PlanStatus) string {
	return results.ShortAll(p.Add, p.Change, p.Destroy, p.Import, p.Forget, p.Move, p.Actions)
}

// recordPolicies records in t the combined policy that counts the plan,
// and the policies that governed it when it reached the gate (kept from
// the tally of the same plan); it says whether those have changed since:
// one added, changed or deleted, which holds the plan (a change under a
// waiting plan never loosens it).
func recordPolicies(t *infrav1.ApprovalTally, run *infrav1.TerraformRun, st *passState) bool {
	t.Policy = approvalpolicy.Effective(st.gov)
	prev := run.Status.Approvals
	if prev == nil || prev.Digest != t.Digest || prev.Policy == nil {
		return false
	}
	t.Policy.Policies = prev.Policy.Policies
	t.Policy.Changed = prev.Policy.Changed
	if t.Policy.Changed == "" && approvalpolicy.Changed(prev.Policy.Policies, st.gov.Refs) {
		t.Policy.Changed = policyChange(prev.Policy.Policies, st.gov.Refs)
	}
	return t.Policy.Changed != ""
}

// policyChange says how the policies that govern a run changed since its
// plan reached the gate.
func policyChange(recorded, now []infrav1.PolicyRef) string {
	var parts []string
	for _, p := range now {
		i := slices.IndexFunc(recorded, func(r infrav1.PolicyRef) bool { return r.Kind == p.Kind && r.Name == p.Name })
		switch {
		case i < 0:
			parts = append(parts, fmt.Sprintf("%s %s was added", p.Kind, p.Name))
		case recorded[i].UID != p.UID:
			parts = append(parts, fmt.Sprintf("%s %s was deleted and made again", p.Kind, p.Name))
		case recorded[i].Generation != p.Generation:
			parts = append(parts, fmt.Sprintf("%s %s changed (generation %d, was %d)", p.Kind, p.Name, p.Generation, recorded[i].Generation))
		}
	}
	for _, p := range recorded {
		if !slices.ContainsFunc(now, func(n infrav1.PolicyRef) bool { return n.Kind == p.Kind && n.Name == p.Name }) {
			parts = append(parts, fmt.Sprintf("%s %s was deleted", p.Kind, p.Name))
		}
	}
	return "the policies that govern the run changed while the plan waited (" + strings.Join(parts, "; ") + ")"
}
