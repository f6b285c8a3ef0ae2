// Package argo runs TerraformRun pipelines as Argo Workflows Workflows.
//
// The Workflow is a DAG plan → check-* → approve → apply, with an onExit
// cleanup. The plan task's pod runs clone, init and plan, and apply's runs
// apply and export-outputs, as Argo containerSets: one pod each, one node
// per step (init's container is terraform-init: Argo's own is init). The
// approval gate is a suspend template; approving it through the
// TerraformRun resumes the node exactly the way `argo resume` does
// (workflow/util.ResumeWorkflow in Argo v3.7).
package argo

import (
	"fmt"
	"maps"
	"strings"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

const (
	entrypoint   = "main"
	workflowKind = "Workflow"

	// Output parameters of the approve (suspend) node. The Argo UI shows the
	// decision input's enum as a dropdown and sets the outputs before resume.
	paramDecision       = "decision"
	paramApprovedDigest = "approved-digest"
	paramDigest         = "digest"
	paramSummary        = "summary"
	decisionApprove     = "approve"
	decisionReject      = "reject"

	// Labels Argo's creator.LabelActor puts on a Workflow that a user resumed.
	actorLabel  = "workflows.argoproj.io/actor"
	actionLabel = "workflows.argoproj.io/action"

	// resultsDir is where steps write their results, which Argo reads as
	// output parameters (valueFrom.path).
	resultsDir = pipeline.TmpDir + "/opr8r-results"
)

// +kubebuilder:rbac:groups=argoproj.io,resources=workflows,verbs=get;list;watch;create;update;patch;delete

// Engine is the Argo Workflows engine.
type Engine struct{}

var (
	_ engine.Engine    = Engine{}
	_ engine.Approver  = Engine{}
	_ engine.Canceller = Engine{}
)

// New returns the Argo engine.
func New() Engine { return Engine{} }

// Name implements engine.Engine.
func (Engine) Name() infrav1.EngineName { return infrav1.EngineArgo }

// ChildGVK implements engine.Engine.
func (Engine) ChildGVK() schema.GroupVersionKind {
	return wfv1.SchemeGroupVersion.WithKind(workflowKind)
}

// NewChild implements engine.Engine.
func (Engine) NewChild() client.Object { return &wfv1.Workflow{} }

// NewChildList implements engine.Engine.
func (Engine) NewChildList() client.ObjectList { return &wfv1.WorkflowList{} }

// Build implements engine.Engine.
func (Engine) Build(req engine.Request) (client.Object, error) {
	p, err := pipeline.Build(req)
	if err != nil {
		return nil, err
	}
	run := req.Run
	wf := &wfv1.Workflow{
		TypeMeta: metav1.TypeMeta{APIVersion: wfv1.SchemeGroupVersion.String(), Kind: workflowKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.Name,
			Namespace: p.Namespace,
			Labels:    maps.Clone(p.Labels),
			// The Argo UI shows both in its list and on the Workflow's page.
			Annotations: map[string]string{
				"workflows.argoproj.io/title":       pipeline.Title(p),
				"workflows.argoproj.io/description": pipeline.Description(p, "RESUME the approve step (decision approve or reject)"),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, infrav1.GroupVersion.WithKind("TerraformRun"))},
		},
		Spec: wfv1.WorkflowSpec{
			Entrypoint:         entrypoint,
			OnExit:             names.StepCleanup,
			ServiceAccountName: p.ServiceAccountName,
			SecurityContext:    p.PodSecurityContext,
			NodeSelector:       p.NodeSelector,
			Tolerations:        p.Tolerations,
			PodMetadata:        &wfv1.Metadata{Labels: maps.Clone(p.Labels)},
			Volumes:            p.Volumes,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: pipeline.WorkspaceVolume},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: p.StorageClassName,
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: p.WorkspaceSize},
					},
				},
			}},
			// The workspace holds the plan file, which may contain secrets:
			// delete it as soon as the Workflow completes, whatever the result.
			VolumeClaimGC: &wfv1.VolumeClaimGC{Strategy: wfv1.VolumeClaimGCOnCompletion},
		},
	}
	wf.Spec.Templates = templates(p, req.Config.StepImage)
	return wf, nil
}

