package tekton_test

import (
	"strings"
	"testing"
	"time"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtime "k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/pkg/engine"
)

func failedPlanTask(states ...tektonv1.StepState) *tektonv1.TaskRun {
	tr := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-plan", Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: "plan"}}}
	tr.Status.Steps = states
	tr.Status.Results = []tektonv1.TaskRunResult{{Name: "error", Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues("Error: boom: detail")}}
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed", Message: `"step-init" exited with code 1`})
	return tr
}

// childRefs names objects as the PipelineRun's children, as Tekton's
// controller does in its status.
func childRefs(pr *tektonv1.PipelineRun, objs ...client.Object) {
	for _, o := range objs {
		kind := "TaskRun"
		if _, ok := o.(*tektonv1beta1.CustomRun); ok {
			kind = "CustomRun"
		}
		pr.Status.ChildReferences = append(pr.Status.ChildReferences, tektonv1.ChildStatusReference{
			TypeMeta: runtime.TypeMeta{Kind: kind}, Name: o.GetName(), PipelineTaskName: o.GetLabels()[tekton.PipelineTaskLabel]})
	}
}

func TestObserveFailedStepAndSkippedRest(t *testing.T) {
	pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr"}}
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed"})
	tr := failedPlanTask(
		tektonv1.StepState{Name: "clone", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		tektonv1.StepState{Name: "init", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}},
	)
	childRefs(pr, tr)
	got, err := tekton.New().Observe(pr, []client.Object{tr}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]infrav1.StepPhase{"clone": infrav1.StepSucceeded, "init": infrav1.StepFailed, "plan": infrav1.StepSkipped}
	for _, s := range got.Steps {
		if want[s.Name] != s.Phase {
			t.Errorf("step %s = %s, want %s", s.Name, s.Phase, want[s.Name])
		}
	}
	if got.Phase != infrav1.RunFailed || got.Message != "step init failed: Error: boom: detail" {
		t.Errorf("phase %s, message %q", got.Phase, got.Message)
	}

	// A pod that never started: no step states, the condition says why.
	noPod := failedPlanTask()
	got, _ = tekton.New().Observe(pr, []client.Object{noPod}, time.Now())
	if got.Steps[0].Phase != infrav1.StepFailed || got.Steps[0].Message != `"step-init" exited with code 1` {
		t.Errorf("first step = %+v, want Failed with the TaskRun's message", got.Steps[0])
	}
}

