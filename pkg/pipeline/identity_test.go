package pipeline_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestIdentityToken: spec.runner.identityToken projects a token for the
// audience into every terraform step, exported under envName and
// registered for redaction, and into no check and not the clone step.
func TestIdentityToken(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").Check("policy", "conftest:1", "", "conftest", "test").Obj()
	run.Spec.Runner.IdentityToken = &infrav1.IdentityToken{Audience: "sts.amazonaws.com", ExpirationSeconds: ptr.To[int64](3600), EnvName: "AWS_WEB_IDENTITY_TOKEN_FILE"}
	p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config), Config: testutil.Config, Type: infrav1.RunApply, Name: "net-1"})
	if err != nil {
		t.Fatal(err)
	}
	var vol *corev1.Volume
	for i, v := range p.Volumes {
		if v.Projected != nil {
			vol = &p.Volumes[i]
		}
	}
	if vol == nil || vol.Projected.Sources[0].ServiceAccountToken == nil || vol.Projected.Sources[0].ServiceAccountToken.Audience != "sts.amazonaws.com" {
		t.Fatalf("no projected token for the audience: %+v", p.Volumes)
	}
	for _, s := range p.Steps {
		mounted := slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol.Name && m.MountPath == pipeline.IdentityTokenDir })
		exported := slices.ContainsFunc(s.Env, func(e corev1.EnvVar) bool {
			return e.Name == "AWS_WEB_IDENTITY_TOKEN_FILE" && e.Value == pipeline.IdentityTokenFile
		})
		redacted := slices.Contains(s.Args, "--secret-files="+pipeline.IdentityTokenDir)
		terraform := slices.Contains([]string{names.StepInit, names.StepPlan, names.StepApply, names.StepExport, names.StepCleanup}, s.Name)
		if mounted != terraform || exported != terraform || redacted != terraform {
			t.Errorf("step %s: token mounted %v, exported %v, redacted %v; want %v (terraform steps only, never a check)", s.Name, mounted, exported, redacted, terraform)
		}
		if names.IsCheck(s.Name) && len(p.UsedVolumes(s)) != 0 && slices.ContainsFunc(p.UsedVolumes(s), func(v corev1.Volume) bool { return v.Projected != nil }) {
			t.Errorf("check %s's pod would hold the token", s.Name)
		}
	}
}

// TestPlanRunsAsItsOwnAccount: with a plan service account, the steps
// before the gate (and every step of a run that never applies) run as it,
// the checks as theirs, the rest as the runner, each step naming it.
func TestPlanRunsAsItsOwnAccount(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  infrav1.RunType
		auto bool
		want map[string]string
	}{
		{"manual apply", infrav1.RunApply, false, map[string]string{
			names.StepClone: "planner", names.StepInit: "planner", names.StepPlan: "planner", "check-policy": "opr8r-check",
			names.StepApply: "deployer", names.StepExport: "deployer", names.StepCleanup: "deployer"}},
		{"auto apply (no gate)", infrav1.RunApply, true, map[string]string{
			names.StepPlan: "planner", names.StepApply: "deployer", names.StepExport: "deployer", names.StepCleanup: "deployer"}},
		{"destroy", infrav1.RunDestroy, false, map[string]string{
			names.StepPlan: "planner", names.StepApply: "deployer", names.StepCleanup: "deployer"}},
		{"drift check: never applies", infrav1.RunDrift, false, map[string]string{
			names.StepClone: "planner", names.StepPlan: "planner", names.StepCleanup: "planner"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testutil.MakeRun("net", "team-a").Check("policy", "conftest:1", "", "conftest", "test")
			if tc.auto {
				w = w.Auto()
			}
			run := w.Obj()
			run.Spec.Runner.ServiceAccountName = "deployer"
			cfg := testutil.Config
			cfg.PlanServiceAccount = "planner"
			p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, cfg), Config: cfg, Type: tc.typ, Name: "net-1"})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{p.Cleanup.Name: p.Cleanup.ServiceAccountName}
			for _, s := range p.Steps {
				if !s.Gate {
					got[s.Name] = s.ServiceAccountName
				}
			}
			for step, want := range tc.want {
				if got[step] != want {
					t.Errorf("step %s runs as %q, want %q (all: %v)", step, got[step], want, got)
				}
			}
		})
	}
}

// TestRestoreStateRunsAsTheRunner: a run whose TerraformRun has kept
// states (engine.Request.KeptStates) begins with restore-state, which runs
// as the runner, even before the gate and with a plan service account of
// its own, and is given the backend; a run without kept states has no
// such step; no other step before the gate runs as the runner.
func TestRestoreStateRunsAsTheRunner(t *testing.T) {
	cases := map[string]struct {
		typ       infrav1.RunType
		kept      bool
		planSA    string
		wantSteps []string // the steps before plan
		wantSA    string   // restore-state's account
	}{
		"no kept states":                        {typ: infrav1.RunApply, planSA: "planner", wantSteps: []string{names.StepClone, names.StepInit}},
		"kept states, plan account":             {typ: infrav1.RunApply, kept: true, planSA: "planner", wantSteps: []string{names.StepRestoreState, names.StepClone, names.StepInit}, wantSA: "deployer"},
		"kept states, no plan account":          {typ: infrav1.RunApply, kept: true, wantSteps: []string{names.StepRestoreState, names.StepClone, names.StepInit}, wantSA: "deployer"},
		"kept states, destroy":                  {typ: infrav1.RunDestroy, kept: true, planSA: "planner", wantSteps: []string{names.StepRestoreState, names.StepClone, names.StepInit}, wantSA: "deployer"},
		"kept states, drift check (plans only)": {typ: infrav1.RunDrift, kept: true, planSA: "planner", wantSteps: []string{names.StepRestoreState, names.StepClone, names.StepInit}, wantSA: "deployer"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := testutil.MakeRun("net", "team-a").Obj()
			run.Spec.Runner.ServiceAccountName = "deployer"
			cfg := testutil.Config
			cfg.PlanServiceAccount = tc.planSA
			p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, cfg), Config: cfg, Type: tc.typ, Name: "net-1", KeptStates: tc.kept})
			if err != nil {
				t.Fatal(err)
			}
			var before []string
			for _, s := range p.Steps {
				if s.Name == names.StepPlan {
					break
				}
				before = append(before, s.Name)
			}
			if diff := cmp.Diff(tc.wantSteps, before); diff != "" {
				t.Fatalf("steps before plan (-want +got):\n%s", diff)
			}
			for _, s := range p.Steps {
				if s.Name == names.StepApply || s.Gate {
					break
				}
				switch {
				case s.Name == names.StepRestoreState:
					if s.ServiceAccountName != tc.wantSA {
						t.Errorf("restore-state runs as %q, want the runner %q", s.ServiceAccountName, tc.wantSA)
					}
					for _, arg := range []string{names.StepRestoreState, "--backend=kubernetes", "--backend-namespace=team-a", "--records-run=net", "--records-run-id=" + pipeline.PhOwnerName} {
						if !slices.Contains(s.Args, arg) {
							t.Errorf("restore-state's args %q lack %q", s.Args, arg)
						}
					}
				case tc.planSA != "" && s.ServiceAccountName == "deployer":
					t.Errorf("step %s, before the gate, runs as the runner", s.Name)
				}
			}
		})
	}
}