// templates are the Workflow's templates: the DAG, the plan's pod (clone,
// init and plan), the restore, the checks, the gate, the apply's pod
// (apply and export), the export alone and the cleanup.
func templates(p *pipeline.Pipeline, img string) []wfv1.Template {
	var ts []wfv1.Template
	ts = append(ts, dagTemplate(p),
		containerSetTemplate(p, names.StepPlan, img, true, stepsNamed(p, names.StepClone, names.StepInit, names.StepPlan)...))
	if s, ok := p.StepNamed(names.StepRestoreState); ok {
		ts = append(ts, containerTemplate(p, s, img))
	}
	for _, c := range p.Checks() {
		ts = append(ts, containerTemplate(p, c, img))
	}
	if p.ManualApproval {
		ts = append(ts, gateTemplate())
	}
	if !pipeline.PlanOnly(p.Type) {
		ts = append(ts, containerSetTemplate(p, names.StepApply, img, false, stepsNamed(p, names.StepApply, names.StepExport)...))
	}
	if p.Type == infrav1.RunApply {
		ts = append(ts, containerSetTemplate(p, names.StepExport, img, false, stepsNamed(p, names.StepExport)...))
	}
	return append(ts, containerTemplate(p, p.Cleanup, img))
}

// initContainer is the name of init's container: Argo names its own init
// container of every pod "init", and a pod's containers need distinct names.
const initContainer = "terraform-init"

// ContainerName is the name of a step's container in a containerSet.
func ContainerName(step string) string {
	if step == names.StepInit {
		return initContainer
	}
	return step
}

// stepsNamed are the pipeline's steps of those names that it has, in order.
func stepsNamed(p *pipeline.Pipeline, stepNames ...string) []pipeline.Step {
	var out []pipeline.Step
	for _, n := range stepNames {
		if s, ok := p.StepNamed(n); ok {
			out = append(out, s)
		}
	}
	return out
}

// containerSetTemplate runs steps one after another in one pod, each its
// own container (Argo's containerSet): the UI shows a node per container
// under the pod's node, and each container is named after its step, which
// is where `argo logs` and `kubectl tfrun logs --step` find its log. The
// pod starts once, not once per step.
//
// Argo reads a containerSet's outputs from its container "main" only, so a
// pod whose steps have results ends with "main", which publishes what they
// wrote (opr8r-step results). The containers' requests are summed when the
// pod is scheduled but they run one at a time, so the first container
// requests the most any step does and the others nothing.
func containerSetTemplate(p *pipeline.Pipeline, name, stepImage string, results bool, steps ...pipeline.Step) wfv1.Template {
	// Argo adds to a containerSet's pod the Workflow's volumes that the
	// set's own volumeMounts name, and the template's volumes: the
	// workspace claim (the Workflow's) is mounted set-wide, the Secret,
	// ConfigMap and cache volumes the steps mount are the template's.
	workspace := corev1.VolumeMount{Name: pipeline.WorkspaceVolume, MountPath: pipeline.WorkspaceDir, ReadOnly: true}
	for _, s := range steps {
		workspace.ReadOnly = workspace.ReadOnly && s.WorkspaceReadOnly
	}
	t := wfv1.Template{
		Name:               name,
		Metadata:           wfv1.Metadata{Labels: map[string]string{infrav1.StepLabel: name}},
		Volumes:            append(p.ScratchVolumes(), p.UsedVolumes(steps...)...),
		ServiceAccountName: steps[0].ServiceAccountName,
		ContainerSet:       &wfv1.ContainerSetTemplate{VolumeMounts: []corev1.VolumeMount{workspace}},
	}
	var prev []string
	for i, s := range steps {
		if p.InstallsStepBinary(s) && t.InitContainers == nil {
			t.InitContainers = []wfv1.UserContainer{{Container: pipeline.InstallStepContainer(p, stepImage, s.Resources)}}
		}
		c := s.Container(ContainerName(s.Name), p, replacer)
		c.Resources = sharedResources(steps, i)
		t.ContainerSet.Containers = append(t.ContainerSet.Containers, wfv1.ContainerNode{Container: c, Dependencies: prev})
		prev = []string{c.Name}
		if s.Name == names.StepApply {
			t.Inputs.Parameters = []wfv1.Parameter{{Name: paramApprovedDigest}}
		}
		for _, r := range s.Results {
			t.Outputs.Parameters = append(t.Outputs.Parameters, wfv1.Parameter{
				Name: r,
				// The default keeps a failed step's own message: without it Argo
				// would report the missing result file instead.
				ValueFrom: &wfv1.ValueFrom{Path: resultsDir + "/" + r, Default: wfv1.AnyStringPtr("")},
			})
		}
	}
	if results && len(t.Outputs.Parameters) > 0 {
		main := corev1.Container{
			Name:            "main",
			Image:           stepImage,
			ImagePullPolicy: p.ImagePullPolicy,
			Command:         []string{pipeline.ImageStepBinary},
			Args:            []string{"results", "--results-dir=" + resultsDir},
			VolumeMounts:    []corev1.VolumeMount{{Name: pipeline.TmpVolume, MountPath: pipeline.TmpDir}},
			SecurityContext: pipeline.ContainerSecurityContext(),
			Resources:       sharedResources(steps, len(steps)),
		}
		t.ContainerSet.Containers = append(t.ContainerSet.Containers, wfv1.ContainerNode{Container: main, Dependencies: prev})
	}
	if d := pipeline.Deadline(steps...); d > 0 {
		t.ActiveDeadlineSeconds = ptr.To(intstr.FromInt32(int32(d.Seconds())))
	}
	return t
}

