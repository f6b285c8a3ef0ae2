package tekton_test

import (
	"testing"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pipelines/tekton"
)

func failedPlanTask(states ...tektonv1.StepState) *tektonv1.TaskRun {
	tr := &tektonv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "pr-plan", Labels: map[string]string{tekton.PipelineRunLabel: "pr", tekton.PipelineTaskLabel: "plan"}}}
	tr.Status.Steps = states
	tr.Status.Results = []tektonv1.TaskRunResult{{Name: "error", Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues("Error: boom: detail")}}
	tr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed", Message: `"step-init" exited with code 1`})
	return tr
}

func TestObserveFailedStepAndSkippedRest(t *testing.T) {
	pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: "pr"}}
	pr.Status.SetCondition(&apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionFalse, Reason: "Failed"})
	tr := failedPlanTask(
		tektonv1.StepState{Name: "clone", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		tektonv1.StepState{Name: "init", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}},
	)
	got, err := tekton.New().Observe(pr, []client.Object{tr})
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
	got, _ = tekton.New().Observe(pr, []client.Object{noPod})
	if got.Steps[0].Phase != infrav1.StepFailed || got.Steps[0].Message != `"step-init" exited with code 1` {
		t.Errorf("first step = %+v, want Failed with the TaskRun's message", got.Steps[0])
	}
}
