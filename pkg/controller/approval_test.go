package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/queue"
)

func TestReconcileApproval(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-10 * time.Minute))
	decided := metav1.NewTime(t0.Add(-time.Minute))
	cases := map[string]struct {
		spec         infrav1.ApprovalSpec
		gate         engine.Gate
		hasChanges   bool
		engineHint   bool
		wantApproved string
		wantMessage  string
		wantSource   infrav1.ApprovalSource
		wantBy       string
		wantApprove  int
		wantReject   int
		wantRequeue  time.Duration
		approvals    []*infrav1.TerraformRunApproval
		decidedBy    string
		untrusted    bool
		wantLabel    string
		wantCancel   bool
		defTimeout   time.Duration // the manager's --default-approval-timeout
	}{
		"waiting, nothing decided: says how to approve": {
			gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "kubectl tfrun approve a",
		},
		"waiting, with the engine's own way too": {
			gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true, engineHint: true,
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "kubectl tfrun approve a, or fake approve a-1",
		},
		"approved through the spec: the gate passes with the digest": {
			spec: infrav1.ApprovalSpec{ApprovedPlan: digest}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedBySpec, wantApprove: 1,
		},
		"rejected through the spec": {
			spec: infrav1.ApprovalSpec{RejectedPlan: digest, RejectReason: "no"}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedBySpec, wantReject: 1,
		},
		"an approval of another plan is refused": {
			spec: infrav1.ApprovalSpec{ApprovedPlan: "sha256:bb"}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "False/StaleApproval", wantMessage: "the plan waiting for approval is sha256:aa",
		},
		"timed out: rejected": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "False/ApprovalTimeout", wantSource: infrav1.ApprovalTimedOut, wantReject: 1,
		},
		"no timeout of its own: the manager's default rejects it": {
			gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true, defTimeout: 5 * time.Minute,
			wantApproved: "False/ApprovalTimeout", wantSource: infrav1.ApprovalTimedOut, wantReject: 1, wantMessage: "approval timed out after 5m0s",
		},
		"a timeout of its own beats the manager's default": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 15 * time.Minute}}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true, defTimeout: 5 * time.Minute,
			wantApproved: "Unknown/AwaitingApproval", wantRequeue: 5 * time.Minute,
		},
		"not yet timed out: looks again at the deadline": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 15 * time.Minute}}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "Unknown/AwaitingApproval", wantRequeue: 5 * time.Minute,
		},
		"approved in the engine (argo resume) by a person admission stamped: recorded with who": {
			gate: engine.Gate{State: engine.GateApproved, By: "alice", Stamped: true, DecidedAt: &decided}, hasChanges: true,
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByEngine, wantBy: "alice",
		},
		"approved in the engine, nobody stamped (a tenant wrote the engine's objects): refused, the child stopped": {
			gate: engine.Gate{State: engine.GateApproved, By: "alice", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/ApprovedOutsidePolicy", wantSource: infrav1.ApprovedByEngine, wantBy: "alice",
			wantMessage: "no approval of it was stamped at admission", wantCancel: true, wantLabel: infrav1.ApprovalLabelRejected,
		},
		"approved in the engine as opr8r, but opr8r counted no approvals: refused": {
			gate: engine.Gate{State: engine.GateApproved, By: "opr8r (alice)", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/ApprovedOutsidePolicy", wantMessage: "0/1 approvals", wantCancel: true,
		},
		"stamped, but the manager runs without the admission policies (untrusted): refused": {
			gate: engine.Gate{State: engine.GateApproved, By: "alice", Stamped: true, DecidedAt: &decided}, hasChanges: true, untrusted: true,
			wantApproved: "False/ApprovedOutsidePolicy", wantCancel: true,
		},
		"approved through the spec: by the user stamped in decided-by": {
			spec: infrav1.ApprovalSpec{ApprovedPlan: digest}, decidedBy: "alice", gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedBySpec, wantBy: "alice", wantApprove: 1,
		},
		"TerraformRunApprovals of two users meet a quorum of two": {
			spec: infrav1.ApprovalSpec{RequiredApprovals: 2}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true), approval("x2", "a", digest, "bob", true), approval("x3", "other", digest, "carol", true)},
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByApproval, wantBy: "alice, bob", wantApprove: 1,
		},
		"a TerraformRunApproval of another run or plan does not count": {
			spec: infrav1.ApprovalSpec{RequiredApprovals: 2}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true), approval("x2", "a", "sha256:bb", "bob", true), approval("x3", "other", digest, "carol", true)},
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "1/2 approvals (alice), 1 more needed",
		},
		"without the admission policies no stamp is trusted: a quorum cannot be met": {
			spec: infrav1.ApprovalSpec{RequiredApprovals: 2}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true, untrusted: true,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true), approval("x2", "a", digest, "bob", true)},
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "no user was stamped at admission",
		},
		"one rejection among approvals rejects": {
			gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true), approval("x2", "a", digest, "bob", false)},
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByApproval, wantBy: "bob", wantReject: 1,
		},
		"approved in the engine by a stamped user the policy does not count: refused, the child stopped": {
			spec: infrav1.ApprovalSpec{Approvers: &infrav1.Approvers{Users: []string{"bob"}}},
			gate: engine.Gate{State: engine.GateApproved, By: "mallory", Stamped: true, DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/ApprovedOutsidePolicy", wantSource: infrav1.ApprovedByEngine, wantBy: "mallory", wantMessage: "not in spec.approval.approvers",
			wantCancel: true,
		},
		"an Argo resume counts as one approval, with the other decisions": {
			spec:      infrav1.ApprovalSpec{RequiredApprovals: 2},
			approvals: []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true)},
			gate:      engine.Gate{State: engine.GateApproved, By: "bob", Stamped: true, DecidedAt: &decided}, hasChanges: true,
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByEngine, wantBy: "alice, bob",
		},
		"opr8r's own resume whose record was lost is recorded from the decisions it counted": {
			spec:      infrav1.ApprovalSpec{RequiredApprovals: 2},
			approvals: []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true), approval("x2", "a", digest, "bob", true)},
			gate:      engine.Gate{State: engine.GateApproved, By: "opr8r (alice, bob)", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByApproval, wantBy: "alice, bob",
		},
		"rejected in the engine by a person: recorded as a rejection with who": {
			gate: engine.Gate{State: engine.GateRejected, By: "alice", Message: "Rejected: no. Decided by alice", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByEngine, wantBy: "alice", wantMessage: "rejected in the engine",
			wantLabel: infrav1.ApprovalLabelRejected,
		},
		"opr8r's own timeout whose record a pass did not see is recorded as the timeout": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
			gate: engine.Gate{State: engine.GateRejected, By: "opr8r (timeout)", Message: "Rejected: approval timed out after 5m0s. Decided by opr8r (timeout)", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/ApprovalTimeout", wantSource: infrav1.ApprovalTimedOut, wantMessage: "approval timed out after 5m0s",
			wantLabel: infrav1.ApprovalLabelTimedOut,
		},
		"a rejection by opr8r that is not its timeout is a rejection in the engine": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
			gate: engine.Gate{State: engine.GateRejected, By: "opr8r", Message: "Rejected: approval timed out after 5m0s. Resumed by: opr8r (timeout)", DecidedAt: &decided}, hasChanges: true,
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByEngine, wantBy: "opr8r", wantMessage: "rejected in the engine",
			wantLabel: infrav1.ApprovalLabelRejected,
		},
		"an approval cast after the deadline does not count: the plan times out": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{castAt(approval("late", "a", digest, "alice", true), t0.Add(-time.Minute))},
			wantApproved: "False/ApprovalTimeout", wantSource: infrav1.ApprovalTimedOut, wantReject: 1,
		},
		"an approval cast before the deadline counts though it is seen after it": {
			spec: infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}, gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute))},
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByApproval, wantBy: "alice", wantApprove: 1,
		},
		// t0 (Monday 12:00 UTC) is inside freeze (Monday 11:00 to 13:00):
		// a plan approved in time waits for it past the 5 minute deadline.
		"approved in time, held by a window past the deadline: still held, not timed out": {
			spec: heldPastDeadline(), gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute))},
			wantApproved: "Unknown/OutsideChangeWindow", wantRequeue: time.Hour,
		},
		"approved in time, held by a window: a rejection cast after the deadline rejects it": {
			spec: heldPastDeadline(), gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals: []*infrav1.TerraformRunApproval{
				castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute)),
				castAt(approval("late", "a", digest, "bob", false), t0.Add(-time.Minute)),
			},
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByApproval, wantBy: "bob", wantReject: 1,
			wantLabel: infrav1.ApprovalLabelRejected,
		},
		"approved in time, held by a window: its approver's own later rejection rejects it": {
			spec: heldPastDeadline(), gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals: []*infrav1.TerraformRunApproval{
				castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute)),
				castAt(approval("late", "a", digest, "alice", false), t0.Add(-time.Minute)),
			},
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByApproval, wantBy: "alice", wantReject: 1,
		},
		"approved in time, held by a window: spec.approval.rejectedPlan set after the deadline rejects it": {
			spec: withRejectedPlan(heldPastDeadline(), digest), decidedBy: "bob", gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals:    []*infrav1.TerraformRunApproval{castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute))},
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedBySpec, wantBy: "bob", wantReject: 1,
		},
		"approved in time, the window opens: a rejection cast after the deadline still wins": {
			spec: withWindow(heldPastDeadline(), infrav1.ChangeWindow{Name: "noon", Type: infrav1.WindowAllow, Schedule: "0 12 * * 1", Duration: metav1.Duration{Duration: time.Hour}}),
			gate: engine.Gate{State: engine.GatePending, Since: &since}, hasChanges: true,
			approvals: []*infrav1.TerraformRunApproval{
				castAt(approval("early", "a", digest, "alice", true), t0.Add(-7*time.Minute)),
				castAt(approval("late", "a", digest, "bob", false), t0.Add(-time.Minute)),
			},
			wantApproved: "False/Rejected", wantSource: infrav1.ApprovedByApproval, wantBy: "bob", wantReject: 1,
		},
		"auto approval": {
			spec: infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}, hasChanges: true,
			wantApproved: "True/AutoApproved", wantSource: infrav1.ApprovedAutomatically,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			var e engine.Engine = f
			if tc.engineHint {
				e = hinter{f}
			}
			run := aRun("a")
			run.Spec.Approval = tc.spec
			if tc.decidedBy != "" {
				run.Annotations = map[string]string{infrav1.DecidedByAnnotation: tc.decidedBy}
			}
			r, _ := newReconciler(t, e)
			run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
			child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
			objs := []client.Object{child}
			for _, a := range tc.approvals {
				objs = append(objs, a)
			}
			r, _ = newReconciler(t, e, objs...)
			r.UntrustedIdentity = tc.untrusted
			r.DefaultApprovalTimeout = tc.defTimeout
			st := r.newPassState(run)
			st.engine, st.child = e, child
			st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: tc.gate, Plan: &engine.PlanResult{Add: 1, HasChanges: tc.hasChanges, Digest: digest}}
			res, err := r.reconcileApproval(ctx(), run, st)
			if err != nil {
				t.Fatal(err)
			}
			if got := condOf(run, infrav1.ApprovedCondition); got != tc.wantApproved {
				t.Errorf("Approved = %s, want %s", got, tc.wantApproved)
			}
			if c := findCond(run, infrav1.ApprovedCondition); tc.wantMessage != "" && (c == nil || !strings.Contains(c.Message, tc.wantMessage)) {
				t.Errorf("Approved message %v, want it to contain %q", c, tc.wantMessage)
			}
			if tc.wantSource != "" && (run.Status.Approval == nil || run.Status.Approval.Source != tc.wantSource || run.Status.Approval.By != tc.wantBy) {
				t.Errorf("status.approval = %+v, want source %s by %q", run.Status.Approval, tc.wantSource, tc.wantBy)
			}
			if len(f.approved) != tc.wantApprove || len(f.rejected) != tc.wantReject {
				t.Errorf("engine approved %d and rejected %d times, want %d and %d", len(f.approved), len(f.rejected), tc.wantApprove, tc.wantReject)
			}
			if tc.wantApprove == 1 && f.approved[0].Digest != digest {
				t.Errorf("approved digest %s, want %s", f.approved[0].Digest, digest)
			}
			if got := gateLabelValue(run, st.progress); tc.wantLabel != "" && got != tc.wantLabel {
				t.Errorf("approval label %q, want %q", got, tc.wantLabel)
			}
			if got := len(f.cancelled) == 1; got != tc.wantCancel {
				t.Errorf("child stopped: %v, want %v", got, tc.wantCancel)
			}
			if tc.wantCancel && (run.Status.Approval == nil || run.Status.Approval.Approved || run.Status.Approval.Digest != digest) {
				t.Errorf("a refused approval must be recorded as not approved: %+v", run.Status.Approval)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// approval is a TerraformRunApproval as the API server stores it, stamped.
func approval(name, run, digest, user string, approve bool) *infrav1.TerraformRunApproval {
	d := infrav1.DecisionApprove
	if !approve {
		d = infrav1.DecisionReject
	}
	return &infrav1.TerraformRunApproval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: aRun(run).Namespace},
		Spec:       infrav1.TerraformRunApprovalSpec{RunName: run, PlanDigest: digest, Decision: d, User: user, Reason: "because " + user},
	}
}

