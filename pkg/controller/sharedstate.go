package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

// stateName is the kubernetes backend's state Secret of a run, and false
// when the run keeps its state elsewhere.
func stateName(run *infrav1.TerraformRun) (string, bool) {
	suffix, ok := names.KubernetesStateSuffix(run)
	if !ok {
		return "", false
	}
	return names.StateSecretName(run.Spec.Terraform.Workspace, suffix), true
}

// sharedState is the TerraformRun of others that holds run's state: the
// same state Secret, through the same workspace and suffix, or through a
// workspace and suffix that join into the same name (x and y-z, x-y and
// z). The older one keeps it; a preview shares its tracked run's, which
// isPreview vouches for. "" when none.
func sharedState(run *infrav1.TerraformRun, others []infrav1.TerraformRun, isPreview func(*infrav1.TerraformRun) bool) string {
	mine, ok := stateName(run)
	if !ok {
		return ""
	}
	previewOf := func(r *infrav1.TerraformRun) string {
		if isPreview != nil && isPreview(r) {
			return r.Labels[infrav1.PreviewOfLabel]
		}
		return ""
	}
	for i := range others {
		o := &others[i]
		if o.UID == run.UID || o.DeletionTimestamp != nil {
			continue
		}
		if theirs, ok := stateName(o); !ok || theirs != mine {
			continue
		}
		if previewOf(run) == o.Name || previewOf(o) == run.Name || (previewOf(run) != "" && previewOf(run) == previewOf(o)) {
			continue
		}
		if o.CreationTimestamp.Before(&run.CreationTimestamp) || (o.CreationTimestamp.Equal(&run.CreationTimestamp) && o.Name < run.Name) {
			return o.Name
		}
	}
	return ""
}

// checkSharedState stalls a run whose state Secret another, older
// TerraformRun of the namespace holds: two runs never govern one state
// (the second would apply to it under its own approval policy, and the
// state API would give its steps the other's state).
func (r *TerraformRunReconciler) checkSharedState(ctx context.Context, run *infrav1.TerraformRun) error {
	if _, ok := stateName(run); !ok {
		return nil
	}
	var list infrav1.TerraformRunList
	if err := r.List(ctx, &list, client.InNamespace(run.Namespace)); err != nil {
		return generic("ListRuns", err, "listing the namespace's TerraformRuns")
	}
	if other := sharedState(run, list.Items, r.IsPreview); other != "" {
		name, _ := stateName(run)
		return stalling(infrav1.ReasonInvalidSpec, "%s", fmt.Sprintf("the state Secret %s is TerraformRun %s's (spec.terraform.workspace and spec.backend.kubernetes.secretSuffix, or the run's name, join into the same name): set spec.backend.kubernetes.secretSuffix to a name of this run's own", name, other))
	}
	return nil
}
