// Package tekton runs TerraformRun pipelines as Tekton PipelineRuns with an
// embedded pipelineSpec: no cluster-side Pipeline or Task is needed.
//
// Pods per run: the "plan" task runs the steps clone, init and plan in one
// pod, and the "apply" task runs apply, export-outputs and cleanup in one
// more (each still shows by name in the dashboard). After a plan without
// changes, Tekton's own `when` expressions skip the gate and apply and run
// the "export-outputs" task instead (export-outputs and cleanup). The
// finally task cleanup is the fallback that keeps cleanup guaranteed: it
// runs whenever neither carrier succeeded (a step failed, cleanup's own
// included; a timeout; a stop; a rejection; a plan-only run).
//
// The approval gate is opr8r's custom task (kind Approval): Tekton creates a
// CustomRun for it, which opr8r's controller keeps running until the
// TerraformRun approves the plan's digest (see approval.go).
package tekton

import (
	"cmp"
	"maps"
	"strings"

	"github.com/opr8r/opr8r/pkg/names"

	tektonpod "github.com/tektoncd/pipeline/pkg/apis/pipeline/pod"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

const (
	// ApprovalKind is the kind of opr8r's approval custom task.
	ApprovalKind = "Approval"
	// ResultsDir is where Tekton collects task results.
	ResultsDir = "/tekton/results"

	taskPlan    = "plan"
	taskRestore = names.StepRestoreState
	taskApprove = names.StepApprove
	taskApply   = names.StepApply
	taskExport  = names.StepExport
	taskCleanup = names.StepCleanup

	// Results of the approval custom task.
	resultDecision       = "decision"
	resultApprovedDigest = "approved-digest"
)

// ApprovalAPIVersion is the apiVersion of opr8r's approval custom task.
var ApprovalAPIVersion = infrav1.GroupVersion.String()

// Engine is the Tekton engine.
type Engine struct{}

var (
	_ engine.Engine             = Engine{}
	_ engine.Approver           = Engine{}
	_ engine.Canceller          = Engine{}
	_ engine.RelatedLister      = Engine{}
	_ engine.ControllerProvider = Engine{}
)

// New returns the Tekton engine.
func New() Engine { return Engine{} }

// Name implements engine.Engine.
func (Engine) Name() infrav1.EngineName { return infrav1.EngineTekton }

// ChildGVK implements engine.Engine.
func (Engine) ChildGVK() schema.GroupVersionKind {
	return tektonv1.SchemeGroupVersion.WithKind("PipelineRun")
}

// NewChild implements engine.Engine.
func (Engine) NewChild() client.Object { return &tektonv1.PipelineRun{} }

// NewChildList implements engine.Engine.
func (Engine) NewChildList() client.ObjectList { return &tektonv1.PipelineRunList{} }

// RelatedTypes implements engine.RelatedLister.
func (Engine) RelatedTypes() []client.Object {
	return []client.Object{&tektonv1.TaskRun{}, &tektonv1beta1.CustomRun{}}
}

var replacer = strings.NewReplacer(
	pipeline.PhOwnerUID, "$(context.pipelineRun.uid)",
	pipeline.PhOwnerName, "$(context.pipelineRun.name)",
	pipeline.PhOwnerKind, "PipelineRun",
	pipeline.PhOwnerAPI, tektonv1.SchemeGroupVersion.String(),
	pipeline.PhResults, "--results-dir="+ResultsDir,
	pipeline.PhErrorFile, ResultsDir+"/"+pipeline.ResultError,
	pipeline.PhApprovedDigest, "$(params."+resultApprovedDigest+")",
)

// Build implements engine.Engine.
func (Engine) Build(req engine.Request) (client.Object, error) {
	p, err := pipeline.Build(req)
	if err != nil {
		return nil, err
	}
	tasks := append(restoreTask(p, req), planTask(p, req))
	tasks = append(tasks, checkTasks(p, req)...)
	if !pipeline.PlanOnly(p.Type) {
		tasks = laterTasks(p, req, tasks)
	}
	return pipelineRun(p, req, tasks), nil
}

// workspaceBinding binds a task to the run's workspace.
func workspaceBinding() []tektonv1.WorkspacePipelineTaskBinding {
	return []tektonv1.WorkspacePipelineTaskBinding{{Name: pipeline.WorkspaceVolume, Workspace: pipeline.WorkspaceVolume}}
}

// restoreTask runs restore-state in a pod of its own, as the runner, when
// the run has it (kept states): the plan task runs after it.
func restoreTask(p *pipeline.Pipeline, req engine.Request) []tektonv1.PipelineTask {
	s, ok := p.StepNamed(names.StepRestoreState)
	if !ok {
		return nil
	}
	return []tektonv1.PipelineTask{{
		Name:        taskRestore,
		DisplayName: "Restore kept states",
		Description: pipeline.StepDescription(names.StepRestoreState),
		Workspaces:  workspaceBinding(),
		TaskSpec:    taskSpec(p, req.Config.StepImage, taskRestore, nil, s),
		Timeout:     taskTimeout(s),
	}}
}

// planTask runs clone, init and plan as steps of one pod.
func planTask(p *pipeline.Pipeline, req engine.Request) tektonv1.PipelineTask {
	clone, _ := p.StepNamed(names.StepClone)
	init, _ := p.StepNamed(names.StepInit)
	plan, _ := p.StepNamed(names.StepPlan)
	var after []string
	if _, ok := p.StepNamed(names.StepRestoreState); ok {
		after = []string{taskRestore}
	}
	return tektonv1.PipelineTask{
		RunAfter:    after,
		Name:        taskPlan,
		DisplayName: "Plan (clone, init, plan)",
		Description: "One pod: " + pipeline.StepDescription(names.StepClone) + " " + pipeline.StepDescription(names.StepInit) + " " + pipeline.StepDescription(names.StepPlan),
		Workspaces:  workspaceBinding(),
		TaskSpec:    taskSpec(p, req.Config.StepImage, taskPlan, stepResults(clone, plan), clone, init, plan),
		Timeout:     taskTimeout(clone, init, plan),
	}
}

// taskTimeout is a task's deadline (pipeline.Deadline): set on every task,
// so that Tekton's default (60 minutes, default-timeout-minutes) never
// cuts a step short.
func taskTimeout(steps ...pipeline.Step) *metav1.Duration {
	return &metav1.Duration{Duration: pipeline.Deadline(steps...)}
}

// checkTasks run side by side after a plan with changes, a pod each; the
// gate (or apply) runs after all of them, and a failed check fails the
// PipelineRun before it.
func checkTasks(p *pipeline.Pipeline, req engine.Request) []tektonv1.PipelineTask {
	var tasks []tektonv1.PipelineTask
	for _, c := range p.Checks() {
		tasks = append(tasks, tektonv1.PipelineTask{
			Name: c.Name, RunAfter: []string{taskPlan}, Workspaces: workspaceBinding(),
			DisplayName: "Check " + strings.TrimPrefix(c.Name, names.CheckPrefix), Description: pipeline.StepDescription(c.Name),
			TaskSpec: taskSpec(p, req.Config.StepImage, c.Name, nil, c),
			Timeout:  taskTimeout(c),
			When:     tektonv1.WhenExpressions{hasChanges()},
		})
	}
	return tasks
}

// pipelineRun is the child: the tasks, the finally task cleanup, the pods'
// settings and the workspace's claim.
func pipelineRun(p *pipeline.Pipeline, req engine.Request, tasks []tektonv1.PipelineTask) *tektonv1.PipelineRun {
	finally := []tektonv1.PipelineTask{{
		Name: taskCleanup, Workspaces: workspaceBinding(),
		DisplayName: "Cleanup", Description: pipeline.StepDescription(names.StepCleanup),
		TaskSpec: taskSpec(p, req.Config.StepImage, taskCleanup, nil, p.Cleanup),
		Timeout:  taskTimeout(p.Cleanup),
		When:     cleanupWhen(tasks),
	}}
	return &tektonv1.PipelineRun{
		TypeMeta: metav1.TypeMeta{APIVersion: tektonv1.SchemeGroupVersion.String(), Kind: "PipelineRun"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.Name,
			Namespace: p.Namespace,
			Labels:    maps.Clone(p.Labels),
			Annotations: map[string]string{
				// The workspace holds the plan file: delete it when the run ends.
				"tekton.dev/auto-cleanup-pvc": "true",
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(req.Run, infrav1.GroupVersion.WithKind("TerraformRun"))},
		},
		Spec: tektonv1.PipelineRunSpec{
			PipelineSpec: &tektonv1.PipelineSpec{
				DisplayName: pipeline.Title(p),
				Description: pipeline.Description(p, ""),
				Workspaces:  []tektonv1.PipelineWorkspaceDeclaration{{Name: pipeline.WorkspaceVolume}},
				Tasks:       tasks,
				Finally:     finally,
			},
			// The default pipeline timeout (60m) would count time spent
			// waiting for approval; each task has its own (taskTimeout).
			Timeouts: &tektonv1.TimeoutFields{Pipeline: &metav1.Duration{}},
			// No service account for the run as a whole: Tekton's affinity
			// assistant pod takes it, and a runner account is only for the
			// steps' pods (opr8r-runner-pods refuses any other); each task
			// gets its own in taskRunSpecs.
			TaskRunTemplate: tektonv1.PipelineTaskRunTemplate{
				PodTemplate: &tektonpod.PodTemplate{SecurityContext: p.PodSecurityContext, NodeSelector: p.NodeSelector, Tolerations: p.Tolerations},
			},
			TaskRunSpecs: taskRunSpecs(p, append(append([]tektonv1.PipelineTask{}, tasks...), finally...)),
			Workspaces: []tektonv1.WorkspaceBinding{{
				Name: pipeline.WorkspaceVolume,
				VolumeClaimTemplate: &corev1.PersistentVolumeClaim{
					Spec: corev1.PersistentVolumeClaimSpec{
						AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
						StorageClassName: p.StorageClassName,
						Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.WorkspaceSize}},
					},
				},
			}},
		},
	}
}