// sharedResources are the resources of the i-th container of a pod that
// runs steps one at a time: every container keeps its step's limits (the
// last, "main", the last step's); the first requests, for each resource,
// the most any step requests, and the others request zero (explicitly:
// a container with limits and no requests would request its limits).
func sharedResources(steps []pipeline.Step, i int) corev1.ResourceRequirements {
	own := steps[min(i, len(steps)-1)].Resources
	out := corev1.ResourceRequirements{Limits: own.Limits.DeepCopy(), Requests: corev1.ResourceList{}}
	for _, s := range steps {
		for k, q := range s.Resources.Requests {
			if i != 0 {
				out.Requests[k] = resource.Quantity{Format: q.Format}
				continue
			}
			if cur, ok := out.Requests[k]; !ok || q.Cmp(cur) > 0 {
				out.Requests[k] = q.DeepCopy()
			}
		}
	}
	if len(out.Requests) == 0 {
		out.Requests = nil
	}
	return out
}

func taskParam(task, name string) string {
	return fmt.Sprintf("{{tasks.%s.outputs.parameters.%s}}", task, name)
}

// dagTemplate wires the steps. Engine-native conditions skip the gate when
// the plan has no changes, and skip apply when it has none or was rejected.
func dagTemplate(p *pipeline.Pipeline) wfv1.Template {
	hasChanges := taskParam(names.StepPlan, pipeline.ResultHasChanges) + " == true"
	// clone, init and plan are containers of the plan task's pod, after
	// restore-state's pod (as the runner) when the run has kept states.
	tasks := []wfv1.DAGTask{{Name: names.StepPlan, Template: names.StepPlan}}
	if _, ok := p.StepNamed(names.StepRestoreState); ok {
		tasks = []wfv1.DAGTask{{Name: names.StepRestoreState, Template: names.StepRestoreState}, {Name: names.StepPlan, Template: names.StepPlan, Depends: names.StepRestoreState}}
	}
	// Checks run side by side once the plan has changes; the gate (or
	// apply) waits for all of them. A failed check leaves the gate and
	// apply omitted and fails the Workflow. ("check" alone in depends is
	// Succeeded, Skipped or Daemoned.)
	afterPlan := names.StepPlan
	for _, c := range p.Checks() {
		tasks = append(tasks, wfv1.DAGTask{Name: c.Name, Template: c.Name, Depends: names.StepPlan, When: hasChanges})
		afterPlan += " && " + c.Name
	}
	if pipeline.PlanOnly(p.Type) {
		return wfv1.Template{Name: entrypoint, DAG: &wfv1.DAGTemplate{Tasks: tasks}}
	}
	// apply's pod also runs export-outputs (a run that applies); after a
	// plan without changes the export-outputs task runs it alone.
	applyTask := wfv1.DAGTask{Name: names.StepApply, Template: names.StepApply}
	if p.ManualApproval {
		tasks = append(tasks, wfv1.DAGTask{
			Name:     names.StepApprove,
			Template: names.StepApprove,
			Depends:  afterPlan,
			When:     hasChanges,
			Arguments: wfv1.Arguments{Parameters: []wfv1.Parameter{
				{Name: paramDigest, Value: wfv1.AnyStringPtr(taskParam(names.StepPlan, pipeline.ResultDigest))},
				{Name: paramSummary, Value: wfv1.AnyStringPtr(taskParam(names.StepPlan, pipeline.ResultSummary))},
				{Name: paramApprovedDigest, Value: wfv1.AnyStringPtr(taskParam(names.StepPlan, pipeline.ResultDigest))},
			}},
		})
		applyTask.Depends = names.StepApprove + ".Succeeded"
		applyTask.When = fmt.Sprintf("'%s' == '%s'", taskParam(names.StepApprove, paramDecision), decisionApprove)
		applyTask.Arguments.Parameters = []wfv1.Parameter{{Name: paramApprovedDigest, Value: wfv1.AnyStringPtr(taskParam(names.StepApprove, paramApprovedDigest))}}
	} else {
		applyTask.Depends = afterPlan
		applyTask.When = hasChanges
		applyTask.Arguments.Parameters = []wfv1.Parameter{{Name: paramApprovedDigest, Value: wfv1.AnyStringPtr(taskParam(names.StepPlan, pipeline.ResultDigest))}}
	}
	tasks = append(tasks, applyTask)
	if p.Type == infrav1.RunApply {
		// After apply is decided, so that its node does not read Skipped
		// while the gate waits: apply is skipped after a plan without
		// changes (Auto), or omitted after the gate was (Manual).
		exportDepends := names.StepApply + ".Skipped"
		if p.ManualApproval {
			exportDepends += " || " + names.StepApprove + ".Skipped"
		}
		tasks = append(tasks, wfv1.DAGTask{Name: names.StepExport, Template: names.StepExport, Depends: exportDepends,
			When: taskParam(names.StepPlan, pipeline.ResultHasChanges) + " == false"})
	}
	return wfv1.Template{Name: entrypoint, DAG: &wfv1.DAGTemplate{Tasks: tasks}}
}

