package pipeline

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
)

// Pipeline is one run, described independently of any engine.
type Pipeline struct {
	// Type is apply or destroy.
	Type infrav1.RunType
	// Name is the child's name.
	Name string
	// Namespace is the run's namespace.
	Namespace string
	// Steps in order; the approve step is a gate, not a container.
	Steps []Step
	// Cleanup always runs at the end (Argo onExit, Tekton finally).
	Cleanup Step
	// ManualApproval is true when the pipeline has an approval gate.
	ManualApproval bool
	// Volumes are the Secret, ConfigMap and provider cache volumes that
	// steps mount.
	Volumes []corev1.Volume
	// ServiceAccountName of the step pods.
	ServiceAccountName string
	// WorkspaceSize and StorageClassName of the shared workspace volume.
	WorkspaceSize    resource.Quantity
	StorageClassName *string
	// NodeSelector and Tolerations of the step pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// PodSecurityContext of the step pods.
	PodSecurityContext *corev1.PodSecurityContext
	// Labels go on the child and every pod.
	Labels map[string]string
	// ImagePullPolicy of every container.
	ImagePullPolicy corev1.PullPolicy
	// StepBinaryImage, when set, is the image the step-binary volume
	// mounts (a Kubernetes image volume): steps run opr8r-step from it and
	// no container installs it. Empty: InstallStepContainer copies it into
	// an emptyDir in each pod that needs it.
	StepBinaryImage string `json:",omitempty"`
}

// Step is one container step, or the approval gate.
type Step struct {
	// Name is the step's name.
	Name string
	// Gate is true for the approval gate, which runs no container.
	Gate bool
	// Image is the container image.
	Image string
	// Command is the entrypoint.
	Command []string
	// Args are the arguments, which may contain placeholders.
	Args []string
	// Env holds non-secret environment variables.
	Env []corev1.EnvVar
	// VolumeMounts of Secret and ConfigMap volumes (the workspace, tmp and
	// step-binary volumes are added by engines).
	VolumeMounts []corev1.VolumeMount
	// WorkspaceReadOnly mounts the shared workspace read-only (checks).
	WorkspaceReadOnly bool `json:",omitempty"`
	// Results are the names of the small results the step writes.
	Results []string
	// NeedsStepBinary is true when the image lacks opr8r-step, so engines
	// install it from the step image into the StepBinVolume first.
	NeedsStepBinary bool
	// Resources of the container.
	Resources corev1.ResourceRequirements
	// SecurityContext of the container.
	SecurityContext *corev1.SecurityContext
	// ServiceAccountName, when set, is the service account of the step's
	// pod instead of the pipeline's (checks: Config.CheckServiceAccount,
	// which reads no Secret and holds no cloud identity).
	ServiceAccountName string `json:",omitempty"`
	// Timeout is the step's budget (spec.timeouts): opr8r-step interrupts
	// terraform at it (--timeout), and the engine ends the pod StopGrace
	// later (Deadline).
	Timeout time.Duration `json:",omitempty"`
}

// Timeouts of steps when neither the TerraformRun (spec.timeouts) nor the
// manager (--default-plan-timeout, --default-apply-timeout) sets one. No
// engine default applies: every step carries its own deadline.
const (
	DefaultPlanTimeout  = time.Hour
	DefaultApplyTimeout = 24 * time.Hour
	// StopGrace is how long after a step's timeout its engine ends the
	// pod: opr8r-step interrupts terraform at the timeout and gives it
	// InterruptGrace to stop and write its state.
	StopGrace = 5 * time.Minute
	// InterruptGrace is how long opr8r-step waits for an interrupted
	// terraform to stop before it kills it.
	InterruptGrace = 4 * time.Minute
)

// Deadline is how long the engine lets a pod that runs these steps live:
// their timeouts, plus StopGrace; zero when no step has a timeout.
func Deadline(steps ...Step) time.Duration {
	var d time.Duration
	for _, s := range steps {
		d += s.Timeout
	}
	if d == 0 {
		return 0
	}
	return d + StopGrace
}