// taskRunSpecs give each task that runs a pod its service account: the
// step's own (the plan's before the gate, checks'), else the runner's.
// Clone and init run in the plan task (planTask), the task named after
// the plan step; the gate, a custom task, runs no pod.
func taskRunSpecs(p *pipeline.Pipeline, tasks []tektonv1.PipelineTask) []tektonv1.PipelineTaskRunSpec {
	own := map[string]string{}
	for _, s := range append(append([]pipeline.Step{}, p.Steps...), p.Cleanup) {
		if s.ServiceAccountName != "" && s.Name != names.StepClone && s.Name != names.StepInit {
			own[s.Name] = s.ServiceAccountName
		}
	}
	var out []tektonv1.PipelineTaskRunSpec
	for _, t := range tasks {
		if t.TaskSpec == nil || t.TaskSpec.IsCustomTask() {
			continue
		}
		sa := cmp.Or(own[t.Name], p.ServiceAccountName)
		if sa == "" {
			continue
		}
		out = append(out, tektonv1.PipelineTaskRunSpec{PipelineTaskName: t.Name, ServiceAccountName: sa})
	}
	return out
}

// taskSpec embeds the given steps as one task (one pod). Steps in a stock
// Terraform image are preceded by a step that installs opr8r-step.
func taskSpec(p *pipeline.Pipeline, stepImage, label string, results []string, steps ...pipeline.Step) *tektonv1.EmbeddedTask {
	ts := tektonv1.TaskSpec{
		Workspaces: []tektonv1.WorkspaceDeclaration{{Name: pipeline.WorkspaceVolume, MountPath: pipeline.WorkspaceDir, ReadOnly: steps[0].WorkspaceReadOnly}},
		Volumes:    append(p.ScratchVolumes(), p.UsedVolumes(steps...)...),
	}
	for _, r := range append(results, pipeline.ResultError) {
		ts.Results = append(ts.Results, tektonv1.TaskResult{Name: r, Type: tektonv1.ResultsTypeString})
	}
	needsBin := false
	for _, s := range steps {
		needsBin = needsBin || p.InstallsStepBinary(s)
	}
	if needsBin {
		ts.Steps = append(ts.Steps, step(pipeline.InstallStepContainer(p, stepImage, steps[0].Resources)))
	}
	for _, s := range steps {
		st := step(s.Container(s.Name, p, replacer))
		st.DisplayName = stepDisplayName(s.Name)
		ts.Steps = append(ts.Steps, st)
	}
	shareRequests(ts.Steps)
	return &tektonv1.EmbeddedTask{
		Metadata: tektonv1.PipelineTaskMetadata{Labels: map[string]string{infrav1.StepLabel: label}},
		TaskSpec: ts,
	}
}

