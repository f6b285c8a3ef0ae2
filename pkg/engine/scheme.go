package engine

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Defaults of Config shared by the manager's flags and `kubectl tfrun
// render`, so a rendered run is what the manager would create.
const (
	DefaultStepImage            = "ghcr.io/opr8r/opr8r:latest"
	DefaultTerraformImage       = "docker.io/hashicorp/terraform:1.11"
	DefaultRunnerServiceAccount = "opr8r-runner"
	// DefaultCheckServiceAccount is the service account of check steps:
	// it may create a check's output Secret and keep its log, and read no
	// Secret (bind it to the opr8r-check Role).
	DefaultCheckServiceAccount = "opr8r-check"
)

// Scheme returns a scheme with every type the manager and the kubectl
// plugin read or write: the Kubernetes and opr8r types, and each engine's
// own (SchemeAdder).
func Scheme(engines []Engine) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	adds := []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme}
	for _, e := range engines {
		if a, ok := e.(SchemeAdder); ok {
			adds = append(adds, a.AddToScheme)
		}
	}
	for _, add := range adds {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// DefaultEngine is the engine of runs whose spec.engine is empty when the
// manager is not told otherwise: the first of the engines, which are listed
// in order of preference (engines.All).
func DefaultEngine(engines []Engine) infrav1.EngineName {
	if len(engines) == 0 {
		return ""
	}
	return engines[0].Name()
}
