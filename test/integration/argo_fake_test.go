package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/argoproj/argo-workflows/v3/workflow/validate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

func ctrlConfigSkipNameValidation() config.Controller {
	// The manager is restarted inside one process; controller names must
	// not be checked for uniqueness across those restarts.
	return config.Controller{SkipNameValidation: ptr.To(true)}
}

// argoController plays the Argo workflow controller for one Workflow: it
// writes node statuses the way Argo v3.7 does, with Argo's own Go types.
type argoController struct {
	k client.ObjectKey
}

var _ engineSim = argoController{}

func (a argoController) key() client.ObjectKey { return a.k }
func (a argoController) object() client.Object { return a.get() }
func (a argoController) cancelRequested() bool {
	return a.get().Spec.Shutdown == wfv1.ShutdownStrategyStop
}

func (a argoController) validate() error {
	return validate.ValidateWorkflow(nil, nil, a.get().DeepCopy(), nil, validate.ValidateOpts{})
}

// gate reads the suspend node; the UI's "reject" choice (a succeeded node
// with decision reject) counts as rejected.
func (a argoController) gate() (string, string, string) {
	n := a.gateNode()
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

func nodeID(wf, name string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(wf + "." + name))
	return fmt.Sprintf("%s-%d", wf, h.Sum32())
}

// update applies fn to a fresh copy of the Workflow (Workflows have no
// status subresource: Argo writes status with Update).
func (a argoController) update(fn func(wf *wfv1.Workflow)) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wf := &wfv1.Workflow{}
		if err := k8sClient.Get(context.Background(), a.k, wf); err != nil {
			return err
		}
		if wf.Status.Nodes == nil {
			wf.Status.Nodes = wfv1.Nodes{}
		}
		fn(wf)
		return k8sClient.Update(context.Background(), wf)
	})).To(Succeed())
	simWrites.Add(1)
}

func (a argoController) get() *wfv1.Workflow {
	wf := &wfv1.Workflow{}
	Expect(k8sClient.Get(context.Background(), a.k, wf)).To(Succeed())
	return wf
}

