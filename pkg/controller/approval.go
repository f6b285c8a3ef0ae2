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

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/results"
)

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
	if st.eff.Spec.Approval.Mode == infrav1.ApprovalAuto && prog.Plan.HasChanges {
		r.setApproval(run, infrav1.ApprovalStatus{Digest: digest, Approved: true, Source: infrav1.ApprovedAutomatically, At: metav1.NewTime(r.now())}, "plan approved automatically (approval mode Auto)")
		return ctrl.Result{}, nil
	}
	switch prog.Gate.State {
	case engine.GateApproved, engine.GateRejected:
		r.setEngineDecision(ctx, run, st, prog.Gate, digest)
		return ctrl.Result{}, nil
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
	if ap.Timeout != nil && prog.Gate.Since != nil {
		deadline = prog.Gate.Since.Add(ap.Timeout.Duration)
	}
	votes, err := r.votes(ctx, run, ap, digest)
	if err != nil {
		return ctrl.Result{}, generic("ListApprovals", err, "listing the TerraformRunApprovals of %s", run.Name)
	}
	t, rejection := tally(ap, r.runAuthor(run), digest, votes)
	run.Status.Approvals = &t
	if pub, ok := st.engine.(engine.GatePublisher); ok && rejection == nil && t.Needed > 0 {
		if err := pub.PublishGate(ctx, r.Client, st.child, gatePolicy(ap, r.runAuthor(run), t)); err != nil {
			return gateErr(err)
		}
	}
	switch {
	case rejection != nil:
		err = r.reject(ctx, run, st, approver, *rejection, t)
	case t.Needed == 0:
		err = r.approve(ctx, run, st, approver, votes, t)
	case !deadline.IsZero() && !r.now().Before(deadline):
		err = r.timeOut(ctx, run, st, approver, ap.Timeout.Duration)
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

// gatePolicy is who may still pass the gate in the engine: spec.approval's
// approvers, less the author (selfApproval Forbidden) and those who have
// approved this plan already, and how many approvals it still needs.
func gatePolicy(ap infrav1.ApprovalSpec, author string, t infrav1.ApprovalTally) engine.GatePolicy {
	p := engine.GatePolicy{Digest: t.Digest, Needed: t.Needed, Barred: append([]string{}, t.ApprovedBy...)}
	if ap.Approvers != nil {
		p.Users = append([]string{}, ap.Approvers.Users...)
		p.Groups = append([]string{}, ap.Approvers.Groups...)
	}
	if ap.SelfApproval == infrav1.SelfApprovalForbidden && author != "" && !slices.Contains(p.Barred, author) {
		p.Barred = append(p.Barred, author)
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

// runAuthor is the author of the active run's change ("" when unknown or
// not trusted).
func (r *TerraformRunReconciler) runAuthor(run *infrav1.TerraformRun) string {
	if r.UntrustedIdentity {
		return ""
	}
	if run.Status.Run != nil {
		return run.Status.Run.Author
	}
	return run.Annotations[infrav1.SpecAuthorAnnotation]
}

// approvalHint says how to approve: kubectl tfrun, and the engine's own way.
func (r *TerraformRunReconciler) approvalHint(run *infrav1.TerraformRun, st *passState) string {
	hint := "kubectl tfrun approve " + run.Name
	if h, ok := st.engine.(engine.ApprovalHinter); ok {
		hint += ", or " + h.ApprovalHint(run.Namespace, st.child.GetName())
	}
	return hint
}

func (r *TerraformRunReconciler) approve(ctx context.Context, run *infrav1.TerraformRun, st *passState, a engine.Approver, votes []vote, t infrav1.ApprovalTally) error {
	digest := st.progress.Plan.Digest
	by := strings.Join(t.ApprovedBy, ", ")
	if err := r.labelGate(ctx, st.child, infrav1.ApprovalLabelApproved); err != nil {
		return err
	}
	if err := a.Approve(ctx, r.Client, st.child, engine.Decision{Digest: digest, By: by}); err != nil {
		return err
	}
	src := approvalSource(votes)
	via := "spec.approval.approvedPlan"
	if src == infrav1.ApprovedByApproval {
		via = "TerraformRunApproval"
	}
	msg := "plan " + digest + " approved through " + via
	if by != "" {
		msg += " by " + by
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
	if errors.Is(err, engine.ErrGateNotPending) || apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, generic("DecideGate", err, "deciding the approval gate")
}

// setEngineDecision records a decision the engine shows and opr8r has not
// recorded yet: someone ran `argo resume` or used the Argo UI. The resume
// counts as one approval by the user the engine recorded, together with the
// plan's other decisions. The engine has already let the plan through, so
// an approval that spec.approval's policy would not count is recorded as
// ApprovedOutsidePolicy, with a Warning event naming the rule it broke.
func (r *TerraformRunReconciler) setEngineDecision(ctx context.Context, run *infrav1.TerraformRun, st *passState, g engine.Gate, digest string) {
	ap := st.eff.Spec.Approval
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
		r.setEngineRejection(run, a, g, digest)
		return
	}
	votes, err := r.votes(ctx, run, ap, digest)
	if err != nil {
		votes = nil // judged on the resume alone
	}
	at0 := time.Time{}
	if g.DecidedAt != nil {
		at0 = g.DecidedAt.Time
	}
	// opr8r's own resume whose record a lost status write dropped: the
	// decisions it counted are still there.
	own := g.By == engine.ActorName || strings.HasPrefix(g.By, engine.ActorName+" (")
	if !own {
		votes = append(votes, vote{user: g.By, groups: g.ByGroups, approve: true, source: "engine", at: at0})
	}
	t, _ := tally(ap, r.runAuthor(run), digest, votes)
	run.Status.Approvals = &t
	if own && t.Needed == 0 {
		a.Source, a.By = approvalSource(votes), strings.Join(t.ApprovedBy, ", ")
		r.setApproval(run, a, "plan "+digest+" approved by "+a.By)
		return
	}
	a.By = strings.Join(t.ApprovedBy, ", ")
	if t.Needed > 0 {
		a.By = g.By
		a.Reason = "approved in the engine outside spec.approval: " + tallyMessage(t)
		run.Status.Approval = &a
		advice := ""
		if h, ok := st.engine.(engine.ApprovalHinter); ok {
			advice = "; " + h.ApprovalRights()
		}
		r.transition(run, infrav1.ApprovedCondition, metav1True, infrav1.ReasonApprovedOutsidePolicy,
			msg+", which spec.approval does not count ("+tallyMessage(t)+")"+advice)
		return
	}
	r.setApproval(run, a, msg)
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

// reconcileSupersede stops an active run whose plan waits for approval when
// the spec changed, a rerun was requested or a dependency's outputs changed:
// the new inputs need a new plan.
// The run's cleanup still runs; the next run starts once it has stopped.
// Sets Approved False (Superseded) and Reconciling (Superseded), and ends
// the pass.
func (r *TerraformRunReconciler) reconcileSupersede(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if !st.active || st.child == nil || st.progress.Gate.State != engine.GatePending {
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
	if trigger == infrav1.TriggerDependencyChange {
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

// shortPlan is a plan's counts for messages.
func shortPlan(p *infrav1.PlanStatus) string {
	return results.Short(p.Add, p.Change, p.Destroy)
}
