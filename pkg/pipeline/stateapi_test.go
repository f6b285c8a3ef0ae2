package pipeline_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestStateAPIToken: with the state API, every terraform step (and no
// check, not the clone) gets its URL and certificate and a token whose
// audience names this child, its run and the run's uid, redacted from the
// logs; a preview's steps read the state without the lock.
func TestStateAPIToken(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").Check("policy", "conftest:1", "", "conftest", "test").Obj()
	cfg := testutil.Config
	cfg.StateAPI = engine.StateAPI{URL: "https://opr8r-state.opr8r-system.svc:9444", CA: "-----BEGIN CERTIFICATE-----"}
	for _, preview := range []bool{false, true} {
		p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, cfg), Config: cfg, Type: infrav1.RunApply, Name: "net-3", Preview: preview})
		if err != nil {
			t.Fatal(err)
		}
		vol, role := pipeline.StateTokenVolume, "runner"
		if preview {
			vol, role = pipeline.StateTokenVolume+"-preview", "preview"
		}
		i := slices.IndexFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
		if i < 0 {
			t.Fatalf("no state token volume %s: %+v", vol, p.Volumes)
		}
		tok := p.Volumes[i].Projected.Sources[0].ServiceAccountToken
		if want := names.StateAudience("team-a", "net", string(run.UID), "net-3", role); tok == nil || tok.Audience != want {
			t.Fatalf("state token %+v, want audience %s", tok, want)
		}
		for _, s := range p.Steps {
			terraform := slices.Contains([]string{names.StepInit, names.StepPlan, names.StepApply, names.StepExport, names.StepCleanup}, s.Name)
			mounted := slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == vol && m.MountPath == names.StateTokenDir
			})
			env := slices.ContainsFunc(s.Env, func(e corev1.EnvVar) bool { return e.Name == names.EnvStateAPI && e.Value == cfg.StateAPI.URL }) &&
				slices.ContainsFunc(s.Env, func(e corev1.EnvVar) bool { return e.Name == names.EnvStateAPICA && e.Value == cfg.StateAPI.CA })
			redacted := slices.Contains(s.Args, "--secret-files="+names.StateTokenDir)
			if mounted != terraform || env != terraform || redacted != terraform {
				t.Errorf("step %s: token mounted %v, URL and CA %v, redacted %v; want %v (terraform steps only)", s.Name, mounted, env, redacted, terraform)
			}
			if noLock := slices.Contains(s.Args, "--no-state-lock"); noLock != (terraform && preview) {
				t.Errorf("step %s of a preview %v: --no-state-lock %v", s.Name, preview, noLock)
			}
		}
	}
	// Without the state API (a manager outside the cluster), nothing.
	p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config), Config: testutil.Config, Type: infrav1.RunApply, Name: "net-3"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == pipeline.StateTokenVolume }) {
		t.Fatal("a state token without a state API")
	}
}

// TestPreviewIdentity: a preview's steps (not its checks) run as the
// install's preview account; other runs never do.
func TestPreviewIdentity(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").Check("policy", "conftest:1", "", "conftest", "test").Obj()
	run.Spec.PlanOnly = true
	cfg := testutil.Config
	cfg.PreviewServiceAccount = "opr8r-preview"
	for _, preview := range []bool{false, true} {
		p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, cfg), Config: cfg, Type: infrav1.RunPlan, Name: "net-pr1-plan-1", Preview: preview})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(p.Steps, p.Cleanup) {
			sa := s.ServiceAccountName
			if sa == "" {
				sa = p.ServiceAccountName
			}
			want := preview && !names.IsCheck(s.Name)
			if (sa == "opr8r-preview") != want {
				t.Errorf("preview %v: step %s runs as %q", preview, s.Name, sa)
			}
		}
	}
}

// TestStateTokenRoles: the steps before the gate of a run with a plan
// account of its own get the planner's state token, the others the
// runner's; the role is in the child, whatever the spec says later.
func TestStateTokenRoles(t *testing.T) {
	run := testutil.MakeRun("net", "team-a").Obj()
	run.Spec.Runner.PlanServiceAccountName = "opr8r-planner"
	cfg := testutil.Config
	cfg.StateAPI = engine.StateAPI{URL: "https://opr8r-state.opr8r-system.svc:9444", CA: "pem"}
	p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineTekton, cfg), Config: cfg, Type: infrav1.RunApply, Name: "net-3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{names.StepInit: "-planner", names.StepPlan: "-planner", names.StepApply: "", names.StepExport: "", names.StepCleanup: ""}
	for _, s := range append(p.Steps, p.Cleanup) {
		suffix, ok := want[s.Name]
		if !ok {
			continue
		}
		if !slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == pipeline.StateTokenVolume+suffix }) {
			t.Errorf("step %s does not mount %s%s: %+v", s.Name, pipeline.StateTokenVolume, suffix, s.VolumeMounts)
		}
	}
	auds := map[string]bool{}
	for _, v := range p.Volumes {
		if v.Projected != nil && v.Projected.Sources[0].ServiceAccountToken != nil {
			auds[v.Projected.Sources[0].ServiceAccountToken.Audience] = true
		}
	}
	for _, role := range []string{"planner", "runner"} {
		if !auds[names.StateAudience("team-a", "net", string(run.UID), "net-3", role)] {
			t.Errorf("no %s state token among %v", role, auds)
		}
	}
}
