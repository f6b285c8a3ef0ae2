package tekton

import (
	"fmt"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// What the Tekton engine owns beyond building and observing PipelineRuns:
// its scheme, how the manager's cache slims PipelineRuns, TaskRuns and
// CustomRuns, and where step logs are.

var (
	_ engine.SchemeAdder  = Engine{}
	_ engine.CacheSlimmer = Engine{}
	_ engine.LogLocator   = Engine{}
)

// AddToScheme implements engine.SchemeAdder.
func (Engine) AddToScheme(s *runtime.Scheme) error {
	if err := tektonv1.AddToScheme(s); err != nil {
		return err
	}
	return tektonv1beta1.AddToScheme(s)
}

// SlimForCache implements engine.CacheSlimmer. Of a PipelineRun the engine
// reads its labels, spec.status (Cancel) and status without the resolved
// pipeline spec; of a TaskRun its labels, owner and status without the task
// spec. CustomRuns stay whole: the approval controller updates their status.
func (Engine) SlimForCache(obj any) bool {
	switch o := obj.(type) {
	case *tektonv1.PipelineRun:
		o.Spec = tektonv1.PipelineRunSpec{Status: o.Spec.Status}
		o.Status.PipelineSpec = nil
		o.Status.Provenance = nil
		o.Annotations = nil
	case *tektonv1.TaskRun:
		o.Spec = tektonv1.TaskRunSpec{Status: o.Spec.Status}
		o.Status.TaskSpec = nil
		o.Status.Provenance = nil
		o.Annotations = nil
	case *tektonv1beta1.CustomRun:
	default:
		return false
	}
	return true
}

// StepLogs implements engine.LogLocator: each task's pod carries the
// pipelineRun and pipelineTask labels; clone, init and plan are steps of
// the plan task's pod, in containers named step-<step>.
func (Engine) StepLogs(child, step string) (string, string) {
	task := step
	if step == pipeline.StepClone || step == pipeline.StepInit {
		task = taskPlan
	}
	return PipelineRunLabel + "=" + child + "," + PipelineTaskLabel + "=" + task, "step-" + step
}

// LogsHint implements engine.LogLocator.
func (Engine) LogsHint(namespace, child string) string {
	return fmt.Sprintf("tkn pipelinerun logs %s -n %s", child, namespace)
}