// shareRequests makes the task's pod request what one step requests, not
// that times its steps. Kubernetes sums the requests of a pod's containers,
// as if they ran side by side, but Tekton runs a task's steps one after
// another: a plan task of four steps at 100m each reserved 400m of the node,
// and on a small node pods waited for CPU nothing used. Each step requests
// an equal share of the largest step's request (what Tekton's task-level
// computeResources does, a beta field this needs no feature flag for);
// limits stay per step. The pod's cgroup weighs its requests' sum, and the
// one step running gets all of it.
func shareRequests(steps []tektonv1.Step) {
	most := corev1.ResourceList{}
	for _, s := range steps {
		// A limit without a request is the request (Kubernetes' default).
		req := maps.Clone(s.ComputeResources.Limits)
		if req == nil {
			req = corev1.ResourceList{}
		}
		maps.Copy(req, s.ComputeResources.Requests)
		for k, v := range req {
			if m, ok := most[k]; !ok || v.Cmp(m) > 0 {
				most[k] = v
			}
		}
	}
	n := int64(len(steps))
	if n < 2 || len(most) == 0 {
		return
	}
	share := corev1.ResourceList{}
	for k, v := range most {
		if k == corev1.ResourceCPU {
			share[k] = *resource.NewMilliQuantity(v.MilliValue()/n, v.Format)
		} else {
			share[k] = *resource.NewQuantity(v.Value()/n, v.Format)
		}
	}
	for i := range steps {
		steps[i].ComputeResources.Requests = share.DeepCopy()
	}
}

