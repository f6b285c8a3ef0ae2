// Package argotest is the Argo engine's kit for the shared test suites:
// Argo's own offline validation, and a simulator of Argo's workflow
// controller that writes Workflow status the way Argo v3.7 does, with
// Argo's own Go types.
package argotest

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"time"

	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/test/envtestutil"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/workflow/validate"
	. "github.com/onsi/gomega" //nolint:revive // test support
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
)

// Kit returns the Argo engine's test kit.
func Kit() enginetest.Kit {
	return enginetest.Kit{
		Engine: argo.New(),
		Validate: func(obj client.Object) error {
			wf, ok := obj.(*wfv1.Workflow)
			if !ok {
				return fmt.Errorf("argotest: expected a Workflow, got %T", obj)
			}
			return validate.ValidateWorkflow(nil, nil, wf.DeepCopy(), nil, validate.ValidateOpts{})
		},
		NewSim: func(env enginetest.Env, key client.ObjectKey) enginetest.Sim { return Sim{key: key, env: env} },
		// Argo's full-schema CRDs: the API server then checks every
		// Workflow opr8r makes against Argo's whole schema.
		CRDs: func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
			return envtestutil.ModuleCRDs(Module, filepath.Join("manifests", "base", "crds", "full", "argoproj.io_*.yaml"))
		},
		StepObjects: func() []client.ObjectList {
			return []client.ObjectList{&wfv1.WorkflowTaskResultList{}, &corev1.PodList{}}
		},
		Bench: benchPlayer{},
	}
}

// Module is the Go module of the Argo version opr8r is built and tested
// against (go.mod pins it).
const Module = "github.com/argoproj/argo-workflows/v3"

// Sim plays the Argo workflow controller for one Workflow: it
// writes node statuses the way Argo v3.7 does, with Argo's own Go types.
type Sim struct {
	key client.ObjectKey
	env enginetest.Env
}

var _ enginetest.Sim = Sim{}

func (a Sim) Key() client.ObjectKey { return a.key }
func (a Sim) Object() client.Object { return a.Get() }
func (a Sim) CancelRequested() bool {
	return a.Get().Spec.Shutdown == wfv1.ShutdownStrategyStop
}

func (a Sim) Validate() error { return Kit().Validate(a.Get()) }

// gate reads the suspend node; the UI's "reject" choice (a succeeded node
// with decision reject) counts as rejected.
func (a Sim) Gate() (string, string, string) {
	n := a.GateNode()
	digest := ""
	decision := ""
	if n.Outputs != nil {
		for _, p := range n.Outputs.Parameters {
			if p.Value != nil && p.Name == "approved-digest" {
				digest = p.Value.String()
			}
			if p.Value != nil && p.Name == "decision" {
				decision = p.Value.String()
			}
		}
	}
	switch {
	case n.Phase == wfv1.NodeRunning:
		return "Pending", n.Message, digest
	case n.Phase == wfv1.NodeSucceeded && decision != "reject":
		return "Approved", n.Message, digest
	default:
		return "Rejected", n.Message, digest
	}
}

// simCommit is where the simulator keeps the commit clone found until the
// plan task's pod ends with it among its outputs.
const simCommit = "argotest.opr8r.io/commit"

func NodeID(wf, name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(wf + "." + name))
	return fmt.Sprintf("%s-%d", wf, h.Sum32())
}

// update applies fn to a fresh copy of the Workflow (Workflows have no
// status subresource: Argo writes status with Update).
func (a Sim) Update(fn func(wf *wfv1.Workflow)) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wf := &wfv1.Workflow{}
		if err := a.env.Client.Get(context.Background(), a.key, wf); err != nil {
			return err
		}
		if wf.Status.Nodes == nil {
			wf.Status.Nodes = wfv1.Nodes{}
		}
		fn(wf)
		return a.env.Client.Update(context.Background(), wf)
	})).To(Succeed())
	a.env.Writes.Add(1)
}

func (a Sim) Get() *wfv1.Workflow {
	wf := &wfv1.Workflow{}
	Expect(a.env.Client.Get(context.Background(), a.key, wf)).To(Succeed())
	return wf
}