// heldPastDeadline is an approval policy of a 5 minute timeout and a deny
// window from Monday 11:00 to 13:00 UTC, which holds t0.
func heldPastDeadline() infrav1.ApprovalSpec {
	return infrav1.ApprovalSpec{
		Timeout: &metav1.Duration{Duration: 5 * time.Minute},
		Windows: []infrav1.ChangeWindow{{Name: "freeze", Type: infrav1.WindowDeny, Schedule: "0 11 * * 1", Duration: metav1.Duration{Duration: 2 * time.Hour}}},
	}
}

// withRejectedPlan is ap with spec.approval.rejectedPlan naming digest.
func withRejectedPlan(ap infrav1.ApprovalSpec, digest string) infrav1.ApprovalSpec {
	ap.RejectedPlan, ap.RejectReason = digest, "changed my mind"
	return ap
}

// withWindow is ap with its windows replaced by w.
func withWindow(ap infrav1.ApprovalSpec, w infrav1.ChangeWindow) infrav1.ApprovalSpec {
	ap.Windows = []infrav1.ChangeWindow{w}
	return ap
}

// castAt is a TerraformRunApproval created at when.
func castAt(a *infrav1.TerraformRunApproval, when time.Time) *infrav1.TerraformRunApproval {
	a.CreationTimestamp = metav1.NewTime(when)
	return a
}

