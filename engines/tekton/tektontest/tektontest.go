// Package tektontest is the Tekton engine's kit for the shared test
// suites: Tekton's own offline defaulting and validation, and a simulator of
// Tekton's pipelines controller that creates TaskRuns and the approval
// CustomRun the way Tekton does (owned by the PipelineRun, with its labels
// plus tekton.dev/pipelineRun and tekton.dev/pipelineTask) and writes their
// status with Tekton's types. The CustomRun's own status is left to opr8r's
// approval controller.
package tektontest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/gomega" //nolint:revive // test support
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"knative.dev/pkg/apis"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// Kit returns the Tekton engine's test kit.
func Kit() enginetest.Kit {
	return enginetest.Kit{
		Engine: tekton.New(),
		Validate: func(obj client.Object) error {
			pr, ok := obj.(*tektonv1.PipelineRun)
			if !ok {
				return fmt.Errorf("tektontest: expected a PipelineRun, got %T", obj)
			}
			pr = pr.DeepCopy()
			pr.SetDefaults(context.Background())
			if err := pr.Validate(context.Background()); err != nil { // *apis.FieldError: compare before it becomes an error
				return err
			}
			return nil
		},
		NewSim: func(env enginetest.Env, key client.ObjectKey) enginetest.Sim { return Sim{key: key, env: env} },
		// Their conversion webhook is never called: opr8r only uses each
		// kind's storage version.
		CRDs: func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
			return envtestutil.ModuleCRDs(Module, filepath.Join("config", "300-crds", "300-*.yaml"))
		},
		StepObjects: func() []client.ObjectList {
			return []client.ObjectList{&tektonv1.TaskRunList{}, &tektonv1beta1.CustomRunList{}, &corev1.PodList{}}
		},
		Bench: benchPlayer{},
		Tick:  tick,
	}
}

// tick plays opr8r's approval custom task controller over every CustomRun.
func tick(ctx context.Context, c client.Client) error {
	crs := &tektonv1beta1.CustomRunList{}
	if err := c.List(ctx, crs); err != nil {
		return err
	}
	r := &tekton.ApprovalReconciler{Client: c}
	for _, cr := range crs.Items {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&cr)}); err != nil {
			return err
		}
	}
	return nil
}

// Module is the Go module of the Tekton version opr8r is built and tested
// against (go.mod pins it).
const Module = "github.com/tektoncd/pipeline"

// Sim plays the Tekton pipelines controller for one
// PipelineRun: it creates TaskRuns and the approval CustomRun the way Tekton
// does (owned by the PipelineRun, with its labels plus tekton.dev/pipelineRun
// and tekton.dev/pipelineTask) and writes their status with Tekton's types.
// The CustomRun's own status is left to opr8r's approval controller.
type Sim struct {
	key client.ObjectKey
	env enginetest.Env
}

var _ enginetest.Sim = Sim{}

func (c Sim) Key() client.ObjectKey { return c.key }

func (c Sim) Get() *tektonv1.PipelineRun {
	pr := &tektonv1.PipelineRun{}
	Expect(c.env.Client.Get(context.Background(), c.key, pr)).To(Succeed())
	return pr
}

func (c Sim) Object() client.Object { return c.Get() }

func (c Sim) Validate() error { return Kit().Validate(c.Get()) }

func (c Sim) CancelRequested() bool {
	return c.Get().Spec.Status == tektonv1.PipelineRunSpecStatusCancelledRunFinally
}

func tcond(status corev1.ConditionStatus, reason, msg string) *apis.Condition {
	return &apis.Condition{Type: apis.ConditionSucceeded, Status: status, Reason: reason, Message: msg}
}

// updatePR writes the PipelineRun's status.
func (c Sim) updatePR(fn func(pr *tektonv1.PipelineRun)) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pr := c.Get()
		fn(pr)
		return c.env.Client.Status().Update(context.Background(), pr)
	})).To(Succeed())
	c.env.Writes.Add(1)
}

func (c Sim) childLabels(task string) map[string]string {
	l := map[string]string{}
	for k, v := range c.Get().Labels {
		l[k] = v
	}
	l[tekton.PipelineRunLabel] = c.key.Name
	l[tekton.PipelineTaskLabel] = task
	return l
}