func SetNode(wf *wfv1.Workflow, name string, typ wfv1.NodeType, phase wfv1.NodePhase, mutate ...func(*wfv1.NodeStatus)) {
	id := NodeID(wf.Name, name)
	n, ok := wf.Status.Nodes[id]
	if !ok {
		n = wfv1.NodeStatus{ID: id, Name: wf.Name + "." + name, DisplayName: name, TemplateName: name, Type: typ,
			StartedAt: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}
		if name == names.StepCleanup {
			n.Name, n.DisplayName = wf.Name+".onExit", wf.Name+".onExit"
		}
	}
	n.Phase = phase
	if phase.Fulfilled(nil) {
		n.FinishedAt = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	}
	for _, m := range mutate {
		m(&n)
	}
	wf.Status.Nodes.Set(id, n)
}

// podOf is the task whose containerSet pod runs a step, as argo.Build
// makes them: clone, init and plan run in plan's pod, apply and
// export-outputs in apply's; "" for a step that is a pod of its own.
func podOf(step string) string {
	switch step {
	case names.StepClone, names.StepInit, names.StepPlan:
		return names.StepPlan
	case names.StepApply, names.StepExport:
		return names.StepApply
	}
	return ""
}

// containersOf are the containers of the Workflow's containerSet template
// of that name, in order.
func containersOf(wf *wfv1.Workflow, pod string) []string {
	var out []string
	for _, t := range wf.Spec.Templates {
		if t.Name == pod && t.ContainerSet != nil {
			for _, c := range t.ContainerSet.Containers {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

// SetContainer sets the node of a container of a containerSet pod as
// Argo v3.7 makes it: "<pod node>.<container>", display name the
// container's, type Container, the pod's template.
func SetContainer(wf *wfv1.Workflow, pod, container string, phase wfv1.NodePhase, mutate ...func(*wfv1.NodeStatus)) {
	SetNode(wf, pod+"."+container, wfv1.NodeTypeContainer, phase, append([]func(*wfv1.NodeStatus){func(n *wfv1.NodeStatus) {
		n.DisplayName, n.TemplateName = container, pod
	}}, mutate...)...)
}

// runPod sets a containerSet pod and its containers: those before upTo
// Succeeded, upTo itself in phase, the rest Pending (Running pod) or ended
// as Argo's emissary ends a container whose dependency failed (exit code
// 64).
func runPod(wf *wfv1.Workflow, pod, upTo string, phase wfv1.NodePhase, msg string) {
	podPhase := wfv1.NodeRunning
	if phase == wfv1.NodeFailed {
		podPhase = wfv1.NodeFailed
	}
	SetNode(wf, pod, wfv1.NodeTypePod, podPhase, func(n *wfv1.NodeStatus) {
		if phase == wfv1.NodeFailed {
			n.Message = msg
		}
	})
	state := wfv1.NodeSucceeded
	for _, c := range containersOf(wf, pod) {
		switch {
		case c == argo.ContainerName(upTo):
			SetContainer(wf, pod, c, phase, func(n *wfv1.NodeStatus) {
				if phase == wfv1.NodeFailed {
					n.Message = c + ": Error (exit code 1): " + msg
				}
			})
			if phase == wfv1.NodeFailed {
				state = wfv1.NodeError
			} else {
				state = wfv1.NodePending
			}
		case state == wfv1.NodeError:
			SetContainer(wf, pod, c, wfv1.NodeError, func(n *wfv1.NodeStatus) { n.Message = c + ": Error (exit code 64): " })
		default:
			SetContainer(wf, pod, c, state)
		}
	}
}

// finishPod ends a containerSet pod and every container of it Succeeded.
func finishPod(wf *wfv1.Workflow, pod string, outputs *wfv1.Outputs, containers ...string) {
	for _, c := range containers {
		SetContainer(wf, pod, c, wfv1.NodeSucceeded)
	}
	SetNode(wf, pod, wfv1.NodeTypePod, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
		if outputs != nil {
			n.Outputs = outputs
			n.TaskResultSynced = ptr.To(true)
		}
	})
}

func Params(kv ...string) *wfv1.Outputs {
	o := &wfv1.Outputs{}
	for i := 0; i < len(kv); i += 2 {
		o.Parameters = append(o.Parameters, wfv1.Parameter{Name: kv[i], Value: wfv1.AnyStringPtr(kv[i+1])})
	}
	return o
}

// start marks the Workflow Running with clone and init done in the plan
// task's pod (whose outputs, the commit among them, come when it ends).
func (a Sim) Start() { a.StartAt(enginetest.DefaultCommit) }

// StartAt implements enginetest.Sim.
func (a Sim) StartAt(commit string) {
	a.Update(func(wf *wfv1.Workflow) {
		wf.Status.Phase = wfv1.WorkflowRunning
		wf.Status.StartedAt = metav1.Now()
		runPod(wf, names.StepPlan, names.StepPlan, wfv1.NodeRunning, "")
		if wf.Annotations == nil {
			wf.Annotations = map[string]string{}
		}
		wf.Annotations[simCommit] = commit
	})
}

// Plan finishes the plan step with the given result.
func (a Sim) Plan(add, change, destroy int, digest string) {
	a.PlanResult(enginetest.PlanOf(add, change, destroy, digest))
}

// PlanResult implements enginetest.Sim.
func (a Sim) PlanResult(p results.Plan) {
	a.Update(func(wf *wfv1.Workflow) {
		v := p.Values()
		kv := []string{pipeline.ResultCommit, wf.Annotations[simCommit],
			results.HasChanges, v[results.HasChanges], results.Digest, v[results.Digest], results.Summary, v[results.Summary], results.Inputs, v[results.Inputs]}
		for _, k := range []string{results.PlanTextDigest, results.PlanJSONDigest, results.PlanSensitiveJSONDigest} {
			if v[k] != "" {
				kv = append(kv, k, v[k])
			}
		}
		finishPod(wf, names.StepPlan, Params(kv...), containersOf(wf, names.StepPlan)...)
	})
}

// Complete implements enginetest.Sim: the exit handler runs and the
// Workflow succeeds.
func (a Sim) Complete() {
	a.Update(func(wf *wfv1.Workflow) {
		SetNode(wf, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = metav1.Now()
	})
}

// suspend reaches the approval gate as Argo does: a Running suspend node
// whose supplied outputs carry defaults resolved from the inputs
// (executeSuspend + addRawOutputFields).
func (a Sim) Suspend(digest string) {
	a.Update(func(wf *wfv1.Workflow) {
		SetNode(wf, names.StepApprove, wfv1.NodeTypeSuspend, wfv1.NodeRunning, func(n *wfv1.NodeStatus) {
			n.Inputs = &wfv1.Inputs{Parameters: []wfv1.Parameter{
				{Name: "digest", Value: wfv1.AnyStringPtr(digest)},
				{Name: "decision", Value: wfv1.AnyStringPtr("approve"), Enum: []wfv1.AnyString{"approve", "reject"}},
			}}
			n.Outputs = &wfv1.Outputs{Parameters: []wfv1.Parameter{
				{Name: "decision", ValueFrom: &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}, Default: wfv1.AnyStringPtr("approve")}},
				{Name: "approved-digest", ValueFrom: &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}, Default: wfv1.AnyStringPtr(digest)}},
			}}
		})
	})
}

