package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opr8r/opr8r/pkg/results"
)

// depValues are the values of the variables a plan takes from its
// dependencies' outputs, by variable, and the variables whose dependency
// (or output) was gone.
type depValues struct {
	vals    map[string]string
	missing []results.DependencyVar
}

// ErrDependencyOutput says that a dependency's output a run takes as a
// variable could not be read.
var ErrDependencyOutput = errors.New("dependency output unavailable")

// loadDependencies reads the values of the plan's dependency variables:
// mounted files for dependencies in the run's namespace, the outputs
// Secret through the API for the others. Every value is redacted from the
// step's output. A value that cannot be read fails the plan, except in a
// destroy, which must not hang on a dependency that is gone: it goes on
// without the variable, and says so.
func (r *Runner) loadDependencies(ctx context.Context, o PlanOptions) (depValues, error) {
	out := depValues{vals: map[string]string{}}
	secrets := map[string]map[string][]byte{}
	for _, d := range o.DependencyVars {
		v, found, err := r.dependencyValue(ctx, d, secrets)
		if err != nil {
			return out, err
		}
		if !found {
			if !o.Destroy {
				return out, fmt.Errorf("%w: dependency %s has no output %q (for variable %s); it may have been applied without it since this run started: request a new run (kubectl tfrun rerun)",
					ErrDependencyOutput, d.Run, d.Output, d.Variable)
			}
			r.logf("dependency %s or its output %q is gone: variable %s is not set for this destroy", d.Run, d.Output, d.Variable)
			out.missing = append(out.missing, d)
			continue
		}
		v = strings.TrimRight(v, "\r\n")
		r.AddSecret(v)
		out.vals[d.Variable] = v
	}
	return out, nil
}

// dependencyValue reads one dependency variable; found is false when the
// file, the Secret or its key does not exist.
func (r *Runner) dependencyValue(ctx context.Context, d results.DependencyVar, cache map[string]map[string][]byte) (string, bool, error) {
	if d.File != "" {
		b, err := os.ReadFile(d.File)
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("reading output %q of dependency %s: %w", d.Output, d.Run, err)
		}
		return string(b), true, nil
	}
	data, ok := cache[d.Secret]
	if !ok {
		if r.Kube == nil {
			return "", false, fmt.Errorf("dependency %s is in another namespace and this step has no API access", d.Run)
		}
		ns, name, _ := strings.Cut(d.Secret, "/")
		s, err := r.Kube.stateClient().CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			data = nil
		case apierrors.IsForbidden(err):
			return "", false, fmt.Errorf("%w: the runner's service account may not read Secret %s, the outputs of dependency %s: bind it to a Role that grants get on that Secret in namespace %s (docs/stacks.md)",
				ErrDependencyOutput, d.Secret, d.Run, ns)
		case err != nil:
			return "", false, fmt.Errorf("reading the outputs of dependency %s: %w", d.Run, err)
		default:
			data = s.Data
		}
		cache[d.Secret] = data
	}
	v, ok := data[d.Output]
	return string(v), ok, nil
}

// writeDependencyVars writes the dependency variables to a private
// tfvars.json file; values that parse as JSON keep their type (as the
// outputs Secret holds non-string outputs), others are strings.
func writeDependencyVars(dir string, vals map[string]string) (string, error) {
	vars := map[string]json.RawMessage{}
	for k, v := range vals {
		vars[k] = tfvarValue(v)
	}
	b, err := json.Marshal(vars)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "dependencies.tfvars.json")
	return path, os.WriteFile(path, b, 0o600)
}

// tfvarValue is a Secret value as a tfvars.json value.
func tfvarValue(v string) json.RawMessage {
	if json.Valid([]byte(v)) {
		return json.RawMessage(v)
	}
	q, _ := json.Marshal(v)
	return q
}

// ErrSensitiveVariable refuses a plan that gives a sensitive output of a
// dependency to a variable the module does not declare sensitive.
var ErrSensitiveVariable = errors.New("a sensitive output feeds a variable that is not sensitive")

// checkSensitive refuses a plan when a variable that takes a sensitive
// output of a dependency is declared without sensitive = true: Terraform
// would print it, and anything made from it, in plans and logs. A
// variable the module does not declare is unused and passes.
func checkSensitive(deps []results.DependencyVar, declared map[string]planVariable) error {
	var bad []string
	for _, d := range deps {
		if !d.Sensitive {
			continue
		}
		if v, ok := declared[d.Variable]; ok && !v.Sensitive {
			bad = append(bad, fmt.Sprintf("%s (output %q of %s)", d.Variable, d.Output, d.Run))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%w: declare sensitive = true on variable %s, which takes a sensitive output; the plan is not shown or kept",
		ErrSensitiveVariable, strings.Join(bad, ", "))
}

// destroyHint adds to a failed destroy plan what a gone dependency means.
func destroyHint(err error, missing []results.DependencyVar) error {
	var te *TerraformError
	if len(missing) == 0 || !errors.As(err, &te) {
		return err
	}
	var names []string
	for _, d := range missing {
		names = append(names, fmt.Sprintf("%s (from %s)", d.Variable, d.Run))
	}
	return fmt.Errorf("%w; the destroy ran without %s, whose dependency or output is gone: give the module defaults for them, or delete without destroying (annotation infra.opr8r.io/skip-destroy=true)", err, strings.Join(names, ", "))
}
