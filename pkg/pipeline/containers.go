package pipeline

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// PodSecurityContext is the hardened pod security context of step pods.
func PodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		FSGroup:        ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// podSecurityContext applies the run's chosen user and groups to the
// hardened pod security context.
func podSecurityContext(sc *infrav1.RunnerSecurityContext) *corev1.PodSecurityContext {
	p := PodSecurityContext()
	if sc == nil {
		return p
	}
	if sc.RunAsUser != nil {
		p.RunAsUser = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		p.RunAsGroup = sc.RunAsGroup
	}
	if sc.FSGroup != nil {
		p.FSGroup = sc.FSGroup
	}
	return p
}

// ContainerSecurityContext is the hardened security context of every step.
func ContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// DefaultResources are the step containers' requests and limits when
// spec.runner.resources is unset.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("2Gi"),
		},
	}
}

// Replace substitutes placeholders in args with an engine's expressions.
func Replace(args []string, r *strings.Replacer) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

// InstallStepContainer copies opr8r-step from the step image into the
// StepBinVolume, for steps that run in a stock Terraform or OpenTofu image
// (which has only sh). Every engine runs it before such steps.
func InstallStepContainer(p *Pipeline, stepImage string, res corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{
		Name:            "install-opr8r-step",
		Image:           stepImage,
		ImagePullPolicy: p.ImagePullPolicy,
		Command:         []string{ImageStepBinary},
		Args:            []string{"install", "--dest=" + StepBinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: StepBinVolume, MountPath: StepBinDir}},
		SecurityContext: ContainerSecurityContext(),
		Resources:       res,
	}
}

// Container is a step's container: its placeholders replaced by the
// engine's expressions, the tmp volume and (when it needs it) the installed
// step binary mounted, then the step's own mounts. Engines add the
// workspace their own way.
func (s Step) Container(name string, p *Pipeline, r *strings.Replacer) corev1.Container {
	mounts := []corev1.VolumeMount{{Name: TmpVolume, MountPath: TmpDir}}
	if s.NeedsStepBinary {
		mounts = append(mounts, corev1.VolumeMount{Name: StepBinVolume, MountPath: StepBinDir, ReadOnly: true})
	}
	return corev1.Container{
		Name:            name,
		Image:           s.Image,
		ImagePullPolicy: p.ImagePullPolicy,
		Command:         s.Command,
		Args:            Replace(s.Args, r),
		Env:             s.Env,
		VolumeMounts:    append(mounts, s.VolumeMounts...),
		Resources:       s.Resources,
		SecurityContext: s.SecurityContext,
	}
}

// WorkspaceMount is how a step mounts the shared workspace.
func (s Step) WorkspaceMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: WorkspaceVolume, MountPath: WorkspaceDir, ReadOnly: s.WorkspaceReadOnly}
}
