// Package job runs TerraformRun pipelines as plain Kubernetes Jobs, with no
// workflow engine installed: what a cluster without Argo or Tekton has.
//
// A run is a sequence of Jobs that opr8r itself drives (engine.Driver):
//
//	<child>          the child: init containers clone and init, container plan
//	                 (when the run has kept states: restore-state, as the
//	                 runner, and the plan Job is <child>-plan after it)
//	<child>-checks   spec.checks, a container each, after a plan with changes
//	<child>-apply    once the plan is approved (at once with Auto approval):
//	                 apply, then export-outputs and cleanup in the same pod
//	<child>-export   export-outputs then cleanup, after a plan without changes
//	<child>-cleanup  cleanup alone, when the run ends any other way: stopped,
//	                 rejected, failed, plan-only, or a step Job whose pod did
//	                 not get to run its cleanup (the guaranteed fallback)
//
// A step Job runs its steps one after another in one pod (all but the last
// as init containers), so a run that applies makes two pods, not four: each
// hand-off from one Job to the next costs seconds (the Job controller, the
// scheduler, the kubelet, the manager seeing the end). Its annotation
// infra.opr8r.io/carries lists the steps it runs.
//
// They share a workspace volume, <child>-workspace, which the driver creates
// with the child and deletes once cleanup has finished. The approval gate is
// the driver waiting between the plan Job and the apply Job; a decision is
// recorded in the child's annotations. Cancelling suspends the plan Job or
// deletes the active step Job; cleanup still runs.
//
// Step results (commit, has-changes, digest, summary) travel as a JSON
// object in each container's termination message, and a failing step's
// one-line summary replaces it there; Observe reads them from the pods.
package job

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;create;delete

// Labels and annotations of the Job engine's objects.
const (
	// ChildLabel on every Job and pod of a run names the run's child.
	ChildLabel = "infra.opr8r.io/child"
	// EngineLabel marks the Job engine's Jobs and pods; the manager caches
	// only pods that carry it.
	EngineLabel = "infra.opr8r.io/engine"

	// annotations on the child
	annoSteps       = "infra.opr8r.io/steps"
	annoApproval    = "infra.opr8r.io/approval"
	annoDecision    = "infra.opr8r.io/gate-decision"
	annoDigest      = "infra.opr8r.io/gate-digest"
	annoDecidedBy   = "infra.opr8r.io/gate-decided-by"
	annoDecidedAt   = "infra.opr8r.io/gate-decided-at"
	annoGateMessage = "infra.opr8r.io/gate-message"
	annoCancelled   = engine.CancelledAnnotation
	annoWorkspace   = "infra.opr8r.io/workspace"
	annoChecks      = "infra.opr8r.io/checks"
	// annoCarries on a step Job lists the steps its pod runs, in order.
	annoCarries = "infra.opr8r.io/carries"

	// stepChecks labels the Job that runs spec.checks, one container each.
	stepChecks = "checks"

	approvalManual  = "manual"
	decisionApprove = "approve"
	decisionReject  = "reject"

	// terminationLog is where steps write results and failure summaries.
	terminationLog = "/dev/termination-log"
	// envOwnerUID carries the child's uid into the containers: the plan
	// Job's read it from the label the Job controller puts on its pods; the
	// driver sets it in the later Jobs.
	envOwnerUID = "OPR8R_OWNER_UID"
	// envApprovedDigest carries the approved plan's digest into apply.
	envApprovedDigest = "OPR8R_APPROVED_DIGEST"
)

// Engine is the Job engine.
type Engine struct{}

var (
	_ engine.Engine    = Engine{}
	_ engine.Driver    = Engine{}
	_ engine.Sealer    = Engine{}
	_ engine.Approver  = Engine{}
	_ engine.Canceller = Engine{}
)

// New returns the Job engine.
func New() Engine { return Engine{} }

// Name implements engine.Engine.
func (Engine) Name() infrav1.EngineName { return infrav1.EngineJob }

// ChildGVK implements engine.Engine.
func (Engine) ChildGVK() schema.GroupVersionKind { return batchv1.SchemeGroupVersion.WithKind("Job") }

// NewChild implements engine.Engine.
func (Engine) NewChild() client.Object { return &batchv1.Job{} }

// NewChildList implements engine.Engine.
func (Engine) NewChildList() client.ObjectList { return &batchv1.JobList{} }

// stepJobs are the Jobs after the plan Job, in order, by step.
var stepJobs = []struct{ step, suffix string }{
	{names.StepApply, "apply"},
	{names.StepExport, "export"},
	{names.StepCleanup, "cleanup"},
}

// stepJobName is the name of a step's Job; the plan Job is the child,
// unless the child runs restore-state: then the plan Job is <child>-plan.
func stepJobName(child, step string) string {
	if step == stepChecks || step == names.StepPlan {
		return child + "-" + step
	}
	for _, s := range stepJobs {
		if s.step == step {
			return child + "-" + s.suffix
		}
	}
	return child
}

