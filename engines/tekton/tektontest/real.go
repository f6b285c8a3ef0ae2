package tektontest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/tektoncd/pipeline/pkg/apis/config"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/opr8r/opr8r/engines/tekton"
)

// The objects Tekton v1.15's controller leaves for a finished run, with
// every status field it writes: the cache test checks that the manager's
// slimmed copy observes the same, and the bench caches what a real
// cluster holds.

// hash is 64 hex digits derived from s, for image and container IDs.
func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// FinishedTaskRun is the TaskRun of one task of the PipelineRun pr, as
// Tekton leaves it once its steps ran (exit codes by step; a missing step
// exits 0) and wrote results: its spec references the task spec, and its
// status carries the pod name, times, each step's container, image ID,
// terminated state with the termination message (the results as JSON),
// the results, a copy of the task spec and the feature flags.
func FinishedTaskRun(pr *tektonv1.PipelineRun, task string, at time.Time, exit map[string]int32, results map[string]string) *tektonv1.TaskRun {
	name := pr.Name + "-" + task
	labels := maps.Clone(pr.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[tekton.PipelineRunLabel], labels[tekton.PipelineTaskLabel] = pr.Name, task
	labels["tekton.dev/memberOf"], labels["tekton.dev/task"] = "tasks", task
	spec := taskSpecOf(pr, task)
	start, end := metav1.NewTime(at.Add(-20*time.Second)), metav1.NewTime(at)
	tr := &tektonv1.TaskRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pr.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pr, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"))}},
		Spec: tektonv1.TaskRunSpec{TaskSpec: spec, ServiceAccountName: "opr8r-runner", Timeout: &metav1.Duration{Duration: time.Hour}},
	}
	res, termination := taskResultsOf(results)
	failed := false
	for _, s := range spec.Steps {
		code := exit[s.Name]
		failed = failed || code != 0
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		tr.Status.Steps = append(tr.Status.Steps, tektonv1.StepState{
			Name: s.Name, Container: "step-" + s.Name, ImageID: "docker.io/hashicorp/terraform@sha256:" + hash(s.Image),
			TerminationReason: reason,
			ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: end,
				ContainerID: "containerd://" + hash(name+s.Name), Message: termination,
			}},
		})
	}
	cond := apis.Condition{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue, Reason: "Succeeded", Message: "All Steps have completed executing",
		LastTransitionTime: apis.VolatileTime{Inner: end}}
	if failed {
		cond.Status, cond.Reason, cond.Message = corev1.ConditionFalse, "Failed", `"step-plan" exited with code 1`
	}
	tr.Status.Status = duckv1.Status{Conditions: duckv1.Conditions{cond}}
	tr.Status.PodName = name + "-pod"
	tr.Status.StartTime, tr.Status.CompletionTime = &start, &end
	tr.Status.Results = res
	tr.Status.TaskSpec = spec.DeepCopy()
	tr.Status.Provenance = &tektonv1.Provenance{FeatureFlags: config.DefaultFeatureFlags.DeepCopy()}
	return tr
}

// taskSpecOf is the embedded spec of a task of pr (one placeholder step
// when pr has none).
func taskSpecOf(pr *tektonv1.PipelineRun, task string) *tektonv1.TaskSpec {
	if ps := pr.Spec.PipelineSpec; ps != nil {
		for _, t := range append(append([]tektonv1.PipelineTask{}, ps.Tasks...), ps.Finally...) {
			if t.Name == task && t.TaskSpec != nil {
				return t.TaskSpec.TaskSpec.DeepCopy()
			}
		}
	}
	return &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: task, Image: "x"}}}
}

// taskResultsOf are a TaskRun's results, and the termination message that
// carries them (Tekton reads results from it, as JSON).
func taskResultsOf(results map[string]string) ([]tektonv1.TaskRunResult, string) {
	type msg struct {
		Key   string `json:"key"`
		Value string `json:"value"`
		Type  int    `json:"type"`
	}
	var res []tektonv1.TaskRunResult
	var msgs []msg
	for _, k := range slices.Sorted(maps.Keys(results)) {
		res = append(res, tektonv1.TaskRunResult{Name: k, Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues(results[k])})
		msgs = append(msgs, msg{Key: k, Value: results[k], Type: 1})
	}
	termination, _ := json.Marshal(msgs)
	return res, string(termination)
}

// FinishedStatus is the status Tekton writes on the PipelineRun pr once it
// succeeded with taskRuns, the tasks skipped (when expressions false)
// listed: the condition, times, a copy of the pipeline spec, the child
// references, the skipped tasks with their when expressions, and the
// feature flags.
func FinishedStatus(pr *tektonv1.PipelineRun, at time.Time, taskRuns []*tektonv1.TaskRun, skipped ...string) tektonv1.PipelineRunStatus {
	start, end := metav1.NewTime(at.Add(-time.Minute)), metav1.NewTime(at)
	s := tektonv1.PipelineRunStatus{Status: duckv1.Status{Conditions: duckv1.Conditions{{Type: apis.ConditionSucceeded, Status: corev1.ConditionTrue,
		Reason: "Succeeded", Message: "Tasks Completed: 2 (Failed: 0, Cancelled 0), Skipped: 2", LastTransitionTime: apis.VolatileTime{Inner: end}}}}}
	s.StartTime, s.CompletionTime = &start, &end
	s.FinallyStartTime = &end
	s.PipelineSpec = pr.Spec.PipelineSpec.DeepCopy()
	for _, tr := range taskRuns {
		s.ChildReferences = append(s.ChildReferences, tektonv1.ChildStatusReference{TypeMeta: runtimeTypeMeta("TaskRun"), Name: tr.Name,
			PipelineTaskName: tr.Labels[tekton.PipelineTaskLabel]})
	}
	for _, t := range skipped {
		s.SkippedTasks = append(s.SkippedTasks, tektonv1.SkippedTask{Name: t, Reason: tektonv1.WhenExpressionsSkip,
			WhenExpressions: tektonv1.WhenExpressions{{Input: "$(tasks.plan.results.has-changes)", Operator: "in", Values: []string{"true"}}}})
	}
	s.Provenance = &tektonv1.Provenance{FeatureFlags: config.DefaultFeatureFlags.DeepCopy()}
	return s
}