// The TaskRuns are cached apart from the PipelineRun: a Succeeded
// PipelineRun whose export TaskRun is not in the view yet is not a
// finished run without outputs (make chaos saw one Ready with none after
// an API server restart); it finishes once the TaskRun is seen.
func TestObserveWaitsForTheTaskRunsThePipelineRunNames(t *testing.T) {
	pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr"}}
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"})
	now := metav1.Now()
	pr.Status.CompletionTime = &now
	pr.Status.ChildReferences = []tektonv1.ChildStatusReference{
		{TypeMeta: runtime.TypeMeta{Kind: "TaskRun"}, Name: "pr-export-outputs", PipelineTaskName: "export-outputs"},
	}
	got, err := tekton.New().Observe(pr, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Finished || got.Phase != infrav1.RunRunning || got.Message != "waiting to read TaskRun pr-export-outputs" {
		t.Fatalf("without its TaskRun: finished %v, phase %s, message %q; want not finished, Running, waiting", got.Finished, got.Phase, got.Message)
	}
	export := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-export-outputs", Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: "export-outputs"}}}
	export.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
	if got, _ = tekton.New().Observe(pr, []client.Object{export}, time.Now()); got.Finished {
		t.Fatalf("with an older copy of its TaskRun, still running: finished %v, phase %s; want not finished", got.Finished, got.Phase)
	}
	export.Status.Steps = []tektonv1.StepState{{Name: "export-outputs", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	export.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"})
	got, err = tekton.New().Observe(pr, []client.Object{export}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Finished || got.Phase != infrav1.RunSucceeded || !got.OutputsExported {
		t.Fatalf("with its TaskRun: finished %v, phase %s, outputs exported %v; want finished, Succeeded, exported", got.Finished, got.Phase, got.OutputsExported)
	}
}

// A PipelineRun opr8r cancelled while its plan waited: Tekton cancels the
// approval CustomRun, which opr8r's approval controller fails
// (CustomRunCancelled). No one decided: the gate reads as skipped and the
// run as stopped, for the reason opr8r gave, not as a rejection. A gate
// rejected by a decision still reads as one.
func TestObserveACancelledRunIsStoppedNotRejected(t *testing.T) {
	gate := func(reason, msg string) *tektonv1beta1.CustomRun {
		cr := &tektonv1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-approve", Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: "approve"}}}
		cr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: reason, Message: msg})
		return cr
	}
	pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr", Annotations: map[string]string{engine.CancelledAnnotation: "superseded by a spec change"}}}
	childRefs(pr, gate("", ""))
	pr.Spec.Status = tektonv1.PipelineRunSpecStatusCancelledRunFinally
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Cancelled", Message: `PipelineRun "pr" was cancelled`})

	got, err := tekton.New().Observe(pr, []client.Object{gate(tekton.ReasonCustomRunCancelled, "the approval was cancelled: CustomRun cancelled as the PipelineRun it belongs to has been cancelled.")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Gate.State != engine.GateSkipped || got.Phase != infrav1.RunFailed || !got.Finished || got.Message != "stopped: superseded by a spec change" {
		t.Errorf("cancelled: gate %s, phase %s, finished %v, message %q; want Skipped, Failed, finished, stopped: superseded by a spec change", got.Gate.State, got.Phase, got.Finished, got.Message)
	}

	// Cancelled by someone else: said so.
	pr.Annotations = nil
	got, _ = tekton.New().Observe(pr, []client.Object{gate(tekton.ReasonCustomRunCancelled, "the approval was cancelled")}, time.Now())
	if got.Message != "stopped: the PipelineRun's spec.status is CancelledRunFinally" {
		t.Errorf("cancelled by hand: message %q", got.Message)
	}

	// Rejected, then the PipelineRun ended: a rejection.
	pr.Spec.Status = ""
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed"})
	got, _ = tekton.New().Observe(pr, []client.Object{gate(tekton.ReasonRejected, "plan sha256:ab rejected by alice")}, time.Now())
	if got.Gate.State != engine.GateRejected || got.Phase != infrav1.RunRejected || got.Gate.By != "alice" {
		t.Errorf("rejected: gate %s by %q, phase %s; want Rejected by alice", got.Gate.State, got.Gate.By, got.Phase)
	}
}

// A TaskRun or CustomRun that carries the PipelineRun's labels and owner
// but that the PipelineRun's status does not name as its child (anyone who
// may create TaskRuns can make one) is not read: a forged plan task that
// reports no changes, or a forged gate that reads approved, changes
// nothing.
func TestObserveReadsOnlyThePipelineRunsChildren(t *testing.T) {
	pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr", UID: "pr-uid"}}
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(pr, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"))}
	gate := &tektonv1beta1.CustomRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-approve", OwnerReferences: owner,
		Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: "approve"}}}
	gate.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: tekton.ReasonAwaitingApproval})
	forged := gate.DeepCopy()
	forged.Name = "pr-approve-forged"
	forged.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: tekton.ReasonApproved, Message: "plan sha256:aa approved by mallory"})
	childRefs(pr, gate)
	for _, related := range [][]client.Object{{gate, forged}, {forged, gate}} {
		got, err := tekton.New().Observe(pr, related, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got.Gate.State != engine.GatePending {
			t.Errorf("gate %s by %q, want Pending: the forged CustomRun was read", got.Gate.State, got.Gate.By)
		}
	}
	if got, _ := tekton.New().Observe(pr, []client.Object{forged}, time.Now()); got.Gate.State != engine.GateAbsent {
		t.Errorf("with only the forged gate: %s, want none", got.Gate.State)
	}
}

func taskRun(task string, ok bool, states ...tektonv1.StepState) *tektonv1.TaskRun {
	tr := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-" + task, Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: task}}}
	tr.Status.Steps = states
	c := &apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded"}
	if !ok {
		c = &apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed", Message: "a step failed"}
	}
	tr.Status.SetCondition(c)
	return tr
}

// runningTaskRun is a TaskRun whose pod runs.
func runningTaskRun(task string, states ...tektonv1.StepState) *tektonv1.TaskRun {
	tr := taskRun(task, true, states...)
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running"})
	return tr
}

