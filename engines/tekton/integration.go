package tekton

import (
	"fmt"
	"strings"

	"github.com/opr8r/opr8r/pkg/names"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/opr8r/opr8r/pkg/engine"
)

// What the Tekton engine owns beyond building and observing PipelineRuns:
// its scheme, how the manager's cache slims PipelineRuns, TaskRuns and
// CustomRuns, and where step logs are.

var (
	_ engine.SchemeAdder  = Engine{}
	_ engine.CacheSlimmer = Engine{}
	_ engine.LogLocator   = Engine{}
)

// AddToScheme implements engine.SchemeAdder.
func (Engine) AddToScheme(s *runtime.Scheme) error {
	if err := tektonv1.AddToScheme(s); err != nil {
		return err
	}
	return tektonv1beta1.AddToScheme(s)
}

// SlimForCache implements engine.CacheSlimmer. Of a PipelineRun the engine
// reads its labels, spec.status (Cancel) and the status that Observe reads
// (slimPipelineRunStatus); of a TaskRun its labels, owner and the status
// Observe reads (slimTaskRunStatus). CustomRuns stay whole: the approval
// controller writes their status back whole (UpdateStatus), and they are
// small.
func (Engine) SlimForCache(obj any) bool {
	switch o := obj.(type) {
	case *tektonv1.PipelineRun:
		o.Spec = tektonv1.PipelineRunSpec{Status: o.Spec.Status}
		o.Status = slimPipelineRunStatus(o.Status)
		if r := o.Annotations[engine.CancelledAnnotation]; r != "" {
			o.Annotations = map[string]string{engine.CancelledAnnotation: r} // why Cancel stopped it
		} else {
			o.Annotations = nil
		}
	case *tektonv1.TaskRun:
		o.Spec = tektonv1.TaskRunSpec{Status: o.Spec.Status}
		o.Status = slimTaskRunStatus(o.Status)
		o.Annotations = nil
	case *tektonv1beta1.CustomRun:
	default:
		return false
	}
	return true
}

// slimPipelineRunStatus keeps what Observe, Approve and Cancel read: the
// conditions, start and completion times, the names of the skipped tasks,
// and the kind, name and pipeline task of each child reference (which
// TaskRuns and CustomRuns are the PipelineRun's). Tekton also writes its
// copy of the pipeline spec, the references' when expressions, results,
// provenance and span context.
func slimPipelineRunStatus(s tektonv1.PipelineRunStatus) tektonv1.PipelineRunStatus {
	out := tektonv1.PipelineRunStatus{Status: duckv1.Status{Conditions: s.Conditions}}
	out.StartTime, out.CompletionTime = s.StartTime, s.CompletionTime
	for _, t := range s.SkippedTasks {
		out.SkippedTasks = append(out.SkippedTasks, tektonv1.SkippedTask{Name: t.Name})
	}
	for _, r := range s.ChildReferences {
		out.ChildReferences = append(out.ChildReferences, tektonv1.ChildStatusReference{
			TypeMeta: r.TypeMeta, Name: r.Name, PipelineTaskName: r.PipelineTaskName})
	}
	return out
}

// slimTaskRunStatus keeps what Observe reads: the conditions, and of each
// step its name and state (exit code, reason and times of a terminated
// step, the start of a running one), and the results' string values.
// Tekton also writes the task spec, each step's container, image, message
// (the results again, as JSON) and provenance, sidecars, retries, the pod
// name and span context.
func slimTaskRunStatus(s tektonv1.TaskRunStatus) tektonv1.TaskRunStatus {
	out := tektonv1.TaskRunStatus{Status: duckv1.Status{Conditions: s.Conditions}}
	out.StartTime, out.CompletionTime = s.StartTime, s.CompletionTime
	for _, st := range s.Steps {
		slim := tektonv1.StepState{Name: st.Name}
		switch {
		case st.Terminated != nil:
			slim.Terminated = &corev1.ContainerStateTerminated{ExitCode: st.Terminated.ExitCode, Reason: st.Terminated.Reason,
				StartedAt: st.Terminated.StartedAt, FinishedAt: st.Terminated.FinishedAt}
		case st.Running != nil:
			slim.Running = &corev1.ContainerStateRunning{StartedAt: st.Running.StartedAt}
		case st.Waiting != nil:
			slim.Waiting = &corev1.ContainerStateWaiting{Reason: st.Waiting.Reason}
		}
		out.Steps = append(out.Steps, slim)
	}
	for _, r := range s.Results {
		out.Results = append(out.Results, tektonv1.TaskRunResult{Name: r.Name, Type: r.Type,
			Value: tektonv1.ResultValue{Type: r.Value.Type, StringVal: r.Value.StringVal}})
	}
	return out
}

// StepLogs implements engine.LogLocator: each task's pod carries the
// pipelineRun and pipelineTask labels, and runs its steps in containers
// named step-<step>. clone, init and plan are steps of the plan task's
// pod; export-outputs runs in apply's pod or the export task's, cleanup in
// either or in the finally task's (the newest pod with the container is
// the one that ran it last).
func (Engine) StepLogs(child, step string) (string, string) {
	tasks := []string{step}
	switch step {
	case names.StepClone, names.StepInit:
		tasks = []string{taskPlan}
	case names.StepExport:
		tasks = []string{taskApply, taskExport}
	case names.StepCleanup:
		tasks = []string{taskApply, taskExport, taskCleanup}
	}
	return PipelineRunLabel + "=" + child + "," + PipelineTaskLabel + " in (" + strings.Join(tasks, ",") + ")", "step-" + step
}

// LogsHint implements engine.LogLocator.
func (Engine) LogsHint(namespace, child string) string {
	return fmt.Sprintf("tkn pipelinerun logs %s -n %s", child, namespace)
}