func (c Sim) owner() []metav1.OwnerReference {
	pr := c.Get()
	return []metav1.OwnerReference{*metav1.NewControllerRef(pr, tektonv1.SchemeGroupVersion.WithKind("PipelineRun"))}
}

func terminated(code int32) corev1.ContainerState {
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0]}}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}}
}

// taskRun creates or updates the TaskRun of a pipeline task.
func (c Sim) taskRun(task string, fn func(tr *tektonv1.TaskRun)) {
	ctx := context.Background()
	name := c.key.Name + "-" + task
	tr := &tektonv1.TaskRun{}
	err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: c.key.Namespace, Name: name}, tr)
	if apierrors.IsNotFound(err) {
		tr = &tektonv1.TaskRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.key.Namespace, Labels: c.childLabels(task), OwnerReferences: c.owner()},
			Spec:       tektonv1.TaskRunSpec{TaskSpec: &tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: task, Image: "x"}}}},
		}
		Expect(c.env.Client.Create(ctx, tr)).To(Succeed())
		c.env.Writes.Add(1)
		c.updatePR(func(pr *tektonv1.PipelineRun) {
			pr.Status.ChildReferences = append(pr.Status.ChildReferences, tektonv1.ChildStatusReference{
				TypeMeta: runtimeTypeMeta("TaskRun"), Name: name, PipelineTaskName: task,
			})
		})
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(tr), tr); err != nil {
			return err
		}
		if tr.Status.StartTime == nil {
			tr.Status.StartTime = &metav1.Time{Time: time.Now()}
		}
		fn(tr)
		return c.env.Client.Status().Update(ctx, tr)
	})).To(Succeed())
	c.env.Writes.Add(1)
}

func succeededTask(steps ...string) func(tr *tektonv1.TaskRun) {
	return func(tr *tektonv1.TaskRun) {
		tr.Status.Steps = nil
		for _, s := range steps {
			tr.Status.Steps = append(tr.Status.Steps, tektonv1.StepState{Name: s, ContainerState: terminated(0)})
		}
		tr.Status.SetCondition(tcond(corev1.ConditionTrue, "Succeeded", "All Steps have completed executing"))
		tr.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	}
}

func result(name, value string) tektonv1.TaskRunResult {
	return tektonv1.TaskRunResult{Name: name, Type: tektonv1.ResultsTypeString, Value: *tektonv1.NewStructuredValues(value)}
}

func (c Sim) Start() { c.StartAt(enginetest.DefaultCommit) }

// StartAt implements enginetest.Sim.
func (c Sim) StartAt(commit string) {
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		pr.Status.StartTime = &metav1.Time{Time: time.Now()}
		pr.Status.SetCondition(tcond(corev1.ConditionUnknown, tektonv1.PipelineRunReasonRunning.String(), "Tasks Completed: 0 (Failed: 0, Cancelled 0), Incomplete: 4, Skipped: 0"))
	})
	c.taskRun("plan", func(tr *tektonv1.TaskRun) {
		tr.Status.Steps = []tektonv1.StepState{
			{Name: "install-opr8r-step", ContainerState: terminated(0)},
			{Name: "clone", ContainerState: terminated(0)},
			{Name: "init", ContainerState: terminated(0)},
			{Name: "plan", ContainerState: running()},
		}
		// Read by Observe only once the task has succeeded, as Tekton
		// reports results.
		tr.Status.Results = []tektonv1.TaskRunResult{result(results.Commit, commit)}
		tr.Status.SetCondition(tcond(corev1.ConditionUnknown, "Running", ""))
	})
}

func (c Sim) Plan(add, change, destroy int, digest string) {
	c.PlanResult(enginetest.PlanOf(add, change, destroy, digest))
}