// gateTemplate is the approval gate: a suspend node without a duration (a
// duration would auto-approve when it expires; opr8r enforces the timeout).
//
// The Argo UI's RESUME shows every input parameter in its confirmation
// (an enum as a dropdown), sets an output of the same name for each (`argo
// node set`), which Argo refuses for an output the template does not
// supply, and then resumes the node by id, which fills no defaults: so
// inputs and supplied outputs are the same four, and apply's
// approved-digest is set even there. The digest and summary are shown in
// the confirmation for the person to read.
func gateTemplate() wfv1.Template {
	supplied := func(name, def string) wfv1.Parameter {
		return wfv1.Parameter{Name: name, ValueFrom: &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}, Default: wfv1.AnyStringPtr(def)}}
	}
	return wfv1.Template{
		Name: names.StepApprove,
		Inputs: wfv1.Inputs{Parameters: []wfv1.Parameter{
			{Name: paramDigest, Description: wfv1.AnyStringPtr("the digest of the plan waiting (kubectl tfrun plan shows it)")},
			{Name: paramSummary, Description: wfv1.AnyStringPtr("what the plan does: resources to add, change, destroy and replace")},
			{
				Name:        paramDecision,
				Default:     wfv1.AnyStringPtr(decisionApprove),
				Enum:        []wfv1.AnyString{decisionApprove, decisionReject},
				Description: wfv1.AnyStringPtr("approve applies the plan whose digest is shown; reject skips apply"),
			},
			{Name: paramApprovedDigest, Description: wfv1.AnyStringPtr("the digest apply checks the plan file against")},
		}},
		Outputs: wfv1.Outputs{Parameters: []wfv1.Parameter{
			supplied(paramDecision, decisionApprove),
			supplied(paramApprovedDigest, "{{inputs.parameters."+paramApprovedDigest+"}}"),
			supplied(paramDigest, "{{inputs.parameters."+paramDigest+"}}"),
			supplied(paramSummary, "{{inputs.parameters."+paramSummary+"}}"),
		}},
		Suspend: &wfv1.SuspendTemplate{},
	}
}

var replacer = strings.NewReplacer(
	pipeline.PhOwnerUID, "{{workflow.uid}}",
	pipeline.PhOwnerName, "{{workflow.name}}",
	pipeline.PhResults, "--results-dir="+resultsDir,
	pipeline.PhApprovedDigest, "{{inputs.parameters."+paramApprovedDigest+"}}",
	pipeline.PhOwnerKind, workflowKind,
	pipeline.PhOwnerAPI, wfv1.SchemeGroupVersion.String(),
	// Argo reads a failed container's termination message into the node's message.
	pipeline.PhErrorFile, "/dev/termination-log",
)

// containerTemplate runs one step in a pod of its own: restore-state, a
// check, or cleanup.
func containerTemplate(p *pipeline.Pipeline, s pipeline.Step, stepImage string) wfv1.Template {
	t := wfv1.Template{
		Name:               s.Name,
		Metadata:           wfv1.Metadata{Labels: map[string]string{infrav1.StepLabel: s.Name}},
		Volumes:            p.ScratchVolumes(),
		ServiceAccountName: s.ServiceAccountName,
	}
	if p.InstallsStepBinary(s) {
		t.InitContainers = []wfv1.UserContainer{{Container: pipeline.InstallStepContainer(p, stepImage, s.Resources)}}
	}
	c := s.Container("main", p, replacer)
	c.VolumeMounts = append([]corev1.VolumeMount{s.WorkspaceMount()}, c.VolumeMounts...)
	t.Container = &c
	if d := pipeline.Deadline(s); d > 0 {
		// The step's own deadline: Argo sets none by default.
		t.ActiveDeadlineSeconds = ptr.To(intstr.FromInt32(int32(d.Seconds())))
	}
	for _, r := range s.Results {
		t.Outputs.Parameters = append(t.Outputs.Parameters, wfv1.Parameter{
			Name: r,
			// The default keeps a failed step's own message: without it Argo
			// would report the missing result file instead.
			ValueFrom: &wfv1.ValueFrom{Path: resultsDir + "/" + r, Default: wfv1.AnyStringPtr("")},
		})
	}
	return t
}
