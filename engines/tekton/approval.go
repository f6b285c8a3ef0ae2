package tekton

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/pkg/apis"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// Reasons on the approval CustomRun's Succeeded condition.
const (
	ReasonAwaitingApproval = "AwaitingApproval"
	ReasonApproved         = "Approved"
	ReasonRejected         = "Rejected"
	// Tekton's reasons for a cancelled or timed-out custom task.
	ReasonCustomRunCancelled = "CustomRunCancelled"
	ReasonCustomRunTimedOut  = "CustomRunTimedOut"
)

// +kubebuilder:rbac:groups=tekton.dev,resources=pipelineruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=tekton.dev,resources=taskruns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=tekton.dev,resources=customruns,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=tekton.dev,resources=customruns/status,verbs=get;update;patch

// ApprovalReconciler implements opr8r's approval custom task, following
// Tekton's custom task contract: it handles only CustomRuns whose customRef
// is infra.opr8r.io/v1alpha1 Approval, writes through the /status
// subresource, keeps Succeeded Unknown while the plan waits, and fails the
// run on spec.status RunCancelled and on spec.timeout. The decision itself
// is made by the TerraformRun reconciler, through Engine.Approve and
// Engine.Reject, bound to the plan's digest.
type ApprovalReconciler struct {
	client.Client
	Now func() time.Time
}

func (r *ApprovalReconciler) now() time.Time { return engine.Now(r.Now) }

// isOurs is Tekton's controller.FilterCustomRunRef, for controller-runtime.
func isOurs(o client.Object) bool {
	cr, ok := o.(*tektonv1beta1.CustomRun)
	return ok && cr.Spec.CustomRef != nil && cr.Spec.CustomRef.APIVersion == ApprovalAPIVersion && string(cr.Spec.CustomRef.Kind) == ApprovalKind
}

// SetupControllers implements engine.ControllerProvider.
func (Engine) SetupControllers(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&tektonv1beta1.CustomRun{}, builder.WithPredicates(predicate.NewPredicateFuncs(isOurs))).
		Named("tekton-approval").
		Complete(&ApprovalReconciler{Client: mgr.GetClient()})
}

// Reconcile starts, cancels and times out approval CustomRuns.
func (r *ApprovalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &tektonv1beta1.CustomRun{}
	if err := r.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !isOurs(cr) || cr.IsDone() {
		return ctrl.Result{}, nil
	}
	orig := cr.DeepCopy()
	var requeue time.Duration
	switch {
	case cr.IsCancelled():
		msg := "the approval was cancelled"
		if cr.Spec.StatusMessage != "" {
			msg += ": " + string(cr.Spec.StatusMessage)
		}
		cr.Status.MarkCustomRunFailed(ReasonCustomRunCancelled, "%s", msg)
	case cr.Status.GetCondition(apis.ConditionSucceeded) == nil:
		cr.Status.InitializeConditions()
		cr.Status.MarkCustomRunRunning(ReasonAwaitingApproval, "%s",
			pipeline.GateMessage(param(cr, "run"), cr.Namespace, param(cr, "summary"), param(cr, "digest"), ""))
	}
	if !cr.IsDone() && cr.Spec.Timeout != nil && cr.Spec.Timeout.Duration > 0 && cr.Status.StartTime != nil {
		deadline := cr.Status.StartTime.Add(cr.Spec.Timeout.Duration)
		if left := deadline.Sub(r.now()); left <= 0 {
			cr.Status.MarkCustomRunFailed(ReasonCustomRunTimedOut, "the approval timed out after %s", cr.Spec.Timeout.Duration)
		} else {
			requeue = left
		}
	}
	if !equalStatus(orig, cr) {
		if err := r.Status().Update(ctx, cr); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func equalStatus(a, b *tektonv1beta1.CustomRun) bool {
	ca, cb := a.Status.GetCondition(apis.ConditionSucceeded), b.Status.GetCondition(apis.ConditionSucceeded)
	if ca == nil || cb == nil {
		return ca == cb
	}
	return ca.Status == cb.Status && ca.Reason == cb.Reason && ca.Message == cb.Message
}

func param(cr *tektonv1beta1.CustomRun, name string) string {
	for _, p := range cr.Spec.Params {
		if p.Name == name {
			return p.Value.StringVal
		}
	}
	return ""
}

// pendingGate finds the PipelineRun's approval CustomRun that still waits.
func pendingGate(ctx context.Context, c client.Client, child client.Object) (*tektonv1beta1.CustomRun, error) {
	pr, ok := child.(*tektonv1.PipelineRun)
	if !ok {
		return nil, fmt.Errorf("tekton: expected a PipelineRun, got %T", child)
	}
	list := &tektonv1beta1.CustomRunList{}
	if err := c.List(ctx, list, client.InNamespace(pr.GetNamespace()),
		client.MatchingLabels{PipelineRunLabel: pr.GetName(), PipelineTaskLabel: taskApprove}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if task, named := childTask(pr, cr); named && task == taskApprove && isOurs(cr) && !cr.IsDone() && !cr.IsCancelled() {
			return cr, nil
		}
	}
	return nil, engine.ErrGateNotPending
}

// Approve implements engine.Approver: the gate succeeds with the approved
// digest as a result, which the apply task's digest check receives.
func (Engine) Approve(ctx context.Context, c client.Client, child client.Object, d engine.Decision) error {
	cr, err := pendingGate(ctx, c, child)
	if err != nil {
		return err
	}
	if got := param(cr, "digest"); got != d.Digest {
		return fmt.Errorf("the gate waits for plan %s, not %s", got, d.Digest)
	}
	cr.Status.Results = []tektonv1beta1.CustomRunResult{
		{Name: resultDecision, Value: "approve"},
		{Name: resultApprovedDigest, Value: d.Digest},
	}
	cr.Status.MarkCustomRunSucceeded(ReasonApproved, "%s", d.Approved())
	return c.Status().Update(ctx, cr)
}

// Reject implements engine.Approver: the gate fails with the reason, apply
// is not run, and the finally task (cleanup) still runs.
func (Engine) Reject(ctx context.Context, c client.Client, child client.Object, d engine.Decision) error {
	cr, err := pendingGate(ctx, c, child)
	if err != nil {
		return err
	}
	cr.Status.Results = []tektonv1beta1.CustomRunResult{{Name: resultDecision, Value: "reject"}}
	cr.Status.MarkCustomRunFailed(ReasonRejected, "%s", d.Rejected())
	return c.Status().Update(ctx, cr)
}

// Cancel implements engine.Canceller with CancelledRunFinally, which stops
// the tasks and still runs finally (cleanup). Once started, spec.status is
// the only field of a PipelineRun that may change.
func (Engine) Cancel(ctx context.Context, c client.Client, obj client.Object, reason string) error {
	pr, ok := obj.(*tektonv1.PipelineRun)
	if !ok {
		return fmt.Errorf("tekton: expected a PipelineRun, got %T", obj)
	}
	if pr.IsDone() || pr.Spec.Status != "" {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{engine.CancelledAnnotation: reason}},
		"spec":     map[string]any{"status": tektonv1.PipelineRunSpecStatusCancelledRunFinally},
	})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, pr, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
