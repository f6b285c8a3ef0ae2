package argo

import (
	"fmt"
	"strings"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
)

// What the Argo engine owns beyond building and observing Workflows: its
// scheme, how the manager's cache slims Workflows, where step logs are and
// how to approve in Argo.

var (
	_ engine.SchemeAdder    = Engine{}
	_ engine.CacheSlimmer   = Engine{}
	_ engine.LogLocator     = Engine{}
	_ engine.ApprovalHinter = Engine{}
)

// AddToScheme implements engine.SchemeAdder.
func (Engine) AddToScheme(s *runtime.Scheme) error { return wfv1.AddToScheme(s) }

// SlimForCache implements engine.CacheSlimmer. Of a Workflow the engine
// reads its labels, spec.shutdown and why (Cancel), the gate annotations
// (PublishGate, who resumed) and the parts of its status that Observe and
// Approve read (slimWorkflowStatus).
func (Engine) SlimForCache(obj any) bool {
	wf, ok := obj.(*wfv1.Workflow)
	if !ok {
		return false
	}
	wf.Spec = wfv1.WorkflowSpec{Shutdown: wf.Spec.Shutdown}
	wf.Status = slimWorkflowStatus(wf.Status)
	var gate map[string]string
	for k, v := range wf.Annotations {
		if strings.HasPrefix(k, AnnoGatePrefix) || k == engine.CancelledAnnotation {
			if gate == nil {
				gate = map[string]string{}
			}
			gate[k] = v
		}
	}
	wf.Annotations = gate
	return true
}

// slimWorkflowStatus keeps what observe.go and approve.go read: the phase,
// times and message, the compressed or offloaded node status as it is, and
// of each node its identity, type, template, phase, message, times, output
// parameter values and whether its task results are synced. Argo also
// writes each node's boundary, children, host, progress, resource
// durations, inputs and exit code, and the workflow's conditions, progress
// and artifact repository: about half a real Workflow's status. Suspend
// nodes stay whole: approving writes the gate node back (a merge patch of
// the node), and its outputs carry the supplied-value markers Argo resumes
// by.
func slimWorkflowStatus(s wfv1.WorkflowStatus) wfv1.WorkflowStatus {
	out := wfv1.WorkflowStatus{Phase: s.Phase, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt, Message: s.Message,
		CompressedNodes: s.CompressedNodes, OffloadNodeStatusVersion: s.OffloadNodeStatusVersion}
	if s.Nodes != nil {
		out.Nodes = make(wfv1.Nodes, len(s.Nodes))
	}
	for id, n := range s.Nodes {
		if n.Type != wfv1.NodeTypeSuspend {
			n = slimNode(n)
		}
		out.Nodes[id] = n
	}
	return out
}

func slimNode(n wfv1.NodeStatus) wfv1.NodeStatus {
	s := wfv1.NodeStatus{ID: n.ID, Name: n.Name, DisplayName: n.DisplayName, Type: n.Type, TemplateName: n.TemplateName,
		Phase: n.Phase, Message: n.Message, StartedAt: n.StartedAt, FinishedAt: n.FinishedAt, TaskResultSynced: n.TaskResultSynced}
	if n.Outputs != nil && len(n.Outputs.Parameters) > 0 {
		params := make([]wfv1.Parameter, len(n.Outputs.Parameters))
		for i, p := range n.Outputs.Parameters {
			params[i] = wfv1.Parameter{Name: p.Name, Value: p.Value}
		}
		s.Outputs = &wfv1.Outputs{Parameters: params}
	}
	return s
}

// StepLogs implements engine.LogLocator: a step's pod carries the
// Workflow's name and its template's step label. clone, init and plan are
// containers of the plan task's pod (init's is terraform-init); export-outputs is a container of
// apply's pod, or of its own after a plan without changes; apply is a
// container of its pod: each container is named after its step. A check
// and cleanup run alone, in "main".
func (Engine) StepLogs(child, step string) (string, string) {
	sel := LabelWorkflow + "=" + child + "," + infrav1.StepLabel
	switch step {
	case names.StepClone, names.StepInit, names.StepPlan:
		return sel + "=" + names.StepPlan, ContainerName(step)
	case names.StepApply:
		return sel + "=" + names.StepApply, step
	case names.StepExport:
		return sel + " in (" + names.StepApply + "," + names.StepExport + ")", step
	}
	return sel + "=" + step, "main"
}

// LogsHint implements engine.LogLocator.
func (Engine) LogsHint(namespace, child string) string {
	return fmt.Sprintf("argo logs %s -n %s", child, namespace)
}

// ApprovalRights implements engine.ApprovalHinter.
func (Engine) ApprovalRights() string {
	return "limit who may resume Workflows with RBAC on workflows (argo resume needs update)"
}

// ApprovalHint implements engine.ApprovalHinter.
func (Engine) ApprovalHint(namespace, child string) string {
	return fmt.Sprintf("argo resume %s -n %s (or RESUME in the Argo UI)", child, namespace)
}