// step is a container as a Tekton step.
func step(c corev1.Container) tektonv1.Step {
	return tektonv1.Step{
		Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy, Command: c.Command, Args: c.Args,
		Env: c.Env, VolumeMounts: c.VolumeMounts, ComputeResources: c.Resources, SecurityContext: c.SecurityContext,
	}
}

// laterTasks adds the gate (Manual approval), apply and export-outputs
// (apply runs) after the plan task.
func laterTasks(p *pipeline.Pipeline, req engine.Request, tasks []tektonv1.PipelineTask) []tektonv1.PipelineTask {
	run := req.Run
	ws := workspaceBinding()
	hasChanges := hasChanges()
	afterPlan := []string{taskPlan}
	for _, c := range p.Checks() {
		afterPlan = append(afterPlan, c.Name)
	}
	carried := p.CarriedSteps(names.StepApply)
	applyTask := tektonv1.PipelineTask{
		Name:        taskApply,
		DisplayName: "Apply the plan",
		Description: "One pod: " + stepsDescription(carried),
		Workspaces:  ws,
		TaskSpec:    taskSpec(p, req.Config.StepImage, taskApply, nil, carried...),
		Timeout:     taskTimeout(carried...),
		When:        tektonv1.WhenExpressions{hasChanges},
	}
	applyTask.TaskSpec.Params = tektonv1.ParamSpecs{{Name: resultApprovedDigest, Type: tektonv1.ParamTypeString}}
	if p.ManualApproval {
		tasks = append(tasks, tektonv1.PipelineTask{
			Name:        taskApprove,
			DisplayName: "Approve the plan",
			Description: pipeline.StepDescription(names.StepApprove) + " Approve: " + pipeline.ApproveCommand(p) + " (upstream Tekton has no approve button).",
			RunAfter:    afterPlan,
			TaskRef:     &tektonv1.TaskRef{APIVersion: ApprovalAPIVersion, Kind: ApprovalKind},
			When:        tektonv1.WhenExpressions{hasChanges},
			Params: tektonv1.Params{
				{Name: "run", Value: *tektonv1.NewStructuredValues(run.Name)},
				{Name: "digest", Value: *tektonv1.NewStructuredValues("$(tasks.plan.results." + pipeline.ResultDigest + ")")},
				{Name: "summary", Value: *tektonv1.NewStructuredValues("$(tasks.plan.results." + pipeline.ResultSummary + ")")},
			},
			// Approval waits as long as it takes; opr8r enforces
			// spec.approval.timeout itself.
			Timeout: &metav1.Duration{},
		})
		applyTask.RunAfter = []string{taskApprove}
		applyTask.When = append(applyTask.When, tektonv1.WhenExpression{Input: "$(tasks.approve.results." + resultDecision + ")", Operator: selection.In, Values: []string{"approve"}})
		applyTask.Params = tektonv1.Params{{Name: resultApprovedDigest, Value: *tektonv1.NewStructuredValues("$(tasks.approve.results." + resultApprovedDigest + ")")}}
	} else {
		applyTask.RunAfter = afterPlan
		applyTask.Params = tektonv1.Params{{Name: resultApprovedDigest, Value: *tektonv1.NewStructuredValues("$(tasks.plan.results." + pipeline.ResultDigest + ")")}}
	}
	tasks = append(tasks, applyTask)
	if p.Type == infrav1.RunApply {
		// After a plan without changes the gate and apply are skipped and
		// outputs are still exported, by a task of their own that carries
		// cleanup as well. After a plan with changes, apply's pod exports.
		exported := p.CarriedSteps(names.StepExport)
		tasks = append(tasks, tektonv1.PipelineTask{
			Name: taskExport, RunAfter: afterPlan, Workspaces: ws,
			DisplayName: "Export outputs", Description: "One pod: " + stepsDescription(exported),
			TaskSpec: taskSpec(p, req.Config.StepImage, taskExport, nil, exported...),
			Timeout:  taskTimeout(exported...),
			When:     tektonv1.WhenExpressions{noChanges()},
		})
	}
	return tasks
}