// workspaceName is the run's workspace volume claim.
func workspaceName(child string) string { return child + "-" + pipeline.WorkspaceVolume }

// Build implements engine.Engine: the plan Job. The later steps' containers
// travel in its annotation infra.opr8r.io/steps, so that the Jobs the driver
// creates run exactly what this run was built with, whatever the spec says
// by then.
func (Engine) Build(req engine.Request) (client.Object, error) {
	p, err := pipeline.Build(req)
	if err != nil {
		return nil, err
	}
	r := replacer(p.Name)
	clone, _ := p.StepNamed(names.StepClone)
	ini, _ := p.StepNamed(names.StepInit)
	plan, _ := p.StepNamed(names.StepPlan)
	first, firstSteps := names.StepPlan, []pipeline.Step{clone, ini, plan}
	var later []pipeline.Step
	if restore, ok := p.StepNamed(names.StepRestoreState); ok {
		// The child runs restore-state alone, as the runner; the driver
		// makes the plan Job once it succeeded.
		first, firstSteps = names.StepRestoreState, []pipeline.Step{restore}
		later = append(later, clone, ini, plan)
	}
	later = append(later, p.Checks()...)
	for _, s := range stepJobs {
		if st, ok := p.StepNamed(s.step); ok {
			later = append(later, st)
		}
	}
	steps, err := json.Marshal(laterSteps{Steps: later, Volumes: p.Volumes})
	if err != nil {
		return nil, err
	}
	tmpl := podTemplate(p, r, first, req.Config.StepImage, firstSteps...)
	deadline := pipeline.Deadline(firstSteps...)
	ownerFromLabel(&tmpl.Spec)
	ws, err := json.Marshal(workspace{Size: p.WorkspaceSize.String(), StorageClassName: p.StorageClassName})
	if err != nil {
		return nil, err
	}
	approval := "auto"
	if p.ManualApproval {
		approval = approvalManual
	}
	annotations := map[string]string{annoSteps: string(steps), annoApproval: approval, annoWorkspace: string(ws),
		"infra.opr8r.io/description": fmt.Sprintf("terraform %s %s/%s", p.Type, req.Run.Namespace, req.Run.Name)}
	if checks := p.Checks(); len(checks) > 0 {
		names := make([]string, len(checks))
		for i, c := range checks {
			names[i] = c.Name
		}
		annotations[annoChecks] = strings.Join(names, ",")
	}
	j := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, Labels: jobLabels(p, req.Name, first),
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(req.Run, infrav1.GroupVersion.WithKind("TerraformRun"))},
		},
		Spec: jobSpec(tmpl, deadline),
	}
	return j, nil
}

// Sealed implements engine.Sealer: everything the driver reads back from
// the child to make its later Jobs: the later steps, volumes, checks,
// approval mode and workspace it carries in annotations, and the pod
// settings those Jobs copy from it, in a stable form.
func (Engine) Sealed(obj client.Object) ([]byte, error) {
	child, ok := obj.(*batchv1.Job)
	if !ok {
		return nil, fmt.Errorf("job: expected a Job, got %T", obj)
	}
	spec := child.Spec.Template.Spec
	// Only what the API server keeps as written: it defaults a container's
	// imagePullPolicy, so that is left out (it decides nothing a tenant
	// could use: admission guards the child's spec anyway).
	sealed := struct {
		Annotations     map[string]string
		ServiceAccount  string
		SecurityContext *corev1.PodSecurityContext
		NodeSelector    map[string]string
		Tolerations     []corev1.Toleration
		InstallImage    string
		StepBinaryImage string `json:",omitempty"` // absent from the seals of children made before it
	}{Annotations: map[string]string{}, ServiceAccount: spec.ServiceAccountName, SecurityContext: spec.SecurityContext,
		NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations, InstallImage: installImage(child), StepBinaryImage: stepBinaryImage(child)}
	for _, k := range []string{annoSteps, annoApproval, annoChecks, annoWorkspace} {
		sealed.Annotations[k] = child.Annotations[k]
	}
	return json.Marshal(sealed)
}

// verified reads the child past the cache and has its seal checked: the
// driver makes nothing from a child someone else changed.
func verified(ctx context.Context, api client.Reader, child *batchv1.Job, verify func(client.Object) error) (*batchv1.Job, error) {
	full, err := fullChild(ctx, api, child)
	if err != nil {
		return nil, err
	}
	if verify == nil {
		return nil, fmt.Errorf("job %s: %w: no seal to check it against", child.Name, engine.ErrSealBroken)
	}
	if err := verify(full); err != nil {
		return nil, fmt.Errorf("job %s: %w (its steps, approval mode or pod settings differ from what opr8r built): opr8r creates no further Job for it; delete the TerraformRun's child and rerun", child.Name, err)
	}
	return full, nil
}