// live is a step whose container runs (or waits in Tekton's entrypoint).
func live(step string) tektonv1.StepState {
	return tektonv1.StepState{Name: step, ContainerState: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func exited(step string, code int32) tektonv1.StepState {
	return tektonv1.StepState{Name: step, ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

// TestObserveCleanupCarriedOrFallback: apply's pod runs apply,
// export-outputs and cleanup; the export task's pod (a plan without
// changes) runs export-outputs and cleanup; the finally task cleanup runs
// only when neither succeeded, and then it is the cleanup that counts.
func TestObserveCleanupCarriedOrFallback(t *testing.T) {
	plan := taskRun("plan", true, exited("clone", 0), exited("init", 0), exited("plan", 0))
	plan.Status.Results = []tektonv1.TaskRunResult{{Name: "has-changes", Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues("true")}}
	for _, tc := range []struct {
		name     string
		ended    bool
		skipped  []string
		trs      []*tektonv1.TaskRun
		want     string
		exported bool
		applied  bool
	}{{
		name:    "apply's pod started, its install step has not ended: no step runs yet (Tekton reports every container running)",
		skipped: []string{"export-outputs"},
		trs:     []*tektonv1.TaskRun{runningTaskRun("apply", live("install-opr8r-step"), live("apply"), live("export-outputs"), live("cleanup"))},
		want:    "apply=Pending export-outputs=Pending cleanup=Pending",
	}, {
		name:    "apply runs: export-outputs and cleanup wait in its pod",
		skipped: []string{"export-outputs"},
		trs:     []*tektonv1.TaskRun{runningTaskRun("apply", exited("install-opr8r-step", 0), live("apply"), live("export-outputs"), live("cleanup"))},
		want:    "apply=Running export-outputs=Pending cleanup=Pending",
	}, {
		name:    "waiting for approval: Tekton skipped the export task already, apply's pod will export",
		skipped: []string{"export-outputs"},
		want:    "",
	}, {
		name:  "apply's pod runs all three",
		ended: true, skipped: []string{"export-outputs", "cleanup"},
		trs:  []*tektonv1.TaskRun{taskRun("apply", true, exited("apply", 0), exited("export-outputs", 0), exited("cleanup", 0))},
		want: "apply=Succeeded export-outputs=Succeeded cleanup=Succeeded", exported: true, applied: true,
	}, {
		name: "apply fails: the fallback is due",
		trs:  []*tektonv1.TaskRun{taskRun("apply", false, exited("apply", 1))},
		want: "apply=Failed export-outputs=Skipped cleanup=Pending",
	}, {
		name:  "apply fails: the fallback ran",
		ended: true, skipped: []string{"export-outputs"},
		trs:  []*tektonv1.TaskRun{taskRun("apply", false, exited("apply", 1)), taskRun("cleanup", true, exited("cleanup", 0))},
		want: "apply=Failed export-outputs=Skipped cleanup=Succeeded",
	}, {
		name:  "cleanup fails in apply's pod and runs again",
		ended: true, skipped: []string{"export-outputs"},
		trs:  []*tektonv1.TaskRun{taskRun("apply", false, exited("apply", 0), exited("export-outputs", 0), exited("cleanup", 1)), taskRun("cleanup", true, exited("cleanup", 0))},
		want: "apply=Succeeded export-outputs=Succeeded cleanup=Succeeded", exported: true, applied: true,
	}, {
		name:  "a plan without changes: the export task's pod",
		ended: true, skipped: []string{"approve", "apply", "cleanup"},
		trs:  []*tektonv1.TaskRun{taskRun("export-outputs", true, exited("export-outputs", 0), exited("cleanup", 0))},
		want: "apply=Skipped export-outputs=Succeeded cleanup=Succeeded", exported: true,
	}, {
		name:  "rejected: neither carrier ran",
		ended: true, skipped: []string{"apply", "export-outputs"},
		trs:  []*tektonv1.TaskRun{taskRun("cleanup", true, exited("cleanup", 0))},
		want: "apply=Skipped export-outputs=Skipped cleanup=Succeeded",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr", Labels: map[string]string{infrav1.RunTypeLabel: "apply"}}}
			st := corev1.ConditionUnknown
			if tc.ended {
				st = corev1.ConditionTrue
			}
			pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: st, Reason: "Running"})
			objs := []client.Object{plan}
			for _, tr := range tc.trs {
				objs = append(objs, tr)
			}
			childRefs(pr, objs...)
			for _, s := range tc.skipped {
				pr.Status.SkippedTasks = append(pr.Status.SkippedTasks, tektonv1.SkippedTask{Name: s})
			}
			got, err := tekton.New().Observe(pr, objs, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var steps []string
			for _, s := range got.Steps {
				if s.Name != "clone" && s.Name != "init" && s.Name != "plan" && s.Name != "approve" {
					steps = append(steps, s.Name+"="+string(s.Phase))
				}
			}
			if strings.Join(steps, " ") != tc.want || got.OutputsExported != tc.exported || got.Applied != tc.applied {
				t.Errorf("steps %q, exported %v, applied %v; want %q, %v, %v", strings.Join(steps, " "), got.OutputsExported, got.Applied, tc.want, tc.exported, tc.applied)
			}
		})
	}
}
