// Package governance keeps the status of the approval policies a platform
// team writes (TerraformRunPolicy, ClusterTerraformRunPolicy): whether
// each compiles. The runs they govern read them in the TerraformRun
// reconciler (pkg/controller, reconcilePolicies), which holds a plan at
// its gate while a policy that governs it does not compile.
package governance

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunpolicies/status;clusterterraformrunpolicies/status,verbs=get;update;patch

// Check says whether a policy's rules compile and its windows parse:
// nil, or the first error, naming the rule or window.
func Check(ap infrav1.ApprovalPolicy) error {
	if len(ap.Rules) > 0 {
		if _, err := planpolicy.Compile(ap.Rules); err != nil {
			return fmt.Errorf("spec.approval.rules: %w", err)
		}
	}
	if _, err := gate.Compile(ap.Windows); err != nil {
		return fmt.Errorf("spec.approval.windows: %w", err)
	}
	return nil
}

// Ready is the Ready condition of a policy at generation gen.
func Ready(ap infrav1.ApprovalPolicy, gen int64) metav1.Condition {
	c := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Valid", ObservedGeneration: gen,
		Message: "every rule compiles and every window parses; the policy governs the runs in its scope"}
	if err := Check(ap); err != nil {
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ReasonInvalidSpec
		c.Message = err.Error() + "; the plans of the runs it governs are held at their gate until it is fixed (docs/policies.md)"
	}
	return c
}

// Reconciler sets the Ready condition of one kind of policy.
type Reconciler struct {
	client.Client
	// New makes an empty object of the kind.
	New func() client.Object
	// Parts reads a policy's approval policy and status.
	Parts func(client.Object) (infrav1.ApprovalPolicy, *infrav1.PolicyStatus)
}

// Reconcile sets a policy's Ready condition.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	o := r.New()
	if err := r.Get(ctx, req.NamespacedName, o); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ap, st := r.Parts(o)
	base := o.DeepCopyObject().(client.Object)
	meta.SetStatusCondition(&st.Conditions, Ready(ap, o.GetGeneration()))
	st.ObservedGeneration = o.GetGeneration()
	if err := r.Status().Patch(ctx, o, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// Setup registers the status reconcilers of both kinds.
func Setup(mgr ctrl.Manager) error {
	for _, r := range []struct {
		name string
		rec  *Reconciler
	}{
		{"terraformrunpolicy", &Reconciler{Client: mgr.GetClient(), New: func() client.Object { return &infrav1.TerraformRunPolicy{} },
			Parts: func(o client.Object) (infrav1.ApprovalPolicy, *infrav1.PolicyStatus) {
				p := o.(*infrav1.TerraformRunPolicy)
				return p.Spec.Approval, &p.Status
			}}},
		{"clusterterraformrunpolicy", &Reconciler{Client: mgr.GetClient(), New: func() client.Object { return &infrav1.ClusterTerraformRunPolicy{} },
			Parts: func(o client.Object) (infrav1.ApprovalPolicy, *infrav1.PolicyStatus) {
				p := o.(*infrav1.ClusterTerraformRunPolicy)
				return p.Spec.Approval, &p.Status
			}}},
	} {
		if err := ctrl.NewControllerManagedBy(mgr).Named(r.name).
			For(r.rec.New(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Complete(r.rec); err != nil {
			return err
		}
	}
	return nil
}