// stepsDescription describes the steps a task runs one after another.
func stepsDescription(steps []pipeline.Step) string {
	var d []string
	for _, s := range steps {
		d = append(d, pipeline.StepDescription(s.Name))
	}
	return strings.Join(d, " ")
}

// cleanupWhen runs the finally task cleanup only when no task ran cleanup
// to its end as a step: apply's and export's pods carry it, and a task
// that succeeded ran every step. A task that failed (any step, cleanup's
// own included), timed out, was cancelled or never ran leaves cleanup to
// the finally task, which Tekton runs on every path.
func cleanupWhen(tasks []tektonv1.PipelineTask) tektonv1.WhenExpressions {
	var when tektonv1.WhenExpressions
	for _, t := range tasks {
		if t.Name == taskApply || t.Name == taskExport {
			when = append(when, tektonv1.WhenExpression{Input: "$(tasks." + t.Name + ".status)", Operator: selection.NotIn, Values: []string{"Succeeded"}})
		}
	}
	return when
}

// stepDisplayName is what the Tekton Dashboard shows for a step.
func stepDisplayName(name string) string {
	switch name {
	case names.StepRestoreState:
		return "push kept states"
	case names.StepClone:
		return "clone the module"
	case names.StepInit:
		return "terraform init"
	case names.StepPlan:
		return "terraform plan"
	case names.StepApply:
		return "terraform apply"
	case names.StepExport:
		return "export outputs"
	case names.StepCleanup:
		return "cleanup"
	}
	if names.IsCheck(name) {
		return "check " + strings.TrimPrefix(name, names.CheckPrefix)
	}
	return ""
}

// hasChanges is the condition of the tasks that run only for a plan with changes.
func hasChanges() tektonv1.WhenExpression {
	return tektonv1.WhenExpression{Input: "$(tasks.plan.results." + pipeline.ResultHasChanges + ")", Operator: selection.In, Values: []string{"true"}}
}

// noChanges is the condition of the task that runs only for a plan without changes.
func noChanges() tektonv1.WhenExpression {
	return tektonv1.WhenExpression{Input: "$(tasks.plan.results." + pipeline.ResultHasChanges + ")", Operator: selection.NotIn, Values: []string{"true"}}
}

// stepResults are the results the given steps write.
func stepResults(steps ...pipeline.Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Results...)
	}
	return out
}
