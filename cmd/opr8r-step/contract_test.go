package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/testutil"
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

// TestPipelinePointsStepsAtEverySecret builds a run's pipeline with every
// kind of Secret a terraform step sees and parses each step's arguments
// with this binary's own flags: every terraform step is told to redact
// the Secrets mounted as files and the backend configuration, the plan
// step reads varsFrom in order and knows which are Secrets, apply (whose
// plan file holds the variables) redacts the varsFrom Secrets too, and
// the plan step declares the digests of what reviewers read.
func TestPipelinePointsStepsAtEverySecret(t *testing.T) {
	run := testutil.MakeRun("db", "team-a").VarsFrom("Secret", "db-vars").VarsFrom("ConfigMap", "db-defaults").VarsFrom("Secret", "db-extra").
		Backend("s3", "s3-backend").Check("policy", "conftest:1", "", "conftest", "test").Obj()
	run.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "gcp", MountPath: "/var/secrets/gcp", Key: "key.json", EnvName: "GOOGLE_APPLICATION_CREDENTIALS"}}
	p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config), Config: testutil.Config, Type: infrav1.RunApply, Name: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		SecretFiles, VarsDirs, SecretVarsDirs []string
		BackendConfig                         string
		Mounts                                []string
	}
	got := map[string]seen{}
	for _, s := range append(p.Steps, p.Cleanup) {
		if s.Gate || s.Name == names.StepClone {
			continue
		}
		var o options
		fs := newFlags(s.Args[0], &o)
		fs.SetOutput(nopWriter{})
		// What every engine puts in place of the results placeholder.
		args := slices.Clone(s.Args[1:])
		if i := slices.Index(args, pipeline.PhResults); i >= 0 {
			args[i] = "--results-dir=/results"
		}
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		v := seen{SecretFiles: o.secretFiles, VarsDirs: o.varsDirs, SecretVarsDirs: o.secretVarsDirs, BackendConfig: o.backendConfig}
		for _, m := range s.VolumeMounts {
			v.Mounts = append(v.Mounts, m.Name)
		}
		got[s.Name] = v
	}
	tf := seen{SecretFiles: []string{"/var/secrets/gcp"}, BackendConfig: pipeline.BackendConfigFile, Mounts: []string{"files-0", "backend-config"}}
	plan := tf
	plan.VarsDirs = []string{pipeline.VarsFromDir + "/0", pipeline.VarsFromDir + "/1", pipeline.VarsFromDir + "/2"}
	plan.SecretVarsDirs = []string{pipeline.VarsFromDir + "/0", pipeline.VarsFromDir + "/2"}
	plan.Mounts = []string{"files-0", "vars-0", "vars-1", "vars-2", "backend-config"}
	apply := tf
	apply.VarsDirs, apply.SecretVarsDirs = plan.SecretVarsDirs, plan.SecretVarsDirs
	apply.Mounts = []string{"files-0", "vars-0", "vars-2", "backend-config"}
	want := map[string]seen{
		names.StepInit: tf, names.StepPlan: plan, names.StepApply: apply, names.StepExport: tf, names.StepCleanup: tf,
		// A check sees none of them.
		names.CheckStep("policy"): {},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("what each step is told (-want +got):\n%s", diff)
	}
	planStep, _ := p.StepNamed(names.StepPlan)
	for _, r := range []string{results.PlanTextDigest, results.PlanJSONDigest} {
		if !slices.Contains(planStep.Results, r) {
			t.Errorf("the plan step does not declare the result %s: %v", r, planStep.Results)
		}
	}
}
