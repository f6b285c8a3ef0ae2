package tektontest

import (
	"context"
	"strings"
	"time"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

// benchPlayer plays Tekton's pipelines controller in the scale benches:
// the plan task's TaskRun first, then its steps, then every TaskRun and
// the PipelineRun's status, with FinishedTaskRun's fields.
type benchPlayer struct{}

var _ enginetest.BenchPlayer = benchPlayer{}

// Prepare implements enginetest.BenchPlayer: the plan task's TaskRun,
// which the PipelineRun's reconciler creates first, and the PipelineRun's
// running status naming it as its child (status.childReferences: the
// manager reads no TaskRun its PipelineRun does not name); the manager
// shows its steps as pending.
func (benchPlayer) Prepare(ctx context.Context, c client.Client, key client.ObjectKey) (bool, error) {
	pr := &tektonv1.PipelineRun{}
	if err := c.Get(ctx, key, pr); err != nil {
		return false, err
	}
	tr := FinishedTaskRun(pr, "plan", time.Now(), nil, nil)
	tr.Status = tektonv1.TaskRunStatus{}
	if err := c.Create(ctx, tr); err != nil {
		return false, err
	}
	return true, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, pr); err != nil {
			return err
		}
		now := metav1.Now()
		pr.Status.StartTime = &now
		pr.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running",
			Message: "Tasks Completed: 0 (Failed: 0, Cancelled 0), Incomplete: 3, Skipped: 0", LastTransitionTime: apis.VolatileTime{Inner: now}}}
		pr.Status.ChildReferences = []tektonv1.ChildStatusReference{{TypeMeta: runtimeTypeMeta("TaskRun"), Name: tr.Name, PipelineTaskName: "plan"}}
		return c.Status().Update(ctx, pr)
	})
}

// StepDone implements enginetest.BenchPlayer: the clone step's state in
// the plan TaskRun's status (the plan task's pod runs clone, init and
// plan).
func (benchPlayer) StepDone(ctx context.Context, c client.Client, key client.ObjectKey) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tr := &tektonv1.TaskRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-plan"}, tr); err != nil {
			return err
		}
		now := metav1.Now()
		tr.Status.PodName = tr.Name + "-pod"
		tr.Status.StartTime = &now
		tr.Status.Status = duckv1.Status{Conditions: duckv1.Conditions{{Type: apis.ConditionSucceeded, Status: corev1.ConditionUnknown, Reason: "Running", Message: "Not all Steps in the Task have finished executing"}}}
		tr.Status.Steps = []tektonv1.StepState{
			{Name: names.StepClone, Container: "step-clone", ContainerState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}},
			{Name: names.StepInit, Container: "step-init", ContainerState: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
			{Name: names.StepPlan, Container: "step-plan", ContainerState: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}},
		}
		return c.Status().Update(ctx, tr)
	})
}

// Finish implements enginetest.BenchPlayer: a plan without changes. The
// plan and export TaskRuns are done (export's pod carries cleanup), apply
// and the finally task cleanup skipped, the PipelineRun succeeded.
func (benchPlayer) Finish(ctx context.Context, c client.Client, key client.ObjectKey) error {
	pr := &tektonv1.PipelineRun{}
	if err := c.Get(ctx, key, pr); err != nil {
		return err
	}
	now := time.Now()
	plan := results.Plan{Digest: "sha256:" + strings.Repeat("0", 64), Inputs: "sha256:" + strings.Repeat("1", 64)}.Values()
	plan[results.Commit] = "sha256:" + strings.Repeat("2", 64)
	plan[results.Summary] = `{"add":0,"change":0,"destroy":0,"replace":0}`
	var trs []*tektonv1.TaskRun
	for _, task := range []string{"plan", names.StepExport} {
		res := map[string]string{}
		if task == "plan" {
			res = plan
		}
		tr := FinishedTaskRun(pr, task, now, nil, res)
		trs = append(trs, tr)
		if err := upsertTaskRun(ctx, c, tr); err != nil {
			return err
		}
		if task == names.StepExport {
			// What the export step writes before its TaskRun succeeds.
			out := enginetest.RawOutputsSecret(pr, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"), "{}")
			if err := c.Create(ctx, out); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pr), pr); err != nil {
			return err
		}
		pr.Status = FinishedStatus(pr, now, trs, names.StepApply, names.StepCleanup)
		return c.Status().Update(ctx, pr)
	})
}

// Finished implements enginetest.BenchPlayer.
func (benchPlayer) Finished(obj client.Object) bool {
	pr, ok := obj.(*tektonv1.PipelineRun)
	return ok && pr.IsDone()
}

// Foreign implements enginetest.BenchPlayer: someone else's PipelineRun.
func (benchPlayer) Foreign(name, ns string) client.Object {
	return &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: tektonv1.PipelineRunSpec{PipelineRef: &tektonv1.PipelineRef{Name: "someone-elses-" + strings.Repeat("x", 100)}}}
}

// upsertTaskRun creates a TaskRun unless it exists, then writes its status.
func upsertTaskRun(ctx context.Context, c client.Client, want *tektonv1.TaskRun) error {
	tr := want.DeepCopy()
	tr.Status = tektonv1.TaskRunStatus{}
	if err := c.Create(ctx, tr); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(want), tr); err != nil {
			return err
		}
		tr.Status = want.Status
		return c.Status().Update(ctx, tr)
	})
}
