package manager

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/stateapi"
)

// addStateAPI serves the state API with grants read from the
// TerraformRuns the tokens name.
func addStateAPI(mgr ctrl.Manager, o Options) error {
	s := o.StateAPI
	if s == nil || s.Addr == "" || s.Addr == "0" {
		return nil
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	if s.Auth == nil {
		s.Auth = &stateapi.TokenReviewer{Client: cs.AuthenticationV1().TokenReviews()}
	}
	if s.Upstream == nil {
		s.Upstream = mgr.GetConfig()
	}
	if s.Grants == nil {
		// Read from the API server, not the cache: a shard's manager
		// caches its shard's runs only, and any replica of any shard may
		// answer a step (the Service picks one).
		reader := mgr.GetAPIReader()
		s.Grants = &stateapi.Grants{
			Runs:     reader,
			IsRunner: o.Engine.IsRunnerAccount,
			Dependencies: func(ctx context.Context, run *infrav1.TerraformRun, _ string) []string {
				return dependencySecrets(ctx, reader, o.AllowCrossNamespaceDependencies, run)
			},
		}
	}
	return mgr.Add(s)
}

// dependencySecrets are the outputs Secrets, in other namespaces, of a
// run's dependencies that the manager would resolve now: only when the
// install allows dependencies across namespaces, and only of a dependency
// that consents (its spec.allowDependentsFrom lists the run's namespace),
// as the reconciler checks before it starts a run. A destroy's child, or
// one whose status is not written yet, reads the same.
func dependencySecrets(ctx context.Context, r client.Reader, allowCrossNamespace bool, run *infrav1.TerraformRun) []string {
	if !allowCrossNamespace {
		return nil
	}
	var out []string
	for _, d := range run.Spec.DependsOn {
		if d.Namespace == "" || d.Namespace == run.Namespace {
			continue // mounted by the kubelet, never read through the API
		}
		dep := &infrav1.TerraformRun{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, dep); err != nil {
			continue
		}
		if !slices.Contains(dep.Spec.AllowDependentsFrom, run.Namespace) {
			continue
		}
		out = append(out, d.Namespace+"/"+names.OutputsSecretName(dep))
	}
	return out
}