// PlanResult implements enginetest.Sim: the plan task succeeds with the
// commit clone reported and the plan's results.
func (c Sim) PlanResult(p results.Plan) {
	commit := enginetest.DefaultCommit
	if tr := c.planTaskRun(); tr != nil {
		for _, r := range tr.Status.Results {
			if r.Name == results.Commit {
				commit = r.Value.StringVal
			}
		}
	}
	v := p.Values()
	c.taskRun("plan", func(tr *tektonv1.TaskRun) {
		succeededTask("install-opr8r-step", "clone", "init", "plan")(tr)
		tr.Status.Results = []tektonv1.TaskRunResult{
			result(results.Commit, commit),
			result(results.HasChanges, v[results.HasChanges]),
			result(results.Digest, v[results.Digest]),
			result(results.Summary, v[results.Summary]),
			result(results.Inputs, v[results.Inputs]),
		}
		for _, k := range []string{results.PlanTextDigest, results.PlanJSONDigest, results.PlanSensitiveJSONDigest} {
			if v[k] != "" {
				tr.Status.Results = append(tr.Status.Results, result(k, v[k]))
			}
		}
	})
	if p.HasChanges && c.hasTask("export-outputs") {
		// The export task runs only after a plan without changes: Tekton
		// skips it as soon as the plan is done (make e2e recorded it so).
		c.skip(tektonv1.WhenExpressionsSkip, "export-outputs")
	}
}

// skip lists tasks as Tekton skipped them, each once.
func (c Sim) skip(reason tektonv1.SkippingReason, tasks ...string) {
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		for _, t := range tasks {
			if !slices.ContainsFunc(pr.Status.SkippedTasks, func(s tektonv1.SkippedTask) bool { return s.Name == t }) {
				pr.Status.SkippedTasks = append(pr.Status.SkippedTasks, tektonv1.SkippedTask{Name: t, Reason: reason})
			}
		}
	})
}

// hasTask says whether the PipelineRun's pipeline has the task.
func (c Sim) hasTask(task string) bool {
	ps := c.Get().Spec.PipelineSpec
	return ps != nil && slices.ContainsFunc(ps.Tasks, func(t tektonv1.PipelineTask) bool { return t.Name == task })
}

// Complete implements enginetest.Sim: finally (cleanup) runs and the
// PipelineRun succeeds.
func (c Sim) Complete() {
	c.complete(corev1.ConditionTrue, tektonv1.PipelineRunReasonSuccessful.String(), "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0")
}

func (c Sim) planTaskRun() *tektonv1.TaskRun {
	tr := &tektonv1.TaskRun{}
	if err := c.env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.key.Namespace, Name: c.key.Name + "-plan"}, tr); err != nil {
		return nil
	}
	return tr
}

// suspend creates the approval CustomRun as Tekton does; opr8r's approval
// controller must then mark it Running.
func (c Sim) Suspend(digest string) {
	cr := &tektonv1beta1.CustomRun{
		ObjectMeta: metav1.ObjectMeta{Name: c.key.Name + "-approve", Namespace: c.key.Namespace, Labels: c.childLabels("approve"), OwnerReferences: c.owner()},
		Spec: tektonv1beta1.CustomRunSpec{
			CustomRef: &tektonv1beta1.TaskRef{APIVersion: tekton.ApprovalAPIVersion, Kind: tekton.ApprovalKind},
			Params: tektonv1beta1.Params{
				{Name: "run", Value: *tektonv1beta1.NewStructuredValues(c.Get().Labels[infrav1.RunNameLabel])},
				{Name: "digest", Value: *tektonv1beta1.NewStructuredValues(digest)},
				{Name: "summary", Value: *tektonv1beta1.NewStructuredValues(`{"add":1}`)},
			},
		},
	}
	Expect(c.env.Client.Create(context.Background(), cr)).To(Succeed())
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		pr.Status.ChildReferences = append(pr.Status.ChildReferences, tektonv1.ChildStatusReference{
			TypeMeta: runtime.TypeMeta{APIVersion: "tekton.dev/v1beta1", Kind: "CustomRun"}, Name: cr.Name, PipelineTaskName: "approve",
		})
	})
	Eventually(func() string { s, _, _ := c.Gate(); return s }, c.env.Timeout, c.env.Interval).Should(Equal("Pending"))
}

func (c Sim) CustomRun() *tektonv1beta1.CustomRun {
	cr := &tektonv1beta1.CustomRun{}
	Expect(c.env.Client.Get(context.Background(), client.ObjectKey{Namespace: c.key.Namespace, Name: c.key.Name + "-approve"}, cr)).To(Succeed())
	return cr
}

