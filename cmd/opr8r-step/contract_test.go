package main

import (
	"os"
	"path/filepath"
	"testing"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/pkg/results"
)

// TestTranslatorsCallRealSubcommands parses every opr8r-step invocation in
// the translators' golden files with this binary's own flags: a renamed or
// missing flag breaks this test, not a pipeline in a cluster.
func TestTranslatorsCallRealSubcommands(t *testing.T) {
	seen := map[string]bool{}
	check := func(where string, args []string) {
		if len(args) == 0 || !knownSteps[args[0]] {
			t.Errorf("%s calls unknown subcommand %v", where, args)
			return
		}
		var o options
		fs := newFlags(args[0], &o)
		fs.SetOutput(nopWriter{})
		if err := fs.Parse(args[1:]); err != nil {
			t.Errorf("%s: opr8r-step %s rejects its arguments: %v", where, args[0], err)
		}
		switch {
		case args[0] == "check" && fs.NArg() == 0:
			t.Errorf("%s: opr8r-step check without the user's command after --", where)
		case args[0] != "check" && fs.NArg() != 0:
			t.Errorf("%s: stray arguments %v", where, fs.Args())
		}
		for _, v := range o.depVars {
			if _, err := results.ParseDependencyVar(v); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
		seen[args[0]] = true
	}
	tektonPaths, err := filepath.Glob("../../engines/tekton/testdata/*.golden.yaml")
	if err != nil || len(tektonPaths) == 0 {
		t.Fatalf("no Tekton golden files: %v", err)
	}
	for _, p := range tektonPaths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pr := &tektonv1.PipelineRun{}
		if err := yaml.UnmarshalStrict(b, pr); err != nil {
			t.Fatal(err)
		}
		for _, pt := range append(pr.Spec.PipelineSpec.Tasks, pr.Spec.PipelineSpec.Finally...) {
			if pt.TaskSpec == nil {
				continue
			}
			for _, s := range pt.TaskSpec.Steps {
				check(filepath.Base(p)+" task "+pt.Name+" step "+s.Name, s.Args)
			}
		}
	}
	paths, err := filepath.Glob("../../engines/argo/testdata/*.golden.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		wf := &wfv1.Workflow{}
		if err := yaml.UnmarshalStrict(b, wf); err != nil {
			t.Fatal(err)
		}
		for _, tmpl := range wf.Spec.Templates {
			var calls [][]string
			if tmpl.Container != nil {
				calls = append(calls, tmpl.Container.Args)
			}
			for _, ic := range tmpl.InitContainers {
				calls = append(calls, ic.Args)
			}
			for _, args := range calls {
				check(filepath.Base(p)+" template "+tmpl.Name, args)
			}
		}
	}
	for _, want := range []string{"install", "clone", "init", "plan", "apply", "export-outputs", "cleanup"} {
		if !seen[want] {
			t.Errorf("no golden Workflow calls opr8r-step %s", want)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