// stepTimeouts are the plan-side and apply timeouts of a run of type t:
// spec.timeouts, else the manager's defaults, else the package's; a
// destroy's apply takes spec.timeouts.destroy, else the apply's.
func stepTimeouts(run *infrav1.TerraformRun, cfg engine.Config, t infrav1.RunType) (plan, apply time.Duration) {
	plan, apply = cmpDuration(cfg.PlanTimeout, DefaultPlanTimeout), cmpDuration(cfg.ApplyTimeout, DefaultApplyTimeout)
	to := run.Spec.Timeouts
	if to == nil {
		return plan, apply
	}
	if to.Plan != nil {
		plan = to.Plan.Duration
	}
	if to.Apply != nil {
		apply = to.Apply.Duration
	}
	if t == infrav1.RunDestroy && to.Destroy != nil {
		apply = to.Destroy.Duration
	}
	return plan, apply
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// RunDeadline is how long a run of type t may take on its engine, waiting
// for approval aside: its plan-side steps' and its apply's timeouts, and a
// StopGrace for each, on top of which the cleanup runs.
func RunDeadline(run *infrav1.TerraformRun, cfg engine.Config, t infrav1.RunType) time.Duration {
	plan, apply := stepTimeouts(run, cfg, t)
	return 3*plan + apply + 4*StopGrace
}

// setTimeouts gives every step its timeout and tells opr8r-step
// (--timeout, right after the step's name, before a check's own command).
func setTimeouts(p *Pipeline, run *infrav1.TerraformRun, cfg engine.Config) {
	plan, apply := stepTimeouts(run, cfg, p.Type)
	set := func(s *Step) {
		if s.Gate || len(s.Args) == 0 {
			return
		}
		s.Timeout = plan
		flags := []string{s.Args[0], "--timeout=" + plan.String()}
		if s.Name == names.StepApply {
			s.Timeout = apply
			flags[1] = "--timeout=" + apply.String()
			if cfg.StateRetry > 0 {
				flags = append(flags, "--state-retry="+cfg.StateRetry.String())
			}
		}
		s.Args = append(flags, s.Args[1:]...)
	}
	for i := range p.Steps {
		set(&p.Steps[i])
	}
	set(&p.Cleanup)
}

// Build describes the pipeline of one run. The run must have defaults applied.
func Build(req engine.Request) (*Pipeline, error) {
	b, err := newBuilder(req)
	if err != nil {
		return nil, err
	}
	run := req.Run
	p := &Pipeline{
		Type:               req.Type,
		Name:               req.Name,
		Namespace:          run.Namespace,
		ManualApproval:     HasGate(run, req.Type),
		Volumes:            b.volumes,
		ServiceAccountName: run.Spec.Runner.ServiceAccountName,
		WorkspaceSize:      *run.Spec.Runner.Workspace.Size,
		StorageClassName:   run.Spec.Runner.Workspace.StorageClassName,
		NodeSelector:       run.Spec.Runner.NodeSelector,
		Tolerations:        run.Spec.Runner.Tolerations,
		PodSecurityContext: podSecurityContext(run.Spec.Runner.SecurityContext),
		Labels:             ChildLabels(run, req.Type, req.SpecHash, req.Number),
		ImagePullPolicy:    corev1.PullPolicy(req.Config.ImagePullPolicy),
	}
	if req.Config.StepBinaryFromImage {
		p.StepBinaryImage = req.Config.StepImage
	}
	if req.KeptStates {
		p.Steps = append(p.Steps, b.restoreState())
	}
	p.Steps = append(p.Steps, b.clone(), b.init(), b.plan())
	p.Steps = append(p.Steps, b.checks()...)
	p.Volumes = b.volumes // with the checks' ConfigMaps
	if !PlanOnly(req.Type) {
		if p.ManualApproval {
			p.Steps = append(p.Steps, Step{Name: names.StepApprove, Gate: true})
		}
		p.Steps = append(p.Steps, b.apply())
		if req.Type == infrav1.RunApply {
			p.Steps = append(p.Steps, b.export())
		}
	}
	p.Cleanup = b.cleanup()
	splitIdentities(p, run)
	previewIdentity(p, req)
	stateRoles(p, run, req)
	setTimeouts(p, run, req.Config)
	return p, nil
}

// newBuilder checks what a build needs (a source, a step image, a
// terraform image, a valid run) and gathers the inputs and volumes.
func newBuilder(req engine.Request) (*builder, error) {
	run := req.Run
	if run.Spec.Source.Git == nil && run.Spec.Source.OCI == nil && run.Spec.Source.Inline == nil && run.Spec.Source.ConfigMapRef == nil {
		return nil, fmt.Errorf("spec.source: one of git, oci, inline or configMapRef is required")
	}
	if req.Config.StepImage == "" {
		return nil, fmt.Errorf("the manager has no step image configured (--step-image)")
	}
	if err := Validate(run); err != nil {
		return nil, err
	}
	b := &builder{req: req, run: run, tfImage: run.Spec.Terraform.Image}
	if b.tfImage == "" {
		return nil, fmt.Errorf("spec.terraform.image is empty and the manager has no --terraform-image")
	}
	enc, embedded, err := EmbeddedInputs(run)
	if err != nil {
		return nil, err
	}
	if embedded {
		b.embedded = enc
	}
	b.collectVolumes()
	return b, nil
}

// splitIdentities runs the steps before the approval gate as the plan's
// service account, when the run has one of its own: they run the author's
// module, which nobody has approved yet. The steps after the gate then
// name the runner's account themselves, so that an engine that builds a
// later step from an earlier one's pod (the Job engine) never takes the
// plan's. restore-state runs as the runner, before the gate: it writes
// the state (the planner may only read it) and runs no module code.
func splitIdentities(p *Pipeline, run *infrav1.TerraformRun) {
	planSA, runner := run.Spec.Runner.PlanServiceAccountName, run.Spec.Runner.ServiceAccountName
	if planSA == "" || planSA == runner {
		return
	}
	beforeGate := true
	for i := range p.Steps {
		s := &p.Steps[i]
		switch {
		case s.Gate || s.Name == names.StepApply:
			beforeGate = false
			if s.Gate {
				continue
			}
			s.ServiceAccountName = runner
		case s.Name == names.StepRestoreState:
			s.ServiceAccountName = runner
		case s.ServiceAccountName != "":
			// a check's own account
		case beforeGate:
			s.ServiceAccountName = planSA
		default:
			s.ServiceAccountName = runner
		}
	}
	p.Cleanup.ServiceAccountName = runner
	if PlanOnly(p.Type) {
		p.Cleanup.ServiceAccountName = planSA
	}
}

// previewIdentity runs every step of a preview but its checks as the
// install's preview account, when it has one: a pull request's code
// runs under an identity of its own.
func previewIdentity(p *Pipeline, req engine.Request) {
	sa := req.Config.PreviewServiceAccount
	if !req.Preview || sa == "" {
		return
	}
	p.ServiceAccountName = sa
	for i := range p.Steps {
		if !names.IsCheck(p.Steps[i].Name) {
			p.Steps[i].ServiceAccountName = sa
		}
	}
	p.Cleanup.ServiceAccountName = sa
}

// Checks returns the pipeline's check steps, in order.
func (p *Pipeline) Checks() []Step {
	var out []Step
	for _, s := range p.Steps {
		if names.IsCheck(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

type builder struct {
	req     engine.Request
	run     *infrav1.TerraformRun
	tfImage string
	volumes []corev1.Volume
	// embedded holds the encoded inputs when they travel in the child
	// (EmbeddedInputs); empty when they are in the inputs ConfigMap.
	embedded string

	sourceMount  *corev1.VolumeMount
	credsMount   *corev1.VolumeMount
	backendMount *corev1.VolumeMount
	varsMounts   []corev1.VolumeMount
	depMounts    []corev1.VolumeMount
	depArgs      []string
	tfMounts     []corev1.VolumeMount // env and file secrets for every terraform step
	tfEnvArgs    []string
	tfEnv        []corev1.EnvVar
	// cacheMount is the namespace's shared provider cache, which only the
	// init step mounts (nil: no claim).
	cacheMount *corev1.VolumeMount
}

func (b *builder) addVolume(v corev1.Volume) { b.volumes = append(b.volumes, v) }

// StepNamed returns the pipeline's step (or cleanup) with that name.
func (p *Pipeline) StepNamed(name string) (Step, bool) {
	if name == p.Cleanup.Name {
		return p.Cleanup, true
	}
	for _, s := range p.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}

// Carried are the steps one pod runs, in order, starting with step, on the
// engines that fold the steps after apply into its pod (Tekton, Jobs): apply
// carries export-outputs (a run that applies) and cleanup; export-outputs
// carries cleanup. Any other step runs alone.
func Carried(step string, typ infrav1.RunType) []string {
	switch step {
	case names.StepApply:
		if typ == infrav1.RunApply {
			return []string{names.StepApply, names.StepExport, names.StepCleanup}
		}
		return []string{names.StepApply, names.StepCleanup}
	case names.StepExport:
		return []string{names.StepExport, names.StepCleanup}
	}
	return []string{step}
}

// CarriedSteps are the pipeline's steps that step's pod runs (Carried).
func (p *Pipeline) CarriedSteps(step string) []Step {
	var steps []Step
	for _, name := range Carried(step, p.Type) {
		if s, ok := p.StepNamed(name); ok {
			steps = append(steps, s)
		}
	}
	return steps
}