func setNode(wf *wfv1.Workflow, name string, typ wfv1.NodeType, phase wfv1.NodePhase, mutate ...func(*wfv1.NodeStatus)) {
	id := nodeID(wf.Name, name)
	n, ok := wf.Status.Nodes[id]
	if !ok {
		n = wfv1.NodeStatus{ID: id, Name: wf.Name + "." + name, DisplayName: name, TemplateName: name, Type: typ,
			StartedAt: metav1.NewTime(time.Now().UTC().Truncate(time.Second))}
		if name == pipeline.StepCleanup {
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

func params(kv ...string) *wfv1.Outputs {
	o := &wfv1.Outputs{}
	for i := 0; i < len(kv); i += 2 {
		o.Parameters = append(o.Parameters, wfv1.Parameter{Name: kv[i], Value: wfv1.AnyStringPtr(kv[i+1])})
	}
	return o
}

// start marks the Workflow Running with clone and init done.
func (a argoController) start() {
	a.update(func(wf *wfv1.Workflow) {
		wf.Status.Phase = wfv1.WorkflowRunning
		wf.Status.StartedAt = metav1.Now()
		setNode(wf, pipeline.StepClone, wfv1.NodeTypePod, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
			n.Outputs = params(pipeline.ResultCommit, "0123456789abcdef0123456789abcdef01234567")
		})
		setNode(wf, pipeline.StepInit, wfv1.NodeTypePod, wfv1.NodeSucceeded)
	})
}

// plan finishes the plan step with the given result.
func (a argoController) plan(add, change, destroy int, digest string) {
	a.update(func(wf *wfv1.Workflow) {
		sum, _ := json.Marshal(map[string]int{"add": add, "change": change, "destroy": destroy, "replace": 0})
		has := "false"
		if add+change+destroy > 0 {
			has = "true"
		}
		setNode(wf, pipeline.StepPlan, wfv1.NodeTypePod, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
			n.Outputs = params(pipeline.ResultHasChanges, has, pipeline.ResultDigest, digest, pipeline.ResultSummary, string(sum))
			n.TaskResultSynced = ptr.To(true)
		})
	})
}

// suspend reaches the approval gate as Argo does: a Running suspend node
// whose supplied outputs carry defaults resolved from the inputs
// (executeSuspend + addRawOutputFields).
func (a argoController) suspend(digest string) {
	a.update(func(wf *wfv1.Workflow) {
		setNode(wf, pipeline.StepApprove, wfv1.NodeTypeSuspend, wfv1.NodeRunning, func(n *wfv1.NodeStatus) {
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
func (a argoController) skipGate() {
	a.update(func(wf *wfv1.Workflow) {
		setNode(wf, pipeline.StepApprove, wfv1.NodeTypeSkipped, wfv1.NodeSkipped)
		setNode(wf, pipeline.StepApply, wfv1.NodeTypeSkipped, wfv1.NodeOmitted)
	})
}

func (a argoController) gateNode() wfv1.NodeStatus {
	wf := a.get()
	n, ok := wf.Status.Nodes[nodeID(wf.Name, pipeline.StepApprove)]
	Expect(ok).To(BeTrue(), "no approve node")
	return n
}

// finishApply runs apply and export-outputs, writing the raw outputs Secret
// as the export step does, then completes the Workflow.
func (a argoController) finishApply(outputsJSON string) {
	wf := a.get()
	if outputsJSON != "" {
		writeRawOutputsFor(wf, "argoproj.io/v1alpha1", "Workflow", outputsJSON)
	}
	a.update(func(wf *wfv1.Workflow) {
		if _, skipped := wf.Status.Nodes[nodeID(wf.Name, pipeline.StepApply)]; !skipped {
			setNode(wf, pipeline.StepApply, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		}
		setNode(wf, pipeline.StepExport, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		setNode(wf, pipeline.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = metav1.Now()
	})
}

// fail fails a step with terraform's message and completes the Workflow.
func (a argoController) fail(step, msg string) {
	a.update(func(wf *wfv1.Workflow) {
		setNode(wf, step, wfv1.NodeTypePod, wfv1.NodeFailed, func(n *wfv1.NodeStatus) { n.Message = msg })
		setNode(wf, pipeline.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowFailed
		wf.Status.FinishedAt = metav1.Now()
	})
}

// completeAfterGate finishes a Workflow whose gate was rejected: the failed
// gate omits apply and export, and the Workflow fails.
func (a argoController) completeAfterGate() { a.completeAfterGateWith(wfv1.WorkflowFailed) }

// completeAfterGateWith finishes a Workflow after its gate with the phase
// Argo gives it (Succeeded after the UI's "reject" choice).
func (a argoController) completeAfterGateWith(phase wfv1.WorkflowPhase) {
	a.update(func(wf *wfv1.Workflow) {
		setNode(wf, pipeline.StepApply, wfv1.NodeTypeSkipped, wfv1.NodeOmitted)
		setNode(wf, pipeline.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = phase
		wf.Status.FinishedAt = metav1.Now()
	})
}

// succeedDestroy runs a destroy Workflow to success.
func (a argoController) succeedDestroy() {
	a.start()
	a.plan(0, 0, 1, digestOf("destroy"))
	a.update(func(wf *wfv1.Workflow) {
		setNode(wf, pipeline.StepApply, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		setNode(wf, pipeline.StepCleanup, wfv1.NodeTypePod, wfv1.NodeSucceeded)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = metav1.Now()
	})
}

// writeRawOutputsFor creates the Secret the export step writes, owned by the
// child and labelled so the manager's cache sees it.
func writeRawOutputsFor(child client.Object, apiVersion, kind, outputsJSON string) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: pipeline.RawOutputsSecretName(child.GetName()), Namespace: child.GetNamespace(),
			Labels:          map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: "raw-outputs"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: child.GetName(), UID: child.GetUID()}},
		},
		Data: map[string][]byte{"outputs.json": []byte(outputsJSON)},
	}
	Expect(k8sClient.Create(context.Background(), s)).To(Succeed())
}
