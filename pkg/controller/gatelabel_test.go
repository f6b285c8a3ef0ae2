package controller

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

func TestGateLabelValue(t *testing.T) {
	const digest = "sha256:aa"
	plan := &engine.PlanResult{HasChanges: true, Digest: digest}
	decision := func(approved bool, src infrav1.ApprovalSource, d string) *infrav1.ApprovalStatus {
		return &infrav1.ApprovalStatus{Digest: d, Approved: approved, Source: src}
	}
	cases := map[string]struct {
		gate     engine.GateState
		plan     *engine.PlanResult
		approval *infrav1.ApprovalStatus
		want     string
	}{
		"no plan yet":                              {gate: engine.GateAbsent, want: ""},
		"no gate (approval mode Auto)":             {gate: engine.GateAbsent, plan: plan, approval: decision(true, infrav1.ApprovedAutomatically, digest), want: ""},
		"no changes: the gate is skipped":          {gate: engine.GateSkipped, plan: &engine.PlanResult{Digest: digest}, want: ""},
		"waiting":                                  {gate: engine.GatePending, plan: plan, want: infrav1.ApprovalLabelWaiting},
		"approved in this pass, engine not yet":    {gate: engine.GatePending, plan: plan, approval: decision(true, infrav1.ApprovedByApproval, digest), want: infrav1.ApprovalLabelApproved},
		"rejected in this pass":                    {gate: engine.GatePending, plan: plan, approval: decision(false, infrav1.ApprovedBySpec, digest), want: infrav1.ApprovalLabelRejected},
		"timed out in this pass":                   {gate: engine.GatePending, plan: plan, approval: decision(false, infrav1.ApprovalTimedOut, digest), want: infrav1.ApprovalLabelTimedOut},
		"a decision about another plan: waiting":   {gate: engine.GatePending, plan: plan, approval: decision(true, infrav1.ApprovedByApproval, "sha256:bb"), want: infrav1.ApprovalLabelWaiting},
		"approved in the engine (the Argo UI)":     {gate: engine.GateApproved, plan: plan, want: infrav1.ApprovalLabelApproved},
		"rejected in the engine":                   {gate: engine.GateRejected, plan: plan, want: infrav1.ApprovalLabelRejected},
		"the engine shows the timeout's rejection": {gate: engine.GateRejected, plan: plan, approval: decision(false, infrav1.ApprovalTimedOut, digest), want: infrav1.ApprovalLabelTimedOut},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := aRun("a")
			run.Status.Approval = tc.approval
			if got := gateLabelValue(run, engine.Progress{Gate: engine.Gate{State: tc.gate}, Plan: tc.plan}); got != tc.want {
				t.Errorf("label %q, want %q", got, tc.want)
			}
		})
	}
}

// The label is written once per change of the gate's state, as a patch of
// the child's metadata that keeps every other label.
func TestReconcileGateLabel(t *testing.T) {
	f := &fakeEngine{}
	run := aRun("a")
	r0, _ := newReconciler(t, f)
	run = withRun(r0, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
	st0 := r0.newPassState(run)
	child := childOf(t, run, infrav1.RunApply, 1, st0.hash)
	r, c := newReconciler(t, f, child)
	stored := func() *batchv1.Job {
		t.Helper()
		j := &batchv1.Job{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(child), j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	before := stored()
	pass := func(gate engine.GateState) *batchv1.Job {
		t.Helper()
		st := r.newPassState(run)
		st.engine, st.child = f, stored()
		st.progress = engine.Progress{Gate: engine.Gate{State: gate}, Plan: &engine.PlanResult{HasChanges: true, Digest: "sha256:aa"}}
		if _, err := r.reconcileGateLabel(ctx(), run, st); err != nil {
			t.Fatal(err)
		}
		return stored()
	}

	waiting := pass(engine.GatePending)
	if got := waiting.Labels[infrav1.ApprovalLabel]; got != infrav1.ApprovalLabelWaiting {
		t.Fatalf("label %q while the plan waits, want %q", got, infrav1.ApprovalLabelWaiting)
	}
	for k, v := range before.Labels {
		if waiting.Labels[k] != v {
			t.Errorf("label %s changed from %q to %q", k, v, waiting.Labels[k])
		}
	}
	if again := pass(engine.GatePending); again.ResourceVersion != waiting.ResourceVersion {
		t.Errorf("a second pass while the plan waits wrote the child again (resourceVersion %s → %s)", waiting.ResourceVersion, again.ResourceVersion)
	}
	if got := pass(engine.GateApproved).Labels[infrav1.ApprovalLabel]; got != infrav1.ApprovalLabelApproved {
		t.Errorf("label %q once approved, want %q", got, infrav1.ApprovalLabelApproved)
	}

	// A finished run's child is left alone.
	run.Status.Run.Phase = infrav1.RunSucceeded
	st := r.newPassState(run)
	st.engine, st.child = f, stored()
	st.progress = engine.Progress{Gate: engine.Gate{State: engine.GateRejected}, Plan: &engine.PlanResult{HasChanges: true, Digest: "sha256:aa"}}
	if _, err := r.reconcileGateLabel(ctx(), run, st); err != nil {
		t.Fatal(err)
	}
	if got := stored().Labels[infrav1.ApprovalLabel]; got != infrav1.ApprovalLabelApproved {
		t.Errorf("a finished run's child was relabelled %q", got)
	}
}