// A plan waiting for approval gives its slot back (no pod runs while it
// waits), and its apply takes one again before opr8r passes the gate: with
// every slot taken, an approved plan waits, Queued, and the gate stays.
func TestAWaitingPlanHoldsNoSlot(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-time.Minute))
	f := &fakeEngine{progress: map[string]engine.Progress{}}
	run := aRun("a")
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	r, _ = newReconciler(t, f, child)
	r.Limiter = queue.NewLimiter(1, 0, nil)
	r.Limiter.Warm()
	key := client.ObjectKeyFromObject(run)
	if ok, _ := r.Limiter.Claim(key, run.Status.Run.ID, prioRun); !ok {
		t.Fatal("no slot for the run")
	}
	prog := engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: engine.Gate{State: engine.GatePending, Since: &since}, Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest}}
	r.holdSlot(run, run.Status.Run.ID, prog)
	if got := r.Limiter.Active(); got != 0 {
		t.Fatalf("a plan waiting at its gate holds %d slots, want 0", got)
	}
	other := types.NamespacedName{Namespace: run.Namespace, Name: "other"}
	if ok, _ := r.Limiter.Claim(other, "other-1", prioRun); !ok {
		t.Fatal("another run got no slot beside a plan that waits for approval")
	}

	run.Spec.Approval = infrav1.ApprovalSpec{ApprovedPlan: digest}
	st := r.newPassState(run)
	st.engine, st.child, st.progress = f, child, prog
	res, err := r.reconcileApproval(ctx(), run, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.approved) != 0 || st.outcome.reason != infrav1.ReasonQueued || res.RequeueAfter != queueRetry {
		t.Fatalf("approved with every slot taken: engine approved %d times, outcome %+v, requeue %s; want the gate kept, Queued, a look again in %s",
			len(f.approved), st.outcome, res.RequeueAfter, queueRetry)
	}
	if !strings.Contains(st.outcome.message, "its apply is queued") {
		t.Errorf("outcome %q, want it to say the apply is queued", st.outcome.message)
	}

	r.Limiter.Release(run.Namespace, "other-1")
	st = r.newPassState(run)
	st.engine, st.child, st.progress = f, child, prog
	if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
		t.Fatal(err)
	}
	if len(f.approved) != 1 || r.Limiter.Active() != 1 {
		t.Fatalf("with a slot free: engine approved %d times, %d slots taken; want the gate passed holding the one slot", len(f.approved), r.Limiter.Active())
	}
	// The gate still shows Pending until the engine moves on: the approved
	// plan keeps its slot.
	r.holdSlot(run, run.Status.Run.ID, prog)
	if got := r.Limiter.Active(); got != 1 {
		t.Fatalf("an approved plan still at its gate holds %d slots, want 1", got)
	}
}

