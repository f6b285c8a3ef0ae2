package job

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/engine"
)

// Approve implements engine.Approver: it records the decision in the
// child's annotations, guarded by the resourceVersion it was read at; the
// driver then creates the apply Job with the approved digest.
func (Engine) Approve(ctx context.Context, c client.Client, child client.Object, d engine.Decision) error {
	return decide(ctx, c, child, decisionApprove, d, d.Approved())
}

// Reject implements engine.Approver: apply is never created; the driver
// goes on to cleanup.
func (Engine) Reject(ctx context.Context, c client.Client, child client.Object, d engine.Decision) error {
	return decide(ctx, c, child, decisionReject, d, d.Rejected())
}

func decide(ctx context.Context, c client.Client, obj client.Object, decision string, d engine.Decision, msg string) error {
	child, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("job: expected a Job, got %T", obj)
	}
	if child.Annotations[annoDecision] != "" || child.Annotations[annoCancelled] != "" {
		return engine.ErrGateNotPending
	}
	return patchAnnotations(ctx, c, child, map[string]string{
		annoDecision: decision, annoDigest: d.Digest, annoDecidedBy: d.Actor(),
		annoDecidedAt: time.Now().UTC().Format(time.RFC3339), annoGateMessage: msg,
	})
}

// Cancel implements engine.Canceller: it marks the run stopped; the driver
// suspends the plan Job or deletes the active step Job, then runs cleanup.
func (Engine) Cancel(ctx context.Context, c client.Client, obj client.Object, reason string) error {
	child, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("job: expected a Job, got %T", obj)
	}
	if child.Annotations[annoCancelled] != "" {
		return nil
	}
	return patchAnnotations(ctx, c, child, map[string]string{annoCancelled: reason})
}

func patchAnnotations(ctx context.Context, c client.Client, child *batchv1.Job, annotations map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": child.ResourceVersion, "annotations": annotations,
	}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, child, client.RawPatch(types.MergePatchType, patch))
}
