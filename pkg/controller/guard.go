package controller

import (
	"context"

	"github.com/opr8r/opr8r/pkg/tenancy"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update

// guardChild lists a child in the namespace's guard list
// (tenancy.GuardConfigMap), with the service accounts its steps run as,
// before it is created: the runners given and the configured ones that
// are the install's runner service accounts (a name a TerraformRun chose
// never joins the list).
func (r *TerraformRunReconciler) guardChild(ctx context.Context, ns, child string, runners ...string) error {
	var listed []string
	for _, sa := range append(runners, r.Config.RunnerServiceAccount, r.Config.PlanServiceAccount, r.Config.CheckServiceAccount, r.Config.PreviewServiceAccount) {
		if r.Config.IsRunnerAccount(sa) {
			listed = append(listed, sa)
		}
	}
	return generic("GuardChildren", r.guard().List(ctx, ns, child, listed...), "listing child %s", child)
}

// unguardChildren drops the children drop matches from the list.
func (r *TerraformRunReconciler) unguardChildren(ctx context.Context, ns string, drop func(string) bool) error {
	return generic("GuardChildren", r.guard().Unlist(ctx, ns, drop), "unlisting children")
}

// guard is the manager's guard list writer.
func (r *TerraformRunReconciler) guard() *tenancy.Guard {
	r.guardOnce.Do(func() { r.guards = &tenancy.Guard{Client: r.Client, Reader: r.APIReader} })
	return r.guards
}
