package manager

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/stateapi"
)

// addStateAPI serves the state API with grants read from the
// TerraformRuns the tokens name.
func addStateAPI(mgr ctrl.Manager, o Options, isPreview func(*infrav1.TerraformRun) bool) error {
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
		cache := mgr.GetAPIReader()
		s.Grants = &stateapi.Grants{
			Runs:      cache,
			IsRunner:  o.Engine.IsRunnerAccount,
			Accounts:  func(run *infrav1.TerraformRun) (string, string) { return RunAccounts(o.Engine, run) },
			IsPreview: isPreview,
			Dependencies: func(ctx context.Context, run *infrav1.TerraformRun) []string {
				var out []string
				for _, d := range run.Spec.DependsOn {
					if d.Namespace == "" || d.Namespace == run.Namespace {
						continue // mounted by the kubelet, never read through the API
					}
					dep := &infrav1.TerraformRun{}
					if err := cache.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, dep); err != nil {
						continue
					}
					out = append(out, d.Namespace+"/"+names.OutputsSecretName(dep))
				}
				return out
			},
		}
	}
	return mgr.Add(s)
}

// RunAccounts are a run's effective planner and runner service accounts:
// its own (spec.runner), else the install's; the planner is the runner
// when neither names one.
func RunAccounts(cfg engine.Config, run *infrav1.TerraformRun) (planner, runner string) {
	runner = run.Spec.Runner.ServiceAccountName
	if runner == "" {
		runner = cfg.RunnerServiceAccount
	}
	planner = run.Spec.Runner.PlanServiceAccountName
	if planner == "" {
		planner = cfg.PlanServiceAccount
	}
	if planner == "" {
		planner = runner
	}
	return planner, runner
}
