package argo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/workflow/packer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/engine"
)

// Approve implements engine.Approver. It does what `argo resume
// --node-field-selector displayName=approve` does after `argo node set`
// supplies the outputs (workflow/util.updateSuspendedNode): the active
// suspend node gets its supplied outputs, phase Succeeded, a "Resumed by:"
// message and finishedAt, and the Workflow is written with a full Update
// guarded by its resourceVersion (opr8r sends a merge patch of the node;
// see decideGate). A conflict is returned to the caller, which retries with
// a fresh object.
func (Engine) Approve(ctx context.Context, c client.Client, obj client.Object, d engine.Decision) error {
	return decideGate(ctx, c, obj, func(n *wfv1.NodeStatus) error {
		if err := supplyOutput(n, paramDecision, decisionApprove); err != nil {
			return err
		}
		if err := supplyOutput(n, paramApprovedDigest, d.Digest); err != nil {
			return err
		}
		n.Phase = wfv1.NodeSucceeded
		n.Message = "Resumed by: " + d.Actor()
		return nil
	})
}

// Reject implements engine.Approver. Like `argo stop --node-field-selector`,
// it fails the suspend node: apply is skipped and the Workflow fails, and the
// exit handler still runs.
func (Engine) Reject(ctx context.Context, c client.Client, obj client.Object, d engine.Decision) error {
	return decideGate(ctx, c, obj, func(n *wfv1.NodeStatus) error {
		if err := supplyOutput(n, paramDecision, decisionReject); err != nil {
			return err
		}
		n.Phase = wfv1.NodeFailed
		n.Message = fmt.Sprintf("Rejected: %s. Resumed by: %s", d.Reason, d.Actor())
		return nil
	})
}

func decideGate(ctx context.Context, c client.Client, obj client.Object, decide func(*wfv1.NodeStatus) error) error {
	orig, ok := obj.(*wfv1.Workflow)
	if !ok {
		return fmt.Errorf("argo: expected a Workflow, got %T", obj)
	}
	wf := orig.DeepCopy()
	if wf.Status.IsOffloadNodeStatus() {
		return fmt.Errorf("workflow %s has offloaded node status; opr8r cannot resume it (disable nodeStatusOffLoad)", wf.Name)
	}
	compressed := wf.Status.CompressedNodes != ""
	if compressed {
		if err := packer.DecompressWorkflow(wf); err != nil {
			return fmt.Errorf("decompressing workflow %s: %w", wf.Name, err)
		}
	}
	var id string
	for nid, n := range wf.Status.Nodes {
		// Only the opr8r gate, by display name: a resume without a selector
		// would resume every suspend node.
		if n.DisplayName == names.StepApprove && n.IsActiveSuspendNode() {
			id = nid
			break
		}
	}
	if id == "" {
		return engine.ErrGateNotPending
	}
	n := wf.Status.Nodes[id]
	if err := decide(&n); err != nil {
		return err
	}
	supplyDefaults(&n)
	n.FinishedAt = metav1.Time{Time: time.Now().UTC()}
	wf.Status.Nodes.Set(id, n)
	if compressed {
		if err := packer.CompressWorkflowIfNeeded(wf); err != nil {
			return fmt.Errorf("compressing workflow %s: %w", wf.Name, err)
		}
	}
	// A merge patch of the one node (or of the compressed nodes), guarded by
	// the resourceVersion the decision was made on, instead of a full
	// Update: the manager's cache holds Workflows without their spec.
	status := map[string]any{"nodes": map[string]any{id: n}}
	if compressed {
		status = map[string]any{"compressedNodes": wf.Status.CompressedNodes}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": orig.ResourceVersion,
			"labels":          map[string]string{actorLabel: engine.ActorName, actionLabel: "Resume"},
		},
		"status": status,
	})
	if err != nil {
		return err
	}
	return c.Patch(ctx, orig, client.RawPatch(types.MergePatchType, patch))
}

// supplyOutput sets a supplied output parameter, as `argo node set` does.
func supplyOutput(n *wfv1.NodeStatus, name, value string) error {
	if n.Outputs == nil {
		return fmt.Errorf("approval node %s has no outputs; was it created by opr8r?", n.ID)
	}
	for i, p := range n.Outputs.Parameters {
		if p.Name == name {
			n.Outputs.Parameters[i].Value = wfv1.AnyStringPtr(value)
			n.Outputs.Parameters[i].ValueFrom = nil
			return nil
		}
	}
	return fmt.Errorf("approval node %s has no output parameter %q", n.ID, name)
}

// supplyDefaults gives every supplied output still unset its default, as
// ResumeWorkflow does (the gate's digest and summary, which the UI's RESUME
// sets and opr8r does not need).
func supplyDefaults(n *wfv1.NodeStatus) {
	if n.Outputs == nil {
		return
	}
	for i, p := range n.Outputs.Parameters {
		if p.ValueFrom != nil && p.ValueFrom.Supplied != nil && p.ValueFrom.Default != nil {
			n.Outputs.Parameters[i].Value = p.ValueFrom.Default
			n.Outputs.Parameters[i].ValueFrom = nil
		}
	}
}

// Cancel implements engine.Canceller with spec.shutdown=Stop, which still
// runs the exit handler (cleanup), and the reason in the Workflow's
// engine.CancelledAnnotation. A finished Workflow is left alone.
func (Engine) Cancel(ctx context.Context, c client.Client, obj client.Object, reason string) error {
	wf, ok := obj.(*wfv1.Workflow)
	if !ok {
		return fmt.Errorf("argo: expected a Workflow, got %T", obj)
	}
	if wf.Status.Phase.Completed() || wf.Spec.Shutdown != "" {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{engine.CancelledAnnotation: reason}},
		"spec":     map[string]any{"shutdown": wfv1.ShutdownStrategyStop},
	})
	if err != nil {
		return err
	}
	return c.Patch(ctx, wf, client.RawPatch(types.MergePatchType, patch))
}
