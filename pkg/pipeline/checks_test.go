package pipeline_test

import (
	"slices"
	"strings"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestChecks: checks come right after plan in apply and planOnly runs and
// never in drift checks or destroy runs; they hold none of the terraform
// steps' Secrets, mount the workspace read-only, and the plan step writes
// their input only when there are checks.
func TestChecks(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").EnvFromSecret("AWS_SECRET_ACCESS_KEY", "aws", "secret-key").
		Check("policy", "conftest:1", "opa", "conftest", "test", "/workspace/plan/plan.json").
		Check("cost", "infracost:1", "", "infracost").Obj()
	build := func(run *infrav1.TerraformRun, t2 infrav1.RunType) *pipeline.Pipeline {
		t.Helper()
		p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config), Config: testutil.Config, Type: t2, Name: "net-1"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	stepNames := func(p *pipeline.Pipeline) []string {
		var out []string
		for _, s := range p.Steps {
			out = append(out, s.Name)
		}
		return out
	}
	for typ, want := range map[infrav1.RunType][]string{
		infrav1.RunApply:   {"clone", "init", "plan", "check-policy", "check-cost", "approve", "apply", "export-outputs"},
		infrav1.RunPlan:    {"clone", "init", "plan", "check-policy", "check-cost"},
		infrav1.RunDrift:   {"clone", "init", "plan"},
		infrav1.RunDestroy: {"clone", "init", "plan", "approve", "apply"},
	} {
		p := build(run, typ)
		if got := stepNames(p); !slices.Equal(got, want) {
			t.Errorf("%s run steps = %v, want %v", typ, got, want)
		}
		plan, _ := p.StepNamed(names.StepPlan)
		hasInput := slices.Contains(plan.Args, "--check-input-dir="+pipeline.CheckInputDir)
		if hasInput != pipeline.HasChecks(typ) {
			t.Errorf("%s run: plan writes the checks' input = %v", typ, hasInput)
		}
	}

	p := build(run, infrav1.RunApply)
	for _, c := range p.Checks() {
		if !c.WorkspaceReadOnly || !c.WorkspaceMount().ReadOnly {
			t.Errorf("%s mounts the workspace writable", c.Name)
		}
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(m.MountPath, pipeline.EnvSecretsDir) {
				t.Errorf("%s mounts the terraform steps' Secret %s", c.Name, m.Name)
			}
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--env-file") {
				t.Errorf("%s gets terraform's env file %s", c.Name, a)
			}
		}
		if c.SecurityContext == nil || !*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("%s is not hardened: %+v", c.Name, c.SecurityContext)
		}
	}
	policy, _ := p.StepNamed("check-policy")
	if vols := p.UsedVolumes(policy); len(vols) != 1 || vols[0].ConfigMap == nil || vols[0].ConfigMap.Name != "opa" {
		t.Errorf("check-policy's volumes = %+v, want only its ConfigMap", vols)
	}
	if i := slices.Index(policy.Args, "--"); i < 0 || !slices.Equal(policy.Args[i+1:], []string{"conftest", "test", "/workspace/plan/plan.json"}) {
		t.Errorf("check-policy args = %v", policy.Args)
	}

	before := pipeline.SpecHash(pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config))
	run.Spec.Checks[0].Command = append(run.Spec.Checks[0].Command, "--strict")
	if pipeline.SpecHash(pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config)) == before {
		t.Error("changing a check does not change the spec hash (no new run)")
	}
}
