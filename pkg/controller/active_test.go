package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

func steps(kv ...string) []infrav1.StepStatus {
	var out []infrav1.StepStatus
	for i := 0; i < len(kv); i += 2 {
		out = append(out, infrav1.StepStatus{Name: kv[i], Phase: infrav1.StepPhase(kv[i+1])})
	}
	return out
}

func TestReconcileActive(t *testing.T) {
	plan := &engine.PlanResult{Add: 1, HasChanges: true, Digest: "sha256:aa"}
	finished := metav1.NewTime(t0)
	cases := map[string]struct {
		phase          infrav1.RunPhase // status.run's phase before the pass
		child          bool
		deleting       bool
		progress       engine.Progress
		wantPhase      infrav1.RunPhase
		wantActive     bool
		wantReady      string
		wantStalled    string
		wantPlanned    string
		wantRecords    int
		wantMayExist   bool
		wantObservedGn int64
	}{
		"no active run: nothing to follow": {
			phase: infrav1.RunSucceeded, child: true, wantPhase: infrav1.RunSucceeded,
		},
		"plan running: steps projected, Reconciling": {
			phase: infrav1.RunPending, child: true,
			progress:  engine.Progress{Phase: infrav1.RunRunning, Steps: steps("clone", "Succeeded", "init", "Succeeded", "plan", "Running")},
			wantPhase: infrav1.RunRunning, wantActive: true, wantReady: "Unknown/Progressing",
		},
		"waiting at the gate: plan recorded": {
			phase: infrav1.RunRunning, child: true,
			progress:  engine.Progress{Phase: infrav1.RunAwaitingApproval, Plan: plan, Gate: engine.Gate{State: engine.GatePending}, Steps: steps("plan", "Succeeded", "approve", "Running")},
			wantPhase: infrav1.RunAwaitingApproval, wantActive: true, wantReady: "Unknown/AwaitingApproval", wantPlanned: "True/Planned",
		},
		"succeeded: recorded, Ready, the state may hold resources": {
			phase: infrav1.RunRunning, child: true,
			progress:  engine.Progress{Phase: infrav1.RunSucceeded, Finished: true, FinishedAt: &finished, Plan: plan, Applied: true, Steps: steps("plan", "Succeeded", "apply", "Succeeded")},
			wantPhase: infrav1.RunSucceeded, wantReady: "True/Succeeded", wantPlanned: "True/Planned", wantRecords: 1, wantMayExist: true, wantObservedGn: 1,
		},
		"plan failed: recorded, Stalled, nothing applied": {
			phase: infrav1.RunRunning, child: true,
			progress:  engine.Progress{Phase: infrav1.RunFailed, Finished: true, Message: "step plan failed: Error: x", Steps: steps("plan", "Failed")},
			wantPhase: infrav1.RunFailed, wantReady: "False/RunFailed", wantStalled: "True/RunFailed", wantPlanned: "False/RunFailed", wantRecords: 1, wantObservedGn: 1,
		},
		"finished unseen with apply done: the state may hold resources": {
			phase: infrav1.RunPending, child: true,
			progress:  engine.Progress{Phase: infrav1.RunSucceeded, Finished: true, Plan: plan, Applied: true, Steps: steps("clone", "Succeeded", "plan", "Succeeded", "apply", "Succeeded")},
			wantPhase: infrav1.RunSucceeded, wantReady: "True/Succeeded", wantPlanned: "True/Planned", wantRecords: 1, wantMayExist: true, wantObservedGn: 1,
		},
		"child deleted: recorded as failed, ChildDeleted": {
			phase: infrav1.RunRunning, wantPhase: infrav1.RunFailed, wantReady: "False/ChildDeleted", wantStalled: "True/ChildDeleted", wantRecords: 1, wantMayExist: true,
		},
		"child being deleted counts as deleted": {
			phase: infrav1.RunRunning, child: true, deleting: true, wantPhase: infrav1.RunFailed, wantReady: "False/ChildDeleted", wantStalled: "True/ChildDeleted", wantRecords: 1, wantMayExist: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, tc.phase, infrav1.RunApply)
			var objs []client.Object
			if tc.child {
				child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
				if tc.deleting {
					now := metav1.NewTime(t0)
					child.DeletionTimestamp, child.Finalizers = &now, []string{"orphan"}
				}
				objs = append(objs, child)
				f.progress[child.Name] = tc.progress
			}
			r, _ = newReconciler(t, f, objs...)
			st, _, err := runSub(r, run, r.reconcileActive)
			if err != nil {
				t.Fatal(err)
			}
			got := struct {
				Phase                   infrav1.RunPhase
				Active                  bool
				Ready, Stalled, Planned string
				Records                 int
				MayExist                bool
				ObservedGeneration      int64
			}{run.Status.Run.Phase, st.active, condOf(run, infrav1.ReadyCondition), condOf(run, infrav1.StalledCondition), condOf(run, infrav1.PlannedCondition),
				len(run.Status.History), run.Status.ResourcesMayExist, run.Status.ObservedGeneration}
			want := struct {
				Phase                   infrav1.RunPhase
				Active                  bool
				Ready, Stalled, Planned string
				Records                 int
				MayExist                bool
				ObservedGeneration      int64
			}{tc.wantPhase, tc.wantActive, tc.wantReady, tc.wantStalled, tc.wantPlanned, tc.wantRecords, tc.wantMayExist, tc.wantObservedGn}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after reconcileActive (-want +got):\n%s", diff)
			}
			if tc.wantRecords == 1 && run.Status.History[0].ID != run.Status.Run.ID {
				t.Errorf("history records %s, want %s", run.Status.History[0].ID, run.Status.Run.ID)
			}
		})
	}
}

func TestApplyMayHaveRun(t *testing.T) {
	cases := map[string]struct {
		steps []infrav1.StepStatus
		want  bool
	}{
		"apply succeeded":           {steps("plan", "Succeeded", "apply", "Succeeded"), true},
		"apply failed":              {steps("plan", "Succeeded", "apply", "Failed"), true},
		"apply skipped":             {steps("plan", "Succeeded", "apply", "Skipped"), false},
		"plan failed, no apply":     {steps("plan", "Failed"), false},
		"rejected at the gate":      {steps("plan", "Succeeded", "approve", "Failed"), false},
		"the engine shows no steps": {nil, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := applyMayHaveRun(tc.steps); got != tc.want {
				t.Errorf("applyMayHaveRun = %v, want %v", got, tc.want)
			}
		})
	}
}