// laterSteps are the steps after the plan, as the child carries them.
type laterSteps struct {
	Steps   []pipeline.Step `json:"steps"`
	Volumes []corev1.Volume `json:"volumes,omitempty"`
}

// workspace is the workspace volume's size and class, as the child carries them.
type workspace struct {
	Size             string  `json:"size"`
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// replacer maps the pipeline's placeholders to what a child's Jobs have.
// The owner's uid is known only once the child exists, and the approved
// digest once the plan is approved: both come from the environment.
func replacer(child string) *strings.Replacer {
	return strings.NewReplacer(
		pipeline.PhOwnerUID, "$("+envOwnerUID+")",
		pipeline.PhOwnerName, child,
		pipeline.PhOwnerKind, "Job",
		pipeline.PhOwnerAPI, batchv1.SchemeGroupVersion.String(),
		pipeline.PhResults, "--results-file="+terminationLog,
		pipeline.PhErrorFile, terminationLog,
		pipeline.PhApprovedDigest, "$("+envApprovedDigest+")",
	)
}

func jobLabels(p *pipeline.Pipeline, child, step string) map[string]string {
	l := maps.Clone(p.Labels)
	l[ChildLabel] = child
	l[EngineLabel] = string(infrav1.EngineJob)
	l[infrav1.StepLabel] = step
	return l
}

// jobSpec runs a pod once: a failed step is not retried (Terraform steps
// are not idempotent), and nothing deletes the Job before opr8r has read it.
// The Job ends its pod at the steps' deadline (pipeline.Deadline), if any.
func jobSpec(tmpl corev1.PodTemplateSpec, deadline time.Duration) batchv1.JobSpec {
	spec := batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: tmpl}
	if deadline > 0 {
		spec.ActiveDeadlineSeconds = ptr.To(int64(deadline.Seconds()))
	}
	return spec
}

// podTemplate is the pod of one Job: the steps' containers (the last one is
// the main container, the others run before it as init containers),
// preceded by the installer of opr8r-step when a step needs it.
func podTemplate(p *pipeline.Pipeline, r *strings.Replacer, step, stepImage string, steps ...pipeline.Step) corev1.PodTemplateSpec {
	var cs []corev1.Container
	for i, s := range steps {
		if p.InstallsStepBinary(s) && (i == 0 || !p.InstallsStepBinary(steps[i-1])) {
			cs = append(cs, pipeline.InstallStepContainer(p, stepImage, s.Resources))
		}
		c := s.Container(s.Name, p, r)
		c.VolumeMounts = append([]corev1.VolumeMount{s.WorkspaceMount()}, c.VolumeMounts...)
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
		cs = append(cs, c)
	}
	spec := podSpec(p, p.Name, p.UsedVolumes(steps...))
	if sa := steps[len(steps)-1].ServiceAccountName; sa != "" {
		// The checks' Job (every step of it is a check), restore-state's
		// (the runner), the plan's (the plan's account).
		spec.ServiceAccountName = sa
	}
	spec.InitContainers, spec.Containers = cs[:len(cs)-1], cs[len(cs)-1:]
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: jobLabels(p, p.Name, step)}, Spec: spec}
}

// ownerFromLabel gives the plan Job's containers the child's uid: the Job
// controller labels the child's pods with it.
func ownerFromLabel(spec *corev1.PodSpec) {
	env := corev1.EnvVar{Name: envOwnerUID, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + batchv1.ControllerUidLabel + "']"},
	}}
	for i := range spec.InitContainers {
		spec.InitContainers[i].Env = append(spec.InitContainers[i].Env, env)
	}
	for i := range spec.Containers {
		spec.Containers[i].Env = append(spec.Containers[i].Env, env)
	}
}

func podSpec(p *pipeline.Pipeline, child string, volumes []corev1.Volume) corev1.PodSpec {
	vols := append(p.ScratchVolumes(), corev1.Volume{Name: pipeline.WorkspaceVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: workspaceName(child)},
	}})
	return corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: p.ServiceAccountName,
		SecurityContext:    p.PodSecurityContext,
		NodeSelector:       p.NodeSelector,
		Tolerations:        p.Tolerations,
		Volumes:            append(vols, volumes...),
	}
}

// workspaceClaim is the run's workspace volume, owned by the child.
func workspaceClaim(child *batchv1.Job) (*corev1.PersistentVolumeClaim, error) {
	var ws workspace
	if err := json.Unmarshal([]byte(child.Annotations[annoWorkspace]), &ws); err != nil {
		return nil, fmt.Errorf("job %s has no readable %s annotation: %w", child.Name, annoWorkspace, err)
	}
	size, err := resource.ParseQuantity(ws.Size)
	if err != nil {
		return nil, fmt.Errorf("job %s: workspace size: %w", child.Name, err)
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: workspaceName(child.Name), Namespace: child.Namespace, Labels: maps.Clone(child.Labels),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(child, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ws.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}, nil
}