func TestReconcileApprovalRetriesAGateThatMovedOn(t *testing.T) {
	f := &fakeEngine{gateGone: true}
	run := aRun("a")
	run.Spec.Approval.ApprovedPlan = "sha256:aa"
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
	st := r.newPassState(run)
	st.engine, st.child = f, childOf(t, run, infrav1.RunApply, 1, st.hash)
	st.progress = engine.Progress{Gate: engine.Gate{State: engine.GatePending}, Plan: &engine.PlanResult{HasChanges: true, Digest: "sha256:aa"}}
	res, err := r.reconcileApproval(ctx(), run, st)
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("got %v, %v; want a retry in a second", res, err)
	}
	if run.Status.Approval != nil {
		t.Fatal("an approval the engine did not take was recorded")
	}
}

func TestReconcileSupersede(t *testing.T) {
	cases := map[string]struct {
		gate       engine.GateState
		change     func(*infrav1.TerraformRun)
		wantCancel bool
	}{
		"spec changed while the plan waits: stopped": {
			gate: engine.GatePending, change: func(r *infrav1.TerraformRun) { r.Spec.Terraform.Workspace = "other" }, wantCancel: true,
		},
		"rerun requested while the plan waits: stopped": {
			gate: engine.GatePending, change: func(r *infrav1.TerraformRun) { r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "x"} }, wantCancel: true,
		},
		"only the approval fields changed: kept": {
			gate: engine.GatePending, change: func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = "sha256:aa" },
		},
		"spec changed while applying: let it finish": {
			gate: engine.GateApproved, change: func(r *infrav1.TerraformRun) { r.Spec.Terraform.Workspace = "other" },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{}
			run := aRun("a")
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
			tc.change(run)
			st := r.newPassState(run)
			st.engine, st.child = f, childOf(t, run, infrav1.RunApply, 1, st.hash)
			st.progress = engine.Progress{Gate: engine.Gate{State: tc.gate}}
			if _, err := r.reconcileSupersede(ctx(), run, st); err != nil {
				t.Fatal(err)
			}
			if got := len(f.cancelled) == 1; got != tc.wantCancel || st.stop != tc.wantCancel {
				t.Fatalf("cancelled %v (pass stopped %v), want %v", f.cancelled, st.stop, tc.wantCancel)
			}
			if tc.wantCancel && condOf(run, infrav1.ApprovedCondition) != "False/Superseded" {
				t.Errorf("Approved = %s, want False/Superseded", condOf(run, infrav1.ApprovedCondition))
			}
		})
	}
}

