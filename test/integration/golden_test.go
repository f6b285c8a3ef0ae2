package integration

import (
	"os"
	"path/filepath"
	"strings"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/test/envtestutil"
)

// goldenFiles reads the Argo translator's golden Workflows.
func goldenFiles() (map[string]*wfv1.Workflow, error) {
	paths, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "pipelines", "argo", "testdata", "*.golden.yaml"))
	if err != nil {
		return nil, err
	}
	out := map[string]*wfv1.Workflow{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		wf := &wfv1.Workflow{}
		if err := yaml.UnmarshalStrict(b, wf); err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(filepath.Base(p), ".golden.yaml")] = wf
	}
	return out, nil
}
