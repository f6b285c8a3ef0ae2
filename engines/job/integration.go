package job

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opr8r/opr8r/pkg/names"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// What the Job engine owns beyond building, observing and driving its
// Jobs: which pods the manager caches, how it slims Jobs and pods, and
// where step logs are. Jobs and pods are in client-go's scheme already.

var (
	_ engine.CacheConfigurer = Engine{}
	_ engine.CacheSlimmer    = Engine{}
	_ engine.LogLocator      = Engine{}
)

// CacheByObject implements engine.CacheConfigurer: only the Job engine's
// own pods are cached, not every step pod of the other engines.
func (Engine) CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{infrav1.ManagedByLabel: infrav1.ManagedByValue, EngineLabel: string(infrav1.EngineJob)})},
	}
}

// SlimForCache implements engine.CacheSlimmer. Of a Job, Observe and the
// driver read its labels, the annotations of the gate, the suspend flag and
// its status (the driver reads the steps and the pod template past the
// cache); of a pod, its labels and container states.
func (Engine) SlimForCache(obj any) bool {
	switch o := obj.(type) {
	case *batchv1.Job:
		if o.Labels[EngineLabel] != string(infrav1.EngineJob) {
			return false
		}
		delete(o.Annotations, annoSteps)
		delete(o.Annotations, annoWorkspace)
		o.Spec = batchv1.JobSpec{Suspend: o.Spec.Suspend}
		o.Status.UncountedTerminatedPods = nil
	case *corev1.Pod:
		if o.Labels[EngineLabel] != string(infrav1.EngineJob) {
			return false
		}
		o.Spec = corev1.PodSpec{}
		o.Status = corev1.PodStatus{Phase: o.Status.Phase, InitContainerStatuses: slimStatuses(o.Status.InitContainerStatuses),
			ContainerStatuses: slimStatuses(o.Status.ContainerStatuses)}
		o.Annotations = nil
	default:
		return false
	}
	return true
}

func slimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, len(in))
	for i, cs := range in {
		out[i] = corev1.ContainerStatus{Name: cs.Name, State: cs.State}
	}
	return out
}

// StepLogs implements engine.LogLocator: restore-state is the container
// of the child's pod when the run has it; clone, init and plan are
// containers of the plan Job's pod; apply, export-outputs and cleanup are
// containers of every step Job that may carry them (carried), so the
// selector names those Jobs and the newest pod with the container is read;
// each container is named after its step.
func (Engine) StepLogs(child, step string) (string, string) {
	var jobs []string
	switch {
	case step == names.StepClone || step == names.StepInit || step == names.StepPlan:
		jobs = []string{names.StepPlan}
	case step == names.StepRestoreState:
		jobs = []string{step}
	case names.IsCheck(step):
		jobs = []string{stepChecks}
	default:
		for _, s := range stepJobs {
			if slices.Contains(pipeline.Carried(s.step, infrav1.RunApply), step) {
				jobs = append(jobs, s.step)
			}
		}
	}
	return ChildLabel + "=" + child + "," + infrav1.StepLabel + " in (" + strings.Join(jobs, ",") + ")", step
}

// LogsHint implements engine.LogLocator. --ignore-errors: the pod of a
// step that failed never starts the steps it carries after it, and kubectl
// logs --all-containers stops at the first such container without it.
func (Engine) LogsHint(namespace, child string) string {
	return fmt.Sprintf("kubectl logs -n %s -l %s=%s --all-containers --prefix --ignore-errors", namespace, ChildLabel, child)
}