// TestEngineForBeforeTheFirstLook: just after a (re)start, before the
// EngineWatcher has looked for the engines' CRDs, a run is not marked
// EngineUnavailable; once it has looked, a missing engine is.
func TestEngineForBeforeTheFirstLook(t *testing.T) {
	r, _ := newReconciler(t, &fakeEngine{})
	r.Available = engine.NewAvailability()
	if _, err := r.engineFor(fakeName); !errors.Is(err, errEnginesUnknown) {
		t.Fatalf("before the first look: err = %v, want errEnginesUnknown", err)
	}
	r.Available.MarkChecked()
	_, err := r.engineFor(fakeName)
	var w *WaitingError
	if !errors.As(err, &w) || w.Reason != infrav1.ReasonEngineUnavailable {
		t.Fatalf("after the first look: err = %v, want EngineUnavailable", err)
	}
	r.Available.Set(fakeName, true)
	if e, err := r.engineFor(fakeName); err != nil || e == nil {
		t.Fatalf("available: %v %v", e, err)
	}
}

// TestRecordedEngineDecisionWakesTheDriver: a decision the gate shows but
// status does not record yet (a manager that crashed after opening the
// Job engine's gate, before its status write) is recorded in a pass whose
// driver has already run without it, and a status write wakes no pass: the
// pass asks for the next one, which drives with it. Once recorded, nothing
// more (CI of 2026-11-30: the chaos spec's c188 waited 90 s for its apply
// Job after such a crash).
func TestRecordedEngineDecisionWakesTheDriver(t *testing.T) {
	const digest = "sha256:aa"
	decided := metav1.NewTime(t0.Add(-time.Minute))
	for _, gate := range []engine.GateState{engine.GateApproved, engine.GateRejected} {
		d := &drivenEngine{fakeEngine: fakeEngine{progress: map[string]engine.Progress{}}}
		r, _ := newReconciler(t, d)
		run := withRun(r, aRun("a"), 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
		child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
		r, _ = newReconciler(t, d, child)
		st := r.newPassState(run)
		st.engine, st.child = d, child
		st.progress = engine.Progress{Phase: infrav1.RunRunning, Gate: engine.Gate{State: gate, By: "alice", Stamped: true, DecidedAt: &decided},
			Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest}}
		res, err := r.reconcileApproval(ctx(), run, st)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status.Approval == nil || run.Status.Approval.Digest != digest || run.Status.Approval.Approved != (gate == engine.GateApproved) {
			t.Fatalf("%s: status.approval = %+v", gate, run.Status.Approval)
		}
		if res.RequeueAfter != decisionRequeue {
			t.Errorf("%s, newly recorded: requeue after %s, want %s", gate, res.RequeueAfter, decisionRequeue)
		}
		if res, err = r.reconcileApproval(ctx(), run, st); err != nil || res.RequeueAfter != 0 {
			t.Errorf("%s, already recorded: requeue after %s (%v), want none", gate, res.RequeueAfter, err)
		}
	}
}

