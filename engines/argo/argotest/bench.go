package argotest

import (
	"context"
	"strings"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/names"
)

// benchPlayer plays Argo's workflow controller in the scale benches: one
// Update of the Workflow per change, with the fields Argo 3.7 writes on the
// e2e cluster's Workflows.
type benchPlayer struct{}

var _ enginetest.BenchPlayer = benchPlayer{}

// Prepare implements enginetest.BenchPlayer: Argo makes nothing before the
// clone node, its first change.
func (benchPlayer) Prepare(context.Context, client.Client, client.ObjectKey) (bool, error) {
	return false, nil
}

// StepDone implements enginetest.BenchPlayer: the clone node, finished.
func (benchPlayer) StepDone(ctx context.Context, c client.Client, key client.ObjectKey) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wf := &wfv1.Workflow{}
		if err := c.Get(ctx, key, wf); err != nil {
			return err
		}
		wf.Status.Phase = wfv1.WorkflowRunning
		wf.Status.StartedAt = metav1.Now()
		if wf.Status.Nodes == nil {
			wf.Status.Nodes = wfv1.Nodes{}
		}
		wf.Status.Nodes.Set(key.Name+"-clone", cloneNode(key.Name))
		return c.Update(ctx, wf)
	})
}

// Finish implements enginetest.BenchPlayer: a plan without changes, as an
// apply run or a check that finds nothing reports.
func (benchPlayer) Finish(ctx context.Context, c client.Client, key client.ObjectKey) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wf := &wfv1.Workflow{}
		if err := c.Get(ctx, key, wf); err != nil {
			return err
		}
		finishedStatus(wf)
		return c.Update(ctx, wf)
	})
}

// finishedStatus is the status Argo writes for a Workflow whose plan has
// no changes: apply skipped, the exit handler done.
func finishedStatus(wf *wfv1.Workflow) {
	name := wf.Name
	wf.Status.Nodes = wfv1.Nodes{}
	root := benchNode(name, "", wfv1.NodeTypeDAG, wfv1.NodeSucceeded, names.StepClone)
	root.ID, root.Name, root.DisplayName, root.TemplateName, root.BoundaryID = name, name, name, "main", ""
	root.OutboundNodes, root.Progress, root.HostNodeName, root.Outputs, root.TaskResultSynced = []string{name + "-apply"}, "4/4", "", nil, nil
	wf.Status.Nodes.Set(root.ID, root)
	wf.Status.Nodes.Set(name+"-clone", cloneNode(name))
	wf.Status.Nodes.Set(name+"-init", benchNode(name, names.StepInit, wfv1.NodeTypePod, wfv1.NodeSucceeded, names.StepPlan))
	wf.Status.Nodes.Set(name+"-plan", benchNode(name, names.StepPlan, wfv1.NodeTypePod, wfv1.NodeSucceeded, names.StepApply,
		benchResult("has-changes", "false"), benchResult("digest", "sha256:"+strings.Repeat("0", 64)),
		benchResult("summary", `{"add":0,"change":0,"destroy":0,"replace":0}`)))
	apply := benchNode(name, names.StepApply, wfv1.NodeTypeSkipped, wfv1.NodeSkipped, "")
	apply.Message, apply.HostNodeName, apply.Outputs, apply.TaskResultSynced, apply.Progress, apply.ResourcesDuration = "when 'false == true' evaluated false", "", nil, nil, "", nil
	wf.Status.Nodes.Set(apply.ID, apply)
	exit := benchNode(name, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded, "")
	exit.ID, exit.Name, exit.DisplayName, exit.BoundaryID, exit.NodeFlag = name+"-exit", name+".onExit", name+".onExit", "", &wfv1.NodeFlag{Hooked: true}
	wf.Status.Nodes.Set(exit.ID, exit)
	wf.Status.Phase = wfv1.WorkflowSucceeded
	wf.Status.FinishedAt = metav1.Now()
	wf.Status.Progress = "5/5"
	wf.Status.ResourcesDuration = wfv1.ResourcesDuration{corev1.ResourceCPU: 0, corev1.ResourceMemory: 32}
	wf.Status.Conditions = wfv1.Conditions{{Type: wfv1.ConditionTypePodRunning, Status: metav1.ConditionFalse}, {Type: wfv1.ConditionTypeCompleted, Status: metav1.ConditionTrue}}
	wf.Status.ArtifactRepositoryRef = &wfv1.ArtifactRepositoryRefStatus{Default: true, ArtifactRepository: &wfv1.ArtifactRepository{}}
	wf.Status.ArtifactGCStatus = &wfv1.ArtGCStatus{NotSpecified: true}
}

// Finished implements enginetest.BenchPlayer.
func (benchPlayer) Finished(obj client.Object) bool {
	wf, ok := obj.(*wfv1.Workflow)
	return ok && wf.Status.Phase.Completed()
}

// Foreign implements enginetest.BenchPlayer: someone else's Workflow.
func (benchPlayer) Foreign(name, ns string) client.Object {
	return &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wfv1.WorkflowSpec{Entrypoint: "main",
		Templates: []wfv1.Template{{Name: "main", Container: &corev1.Container{Image: "busybox", Command: []string{"sh", "-c", strings.Repeat("echo padding; ", 40)}}}}}}
}

// benchNode is a step's node in a DAG as Argo 3.7 writes it, with the
// fields of the e2e cluster's Workflows: boundary, children, host,
// progress, resource durations, template scope, exit code and synced task
// results.
func benchNode(wfName, step string, typ wfv1.NodeType, phase wfv1.NodePhase, next string, results ...wfv1.Parameter) wfv1.NodeStatus {
	now := metav1.Now()
	n := wfv1.NodeStatus{ID: wfName + "-" + step, Name: wfName + "." + step, DisplayName: step, TemplateName: step, TemplateScope: "local/" + wfName,
		Type: typ, Phase: phase, BoundaryID: wfName, HostNodeName: "node-1", StartedAt: now, FinishedAt: now, Progress: "1/1",
		ResourcesDuration: wfv1.ResourcesDuration{corev1.ResourceCPU: 0, corev1.ResourceMemory: 5}, TaskResultSynced: ptr.To(true),
		Outputs: &wfv1.Outputs{ExitCode: ptr.To("0"), Parameters: results}}
	if next != "" {
		n.Children = []string{wfName + "-" + next}
	}
	return n
}

// cloneNode is the clone step's node, finished: the change StepDone
// writes, and part of every finished Workflow.
func cloneNode(wfName string) wfv1.NodeStatus {
	return benchNode(wfName, names.StepClone, wfv1.NodeTypePod, wfv1.NodeSucceeded, names.StepInit, benchResult("commit", ""))
}

// benchResult is an output parameter as Argo reports it: its value and
// where it was read from.
func benchResult(name, value string) wfv1.Parameter {
	return wfv1.Parameter{Name: name, Value: wfv1.AnyStringPtr(value), ValueFrom: &wfv1.ValueFrom{Default: wfv1.AnyStringPtr(""), Path: "/tmp/opr8r-results/" + name}}
}
