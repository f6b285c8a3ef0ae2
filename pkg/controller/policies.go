package controller

import (
	"context"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/governance"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunpolicies;clusterterraformrunpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// reconcilePolicies combines the run's spec.approval with the policies
// that govern it (TerraformRunPolicies of its namespace, and the
// ClusterTerraformRunPolicies that select the namespace): every later
// step of the pass reads the combined policy from st.eff. The hash of
// what the run executes (st.hash) is not touched: a policy changes how a
// plan is approved, never what is planned.
func (r *TerraformRunReconciler) reconcilePolicies(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	ps, err := r.governing(ctx, run.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.gov = gate.Combine(st.eff.Spec.Approval, ps)
	st.eff.Spec.Approval = st.gov.Approval
	return ctrl.Result{}, nil
}

// governing lists the policies that govern the runs of namespace ns
// (governance.Governing): the namespace's labels are read around the
// cache (a manager that watches some namespaces holds no cluster-wide
// watch of namespaces).
func (r *TerraformRunReconciler) governing(ctx context.Context, ns string) ([]gate.Policy, error) {
	labels := r.APIReader
	if labels == nil {
		labels = r.Client
	}
	ps, err := governance.Governing(ctx, governance.Readers{Policies: r.Client, Namespaces: labels}, ns)
	return ps, generic("ListPolicies", err, "reading the policies that govern namespace %s", ns)
}

// policyRuns wakes the runs a policy governs when it is created, changed
// or deleted: a TerraformRunPolicy's namespace's, or every run for a
// ClusterTerraformRunPolicy.
func (r *TerraformRunReconciler) policyRuns(ctx context.Context, o client.Object) []reconcile.Request {
	var opts []client.ListOption
	if o.GetNamespace() != "" {
		opts = append(opts, client.InNamespace(o.GetNamespace()))
	}
	var list infrav1.TerraformRunList
	if err := r.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the TerraformRuns a policy governs", "policy", client.ObjectKeyFromObject(o))
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// policyChanged passes the policy events that matter to its runs:
// creation, deletion and a spec change.
var policyChanged = predicate.GenerationChangedPredicate{}

// reconcileUngated stops an apply whose child was built without an
// approval gate (mode Auto, no rules, no windows) when the policies that
// govern the run now need one (a Manual policy created while it planned),
// before its apply starts: its plan would otherwise apply with nobody's
// approval. The run ends stopped, saying so; a rerun plans again, gated.
// It runs before reconcileDrive, which would start the Job engine's apply.
func (r *TerraformRunReconciler) reconcileUngated(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	cur := run.Status.Run
	if !st.active || st.child == nil || cur == nil || st.progress.Finished || cur.Type != infrav1.RunApply ||
		cur.ApprovalMode != infrav1.ApprovalAuto || approvalMode(st.eff, cur.Type) != infrav1.ApprovalManual || applyStarted(st.progress.Steps) {
		return ctrl.Result{}, nil
	}
	c, ok := st.engine.(engine.Canceller)
	if !ok {
		return ctrl.Result{}, nil
	}
	why := "the policies that govern the run now need an approval its run " + cur.ID + " was built without (" + policyNames(st.gov.Refs) + ")"
	if err := c.Cancel(ctx, r.Client, st.child, why+"; stopped before its apply: kubectl tfrun rerun "+run.Name+" plans again, gated"); err != nil {
		return ctrl.Result{}, generic("StopUngated", err, "stopping run %s, which has no approval gate", cur.ID)
	}
	r.transition(run, infrav1.ApprovedCondition, metav1False, infrav1.ReasonSuperseded, "plan of run "+cur.ID+" was not applied: "+why)
	st.report(progressing, infrav1.ReasonSuperseded, "stopping run "+cur.ID+" before its apply: "+why)
	st.stop = true
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}

// policyNames names policies for messages.
func policyNames(refs []infrav1.PolicyRef) string {
	var out []string
	for _, p := range refs {
		out = append(out, p.Kind+" "+p.Name)
	}
	if len(out) == 0 {
		return "spec.approval"
	}
	return strings.Join(out, ", ")
}