// An Argo resume made after the approval deadline (the manager had not
// yet acted on the timeout) does not count, as a TerraformRunApproval made
// at the same instant would not: the plan timed out (attack review).
func TestEngineResumeAfterTheDeadlineIsRefused(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-10 * time.Minute)) // deadline t0-5m
	late := metav1.NewTime(t0.Add(-time.Minute))       // after the deadline
	f := &fakeEngine{progress: map[string]engine.Progress{}}
	run := aRun("a")
	run.Spec.Approval = infrav1.ApprovalSpec{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	r, _ = newReconciler(t, f, []client.Object{child}...)
	st := r.newPassState(run)
	st.engine, st.child = f, child
	st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval,
		Gate: engine.Gate{State: engine.GateApproved, Since: &since, By: "alice", Stamped: true, DecidedAt: &late},
		Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest}}
	if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
		t.Fatal(err)
	}
	if a := run.Status.Approval; a == nil || a.Approved || !strings.Contains(a.Reason, "timed out") {
		t.Errorf("a resume cast %s after the deadline was accepted: %+v (condition %s)", late.Sub(since.Add(5*time.Minute)), a, condOf(run, infrav1.ApprovedCondition))
	}
}

// A resume while a counted rejection is pending is refused: the plan is
// rejected (the code before pkg/gate dropped the rejection here).
func TestEngineResumeOverARejectionIsRefused(t *testing.T) {
	const digest = "sha256:aa"
	decided := metav1.NewTime(t0.Add(-time.Minute))
	f := &fakeEngine{progress: map[string]engine.Progress{}}
	run := aRun("a")
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
	child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	r, _ = newReconciler(t, f, child, castAt(approval("x", "a", digest, "bob", false), t0.Add(-3*time.Minute)))
	st := r.newPassState(run)
	st.engine, st.child = f, child
	st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval,
		Gate: engine.Gate{State: engine.GateApproved, By: "alice", Stamped: true, DecidedAt: &decided},
		Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest}}
	if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
		t.Fatal(err)
	}
	if a := run.Status.Approval; a == nil || a.Approved || !strings.Contains(a.Reason, "rejected by bob") {
		t.Errorf("resume accepted over bob's rejection: %+v", a)
	}
}