func (c Sim) Gate() (string, string, string) {
	cr := c.CustomRun()
	k := cr.Status.GetCondition(apis.ConditionSucceeded)
	digest := ""
	for _, r := range cr.Status.Results {
		if r.Name == "approved-digest" {
			digest = r.Value
		}
	}
	switch {
	case k == nil:
		return "", "", digest
	case k.Status == corev1.ConditionUnknown:
		return "Pending", k.Message, digest
	case k.Status == corev1.ConditionTrue:
		return "Approved", k.Message, digest
	default:
		return "Rejected", k.Message, digest
	}
}

func (c Sim) SkipGate() {
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		pr.Status.SkippedTasks = append(pr.Status.SkippedTasks,
			tektonv1.SkippedTask{Name: "approve", Reason: tektonv1.WhenExpressionsSkip},
			tektonv1.SkippedTask{Name: "apply", Reason: tektonv1.WhenExpressionsSkip})
	})
}

func (c Sim) skipped(task string) bool {
	for _, s := range c.Get().Status.SkippedTasks {
		if s.Name == task {
			return true
		}
	}
	return false
}

// complete runs the finally task cleanup, as Tekton does when no task
// that carries cleanup succeeded, and ends the PipelineRun.
func (c Sim) complete(status corev1.ConditionStatus, reason, msg string) {
	c.taskRun("cleanup", succeededTask("install-opr8r-step", "cleanup"))
	c.end(status, reason, msg)
}

// completeCarried ends a PipelineRun whose apply or export task ran
// cleanup as its last step: Tekton skips the finally task by its when
// expressions.
func (c Sim) completeCarried(msg string) {
	c.skip(tektonv1.WhenExpressionsSkip, "cleanup")
	c.end(corev1.ConditionTrue, tektonv1.PipelineRunReasonSuccessful.String(), msg)
}

func (c Sim) end(status corev1.ConditionStatus, reason, msg string) {
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		pr.Status.SetCondition(tcond(status, reason, msg))
		pr.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	})
}

// FinishApply implements enginetest.Sim: apply's pod applies, exports
// and cleans up; after a plan without changes (apply skipped) the export
// task's pod exports and cleans up, and Tekton skips the other.
func (c Sim) FinishApply(outputsJSON string) {
	carrier, other := "apply", "export-outputs"
	if c.skipped("apply") {
		carrier, other = "export-outputs", "apply"
	}
	if outputsJSON != "" {
		enginetest.WriteRawOutputs(c.env, c.Get(), outputsJSON)
	}
	c.taskRun(carrier, succeededTask(append([]string{"install-opr8r-step"}, taskSteps[carrier]...)...))
	c.skip(tektonv1.WhenExpressionsSkip, other)
	c.completeCarried("Tasks Completed: 2 (Failed: 0, Cancelled 0), Skipped: 2")
}

// taskSteps are the steps of the tasks that run more than one, in order.
var taskSteps = map[string][]string{
	"plan":           {"clone", "init", "plan"},
	"apply":          {"apply", "export-outputs", "cleanup"},
	"export-outputs": {"export-outputs", "cleanup"},
}

// fail fails a step of a task: the step exits 1 and opr8r-step's summary
// arrives as the task's error result.
func (c Sim) Fail(step, msg string) {
	task := step
	switch {
	case step == "clone" || step == "init":
		task = "plan"
	case step == "export-outputs" && !c.skipped("apply"):
		task = "apply"
	}
	c.taskRun(task, func(tr *tektonv1.TaskRun) {
		tr.Status.Steps = []tektonv1.StepState{{Name: "install-opr8r-step", ContainerState: terminated(0)}}
		for _, before := range taskSteps[task] {
			if before == step {
				break
			}
			tr.Status.Steps = append(tr.Status.Steps, tektonv1.StepState{Name: before, ContainerState: terminated(0)})
		}
		tr.Status.Steps = append(tr.Status.Steps, tektonv1.StepState{Name: step, ContainerState: terminated(1)})
		tr.Status.Results = []tektonv1.TaskRunResult{result(pipeline.ResultError, msg)}
		tr.Status.SetCondition(tcond(corev1.ConditionFalse, "Failed", `"step-`+step+`" exited with code 1`))
		tr.Status.CompletionTime = &metav1.Time{Time: time.Now()}
	})
	c.skipLater()
	c.complete(corev1.ConditionFalse, tektonv1.PipelineRunReasonFailed.String(), "Tasks Completed: 2 (Failed: 1, Cancelled 0), Skipped: 1")
}