// skipGate marks the gate Skipped and apply Omitted (a plan without changes).
func (a Sim) SkipGate() {
	a.Update(func(wf *wfv1.Workflow) {
		SetNode(wf, names.StepApprove, wfv1.NodeTypeSkipped, wfv1.NodeSkipped)
		SetNode(wf, names.StepApply, wfv1.NodeTypeSkipped, wfv1.NodeOmitted)
	})
}

func (a Sim) GateNode() wfv1.NodeStatus {
	wf := a.Get()
	n, ok := wf.Status.Nodes[NodeID(wf.Name, names.StepApprove)]
	Expect(ok).To(BeTrue(), "no approve node")
	return n
}

// finishApply runs apply and export-outputs, writing the raw outputs Secret
// as the export step does, then completes the Workflow.
func (a Sim) FinishApply(outputsJSON string) {
	wf := a.Get()
	if outputsJSON != "" {
		enginetest.WriteRawOutputs(a.env, wf, outputsJSON)
	}
	a.Update(func(wf *wfv1.Workflow) {
		if _, skipped := wf.Status.Nodes[NodeID(wf.Name, names.StepApply)]; !skipped {
			finishPod(wf, names.StepApply, nil, containersOf(wf, names.StepApply)...)
		} else {
			// After a plan without changes export-outputs runs alone.
			finishPod(wf, names.StepExport, nil, containersOf(wf, names.StepExport)...)
		}
		SetNode(wf, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = metav1.Now()
	})
}

// fail fails a step with terraform's message and completes the Workflow:
// the tasks after it are omitted, as Argo omits them.
func (a Sim) Fail(step, msg string) {
	a.Update(func(wf *wfv1.Workflow) {
		if pod := podOf(step); pod != "" {
			runPod(wf, pod, step, wfv1.NodeFailed, msg)
		} else {
			SetNode(wf, step, wfv1.NodeTypePod, wfv1.NodeFailed, func(n *wfv1.NodeStatus) { n.Message = msg })
		}
		omitLater(wf)
		SetNode(wf, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowFailed
		wf.Status.FinishedAt = metav1.Now()
	})
}

// completeAfterGate finishes a Workflow whose gate was rejected: the failed
// gate omits apply and export, and the Workflow fails.
func (a Sim) CompleteAfterGate() { a.CompleteAfterGateWith(wfv1.WorkflowFailed) }

// completeAfterGateWith finishes a Workflow after its gate with the phase
// Argo gives it (Succeeded after the UI's "reject" choice).
// Of a Workflow stopped (spec.shutdown) while its gate waits, Argo fails
// the suspend node ("Stopped with strategy 'Stop'").
func (a Sim) CompleteAfterGateWith(phase wfv1.WorkflowPhase) {
	a.Update(func(wf *wfv1.Workflow) {
		if g, ok := wf.Status.Nodes[NodeID(wf.Name, names.StepApprove)]; ok && wf.Spec.Shutdown != "" && g.IsActiveSuspendNode() {
			SetNode(wf, names.StepApprove, wfv1.NodeTypeSuspend, wfv1.NodeFailed, func(n *wfv1.NodeStatus) {
				n.Message = "Stopped with strategy '" + string(wf.Spec.Shutdown) + "'"
			})
		}
		omitLater(wf)
		SetNode(wf, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = phase
		wf.Status.FinishedAt = metav1.Now()
	})
}

// succeedDestroy runs a destroy Workflow to success.
func (a Sim) SucceedDestroy() {
	a.Start()
	a.Plan(0, 0, 1, enginetest.Digest("destroy"))
	a.FinishDestroy()
}

// FinishDestroy implements enginetest.Sim: apply and cleanup succeed.
func (a Sim) FinishDestroy() {
	a.Update(func(wf *wfv1.Workflow) {
		finishPod(wf, names.StepApply, nil, containersOf(wf, names.StepApply)...)
		SetNode(wf, names.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = metav1.Now()
	})
}

// PassChecks implements enginetest.Sim: each check's pod node succeeds.
func (a Sim) PassChecks(checks ...string) {
	a.Update(func(wf *wfv1.Workflow) {
		for _, c := range checks {
			SetNode(wf, c, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		}
	})
}

// FailCheck implements enginetest.Sim: the check's node fails with its
// termination message; the gate and apply are omitted and the exit
// handler runs.
func (a Sim) FailCheck(check, msg string, passed ...string) {
	a.PassChecks(passed...)
	a.Fail(check, msg)
}

// dagTasks are the names of the Workflow's DAG tasks.
func dagTasks(wf *wfv1.Workflow) map[string]bool {
	tasks := map[string]bool{}
	for _, tmpl := range wf.Spec.Templates {
		if tmpl.DAG != nil {
			for _, task := range tmpl.DAG.Tasks {
				tasks[task.Name] = true
			}
		}
	}
	return tasks
}

// omitLater marks the gate, apply and export-outputs, where the Workflow's
// DAG has them and they have no node yet, as Argo does once a task before
// them failed or the gate ended the run: Omitted, "omitted: depends
// condition not met" (make e2e recorded it so).
func omitLater(wf *wfv1.Workflow) {
	tasks := dagTasks(wf)
	for _, step := range []string{names.StepApprove, names.StepApply, names.StepExport} {
		if _, seen := wf.Status.Nodes[NodeID(wf.Name, step)]; seen || !tasks[step] {
			continue
		}
		SetNode(wf, step, wfv1.NodeTypeSkipped, wfv1.NodeOmitted, func(n *wfv1.NodeStatus) { n.Message = "omitted: depends condition not met" })
	}
}
