package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// enginePlayer plays one engine's controller for the bench (BENCH_ENGINE: argo,
// the default, or tekton): no engine controller runs, so the bench builds
// the children a bare client would create and writes their status the way
// the engine does, with every field the engine writes.
type enginePlayer struct {
	name infrav1.EngineName
	eng  engine.Engine
	gvr  schema.GroupVersionResource
}

// benchEngine is the engine BENCH_ENGINE names.
func benchEngine() (enginePlayer, error) {
	switch e := os.Getenv("BENCH_ENGINE"); e {
	case "", "argo":
		return enginePlayer{name: infrav1.EngineArgo, eng: argo.New(), gvr: wfv1.SchemeGroupVersion.WithResource("workflows")}, nil
	case "tekton":
		return enginePlayer{name: infrav1.EngineTekton, eng: tekton.New(), gvr: tektonv1.SchemeGroupVersion.WithResource("pipelineruns")}, nil
	default:
		return enginePlayer{}, fmt.Errorf("BENCH_ENGINE=%q: the bench plays argo or tekton", e)
	}
}

// run is a TerraformRun of the bench, on the played engine.
func (p enginePlayer) run(name, ns string) *testutil.RunWrapper {
	return testutil.MakeRun(name, ns).Engine(p.name).Auto()
}

// build is the child the manager would create for run's first run.
func (p enginePlayer) build(run *infrav1.TerraformRun) (client.Object, error) {
	eff := pipeline.Defaults(run, p.name, testutil.Config)
	hash := pipeline.SpecHash(eff)
	return p.eng.Build(engine.Request{Run: eff, Type: infrav1.RunApply, Name: names.ChildName(run.Name, infrav1.RunApply, 1), Number: 1, SpecHash: hash, Config: testutil.Config})
}

// prepare makes what the engine makes before P2's timed change. Argo:
// nothing (the clone node is its first change). Tekton: the plan task's
// TaskRun, which the PipelineRun's reconciler creates first; the manager
// shows its steps as pending.
func (p enginePlayer) prepare(ctx context.Context, c client.Client, ns, child string) error {
	if p.name != infrav1.EngineTekton {
		return nil
	}
	pr := &tektonv1.PipelineRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: child}, pr); err != nil {
		return err
	}
	tr := tektontest.FinishedTaskRun(pr, "plan", time.Now(), nil, nil)
	tr.Status = tektonv1.TaskRunStatus{}
	return c.Create(ctx, tr)
}

// stepDone writes P2's timed change: the clone step finished. Argo: its
// node in the Workflow's status. Tekton: its state in the plan TaskRun's
// status (the plan task's pod runs clone, init and plan).
func (p enginePlayer) stepDone(ctx context.Context, c client.Client, ns, child string) error {
	if p.name != infrav1.EngineTekton {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			wf := &wfv1.Workflow{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: child}, wf); err != nil {
				return err
			}
			wf.Status.Phase = wfv1.WorkflowRunning
			wf.Status.StartedAt = metav1.Now()
			if wf.Status.Nodes == nil {
				wf.Status.Nodes = wfv1.Nodes{}
			}
			wf.Status.Nodes.Set(child+"-clone", cloneNode(child))
			return c.Update(ctx, wf)
		})
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tr := &tektonv1.TaskRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: child + "-plan"}, tr); err != nil {
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

// finish completes a child as the engine would for a run with no changes
// and no outputs: plan without changes, apply skipped, cleanup ran.
func (p enginePlayer) finish(ctx context.Context, c client.Client, ns, child string) error {
	if p.name != infrav1.EngineTekton {
		return finishChild(ctx, c, ns, child)
	}
	pr := &tektonv1.PipelineRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: child}, pr); err != nil {
		return err
	}
	now := time.Now()
	plan := results.Plan{Digest: "sha256:" + strings.Repeat("0", 64), Inputs: "sha256:" + strings.Repeat("1", 64)}.Values()
	plan[results.Commit] = "sha256:" + strings.Repeat("2", 64)
	plan[results.Summary] = `{"add":0,"change":0,"destroy":0,"replace":0}`
	var trs []*tektonv1.TaskRun
	for _, task := range []string{"plan", names.StepCleanup} {
		res := map[string]string{}
		if task == "plan" {
			res = plan
		}
		tr := tektontest.FinishedTaskRun(pr, task, now, nil, res)
		trs = append(trs, tr)
		if err := upsertTaskRun(ctx, c, tr); err != nil {
			return err
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pr), pr); err != nil {
			return err
		}
		pr.Status = tektontest.FinishedStatus(pr, now, trs, names.StepApply, names.StepExport)
		return c.Status().Update(ctx, pr)
	})
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

// cloneDone says whether a run's status shows P2's change: the clone step
// succeeded.
func cloneDone(r *infrav1.TerraformRun) bool {
	if r.Status.Run == nil {
		return false
	}
	for _, s := range r.Status.Run.Steps {
		if s.Name == names.StepClone && s.Phase == infrav1.StepSucceeded {
			return true
		}
	}
	return false
}