func (c Sim) CompleteAfterGate() {
	if c.CancelRequested() {
		c.completeCancelled()
		return
	}
	c.skip(tektonv1.StoppingSkip, "apply", "export-outputs")
	c.complete(corev1.ConditionFalse, tektonv1.PipelineRunReasonFailed.String(), "Tasks Completed: 2 (Failed: 1, Cancelled 0), Skipped: 2")
}

// completeCancelled ends a PipelineRun opr8r cancelled as Tekton does: it
// cancels the approval CustomRun still waiting (spec.status RunCancelled,
// with Tekton's message), which opr8r's approval controller then fails
// (CustomRunCancelled); the finally task (cleanup) runs; the PipelineRun
// fails with the reason Cancelled.
func (c Sim) completeCancelled() {
	ctx := context.Background()
	cr := &tektonv1beta1.CustomRun{}
	err := c.env.Client.Get(ctx, client.ObjectKey{Namespace: c.key.Namespace, Name: c.key.Name + "-approve"}, cr)
	if err == nil && !cr.IsDone() {
		cr.Spec.Status = tektonv1beta1.CustomRunSpecStatusCancelled
		cr.Spec.StatusMessage = tektonv1beta1.CustomRunCancelledByPipelineMsg
		Expect(c.env.Client.Update(ctx, cr)).To(Succeed())
		Eventually(func() bool { return c.CustomRun().IsDone() }, c.env.Timeout, c.env.Interval).Should(BeTrue(), "opr8r's approval controller fails the cancelled CustomRun")
	} else if !apierrors.IsNotFound(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	c.skip(tektonv1.GracefullyCancelledSkip, "apply", "export-outputs")
	c.complete(corev1.ConditionFalse, tektonv1.PipelineRunReasonCancelled.String(), `PipelineRun "`+c.key.Name+`" was cancelled`)
}

func (c Sim) SucceedDestroy() {
	c.Start()
	c.Plan(0, 0, 1, enginetest.Digest("destroy"))
	c.FinishDestroy()
}

// FinishDestroy implements enginetest.Sim: apply's pod applies and cleans
// up, and the PipelineRun completes.
func (c Sim) FinishDestroy() {
	c.taskRun("apply", succeededTask("install-opr8r-step", "apply", "cleanup"))
	c.completeCarried("")
}

func runtimeTypeMeta(kind string) runtime.TypeMeta {
	return runtime.TypeMeta{APIVersion: "tekton.dev/v1", Kind: kind}
}

// skipLater lists the gate, apply and export-outputs, where the pipeline
// has them and they have not run, as tasks Tekton skipped because the
// PipelineRun was stopping (a task before them failed; make e2e recorded
// it so).
func (c Sim) skipLater() {
	pr := c.Get()
	have := map[string]bool{}
	for _, ref := range pr.Status.ChildReferences {
		have[ref.PipelineTaskName] = true
	}
	for _, s := range pr.Status.SkippedTasks {
		have[s.Name] = true
	}
	var later []string
	if ps := pr.Spec.PipelineSpec; ps != nil {
		for _, task := range ps.Tasks {
			if slices.Contains([]string{names.StepApprove, names.StepApply, names.StepExport}, task.Name) && !have[task.Name] {
				later = append(later, task.Name)
			}
		}
	}
	if len(later) == 0 {
		return
	}
	c.updatePR(func(pr *tektonv1.PipelineRun) {
		for _, task := range later {
			pr.Status.SkippedTasks = append(pr.Status.SkippedTasks, tektonv1.SkippedTask{Name: task, Reason: tektonv1.StoppingSkip})
		}
	})
}

// PassChecks implements enginetest.Sim: each check's TaskRun succeeds.
func (c Sim) PassChecks(checks ...string) {
	for _, ch := range checks {
		c.taskRun(ch, succeededTask("install-opr8r-step", ch))
	}
}

// FailCheck implements enginetest.Sim: the check's TaskRun fails with the
// error result; Tekton skips the tasks after it and the PipelineRun fails.
func (c Sim) FailCheck(check, msg string, passed ...string) {
	c.PassChecks(passed...)
	c.skip(tektonv1.StoppingSkip, "approve", "apply", "export-outputs")
	c.Fail(check, msg)
}
